import Foundation
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardPush

enum PushCommand {
    static let help = """
        USAGE: switchboard push DEVICE_TOKEN --topic BUNDLE_ID
                                (--key-file AuthKey.p8 --key-id KEY_ID --team-id TEAM_ID | --cert FILE [--cert-key FILE] [--cert-password P])
                                [--type voip|alert|background] [--env sandbox|production | --url URL]
                                [--payload JSON] [--priority 10|5] [--expiration EPOCH] [--collapse-id ID]
                                [--apns-id UUID] [--ca-file PEM] [--timeout SECONDS]

        Sends one push through APNs' HTTP/2 provider API and prints the status, apns-id and reason.
        Exits 0 when APNs accepted the push, 1 otherwise.

        OPTIONS:
          --topic BUNDLE_ID     The app's bundle id; for VoIP pushes `.voip` is appended (once).
          --key-file FILE       Token authentication: the .p8 signing key from Apple.
          --key-id KEY_ID       Its 10-character key id.
          --team-id TEAM_ID     The Apple developer team id.
          --cert FILE           Certificate authentication: a PEM certificate (with --cert-key) or
                                a .p12 (with --cert-password).
          --type TYPE           voip (default), alert or background.
          --env ENV             sandbox (default; development builds) or production.
          --url URL             Another host, e.g. the local sandbox https://127.0.0.1:2197.
          --ca-file PEM         Trust this certificate (the sandbox prints its path).
          --payload JSON        Default for voip: {"UUID": <new>, "handle": "switchboard", "hasVideo": false}
          --priority N          Default 10 (5 for background).
          --expiration EPOCH    apns-expiration; 0 means deliver now or never.
          --collapse-id ID      apns-collapse-id.
          --apns-id UUID        apns-id (default: a new UUID).
          --timeout SECONDS     Give up after this long, retries included (default 30).

        The provider token is reused between runs (kept in ~/.cache/switchboard, user-only) while it
        is under 40 minutes old: Apple answers TooManyProviderTokenUpdates to providers that mint
        new tokens more often than every 20 minutes.
          --help                Show this help.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let parsed = try Arguments(
            arguments,
            valued: ["topic", "key-file", "key-id", "team-id", "cert", "cert-key", "cert-password", "type", "env", "url",
                     "payload", "priority", "expiration", "collapse-id", "apns-id", "ca-file", "timeout"])
        if parsed.has("help") {
            print(help)
            return 0
        }
        try parsed.rejectUnknownFlags(["help"])
        guard parsed.positionals.count == 1 else { throw UsageError("give exactly one device token") }
        let token = parsed.positionals[0].lowercased()
        guard PushNotification.isDeviceToken(token) else {
            throw UsageError("a device token is 64 hexadecimal characters")
        }
        let topic = try parsed.required("topic")
        guard let type = PushType(rawValue: parsed.value("type") ?? "voip") else {
            throw UsageError("--type must be voip, alert or background")
        }
        guard let environment = APNsEnvironment(rawValue: parsed.value("env") ?? "sandbox") else {
            throw UsageError("--env must be sandbox or production")
        }

        let credentials: APNsCredentials
        var tokenCache: ProviderTokenCache?
        var tokenFile: String?
        if let keyFile = parsed.value("key-file") {
            guard let pem = try? String(contentsOfFile: keyFile, encoding: .utf8) else { throw UsageError("cannot read --key-file \(keyFile)") }
            let key = try ECPrivateKey(pem: pem)
            let cache = ProviderTokenCache(key: key, keyID: try parsed.required("key-id"), teamID: try parsed.required("team-id"))
            tokenFile = Self.tokenCachePath(teamID: cache.teamID, keyID: cache.keyID)
            if let tokenFile, let saved = try? String(contentsOfFile: tokenFile, encoding: .utf8) {
                _ = cache.adopt(saved.trimmingCharacters(in: .whitespacesAndNewlines))
            }
            tokenCache = cache
            credentials = .token(cache)
        } else if let certificate = parsed.value("cert") {
            credentials = .certificate(
                path: certificate, keyPath: parsed.value("cert-key"), password: parsed.value("cert-password"),
                isP12: certificate.lowercased().hasSuffix(".p12") || certificate.lowercased().hasSuffix(".pfx"))
        } else {
            throw UsageError("give --key-file, --key-id and --team-id, or --cert")
        }

        let payload: [UInt8]
        if let text = parsed.value("payload") {
            guard (try? JSONSerialization.jsonObject(with: Data(text.utf8))) != nil else { throw UsageError("--payload is not valid JSON") }
            payload = Array(text.utf8)
        } else if type == .voip {
            payload = Array(#"{"UUID":"\#(UUID().uuidString)","handle":"switchboard","hasVideo":false}"#.utf8)
        } else if type == .alert {
            payload = Array(#"{"aps":{"alert":{"title":"Switchboard","body":"Test notification"}}}"#.utf8)
        } else {
            payload = Array(#"{"aps":{"content-available":1}}"#.utf8)
        }

        var configuration = APNsClientConfiguration(credentials: credentials, environment: environment)
        configuration.baseURL = parsed.value("url")
        configuration.caFile = parsed.value("ca-file")
        let timeout = Int(parsed.value("timeout") ?? "30") ?? 30
        let client = APNsClient(configuration: configuration, logger: Logger(minimumLevel: .warning))
        defer { client.shutdown() }
        let notification = PushNotification(
            deviceToken: token, type: type, topic: topic, payload: payload, priority: parsed.value("priority").flatMap { Int($0) },
            expiration: parsed.value("expiration").flatMap { Int64($0) }, collapseID: parsed.value("collapse-id"),
            id: parsed.value("apns-id").flatMap { UUID(uuidString: $0) })
        let result = await client.send(notification, deadline: .now + .seconds(timeout))
        if let tokenFile, let token = tokenCache?.currentToken {
            Self.save(token.jwt, to: tokenFile)
        }
        print("status: \(result.status)")
        print("apns-id: \(result.apnsID)")
        print("topic: \(notification.apnsTopic)")
        if let failure = result.failure { print("reason: \(failure)") }
        print("attempts: \(result.attempts)")
        return result.accepted ? 0 : 1
    }

    /// Where the provider token is kept between runs: `$XDG_CACHE_HOME/switchboard/` (or
    /// `~/.cache/switchboard/`), readable by the user only.
    static func tokenCachePath(teamID: String, keyID: String) -> String? {
        let environment = ProcessInfo.processInfo.environment
        guard let base = environment["XDG_CACHE_HOME"] ?? environment["HOME"].map({ $0 + "/.cache" }) else { return nil }
        let safe = { (text: String) in text.filter { $0.isLetter || $0.isNumber } }
        return "\(base)/switchboard/apns-provider-token-\(safe(teamID))-\(safe(keyID))"
    }

    static func save(_ jwt: String, to path: String) {
        let directory = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        _ = FileManager.default.createFile(atPath: path, contents: Data(jwt.utf8), attributes: [.posixPermissions: 0o600])
    }
}
