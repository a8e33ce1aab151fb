import Foundation
import SwitchboardSystem
import SwitchboardSupport

/// What the store's memory says of an API key, without reading the database.
public enum AppLookup: Sendable, Equatable {
    case found(App)
    /// No such app: the key is malformed, or was looked up and not found lately.
    case unknown
    /// Not in memory and not looked up lately: `Store.lookUpApp` finds out, off the caller's thread.
    case notLoaded
}

/// Every app in memory, and the API keys known not to exist. The server's event loop reads
/// only this; the database is read by the store's own threads (`Store.lookUpApp`,
/// `Store.refreshApps`).
struct AppCache {
    var byKey: [String: App] = [:]
    /// Keys looked up and not found, until when they count as unknown.
    var unknown: [String: ContinuousClock.Instant] = [:]
    /// Keys waiting for a lookup, with what to run once it has answered.
    var waiting: [String: [@Sendable () -> Void]] = [:]
    var lookupRunning = false

    mutating func replaceAll(_ apps: [App]) {
        byKey = Dictionary(apps.map { ($0.apiKey, $0) }, uniquingKeysWith: { first, _ in first })
        unknown = [:]
    }
}

extension Store {
    /// Keys waiting for one lookup at most; past them an unknown key is refused at once (a
    /// flood of made-up keys costs one batched read at a time, never one per request).
    static let maxKeysAwaitingLookup = 1024

    // MARK: Apps

