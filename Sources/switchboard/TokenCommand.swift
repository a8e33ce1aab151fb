import Foundation
import SwitchboardProtocol
import SwitchboardServer

enum TokenCommand {
    static let help = """
        USAGE: switchboard token --api-key KEY --identity ID [--grant GRANT ...] [--ttl SECONDS]
                                 [--name NAME] [--handle HANDLE] [--data-dir DIR]

        Prints an access token (an HS256 JWT signed with the app's secret, read from the store).

        OPTIONS:
          --api-key KEY      The app's API key (default: the only app in the store).
          --identity ID      The user the token is for (its `sub`).
          --name NAME        The user's display name (what a callee's phone shows).
          --handle HANDLE    The user's handle (a phone number, an email: what a callee's phone
                             shows and calls back; default the identity).
          --grant GRANT      Repeatable: room=NAME (exact, or a prefix ending in *), roomJoin,
                             call, admin. Example: --grant room=team-* --grant roomJoin --grant call
          --ttl SECONDS      Lifetime (default 3600).
          --data-dir DIR     The server's data directory (default ./data, env SWITCHBOARD_DATA_DIR).
          --store-url URL    The store's PostgreSQL database instead (env SWITCHBOARD_STORE_URL).
          --help             Show this help.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let parsed = try Arguments(arguments, valued: ["api-key", "identity", "name", "handle", "grant", "ttl", "data-dir", "store-url"])
        if parsed.has("help") {
            print(help)
            return 0
        }
        try parsed.rejectUnknownFlags(["help"])
        let dataDirectory = parsed.value("data-dir") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_DATA_DIR"] ?? "./data"
        let storeURL = parsed.value("store-url") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_STORE_URL"]
        let identity = try parsed.required("identity")
        guard identity.utf8.count <= 256 else { throw UsageError("--identity is longer than 256 bytes") }
        let ttl = Int(parsed.value("ttl") ?? "3600") ?? -1
        guard (1...AccessTokenIssuer.maxTTLSeconds).contains(ttl) else {
            throw UsageError("--ttl must be 1 to \(AccessTokenIssuer.maxTTLSeconds) seconds")
        }
        var grants = Grants()
        for grant in parsed.values("grant") {
            switch grant {
            case "roomJoin": grants.roomJoin = true
            case "call": grants.call = true
            case "admin": grants.admin = true
            case let text where text.hasPrefix("room="): grants.room = String(text.dropFirst(5))
            default: throw UsageError("unknown grant '\(grant)' (room=NAME, roomJoin, call, admin)")
            }
        }

        let store = try Store.open(url: storeURL, directory: dataDirectory)
        defer { store.close() }
        let app: App
        if let key = parsed.value("api-key") {
            guard let found = store.app(apiKey: key) else { throw UsageError("no app with API key \(key) in \(dataDirectory)") }
            app = found
        } else {
            let apps = try store.allApps()
            guard apps.count == 1 else { throw UsageError("--api-key is required when the store has \(apps.count) apps") }
            app = apps[0]
        }
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: identity, name: parsed.value("name"), handle: parsed.value("handle"), grants: grants, ttlSeconds: ttl)
        print(AccessTokenVerifier.sign(claims, secret: app.apiSecret))
        return 0
    }
}
