import Foundation
import SwitchboardServer
import SwitchboardSystem

enum StoreCommand {
    static let help = """
        USAGE: switchboard store status [--data-dir DIR | --store-url URL]
               switchboard store migrate --from sqlite:DIR --to postgres://user@host:port/db

        status   Prints the store's engine, where it is (a URL without its password), the schema
                 version it is at and the one this build writes, as JSON. It reads only: it does
                 not create or migrate anything (serve does, at start).
        migrate  Copies the SQLite store in DIR (a server's data directory) into the PostgreSQL
                 database, which must hold no rows yet: apps and their keys, push credentials,
                 devices and tokens, block lists, calls, history and traces, in one transaction.
                 Then checks it (the same count in every table, sampled rows equal, the same
                 history and call records read from both) and prints what it copied as JSON.
                 Refused while a server runs on DIR. The SQLite store is left as it was.

        OPTIONS:
          --data-dir DIR     The server's data directory (default ./data, env SWITCHBOARD_DATA_DIR).
          --store-url URL    The store's PostgreSQL database instead (env SWITCHBOARD_STORE_URL).
          --from sqlite:DIR  The store to copy (DIR may also name its switchboard.db).
          --to URL           The PostgreSQL database to copy it into.
          --help             Show this help.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let parsed = try Arguments(arguments, valued: ["data-dir", "store-url", "from", "to"])
        let action = parsed.positionals.first
        if parsed.has("help") || (action != "status" && action != "migrate") {
            print(help)
            return parsed.has("help") ? 0 : 2
        }
        try parsed.rejectUnknownFlags(["help"])
        return action == "status" ? try status(parsed) : try migrate(parsed)
    }

    private static func status(_ parsed: Arguments) throws -> Int32 {
        let dataDirectory = parsed.value("data-dir") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_DATA_DIR"] ?? "./data"
        let storeURL = parsed.value("store-url") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_STORE_URL"]
        let status = try Store.status(url: storeURL, directory: dataDirectory)
        print(try json(status))
        return status.schemaVersion > status.buildSchemaVersion ? 1 : 0
    }

    private static func migrate(_ parsed: Arguments) throws -> Int32 {
        guard let from = parsed.value("from"), from.hasPrefix("sqlite:"), from.count > "sqlite:".count else {
            throw UsageError("--from sqlite:DIR names the SQLite store to copy")
        }
        guard let to = parsed.value("to"), to.hasPrefix("postgres://") || to.hasPrefix("postgresql://") else {
            throw UsageError("--to postgres://… names the PostgreSQL database to copy it into")
        }
        var directory = String(from.dropFirst("sqlite:".count))
        if (directory as NSString).lastPathComponent == "switchboard.db" { directory = (directory as NSString).deletingLastPathComponent }
        let report = try Store.copy(sqlite: directory.isEmpty ? "." : directory, toPostgres: to)
        print(try json(report))
        return 0
    }

    private static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
