import Foundation
import SwitchboardServer
import SwitchboardSystem

enum StoreCommand {
    static let help = """
        USAGE: switchboard store status [--data-dir DIR | --store-url URL]

        status  Prints the store's engine, where it is (a URL without its password), the schema
                version it is at and the one this build writes, as JSON. It reads only: it does
                not create or migrate anything (serve does, at start).

        OPTIONS:
          --data-dir DIR     The server's data directory (default ./data, env SWITCHBOARD_DATA_DIR).
          --store-url URL    The store's PostgreSQL database instead (env SWITCHBOARD_STORE_URL).
          --help             Show this help.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let parsed = try Arguments(arguments, valued: ["data-dir", "store-url"])
        if parsed.has("help") || parsed.positionals.first != "status" {
            print(help)
            return parsed.has("help") ? 0 : 2
        }
        try parsed.rejectUnknownFlags(["help"])
        let dataDirectory = parsed.value("data-dir") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_DATA_DIR"] ?? "./data"
        let storeURL = parsed.value("store-url") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_STORE_URL"]
        let status = try Store.status(url: storeURL, directory: dataDirectory)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        print(String(decoding: try encoder.encode(status), as: UTF8.self))
        return status.schemaVersion > status.buildSchemaVersion ? 1 : 0
    }
}