    /// Saves a new app.
    public func insert(_ app: App) throws {
        _ = try write { database in
            try database.query(
                "INSERT INTO apps (id, name, api_key, api_secret, bundle_id, created_at, extra_bundle_ids) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [.text(app.id), .text(app.name), .text(app.apiKey), .text(app.apiSecret), .text(app.bundleID),
                 .integer(Int64(app.createdAt.timeIntervalSince1970 * 1000)),
                 app.extraBundleIDs.isEmpty ? .null : .text(app.extraBundleIDs.joined(separator: ","))])
        }
        apps.withLock { cache in
            cache.byKey[app.apiKey] = app
            cache.unknown.removeValue(forKey: app.apiKey)
        }
    }

    /// The app with API key `apiKey`, from memory or else from the database: blocks, so
    /// never on the event loop (commands use it; the server asks `cachedApp` and `lookUpApp`).
    public func app(apiKey: String) -> App? {
        switch cachedApp(apiKey: apiKey) {
        case .found(let app): return app
        case .unknown: return nil
        case .notLoaded:
            let found = try? read { try Self.readApps(keys: [apiKey], from: $0) }.first
            apps.withLock { cache in
                if let found { cache.byKey[apiKey] = found }
            }
            return found
        }
    }

    /// What memory says of `apiKey`: never reads the database, so the event loop may ask.
    public func cachedApp(apiKey: String, now: ContinuousClock.Instant = .now) -> AppLookup {
        guard App.isWellFormedAPIKey(apiKey) else { return .unknown }
        return apps.withLock { cache in
            if let app = cache.byKey[apiKey] { return .found(app) }
            if let until = cache.unknown[apiKey], until > now { return .unknown }
            return .notLoaded
        }
    }

    /// Every app memory holds (no database read).
    public func cachedApps() -> [App] {
        apps.withLock { Array($0.byKey.values) }
    }

    /// Reads `apiKey`'s app on the store's threads (with any other keys waiting, in one read)
    /// and runs `then` there once memory knows it (found, or unknown for
    /// `app_refresh_seconds`). A read that fails leaves the key unknown for a second.
    public func lookUpApp(apiKey: String, then: @escaping @Sendable () -> Void) {
        let start = apps.withLock { cache -> Bool? in
            if cache.waiting[apiKey] != nil {
                cache.waiting[apiKey]?.append(then)
                return false
            }
            guard cache.waiting.count < Self.maxKeysAwaitingLookup else { return nil }
            cache.waiting[apiKey] = [then]
            defer { cache.lookupRunning = true }
            return !cache.lookupRunning
        }
        switch start {
        case nil:
            apps.withLock { $0.unknown[apiKey] = .now + .seconds(1) }
            then()
        case true?:
            requests.submit(lane: Self.appsLane) { [self] in lookUpWaitingKeys() }
        case false?:
            break
        }
    }

    /// The request lane app lookups run in: never behind an app's own requests.
    static let appsLane = "\u{0}apps"

    /// Store threads: reads every key waiting, 256 at a time, until none waits.
    private func lookUpWaitingKeys() {
        while true {
            let keys = apps.withLock { cache -> [String] in
                let keys = Array(cache.waiting.keys.prefix(256))
                if keys.isEmpty { cache.lookupRunning = false }
                return keys
            }
            guard !keys.isEmpty else { return }
            let found: [App]?
            do { found = try read { try Self.readApps(keys: keys, from: $0) } } catch {
                logger.warning("app lookup failed", ["keys": String(keys.count), "error": "\(error)"])
                found = nil
            }
            let remember: Duration = found == nil ? .seconds(1) : .seconds(limits.appRefreshSeconds)
            // The waiters as they are now (more may have joined a key during the read).
            let waiters = apps.withLock { cache -> [@Sendable () -> Void] in
                let until = ContinuousClock.now + remember
                for app in found ?? [] { cache.byKey[app.apiKey] = app }
                var waiters: [@Sendable () -> Void] = []
                for key in keys {
                    waiters += cache.waiting.removeValue(forKey: key) ?? []
                    if cache.byKey[key] == nil { cache.unknown[key] = until }
                }
                // Bounded: the refusals no longer remembered go first once there are many.
                if cache.unknown.count > 100_000 { cache.unknown = cache.unknown.filter { $0.value > .now } }
                return waiters
            }
            waiters.forEach { $0() }
        }
    }

    /// Reads every app again (a full read, on the calling thread: the server's store threads):
    /// apps made and secrets rotated by other processes, and keys once unknown, are then known.
    public func refreshApps() throws {
        let loaded = try read { database in try database.query(Self.selectApps).map(Self.app(from:)) }
        apps.withLock { $0.replaceAll(loaded) }
    }

    /// Every app, oldest first.
    public func allApps() throws -> [App] {
        try read { database in try database.query(Self.selectApps + " ORDER BY created_at, id").map(Self.app(from:)) }
    }

    /// Gives the app a new secret; the old one is still accepted for `graceSeconds` (0: refused
    /// at once, for a secret that leaked). Returns the app with its new secret. A server reads
    /// the change within `app_refresh_seconds`.
    public func rotateSecret(apiKey: String, graceSeconds: Int, now: Date = Date()) throws -> App? {
        let secret = RandomID.alphanumeric(43)
        let until = Int64(now.timeIntervalSince1970 * 1000) + Int64(max(0, graceSeconds)) * 1000
        let rotated = try write { database -> Bool in
            try database.query(
                "UPDATE apps SET previous_secret = api_secret, previous_secret_until = ?, api_secret = ? WHERE api_key = ?",
                [.integer(until), .text(secret), .text(apiKey)])
            return database.changes == 1
        }
        guard rotated else { return nil }
        let app = try read { try Self.readApps(keys: [apiKey], from: $0) }.first
        if let app { apps.withLock { $0.byKey[apiKey] = app } }
        return app
    }

    /// Sets the other bundle ids the app's devices may register with (none: only the app's
    /// own). Returns the app, or nil when no app has the key. A server reads the change within
    /// `app_refresh_seconds`.
    public func setExtraBundleIDs(_ bundleIDs: [String], apiKey: String) throws -> App? {
        let changed = try write { database -> Bool in
            try database.query(
                "UPDATE apps SET extra_bundle_ids = ? WHERE api_key = ?",
                [bundleIDs.isEmpty ? .null : .text(bundleIDs.joined(separator: ",")), .text(apiKey)])
            return database.changes == 1
        }
        guard changed else { return nil }
        let app = try read { try Self.readApps(keys: [apiKey], from: $0) }.first
        if let app { apps.withLock { $0.byKey[apiKey] = app } }
        return app
    }

    static let selectApps =
        "SELECT id, name, api_key, api_secret, bundle_id, created_at, previous_secret, previous_secret_until, extra_bundle_ids FROM apps"

    static func loadApps(_ database: any SQLDatabase) throws -> [App] {
        try database.query(selectApps).map(app(from:))
    }

    private static func readApps(keys: [String], from database: any SQLDatabase) throws -> [App] {
        let marks = Array(repeating: "?", count: keys.count).joined(separator: ", ")
        return try database.query(selectApps + " WHERE api_key IN (\(marks))", keys.map { .text($0) }).map(app(from:))
    }

    private static func app(from row: [SQLValue]) -> App {
        App(
            id: row[0].string ?? "", name: row[1].string ?? "", apiKey: row[2].string ?? "",
            apiSecret: row[3].string ?? "", bundleID: row[4].string ?? "",
            createdAt: Date(timeIntervalSince1970: Double(row[5].int64 ?? 0) / 1000),
            previousSecret: row[6].string, previousSecretExpiresAt: row[7].int64.map { Date(timeIntervalSince1970: Double($0) / 1000) },
            extraBundleIDs: (row[8].string ?? "").split(separator: ",").map(String.init))
    }
}
