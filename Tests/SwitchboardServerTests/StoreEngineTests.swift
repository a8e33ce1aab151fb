import Foundation
import SwitchboardCore
import SwitchboardProtocol
import SwitchboardPush
import SwitchboardSystem
import SwitchboardTesting
import Testing

@testable import SwitchboardServer

/// The engines the store runs on, each test on both: SQLite in a temporary directory, and a
/// database of its own on the run's PostgreSQL (`scripts/with-postgres.sh`; left out, with the
/// reason printed by `postgresRunsHere`, where there is none).
enum StoreEngine: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite, postgres

    static var available: [StoreEngine] { TestPostgres.runs ? allCases : [.sqlite] }

    var testDescription: String { rawValue }

    /// A place for stores on this engine: every `open` opens a store on the same database.
    final class Place: Sendable {
        let engine: StoreEngine
        let location: String
        private let drop: @Sendable () -> Void

        init(_ engine: StoreEngine) throws {
            self.engine = engine
            switch engine {
            case .sqlite:
                let directory = try makeTemporaryDirectory()
                location = directory
                drop = { try? FileManager.default.removeItem(atPath: directory) }
            case .postgres:
                (location, drop) = try TestPostgres.database()
            }
        }

        func open(owner: String = "p_" + RandomID.alphanumeric(8), backlogLimit: Int = 10_000) throws -> Store {
            switch engine {
            case .sqlite: try Store(directory: location, backlogLimit: backlogLimit, owner: owner)
            case .postgres: try Store(postgres: location, backlogLimit: backlogLimit, owner: owner)
            }
        }

        deinit { drop() }
    }
}

