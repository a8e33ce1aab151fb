import Foundation
import SwitchboardServer
import SwitchboardSystem
import SwitchboardSupport

enum AppCommand {
    static let help = """
        USAGE: switchboard app create --name NAME --bundle-id BUNDLE_ID [--extra-bundle-ids ID,ID] [--data-dir DIR]
               switchboard app list [--data-dir DIR]
               switchboard app rotate-secret --api-key KEY [--grace-seconds 86400] [--data-dir DIR]
               switchboard app bundle-ids --api-key KEY --extra-bundle-ids ID,ID [--data-dir DIR]
               switchboard app push-key --api-key KEY --key-file AuthKey.p8 --key-id KEY_ID --team-id TEAM_ID [--data-dir DIR]
               switchboard app push-cert --api-key KEY --cert-file voip.pem [--cert-key key.pem] [--password P] [--data-dir DIR]

        create  Creates an app and prints it as JSON, with its API key and secret.
                The secret is printed this once; store it in your backend's secrets.
        list    Lists the apps as JSON, secrets redacted.
        rotate-secret
                Gives the app a new API secret, printed this once. Tokens signed with the old one
                are still accepted for --grace-seconds (default 86400; 0 refuses them at once, for
                a secret that leaked: every session opened with one is closed with 4003). Running
                servers read the change within app_refresh_seconds.
        bundle-ids
                Sets the other bundle ids (besides --bundle-id) the app's devices may register
                with; each is then an APNs topic of the app's pushes. "" clears them.
        push-key
                Sets the APNs signing key the server uses for the app's pushes (stored, never shown).
        push-cert
                Sets a VoIP services certificate (PEM, with its key) instead (stored, never shown).

        OPTIONS:
          --name NAME            The app's name.
          --bundle-id BUNDLE_ID  The iOS bundle id (VoIP pushes go to BUNDLE_ID.voip).
          --extra-bundle-ids L   Other bundle ids of the same product, comma-separated.
          --grace-seconds N      How long the old secret still verifies after a rotation (0-2592000).
          --data-dir DIR         The server's data directory (default ./data, env SWITCHBOARD_DATA_DIR).
          --store-url URL        The store's PostgreSQL database instead (env SWITCHBOARD_STORE_URL).
          --help                 Show this help.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let parsed = try Arguments(
            arguments,
            valued: [
                "name", "bundle-id", "extra-bundle-ids", "grace-seconds", "data-dir", "store-url", "api-key", "key-file", "key-id", "team-id",
                "cert-file", "cert-key", "password",
            ])
        if parsed.has("help") || parsed.positionals.isEmpty {
            print(help)
            return parsed.has("help") ? 0 : 2
        }
        try parsed.rejectUnknownFlags(["help"])
        let dataDirectory = parsed.value("data-dir") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_DATA_DIR"] ?? "./data"
        let storeURL = parsed.value("store-url") ?? ProcessInfo.processInfo.environment["SWITCHBOARD_STORE_URL"]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        /// Runs `body` on the store, closed after it.
        func withStore(_ body: (Store) throws -> Void) throws {
            let store = try Store.open(url: storeURL, directory: dataDirectory)
            defer { store.close() }
            try body(store)
        }
        /// The app `--api-key` names.
        func namedApp(in store: Store) throws -> App {
            let apiKey = try parsed.required("api-key")
            guard let app = store.app(apiKey: apiKey) else { throw UsageError("no app with API key \(apiKey)") }
            return app
        }
        /// `--extra-bundle-ids`, checked.
        func extraBundleIDs() throws -> [String] {
            let list = (parsed.value("extra-bundle-ids") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.isEmpty }
            for id in list where !App.isWellFormedBundleID(id) { throw UsageError("'\(id)' in --extra-bundle-ids is not a bundle id") }
            return list
        }
        switch parsed.positionals[0] {
        case "rotate-secret":
            let apiKey = try parsed.required("api-key")
            guard let grace = Int(parsed.value("grace-seconds") ?? "86400"), (0...2_592_000).contains(grace) else {
                throw UsageError("--grace-seconds must be 0 to 2592000")
            }
            try withStore { store in
                guard let app = try store.rotateSecret(apiKey: apiKey, graceSeconds: grace) else {
                    throw UsageError("no app with API key \(apiKey)")
                }
                print(String(decoding: try encoder.encode(app), as: UTF8.self))
            }
            return 0
        case "bundle-ids":
            let apiKey = try parsed.required("api-key")
            guard parsed.value("extra-bundle-ids") != nil else { throw UsageError("give --extra-bundle-ids (\"\" clears them)") }
            let list = try extraBundleIDs()
            try withStore { store in
                guard let app = try store.setExtraBundleIDs(list, apiKey: apiKey) else { throw UsageError("no app with API key \(apiKey)") }
                var shown = app
                shown.apiSecret = Redact.token(app.apiSecret)
                print(String(decoding: try encoder.encode(shown), as: UTF8.self))
            }
            return 0
        case "create":
            let name = try parsed.required("name")
            let bundleID = try parsed.required("bundle-id")
            guard name.utf8.count <= 200 else { throw UsageError("--name is longer than 200 bytes") }
            guard App.isWellFormedBundleID(bundleID) else { throw UsageError("--bundle-id must look like com.example.app") }
            var app = App.make(name: name, bundleID: bundleID)
            app.extraBundleIDs = try extraBundleIDs()
            try withStore { try $0.insert(app) }
            print(String(decoding: try encoder.encode(app), as: UTF8.self))
            return 0
        case "list":
            try withStore { store in
                let apps = try store.allApps().map { app -> App in
                    var redacted = app
                    redacted.apiSecret = Redact.token(app.apiSecret)
                    return redacted
                }
                print(String(decoding: try encoder.encode(apps), as: UTF8.self))
            }
            return 0
        case "push-key":
            let file = try parsed.required("key-file")
            guard let pem = try? String(contentsOfFile: file, encoding: .utf8) else { throw UsageError("cannot read \(file)") }
            _ = try ECPrivateKey(pem: pem)
            let (keyID, teamID) = (try parsed.required("key-id"), try parsed.required("team-id"))
            try withStore { store in
                let app = try namedApp(in: store)
                try store.setPushSettings(AppPushSettings(keyPEM: pem, keyID: keyID, teamID: teamID), appID: app.id)
                print("APNs key \(keyID) set for \(app.name) (\(app.id))")
            }
            return 0
        case "push-cert":
            var pem = ""
            for file in [try parsed.required("cert-file")] + parsed.values("cert-key") {
                guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { throw UsageError("cannot read \(file)") }
                pem += text.hasSuffix("\n") ? text : text + "\n"
            }
            guard pem.contains("BEGIN CERTIFICATE"), pem.contains("PRIVATE KEY") else {
                throw UsageError("give the certificate and its private key as PEM (--cert-key for a separate key file)")
            }
            try withStore { store in
                let app = try namedApp(in: store)
                try store.setPushSettings(.certificate(pem: pem, password: parsed.value("password")), appID: app.id)
                print("APNs certificate set for \(app.name) (\(app.id))")
            }
            return 0
        default:
            throw UsageError("unknown app command '\(parsed.positionals[0])'")
        }
    }
}
