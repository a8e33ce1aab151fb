import Foundation
import SwitchboardCore
import SwitchboardProtocol
import SwitchboardPush
import SwitchboardSupport
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

        func open(owner: String = "p_" + RandomID.alphanumeric(8), limits: Store.Limits = Store.Limits(), metrics: Metrics? = nil) throws -> Store {
            switch engine {
            case .sqlite: return try Store(directory: location, metrics: metrics, limits: limits, owner: owner)
            case .postgres:
                let store = try Store(postgres: location, metrics: metrics, limits: limits, owner: owner)
                try TestPostgres.expectOnPostgres(store, url: location)
                return store
            }
        }

        /// A connection of another process to the same database.
        func otherConnection() throws -> any SQLDatabase {
            switch engine {
            case .sqlite: try SQLiteDatabase(path: location + "/switchboard.db")
            case .postgres: try PostgresConnection(url: location)
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
            id: id, appID: Self.app.id, caller: "alice", callerDevice: "a", callees: ["bob"], connected: ["bob"], phones: [:],
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
        try store.register(device("dave", "d-phone", voip: "cd" + token.dropFirst(2), apns: token, at: 13))
        #expect(try store.disablePushToken(token, reason: "Unregistered", invalidSince: nil, at: Date(timeIntervalSince1970: 20)))
        #expect(try store.devices(appID: Self.app.id, userID: "carol").first?.voipToken == nil, "a dead token is left out")
        let both = try store.devices(appID: Self.app.id, users: ["carol", "dave", "erin"])
        #expect(both.keys.sorted() == ["carol", "dave", "erin"] && both["erin"] == [], "every user asked for, with or without devices")
        #expect(both["dave"]?.first?.voipToken == "cd" + token.dropFirst(2) && both["dave"]?.first?.apnsToken == nil, "dead as either kind")
        #expect(try store.pushToken(token)?.disabledReason == "Unregistered")
        try store.register(device("carol", "c-phone", voip: token, at: 30_000))
        #expect(try store.devices(appID: Self.app.id, userID: "carol").first?.voipToken == token, "registered again, it is back")
        #expect(try store.removeDevice(appID: Self.app.id, userID: "bob", deviceID: "b-phone"))
        #expect(try !store.removeDevice(appID: Self.app.id, userID: "bob", deviceID: "b-phone"), "gone once")

        // A call's setup reads block lists and devices in one query.
        let callees = ["carol", "dave", "erin"]
        let ring = try store.ringList("alice", callees: callees, appID: Self.app.id)
        let devices = try store.devices(appID: Self.app.id, users: callees)
        #expect(ring.blockedBy == nil && ring.devices == devices)
        try store.setBlocked(["alice"], appID: Self.app.id, userID: "erin")
        try store.setBlocked(["zoe"], appID: Self.app.id, userID: "carol")
        let blocked = try store.ringList("alice", callees: callees, appID: Self.app.id)
        #expect(blocked.blockedBy == "erin" && blocked.devices.isEmpty, "blocked: no devices")
        #expect(try store.ringList("alice", callees: ["carol"], appID: Self.app.id).devices == ["carol": devices["carol"]!])
        #expect(try store.ringList("zoe", callees: ["erin", "carol"], appID: "another app").blockedBy == nil, "block lists are per app")
    }

    @Test(arguments: StoreEngine.available)
    func blockListsPushCredentialsAndProviderTokens(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let store = try place.open()
        defer { store.close() }
        try store.setBlocked(["mallory", "eve", "mallory"], appID: Self.app.id, userID: "bob")
        #expect(try store.blocked(appID: Self.app.id, userID: "bob") == ["eve", "mallory"])
        #expect(try store.ringList("eve", callees: ["bob"], appID: Self.app.id).blockedBy == "bob")
        #expect(try store.ringList("bob", callees: ["eve"], appID: Self.app.id).blockedBy == nil)
        try store.setBlocked(["eve"], appID: Self.app.id, userID: "carol")
        #expect(try store.ringList("eve", callees: ["dave", "carol", "bob"], appID: Self.app.id).blockedBy == "carol", "the first in order")
        try store.setBlocked([], appID: Self.app.id, userID: "bob")
        #expect(try store.blocked(appID: Self.app.id, userID: "bob").isEmpty)

        try store.setPushSettings(.key(pem: "KEY", keyID: "K1", teamID: "T1"), appID: Self.app.id)
        try store.setPushSettings(.certificate(pem: "CERT", password: "pw"), appID: Self.app.id)
        #expect(try store.pushSettings(appID: Self.app.id) == .certificate(pem: "CERT", password: "pw"), "replaced, not added")
        // One provider token per key among the processes sharing the store: the first to
        // replace a token wins, the others are told to use it.
        let first = Date(timeIntervalSince1970: 100), second = Date(timeIntervalSince1970: 200)
        #expect(try store.settleProviderToken("jwt-1", issuedAt: first, replacing: nil, keyID: "K1", teamID: "T1") == "jwt-1")
        #expect(try store.settleProviderToken("jwt-1b", issuedAt: first, replacing: nil, keyID: "K1", teamID: "T1") == "jwt-1", "another first mint")
        #expect(try store.settleProviderToken("jwt-2", issuedAt: second, replacing: first, keyID: "K1", teamID: "T1") == "jwt-2")
        #expect(
            try store.settleProviderToken("jwt-2b", issuedAt: second, replacing: first, keyID: "K1", teamID: "T1") == "jwt-2",
            "a second process replacing the same old token is handed the new one")
        #expect(try store.providerToken(keyID: "K1", teamID: "T1") == "jwt-2")
    }

    /// Two servers sharing a store, each with its own token cache for one signing key, both
    /// find the token they adopted too old, one second apart: the first one's new token is
    /// stored and used by both (Apple refuses a key's new token within 20 minutes of the last:
    /// the second's own would be `TooManyProviderTokenUpdates`); one token minted in all.
    @Test(arguments: StoreEngine.available)
    func serversSharingAStoreRefreshAProviderTokenOnce(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let stores = [try place.open(), try place.open()]
        defer { stores.forEach { $0.close() } }
        let key = try ECPrivateKey.generate()
        let now = Locked(Date(timeIntervalSince1970: 1_800_000_000))
        let caches = stores.map { store in
            ProviderTokenCache(key: key, keyID: "K1", teamID: "T1", clock: { now.withLock { $0 } }, settle: { minted, replacing in
                try? store.settleProviderToken(minted.jwt, issuedAt: minted.issuedAt, replacing: replacing?.issuedAt, keyID: "K1", teamID: "T1")
            })
        }
        let first = try caches[0].token()
        #expect(caches[1].adopt(first.jwt), "the second server adopts the stored token at its first push")
        now.withLock { $0 += 41 * 60 }
        let renewed = try caches[0].token()
        #expect(renewed != first)
        now.withLock { $0 += 1 }
        #expect(try caches[1].token() == renewed, "the second server uses the token the first stored")
        #expect(caches[0].mintCount + caches[1].mintCount == 2, "two tokens in all: the first, and one refresh")
        #expect(try stores[1].providerToken(keyID: "K1", teamID: "T1") == renewed.jwt)
    }

    /// A call's record, its history (paged by `created_at`, milliseconds on both engines), its
    /// trace in order, and one call per idempotency key.
    @Test(arguments: StoreEngine.available)
    func callsHistoryAndTraces(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let store = try place.open()
        defer { store.close() }
        var state = call("c1")
        store.saveCall(state, idempotencyKey: "k1", leaseUntilMillis: .max)
        _ = try state.answer(by: "bob", device: "b", nowMillis: 1_800_000_001_000)
        _ = try state.end(by: "alice", device: "a", reason: nil, nowMillis: 1_800_000_004_000)
        store.saveCall(state, idempotencyKey: "k1", leaseUntilMillis: .max)
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
    /// process that runs it.
    @Test(arguments: StoreEngine.available)
    func recoveryEndsTheCallsOfOtherOwnersOnly(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let crashed = try place.open(owner: "p_crashed")
        crashed.saveCall(call("c-crashed"), idempotencyKey: nil, leaseUntilMillis: .max)
        crashed.close()
        let running = try place.open(owner: "p_running")
        defer { running.close() }
        running.saveCall(call("c-running"), idempotencyKey: nil, leaseUntilMillis: 1)
        running.flush()
        #expect(try running.endAbandonedCalls(.everyOtherOwner, nowMillis: 1_800_000_009_000) == 1)
        #expect(try running.callSummary(id: "c-crashed", appID: Self.app.id)?.summary["outcome"] == "failed")
        #expect(try running.callSummary(id: "c-crashed", appID: Self.app.id)?.summary["end_reason"] == "server_restart")
        #expect(try running.callSummary(id: "c-running", appID: Self.app.id)?.summary["state"] == "ringing", "its own call is untouched")
        #expect(try running.history(appID: Self.app.id, userID: "bob", limit: 10, before: nil).count == 1)
    }

    /// On a store several servers share, a server's start (and its sweep) ends only the calls
    /// whose owner stopped renewing its lease (or gave them up): another live server's calls go
    /// on, and renewing its one lease keeps them all, whatever each call's own lease says. Two servers sweeping at once end an abandoned call once (one history entry
    /// each, counted once).
    @Test(arguments: StoreEngine.available)
    func aSharedStoreEndsOnlyCallsWhoseLeaseExpiredAndEachOnce(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let now: Int64 = 1_800_000_000_000
        let alive = try place.open(owner: "p_alive")
        defer { alive.close() }
        alive.saveCall(call("c-alive"), idempotencyKey: nil, leaseUntilMillis: now + 15_000)
        alive.saveCall(call("c-renewed"), idempotencyKey: nil, leaseUntilMillis: now - 1)
        alive.saveCall(call("c-given-up"), idempotencyKey: nil, leaseUntilMillis: now + 15_000)
        alive.renewCallLeases(untilMillis: now + 15_000)
        alive.giveUpCallLeases(["c-given-up"]) {}
        let dead = try place.open(owner: "p_dead")
        dead.saveCall(call("c-dead"), idempotencyKey: nil, leaseUntilMillis: now - 1)
        dead.close()
        alive.flush()
        let first = try place.open(owner: "p_first"), second = try place.open(owner: "p_second")
        defer { first.close(); second.close() }
        #expect(try first.liveCall(id: "c-renewed", nowMillis: now)?.abandoned == nil, "the server renews its lease: its calls stay its own")
        #expect(try first.liveCall(id: "c-dead", nowMillis: now)?.abandoned?.id == "c-dead")
        #expect(try first.liveCall(id: "c-given-up", nowMillis: now)?.abandoned?.id == "c-given-up", "a call given up is free at once")
        #expect(try first.abandonedCalls(nowMillis: now).map(\.id).sorted() == ["c-dead", "c-given-up"])
        let counts = Locked<[Int]>([])
        let group = DispatchGroup()
        for store in [first, second] {
            DispatchQueue.global().async(group: group) {
                let ended = (try? store.endAbandonedCalls(.leaseExpired(), nowMillis: now)) ?? -1
                counts.withLock { $0.append(ended) }
            }
        }
        group.wait()
        #expect(counts.withLock { $0.reduce(0, +) } == 2, "each abandoned call is ended by one of the two, once")
        #expect(try first.callSummary(id: "c-dead", appID: Self.app.id)?.summary["end_reason"] == "server_restart")
        for id in ["c-alive", "c-renewed"] {
            #expect(try first.callSummary(id: id, appID: Self.app.id)?.summary["state"] == "ringing", "\(id) belongs to a server that renews")
        }
        #expect(try first.history(appID: Self.app.id, userID: "bob", limit: 10, before: nil).compactMap { $0["call_id"]?.stringValue }.sorted() == ["c-dead", "c-given-up"])
        #expect(try second.endAbandonedCalls(.leaseExpired(), nowMillis: now + 15_001) == 2, "once the live server stops renewing")
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

    func traceEntry(_ store: Store, call: String, at: Int64) {
        store.trace(callID: call, user: "bob", device: "b", channel: "voip_push", event: "push_sent", atMillis: at)
    }

    /// Waits up to `seconds` for `condition`.
    func eventually(within seconds: Double = 5, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            guard Date() < deadline else { return false }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return true
    }

    /// SQLite's WAL is copied into the database file by the store's checkpointer, on a thread
    /// of its own, never inside a commit; the WAL does not grow without bound meanwhile, and what
    /// was written reads back whole after the store is opened again.
    @Test func theWALIsCheckpointedOffTheWritersThreadAndStaysBounded() throws {
        let place = try StoreEngine.Place(.sqlite)
        let store = try place.open()
        let wal = place.location + "/switchboard.db-wal"
        let detail = JSONValue.string(String(repeating: "x", count: 2000))
        var largest = 0
        // About 24 MB of trace entries in 120 commits: six times the checkpoint threshold.
        for batch in 0..<120 {
            for index in 0..<100 {
                store.trace(callID: "c\(batch)", user: "bob", device: "b", channel: "voip_push", event: "push_sent", atMillis: Int64(index), detail: detail)
            }
            store.flush()
            largest = max(largest, (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0)
        }
        #expect(eventually { store.walCheckpoints >= 1 }, "the checkpointer copied the WAL")
        #expect(largest < 16 << 20, "the WAL started over after checkpoints: at most \(largest) bytes")
        store.close()
        let again = try place.open()
        defer { again.close() }
        #expect(try again.trace(callID: "c119").count == 100)
    }

    /// Storage that refused writes is tried again after 1 s, 2 s, 4 s, then every 5 s, each
    /// delay a fifth shorter or longer at random.
    @Test func retriesWaitLongerUpToFiveSeconds() {
        for (retries, base) in [(0, 1.0), (1, 2), (2, 4), (3, 5), (10, 5), (100, 5)] {
            let delays = (0..<100).map { _ in Store.retryDelay(after: retries) }
            #expect(delays.allSatisfy { $0 >= base * 0.8 && $0 <= base * 1.2 }, "after \(retries): \(delays.min()!)...\(delays.max()!)")
            #expect(Set(delays).count > 1, "jittered")
        }
    }

    /// The writes queued while one transaction commits go together in the next; a write that
    /// fails for a reason of its own costs only itself, the others of its batch are written.
    @Test(arguments: StoreEngine.available)
    func queuedWritesCommitTogetherAndABadOneCostsOnlyItself(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let metrics = Metrics()
        let store = try place.open(metrics: metrics)
        defer { store.close() }
        // Holds the writer until released (and lets it by when it runs again, alone).
        let hold: @Sendable (DispatchSemaphore) -> Void = { release in
            release.wait()
            release.signal()
        }
        let release = DispatchSemaphore(value: 0)
        store.enqueue("hold the writer") { _ in hold(release) }
        for index in 0..<500 { traceEntry(store, call: "c1", at: Int64(index)) }
        release.signal()
        store.flush()
        #expect(try store.trace(callID: "c1").count == 500)
        let commits = metrics.counter("switchboard_store_commits_total")
        #expect(commits <= 2, "501 writes queued behind one another took \(commits) commits")
        #expect(metrics.counter("switchboard_store_writes_total", ["outcome": "ok"]) == 501)

        let second = DispatchSemaphore(value: 0)
        store.enqueue("hold the writer") { _ in hold(second) }
        for index in 0..<100 {
            if index == 50 { store.enqueue("a wrong write") { try $0.query("INSERT INTO no_such_table VALUES (1)") } }
            traceEntry(store, call: "c2", at: Int64(index))
        }
        second.signal()
        store.flush()
        #expect(try store.trace(callID: "c2").count == 100, "the wrong write's batch is written without it")
        #expect(metrics.counter("switchboard_store_writes_total", ["outcome": "error"]) == 1)

        // Statements only (what a batch sends together): one that fails is the only one lost.
        let third = DispatchSemaphore(value: 0)
        store.enqueue("hold the writer") { _ in hold(third) }
        for index in 0..<100 {
            if index == 50 {
                store.enqueue("a duplicate trace", statements: [SQLStatement(
                    "INSERT INTO call_trace (seq, call_id, user_id, device_id, channel, event, at) VALUES (1, 'c3', 'u', 'd', 'c', 'e', 0)", [])])
            }
            traceEntry(store, call: "c3", at: Int64(index))
        }
        third.signal()
        store.flush()
        #expect(try store.trace(callID: "c3").count == 100)
        #expect(metrics.counter("switchboard_store_writes_total", ["outcome": "error"]) == 2)
        #expect(store.storageProblem == nil, "a wrong statement is not the storage's problem")
    }

    /// A write nobody waits for waits up to `store_commit_delay_ms` for the next commit: it goes
    /// with the next write somebody waits for, or alone once the delay is over; a read of queued
    /// writes (`flush`, `perform`) commits it at once.
    // Covers: limit:store_commit_delay_ms
    @Test(arguments: StoreEngine.available)
    func writesNobodyWaitsForJoinTheNextCommit(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let metrics = Metrics()
        let store = try place.open(limits: Store.Limits(commitDelayMillis: 3_000), metrics: metrics)
        defer { store.close() }
        let commits = { metrics.counter("switchboard_store_commits_total") }
        let before = commits()
        for index in 0..<10 { traceEntry(store, call: "c1", at: Int64(index)) }
        #expect(try store.trace(callID: "c1").isEmpty, "held for the next commit")
        let written = DispatchSemaphore(value: 0)
        store.enqueue("a write somebody waits for", statements: [], written: { written.signal() })
        #expect(written.wait(timeout: .now() + 5) == .success)
        #expect(try store.trace(callID: "c1").count == 10)
        #expect(commits() == before + 1, "the held writes went with the awaited one")

        traceEntry(store, call: "c2", at: 0)
        #expect(eventually(within: 10) { (try? store.trace(callID: "c2").count) == 1 }, "committed alone after the delay")
        // The row is readable once the commit is done, a moment before the writer counts it.
        #expect(eventually(within: 5) { commits() == before + 2 }, "\(commits() - before) commits")

        traceEntry(store, call: "c3", at: 0)
        store.flush()
        #expect(try store.trace(callID: "c3").count == 1, "a flush commits what is held")
    }

    /// A statement that waits for another process's lock past `store_statement_timeout_ms`
    /// fails: its write waits in the backlog (the store is not writable meanwhile) and is written
    /// once the lock is gone; on PostgreSQL a read fails too, as the storage's problem (503).
    /// SQLite's readers never wait for a writer's lock (WAL), so there only writes can.
    // Covers: limit:store_statement_timeout_ms
    @Test(arguments: StoreEngine.available)
    func aStatementPastTheTimeoutFailsAndItsWriteWaitsForTheLock(engine: StoreEngine) throws {
        let place = try StoreEngine.Place(engine)
        let store = try place.open(limits: Store.Limits(statementTimeoutMillis: 300))
        defer { store.close() }
        let other = try place.otherConnection()
        defer { other.close() }
        switch engine {
        case .sqlite: try other.execute("BEGIN IMMEDIATE")
        case .postgres: try other.execute("BEGIN; LOCK TABLE call_trace IN ACCESS EXCLUSIVE MODE")
        }
        let started = Date()
        traceEntry(store, call: "c1", at: 1)
        store.flush()
        let waited = Date().timeIntervalSince(started)
        #expect(store.storageProblem == "statement timeout")
        #expect(waited >= 0.25 && waited < 3, "the write waited \(waited) s for a 300 ms timeout")
        if engine == .postgres {
            do {
                _ = try store.trace(callID: "c1")
                Issue.record("a read of a locked table answered")
            } catch {
                #expect(Store.storageProblem(of: error) == "statement timeout", "\(error)")
                #expect(ErrorBody.storeRead(error, reading: "the trace").code == .unavailable)
            }
        }
        try other.execute("ROLLBACK")
        #expect(eventually { store.storageProblem == nil }, "the backlog is written once the lock is gone")
        #expect(try store.trace(callID: "c1").count == 1)
    }

    /// Reads run side by side on the pool's connections, as many as it has: a read waiting
    /// for a lock holds the others up only when it took the last read connection. PostgreSQL
    /// only: there a read can wait for a lock.
    // Covers: limit:store_pool_size
    @Test(.enabled(if: TestPostgres.runs, TestPostgres.skipReason), arguments: [2, 3])
    func readsRunSideBySideOnThePool(poolSize: Int) throws {
        let place = try StoreEngine.Place(.postgres)
        let store = try place.open(limits: Store.Limits(poolSize: poolSize, statementTimeoutMillis: 60_000))
        defer { store.close() }
        let other = try place.otherConnection()
        defer { other.close() }
        try other.execute("BEGIN; LOCK TABLE call_trace IN ACCESS EXCLUSIVE MODE")
        let locked = DispatchSemaphore(value: 0), free = DispatchSemaphore(value: 0)
        store.perform({ try $0.trace(callID: "c1") }) { _ in locked.signal() }
        store.perform({ try $0.history(appID: Self.app.id, userID: "bob", limit: 10, before: nil) }) { _ in free.signal() }
        let freeAnswered = free.wait(timeout: .now() + (poolSize == 2 ? 0.5 : 5)) == .success
        if poolSize == 2 {
            #expect(!freeAnswered, "with one read connection, the second read waits for the first")
        } else {
            #expect(freeAnswered, "a second read connection answers while the first waits for the lock")
        }
        #expect(locked.wait(timeout: .now() + 0.01) == .timedOut)
        try other.execute("ROLLBACK")
        #expect(locked.wait(timeout: .now() + 5) == .success)
        if !freeAnswered { #expect(free.wait(timeout: .now() + 5) == .success) }
    }

    /// `switchboard store migrate` copies an SQLite store with a few thousand calls into an empty
    /// PostgreSQL database and checks it; the PostgreSQL store then answers as the SQLite one did.
    /// A second run is refused (the target holds rows), and so is a run while a server holds the
    /// data directory.
    @Test(.enabled(if: TestPostgres.runs, TestPostgres.skipReason))
    func migrateCopiesAnSQLiteStoreIntoAnEmptyPostgresDatabase() async throws {
        let sqlite = try StoreEngine.Place(.sqlite), postgres = try StoreEngine.Place(.postgres)
        let calls = 3_000
        do {
            let store = try sqlite.open()
            defer { store.close() }
            try store.insert(Self.app)
            let other = App.make(name: "Other", bundleID: "com.example.other", now: Date(timeIntervalSince1970: 1_800_000_000))
            try store.insert(other)
            for user in 0..<40 {
                try store.register(device("u\(user)", "phone", voip: "voip-\(user)", apns: "apns-\(user)", at: Int64(user)))
            }
            try store.setBlocked(["u1", "u2"], appID: Self.app.id, userID: "u0")
            try store.setPushSettings(.key(pem: "KEY", keyID: "K1", teamID: "T1"), appID: Self.app.id)
            _ = try store.settleProviderToken("jwt-1", issuedAt: Date(timeIntervalSince1970: 100), replacing: nil, keyID: "K1", teamID: "T1")
            store.flush()
            for index in 0..<calls {
                var state = CallState(
                    id: "call-\(index)", appID: Self.app.id, caller: "u\(index % 40)", callerDevice: "phone", callees: ["u\((index + 1) % 40)"],
                    connected: ["u\((index + 1) % 40)"], phones: [:], now: .now, nowMillis: 1_800_000_000_000 + Int64(index) * 1_000,
                    ringTimeout: .seconds(45))
                store.saveCall(state, idempotencyKey: index % 10 == 0 ? "key-\(index)" : nil, leaseUntilMillis: .max)
                if index % 3 == 0 {
                    _ = try state.answer(by: "u\((index + 1) % 40)", device: "phone", nowMillis: 1_800_000_000_000 + Int64(index) * 1_000 + 300)
                    _ = try state.end(by: "u\(index % 40)", device: "phone", reason: nil, nowMillis: 1_800_000_000_000 + Int64(index) * 1_000 + 900)
                } else {
                    _ = try state.cancel(by: "u\(index % 40)", nowMillis: 1_800_000_000_000 + Int64(index) * 1_000 + 500)
                }
                store.saveCall(state, idempotencyKey: index % 10 == 0 ? "key-\(index)" : nil, leaseUntilMillis: .max)
                store.recordHistory(state, video: index % 2 == 0)
                for event in ["push_sent", "apns_accepted", "ended"] {
                    store.trace(callID: "call-\(index)", user: "u\((index + 1) % 40)", device: "phone", channel: "voip_push", event: event,
                        atMillis: 1_800_000_000_000 + Int64(index) * 1_000, detail: event == "apns_accepted" ? ["apns_status": 200] : nil)
                }
            }
            store.flush()
        }

        let migrate = ["store", "migrate", "--from", "sqlite:" + sqlite.location, "--to", postgres.location]
        let tool = try ToolProcess(migrate)
        #expect(try await tool.waitForExit() == 0, "\(tool.standardError)")
        let report = try JSONDecoder().decode(JSONValue.self, from: Data(tool.standardOutput.utf8))
        #expect(report["tables"]?["calls"] == .int(Int64(calls)))
        #expect(report["tables"]?["call_history"] == .int(Int64(calls * 2)))
        #expect(report["tables"]?["call_trace"] == .int(Int64(calls * 3)))
        #expect(report["tables"]?["apps"] == 2 && report["tables"]?["devices"] == 40 && report["tables"]?["blocked"] == 2)
        #expect((report["rows_compared"]?.intValue ?? 0) >= 200 && (report["reads_compared"]?.intValue ?? 0) > 50, "\(report)")
        #expect(report["to"]?.stringValue?.contains("@") == true)

        // The copy answers as the original did, and takes new writes after the copied ones.
        let copy = try postgres.open()
        let original = try sqlite.open()
        #expect(try copy.allApps() == original.allApps())
        #expect(copy.app(apiKey: Self.app.apiKey) == Self.app)
        for user in ["u0", "u7", "u39"] {
            #expect(try copy.history(appID: Self.app.id, userID: user, limit: 500, before: nil)
                == original.history(appID: Self.app.id, userID: user, limit: 500, before: nil))
            #expect(try copy.devices(appID: Self.app.id, userID: user) == original.devices(appID: Self.app.id, userID: user))
        }
        #expect(try copy.ringList("u2", callees: ["u0"], appID: Self.app.id).blockedBy == "u0")
        #expect(try copy.pushSettings(appID: Self.app.id) == .key(pem: "KEY", keyID: "K1", teamID: "T1"))
        #expect(try copy.providerToken(keyID: "K1", teamID: "T1") == "jwt-1")
        #expect(try copy.callSummary(id: "call-2999", appID: Self.app.id)?.summary == original.callSummary(id: "call-2999", appID: Self.app.id)?.summary)
        #expect(try copy.trace(callID: "call-1234") == original.trace(callID: "call-1234"))
        traceEntry(copy, call: "call-1234", at: 1_900_000_000_000)
        copy.flush()
        #expect(try copy.trace(callID: "call-1234").count == 4, "the trace's sequence goes on after the copied entries")
        copy.close()
        original.close()

        let again = try ToolProcess(migrate)
        #expect(try await again.waitForExit() == 1)
        #expect(again.standardError.contains("already holds rows"), "\(again.standardError)")

        let lock = try DirectoryLock(directory: sqlite.location, infoFile: sqlite.location + "/switchboard.lock", holder: "a test server")
        defer { lock.release() }
        let running = try ToolProcess(["store", "migrate", "--from", "sqlite:" + sqlite.location, "--to", postgres.location])
        #expect(try await running.waitForExit() == 1)
        #expect(running.standardError.contains("stop it first"), "\(running.standardError)")
    }
}