/// Every store operation, with the same behaviour on SQLite and on PostgreSQL.
@Suite(.serialized, .timeLimit(.minutes(3))) struct StoreEngineTests {
    static let app = App.make(name: "Chat", bundleID: "com.example.chat", now: Date(timeIntervalSince1970: 1_800_000_000))

    func device(_ user: String, _ id: String, voip: String? = nil, apns: String? = nil, at: Int64 = 1) -> Device {
        Device(
            appID: Self.app.id, userID: user, deviceID: id, platform: "ios", voipToken: voip, apnsToken: apns, environment: .sandbox,
            bundleID: nil, callKitEnabled: true, appVersion: "1.0", updatedAt: at)
    }

    func call(_ id: String, createdAt: Int64 = 1_800_000_000_123) -> CallState {
        CallState(
            id: id, appID: Self.app.id, caller: "alice", callerDevice: "a", callees: ["bob"], busy: [], connected: ["bob"], phones: [:],
            now: .now, nowMillis: createdAt, ringTimeout: .seconds(45))
    }

    @Test(.enabled(if: TestPostgres.runs, TestPostgres.skipReason)) func postgresRunsHere() throws {
        let place = try StoreEngine.Place(.postgres)
        let store = try place.open()
        defer { store.close() }
        #expect(store.engine == .postgres)
        #expect(!store.path.contains(":@") && store.path.hasPrefix("postgres://"))
    }

    @Test(arguments: StoreEngine.available)
    func appsAreFoundByKeyFromAnotherProcess(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let first = try place.open()
        defer { first.close() }
        try first.insert(Self.app)
        let second = try place.open()
        defer { second.close() }
        let found = try #require(second.app(apiKey: Self.app.apiKey), "an app made by another store is found")
        #expect(found == Self.app)
        #expect(second.app(apiKey: "sbk_nothing") == nil)
        #expect(try second.allApps() == [Self.app])
    }

    /// One registration per device; a token moves to the device that registered it last; the
    /// device limit; a token APNs called dead is left out until it is registered again.
    @Test(arguments: StoreEngine.available)
    func devicesAndTheirTokens(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let store = try place.open()
        defer { store.close() }
        let token = String(repeating: "ab", count: 32)
        try store.register(device("bob", "b-phone", voip: token, at: 10))
        try store.register(device("bob", "b-phone", voip: token, at: 11))
        #expect(try store.devices(appID: Self.app.id, userID: "bob").map(\.updatedAt) == [11], "one row per device")
        try store.register(device("carol", "c-phone", voip: token, at: 12))
        #expect(try store.devices(appID: Self.app.id, userID: "bob").first?.voipToken == nil, "the token moved")
        #expect(try store.devices(appID: Self.app.id, userID: "carol").first?.voipToken == token)
        #expect(throws: DeviceLimitReached.self) { try store.register(device("bob", "b-ipad"), limit: 1) }
        try store.register(device("bob", "b-phone"), limit: 1)  // the same device again is not a new one
        #expect(try store.disablePushToken(token, reason: "Unregistered", invalidSince: nil, at: Date(timeIntervalSince1970: 20)))
        #expect(try store.devices(appID: Self.app.id, userID: "carol").first?.voipToken == nil, "a dead token is left out")
        #expect(try store.pushToken(token)?.disabledReason == "Unregistered")
        try store.register(device("carol", "c-phone", voip: token, at: 30_000))
        #expect(try store.devices(appID: Self.app.id, userID: "carol").first?.voipToken == token, "registered again, it is back")
        #expect(try store.removeDevice(appID: Self.app.id, userID: "bob", deviceID: "b-phone"))
        #expect(try !store.removeDevice(appID: Self.app.id, userID: "bob", deviceID: "b-phone"), "gone once")
    }

    @Test(arguments: StoreEngine.available)
    func blockListsPushCredentialsAndProviderTokens(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let store = try place.open()
        defer { store.close() }
        try store.setBlocked(["mallory", "eve", "mallory"], appID: Self.app.id, userID: "bob")
        #expect(try store.blocked(appID: Self.app.id, userID: "bob") == ["eve", "mallory"])
        #expect(try store.isBlocked("eve", by: "bob", appID: Self.app.id))
        #expect(try !store.isBlocked("bob", by: "eve", appID: Self.app.id))
        try store.setBlocked([], appID: Self.app.id, userID: "bob")
        #expect(try store.blocked(appID: Self.app.id, userID: "bob").isEmpty)

        try store.setPushSettings(.key(pem: "KEY", keyID: "K1", teamID: "T1"), appID: Self.app.id)
        try store.setPushSettings(.certificate(pem: "CERT", password: "pw"), appID: Self.app.id)
        #expect(try store.pushSettings(appID: Self.app.id) == .certificate(pem: "CERT", password: "pw"), "replaced, not added")
        try store.setProviderToken("jwt-1", issuedAt: Date(timeIntervalSince1970: 100), keyID: "K1", teamID: "T1")
        try store.setProviderToken("jwt-2", issuedAt: Date(timeIntervalSince1970: 200), keyID: "K1", teamID: "T1")
        #expect(try store.providerToken(keyID: "K1", teamID: "T1") == "jwt-2")
    }

    /// A call's record, its history (paged by `created_at`, milliseconds on both engines), its
    /// trace in order, and one call per idempotency key.
    @Test(arguments: StoreEngine.available)
    func callsHistoryAndTraces(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let store = try place.open()
        defer { store.close() }
        var state = call("c1")
        store.saveCall(state, idempotencyKey: "k1")
        _ = try state.answer(by: "bob", device: "b", nowMillis: 1_800_000_001_000)
        _ = try state.end(by: "alice", device: "a", reason: nil, nowMillis: 1_800_000_004_000)
        store.saveCall(state, idempotencyKey: "k1")
        store.recordHistory(state, video: true)
        for (index, event) in ["push_sent", "apns_accepted", "answered", "ended"].enumerated() {
            store.trace(callID: "c1", user: "bob", device: "b", channel: "voip_push", event: event, atMillis: 1_800_000_000_200 + Int64(index),
                detail: index == 1 ? ["apns_status": 200] : nil)
        }
        var older = call("c0", createdAt: 1_800_000_000_000)
        _ = try older.cancel(by: "alice", nowMillis: 1_800_000_000_500)
        store.recordHistory(older, video: false)
        store.flush()
        let summary = try #require(try store.callSummary(id: "c1", appID: Self.app.id))
        #expect(summary.summary["state"] == "ended" && summary.summary["answered_at"] == .int(1_800_000_001_000))
        #expect(summary.callees == ["bob"])
        let page = try store.history(appID: Self.app.id, userID: "bob", limit: 1, before: nil)
        #expect(page.map { $0["call_id"] } == ["c1"])
        #expect(page.first?["duration_ms"] == .int(3_000))
        #expect(page.first?["video"] == true)
        #expect(page.first?["created_at"] == .int(1_800_000_000_123))
        let next = try store.history(appID: Self.app.id, userID: "bob", limit: 10, before: 1_800_000_000_123)
        #expect(next.map { $0["call_id"] } == ["c0"])
        #expect(next.first?["outcome"] == "missed")
        let trace = try store.trace(callID: "c1")
        #expect(trace.compactMap { $0["event"]?.stringValue } == ["push_sent", "apns_accepted", "answered", "ended"])
        #expect(trace[1]["apns_status"] == 200)
        #expect(throws: (any Error).self, "a second call with the same idempotency key is refused") {
            try store.write { database in
                try database.query(
                    "INSERT INTO calls (id, app_id, caller, callees, state, summary, created_at, idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [.text("c2"), .text(Self.app.id), .text("alice"), .text("[]"), .text("ringing"), .text("{}"), .integer(1), .text("k1")])
            }
        }
    }

    /// Recovery at start ends only the calls of processes that are gone, never those of the
    /// process that runs it (the design a store shared by several servers needs).
    @Test(arguments: StoreEngine.available)
    func recoveryEndsTheCallsOfOtherOwnersOnly(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let crashed = try place.open(owner: "p_crashed")
        crashed.saveCall(call("c-crashed"), idempotencyKey: nil)
        crashed.close()
        let running = try place.open(owner: "p_running")
        defer { running.close() }
        running.saveCall(call("c-running"), idempotencyKey: nil)
        running.flush()
        #expect(try running.failInterruptedCalls(nowMillis: 1_800_000_009_000) == 1)
        #expect(try running.callSummary(id: "c-crashed", appID: Self.app.id)?.summary["outcome"] == "failed")
        #expect(try running.callSummary(id: "c-crashed", appID: Self.app.id)?.summary["end_reason"] == "server_restart")
        #expect(try running.callSummary(id: "c-running", appID: Self.app.id)?.summary["state"] == "ringing", "its own call is untouched")
        #expect(try running.history(appID: Self.app.id, userID: "bob", limit: 10, before: nil).count == 1)
    }

    /// A database a newer build migrated is refused, on both engines, with the versions named.
    @Test(arguments: StoreEngine.available)
    func aDatabaseFromANewerBuildIsRefused(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let store = try place.open()
        #expect(try store.write { try Store.schemaVersion(of: $0, engine: store.engine) } == Store.schemaVersion)
        _ = try store.write { database in
            switch engine {
            case .sqlite: try database.execute("PRAGMA user_version = \(Store.schemaVersion + 1)")
            case .postgres: try database.query("UPDATE schema_version SET version = ?", [.integer(Int64(Store.schemaVersion + 1))])
            }
        }
        store.close()
        do {
            _ = try place.open()
            Issue.record("a newer database was opened")
        } catch {
            #expect("\(error)".contains("cannot open the store") && "\(error)".contains("newer than this build"), "\(error)")
            #expect(!"\(error)".lowercased().contains("sqlite error"), "a sentence, not an engine's code")
        }
    }

    /// `switchboard store status` reads where a store's schema is, on either engine, without
    /// creating or migrating anything; a database from a newer build exits 1.
    @Test(arguments: StoreEngine.available)
    func storeStatusShowsTheSchemaVersionWithoutMigrating(engine: StoreEngine) async throws {
        let place = try StoreEngine.Place(engine)
        let target = engine == .sqlite ? ["--data-dir", place.location] : ["--store-url", place.location]
        func status() async throws -> (code: Int32, value: JSONValue) {
            let tool = try ToolProcess(["store", "status"] + target)
            let code = try await tool.waitForExit()
            return (code, try JSONDecoder().decode(JSONValue.self, from: Data(tool.standardOutput.utf8)))
        }
        let empty = try await status()
        #expect(empty.code == 0 && empty.value["schema_version"] == 0 && empty.value["engine"] == .string(engine.rawValue))
        #expect(try await status().value["schema_version"] == 0, "reading made nothing")
        let store = try place.open()
        _ = try store.write { database in
            switch engine {
            case .sqlite: try database.execute("PRAGMA user_version = \(Store.schemaVersion + 1)")
            case .postgres: try database.query("UPDATE schema_version SET version = ?", [.integer(Int64(Store.schemaVersion + 1))])
            }
        }
        store.close()
        let newer = try await status()
        #expect(newer.value["schema_version"] == .int(Int64(Store.schemaVersion + 1)))
        #expect(newer.value["build_schema_version"] == .int(Int64(Store.schemaVersion)))
        #expect(newer.code == 1, "a store this build cannot open")
        if engine == .postgres {
            // A password in the URL (trust authentication here ignores it) is never printed.
            let tool = try ToolProcess(["store", "status", "--store-url", place.location.replacingOccurrences(of: "//sb@", with: "//sb:hunter2@")])
            _ = try await tool.waitForExit()
            let location = try JSONDecoder().decode(JSONValue.self, from: Data(tool.standardOutput.utf8))["location"]?.stringValue
            let shown = try #require(location)
            #expect(shown.hasPrefix("postgres://sb@") && !shown.contains("hunter2"), "\(shown)")
        }
    }
}
