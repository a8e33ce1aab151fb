import Dispatch
import Foundation
import SwitchboardServer
import SwitchboardSystem
import SwitchboardSupport

enum ServeCommand {
    static var help: String {
        var text = """
            USAGE: switchboard serve [--config FILE] [options]

            Runs the server until SIGTERM or SIGINT, then shuts down gracefully: stops accepting,
            closes WebSockets with 1001 and finishes store writes.

            Settings come from, in increasing priority: defaults, the JSON --config file (keys as
            below with underscores), environment variables (SWITCHBOARD_<NAME>), and flags.

            OPTIONS:
              --config FILE
                    JSON object of settings, e.g. {"port": 8080, "max_message_bytes": 65536}

            """
        let defaults = ServerConfiguration.defaultValues
        for setting in ServerConfiguration.settings {
            text += "  \(setting.flag)\(setting.isFlag ? "" : " VALUE")    (env \(setting.environmentVariable), default \(defaults[setting.name] ?? "-"))\n"
            text += "        \(setting.summary)\n"
        }
        text += "  --help\n        Show this help.\n"
        return text
    }

    static func run(_ arguments: [String]) async throws -> Int32 {
        let valued = Set(ServerConfiguration.settings.filter { !$0.isFlag }.map { String($0.flag.dropFirst(2)) } + ["config"])
        let flags = Set(ServerConfiguration.settings.filter(\.isFlag).map { String($0.flag.dropFirst(2)) })
        let parsed = try Arguments(arguments, valued: valued)
        if parsed.has("help") {
            print(help)
            return 0
        }
        try parsed.rejectUnknownFlags(flags.union(["help"]))
        if let stray = parsed.positionals.first { throw UsageError("unexpected argument '\(stray)'") }

        var configuration = ServerConfiguration()
        if let file = parsed.value("config") {
            guard FileManager.default.fileExists(atPath: file) else { throw UsageError("--config \(file): no such file") }
            guard let data = FileManager.default.contents(atPath: file) else { throw UsageError("--config \(file): the file cannot be read") }
            do { try configuration.apply(json: data) } catch { throw UsageError("--config \(file): \(error)") }
        }
        let environment = ProcessInfo.processInfo.environment
        for setting in ServerConfiguration.settings {
            if let value = environment[setting.environmentVariable] { try setting.apply(&configuration, value) }
        }
        for setting in ServerConfiguration.settings {
            let name = String(setting.flag.dropFirst(2))
            if setting.isFlag {
                if parsed.has(name) { try setting.apply(&configuration, "true") }
            } else if let value = parsed.value(name) {
                try setting.apply(&configuration, value)
            }
        }

        signal(SIGPIPE, SIG_IGN)
        let termination = Termination()
        // A server needs more descriptors than the interactive default (1,024); max_connections
        // is derived from what this gives unless set.
        DescriptorLimit.raiseToHardLimit()
        let logger = Logger(minimumLevel: configuration.logLevel, sink: .standardError(repeatLimit: configuration.logRepeatLimit))
        SystemLog.logger = logger.with("component", "system")
        let server = try SwitchboardServer.start(configuration, logger: logger)

        if let app = try server.createDevelopmentAppIfNeeded() {
            writeLine("""

                Created a development app (shown once; keep the secret safe):
                  app id      \(app.id)
                  API key     \(app.apiKey)
                  API secret  \(app.apiSecret)
                  bundle id   \(app.bundleID)

                """)
        } else if let app = try server.store.allApps().first {
            writeLine("\nApp \(app.name): API key \(app.apiKey) (secret shown when it was created)")
        }
        writeLine("Switchboard is running: \(server.publicURL)  (Ctrl-C to stop)\n")

        await termination.wait()
        server.shutdown()
        return 0
    }
}
