import Dispatch
import Foundation
import SwitchboardSystem
import SwitchboardTesting
import SwitchboardSupport

enum SandboxCommand {
    static let help = """
        USAGE: switchboard apns-sandbox [--port 2197] [--admin-port 2198] [--host 127.0.0.1]
                                        (--key KEY_ID=public-or-private.pem ... | --accept-any-key)
                                        [--cert cert.pem --cert-key key.pem] [--dir DIR]
                                        [--max-concurrent-streams N]

        A local APNs provider API for development and tests: HTTP/2 over TLS at
        https://HOST:PORT/3/device/{token}, checking provider tokens, headers, payloads and device
        tokens as Apple does and answering with Apple's status codes and reasons.

        Without --cert it generates a self-signed certificate (for 127.0.0.1 and localhost) in DIR
        and prints its path: pass it to clients (switchboard push --ca-file).

        The admin API (plain HTTP on --admin-port):
          GET    /pushes[?token=T]          recorded pushes
          DELETE /pushes                    forget them
          PUT    /tokens/{token}            {"state": "unregistered", "since": MS} | {"state": "bad"}
                                            | {"state": "topic", "topic": "com.example.app.voip"} | {"state": "active"}
          POST   /faults                    {"kind": "status", "status": 429|500|503, "count": N}
                                            | {"kind": "goaway", "after_streams": N}
                                            | {"kind": "latency", "ms": 40}
                                            | {"kind": "expired_provider_token", "count": N}
          POST   /reset                     forget everything
          GET    /stats                     requests, connections, token updates
          WS     /devices/{token}           a simulated device: each accepted push arrives as JSON

        OPTIONS:
          --key KEY_ID=FILE          Accept provider tokens signed by this key (PEM, public or private; repeatable).
          --accept-any-key           Accept any well-formed ES256 provider token.
          --client-ca FILE           Certificate authentication: client certificates from these CAs need no token.
          --max-concurrent-streams N SETTINGS_MAX_CONCURRENT_STREAMS per connection (default 1000).
          --help                     Show this help.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let parsed = try Arguments(
            arguments, valued: ["port", "admin-port", "host", "key", "cert", "cert-key", "dir", "max-concurrent-streams", "client-ca"])
        if parsed.has("help") {
            print(help)
            return 0
        }
        try parsed.rejectUnknownFlags(["help", "accept-any-key"])
        var configuration = APNsSandbox.Configuration()
        configuration.host = parsed.value("host") ?? "127.0.0.1"
        guard let port = Int(parsed.value("port") ?? "2197"), let adminPort = Int(parsed.value("admin-port") ?? "2198") else {
            throw UsageError("--port and --admin-port are numbers")
        }
        configuration.port = port
        configuration.adminPort = adminPort
        configuration.certificatePath = parsed.value("cert")
        configuration.privateKeyPath = parsed.value("cert-key")
        if let directory = parsed.value("dir") { configuration.directory = directory }
        if let streams = parsed.value("max-concurrent-streams") {
            guard let value = UInt32(streams), value > 0 else { throw UsageError("--max-concurrent-streams is a positive number") }
            configuration.maxConcurrentStreams = value
        }
        configuration.acceptAnyKey = parsed.has("accept-any-key")
        configuration.clientCAPath = parsed.value("client-ca")
        for entry in parsed.values("key") {
            guard let equals = entry.firstIndex(of: "=") else { throw UsageError("--key is KEY_ID=FILE") }
            let file = String(entry[entry.index(after: equals)...])
            guard let pem = try? String(contentsOfFile: file, encoding: .utf8) else { throw UsageError("cannot read \(file)") }
            configuration.keys[String(entry[..<equals])] = try ECPublicKey(pem: pem)
        }
        guard configuration.acceptAnyKey || !configuration.keys.isEmpty || configuration.clientCAPath != nil else {
            throw UsageError("give --key KEY_ID=FILE (repeatable), --accept-any-key or --client-ca")
        }

        signal(SIGPIPE, SIG_IGN)
        let termination = Termination()
        let sandbox = try APNsSandbox(configuration: configuration, logger: Logger(minimumLevel: .warning))
        writeLine("""
            APNs sandbox: \(sandbox.url)  (HTTP/2 over TLS)
            certificate:  \(sandbox.certificatePath)
            admin API:    \(sandbox.adminURL)
            Try: switchboard push <64 hex> --topic com.example.app --key-file AuthKey.p8 --key-id KEY --team-id TEAM \\
                   --url \(sandbox.url) --ca-file \(sandbox.certificatePath)
            """)
        await termination.wait()
        sandbox.stop()
        return 0
    }
}
