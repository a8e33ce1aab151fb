import SwitchboardProtocol
import Dispatch
import Foundation
import SwitchboardSystem
import SwitchboardSupport

/// The store, on one of two engines with one schema: an SQLite file in WAL mode under the data
/// directory (the embedded default), or a PostgreSQL database (`Store(postgres:)`).
///
/// One writer: every write runs on the store's serial queue with the single write connection,
/// and the writes queued while one transaction commits go together in the next (one commit for
/// many). Reads use a pool of other connections, so that they wait neither behind writes nor
/// behind each other. Apps are cached in memory, since every token check looks one up.
public final class Store: Sendable {
    /// The schema, one entry per version; entry N upgrades version N to N+1. Never edit a
    /// released entry: add a new one.
    static let migrations: [String] = [
        """
        CREATE TABLE apps (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            api_key TEXT NOT NULL UNIQUE,
            api_secret TEXT NOT NULL,
            bundle_id TEXT NOT NULL,
            created_at INTEGER NOT NULL
        );
        """,
        """
        CREATE TABLE push_tokens (
            token TEXT PRIMARY KEY,
            app_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            registered_at INTEGER NOT NULL,
            disabled_at INTEGER,
            disabled_reason TEXT
        );
        """,
        """
        CREATE TABLE devices (
            app_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            device_id TEXT NOT NULL,
            platform TEXT NOT NULL,
            voip_token TEXT,
            apns_token TEXT,
            environment TEXT NOT NULL,
            bundle_id TEXT,
            callkit_enabled INTEGER NOT NULL,
            app_version TEXT,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (app_id, user_id, device_id)
        );
        CREATE INDEX devices_voip ON devices (app_id, voip_token);
        CREATE INDEX devices_apns ON devices (app_id, apns_token);
        CREATE TABLE app_push (
            app_id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            key_pem TEXT,
            key_id TEXT,
            team_id TEXT,
            certificate_pem TEXT,
            certificate_password TEXT,
            updated_at INTEGER NOT NULL
        );
        CREATE TABLE blocked (
            app_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            blocked_id TEXT NOT NULL,
            PRIMARY KEY (app_id, user_id, blocked_id)
        );
        CREATE TABLE calls (
            id TEXT PRIMARY KEY,
            app_id TEXT NOT NULL,
            caller TEXT NOT NULL,
            callees TEXT NOT NULL,
            state TEXT NOT NULL,
            summary TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            idempotency_key TEXT
        );
        CREATE UNIQUE INDEX calls_idempotency ON calls (app_id, caller, idempotency_key);
        CREATE TABLE call_history (
            app_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            direction TEXT NOT NULL,
            peers TEXT NOT NULL,
            video INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            answered_at INTEGER,
            ended_at INTEGER,
            duration_ms INTEGER NOT NULL,
            outcome TEXT NOT NULL,
            end_reason TEXT,
            ended_by TEXT,
            PRIMARY KEY (app_id, user_id, call_id)
        );
        CREATE INDEX call_history_user ON call_history (app_id, user_id, created_at);
        CREATE TABLE call_trace (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            call_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            device_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            event TEXT NOT NULL,
            at INTEGER NOT NULL,
            detail TEXT
        );
        CREATE INDEX call_trace_call ON call_trace (call_id, seq);
        """,
        // 4: the APNs provider token in use per signing key, adopted after a restart.
        """
        CREATE TABLE provider_tokens (
            key_id TEXT NOT NULL,
            team_id TEXT NOT NULL,
            jwt TEXT NOT NULL,
            issued_at INTEGER NOT NULL,
            PRIMARY KEY (key_id, team_id)
        );
        """,
        // 5: which server process runs each call, so that recovery ends only the calls of a
        // process that is gone (calls from before this version have none).
        """
        ALTER TABLE calls ADD COLUMN owner TEXT;
        CREATE INDEX calls_live ON calls (state, owner);
        """,
        // 6: the secret a rotation replaced, accepted until its grace period ends; the other
        // bundle ids the operator allows the app's devices (APNs topics).
        """
        ALTER TABLE apps ADD COLUMN previous_secret TEXT;
        ALTER TABLE apps ADD COLUMN previous_secret_until INTEGER;
        ALTER TABLE apps ADD COLUMN extra_bundle_ids TEXT;
        """,
        // 7: until when each live call's owner holds it (wall-clock ms): a call whose owner
        // stopped renewing is ended by another server, never one whose owner still runs.
        """
        ALTER TABLE calls ADD COLUMN lease_until INTEGER;
        """,
        // 8: what another node of a cluster needs to continue a call whose owner died
        // (`ActiveCall.Continuation`, JSON); none on a single node.
        """
        ALTER TABLE calls ADD COLUMN continuation TEXT;
        """,
        // 9: until when each server process holds its calls (wall-clock ms), renewed as one
        // row: a live call is its owner's while either this or the call's own lease_until (set
        // at each save; 0 once given up) runs, so no renewal rewrites every call's row. The
        // sweep for abandoned calls reads the live calls only (a partial index), not the
        // history of every call ever made.
        """
        CREATE TABLE call_owners (
            owner TEXT PRIMARY KEY,
            lease_until INTEGER NOT NULL
        );
        CREATE INDEX calls_unended ON calls (owner, lease_until) WHERE state != 'ended';
        """,
        // 10: the sound a device's app plays for the alert that rings it without CallKit.
        """
        ALTER TABLE devices ADD COLUMN ringtone TEXT;
        """,
        // 11: the sweep finds the live calls given up (lease 0) or never leased without reading
        // every live call (`Store.narrowed`).
        """
        CREATE INDEX calls_unended_lease ON calls (lease_until) WHERE state != 'ended';
        """,
    ]

    /// Which database the store runs on.
    public enum Engine: Sendable, Equatable {
        case sqlite
        case postgres
    }

    /// How much the store holds and waits: the `store_*` settings.
    public struct Limits: Sendable, Equatable {
        /// Queued writes kept while the storage refuses them (`store_backlog_writes`).
        public var backlogWrites = 10_000
        /// Connections: one writes, the others read (`store_pool_size`, at least 2).
        public var poolSize = 4
        /// How long one statement may run, or wait for a lock another process holds, before it
        /// fails (`store_statement_timeout_ms`).
        public var statementTimeoutMillis = 5_000
        /// How long a write nobody waits for (a trace entry, a call's later state) may wait
        /// for the next commit, so that it joins one somebody waits for (`store_commit_delay_ms`;
        /// 0 commits each turn at once).
        public var commitDelayMillis = 5
        /// How long the server trusts its memory of the apps: it reads them all again this
        /// often, and an API key looked up and not found counts as unknown this long
        /// (`app_refresh_seconds`).
        public var appRefreshSeconds = 10

        public init(
            backlogWrites: Int = 10_000, poolSize: Int = 4, statementTimeoutMillis: Int = 5_000, commitDelayMillis: Int = 5,
            appRefreshSeconds: Int = 10
        ) {
            self.backlogWrites = backlogWrites
            self.poolSize = max(2, poolSize)
            self.statementTimeoutMillis = statementTimeoutMillis
            self.commitDelayMillis = max(0, commitDelayMillis)
            self.appRefreshSeconds = max(1, appRefreshSeconds)
        }
    }

    /// A queued write: what it is (for logs) and what it does, as statements whose rows are not
    /// read (which a batch sends together) or as code; `written` runs once it is committed.
    private struct Write: Sendable {
        var what: String
        var statements: [SQLStatement] = []
        var body: (@Sendable (any SQLDatabase) throws -> Void)?
        var written: (@Sendable () -> Void)?
        /// `written` runs also when the storage refuses the write and it waits in memory
        /// (`keep`), not only once it is committed.
        var settledWhenKept = false

        func run(on database: any SQLDatabase) throws {
            if let body { return try body(database) }
            for statement in statements { try database.query(statement.sql, statement.parameters) }
        }
    }

    public let engine: Engine
    /// The SQLite file, or the PostgreSQL URL without its password.
    public let path: String
    /// Opens the write connection again (after the storage came back).
    private let reopenWriter: @Sendable () throws -> any SQLDatabase
    public let limits: Limits
    /// Queued writes kept while the storage refuses them (at most this many; the oldest go first).
    public var backlogLimit: Int { limits.backlogWrites }
    /// The server process writing through this store: its calls are saved with it as their owner.
    public let owner: String
    private let writer: Locked<(any SQLDatabase)?>
    /// SQLite: checkpoints the WAL off the writer's thread.
    private let checkpointer: SQLiteCheckpointer?
    private let readers: ReadPool
    private let queue = DispatchQueue(label: "switchboard.store.writer")
    /// Writes queued for the writer's next transaction; whether that turn is scheduled, and
    /// whether writes nobody waits for are held for it (`Limits.commitDelayMillis`).
    private let pending = Locked<(writes: [Write], scheduled: Bool, held: Bool)>(([], false, false))
    /// Where `perform` runs the server's requests, in the order they came, one per read
    /// connection: threads of their own (never the event loop, nor a shared pool, which grows
    /// a thread only milliseconds after one blocks).
    let requests: WorkerThreads
    /// Every app, in memory, with the API keys known not to exist (`Store+Apps`).
    let apps = Locked(AppCache())
    private let metrics: Metrics?
    let logger: Logger

    /// Writes the storage refused (disk full, read-only), in order, and why. While it holds any,
    /// or `problem` is set, the store is not writable; a retry every second drains it.
    private struct Backlog {
        var writes: [Write] = []
        /// The last refusal while the storage refuses writes.
        var problem: StorageRefusal?
        var retryScheduled = false
        /// Retries since the storage last took writes: each waits longer (`retryDelay`).
        var retries = 0
        var dropped = 0
        var closed = false
    }
    private let backlog = Locked(Backlog())

    /// Opens or creates `switchboard.db` in `directory`, migrating it to the current schema.
    /// `owner` names the process (see `endAbandonedCalls`).
    public convenience init(
        directory: String, metrics: Metrics? = nil, logger: Logger = Logger(), limits: Limits = Limits(),
        owner: String = "p_" + RandomID.alphanumeric(12)
    ) throws {
        // The file holds every app's secret and APNs key: its directory and it (and the WAL and
        // shared-memory files SQLite makes with its permissions) are the owner's only.
        if try Files.createPrivateDirectory(directory) {
            logger.warning("the data directory was readable by others: made private to its owner", ["data_dir": directory])
        }
        let path = (directory as NSString).appendingPathComponent("switchboard.db")
        try Files.createPrivateFile(path)
        for file in [path, path + "-wal", path + "-shm"] where try Files.makePrivate(file, mode: 0o600) {
            logger.warning("the store's file was readable by others: made private to its owner", ["file": file])
        }
        let timeout = limits.statementTimeoutMillis
        do {
            let checkpointer = try SQLiteCheckpointer(path: path, busyTimeoutMillis: timeout)
            try self.init(
                engine: .sqlite, path: path, metrics: metrics, logger: logger, limits: limits, owner: owner, checkpointer: checkpointer,
                openWriter: { try Self.openWriter(path, busyTimeoutMillis: timeout, checkpointer: checkpointer) },
                openReader: { try SQLiteDatabase(path: path, readOnly: true, busyTimeoutMillis: timeout) })
        } catch let error as SQLiteError {
            throw FileError(description: "cannot open the store '\(path)': \(error.message) (SQLite error \(error.code))")
        } catch let error as StoreNewerThanBuild {
            throw FileError(description: "cannot open the store '\(path)': \(error)")
        }
    }

    /// Opens the store in the PostgreSQL database at `url` (`postgres://user@host:port/db?…`),
    /// migrating it to the current schema. Several servers may share one database.
    public convenience init(
        postgres url: String, metrics: Metrics? = nil, logger: Logger = Logger(), limits: Limits = Limits(),
        owner: String = "p_" + RandomID.alphanumeric(12)
    ) throws {
        let shown = Self.withoutPassword(url)
        // Set again by libpq's reconnect too: each connection's sessions keep the timeout.
        let setup = ["SET statement_timeout = \(limits.statementTimeoutMillis)"]
        do {
            try self.init(
                engine: .postgres, path: shown, metrics: metrics, logger: logger, limits: limits, owner: owner,
                openWriter: { try PostgresConnection(url: url, setup: setup) },
                openReader: { try PostgresConnection(url: url, setup: setup) })
        } catch let error as PostgresError {
            throw FileError(description: "cannot open the store at \(shown): \(error)")
        } catch let error as StoreNewerThanBuild {
            throw FileError(description: "cannot open the store at \(shown): \(error)")
        }
    }

    private init(
        engine: Engine, path: String, metrics: Metrics?, logger: Logger, limits: Limits, owner: String, checkpointer: SQLiteCheckpointer? = nil,
        openWriter: @escaping @Sendable () throws -> any SQLDatabase, openReader: @escaping @Sendable () throws -> any SQLDatabase
    ) throws {
        self.engine = engine
        self.checkpointer = checkpointer
        self.path = path
        self.limits = limits
        self.owner = owner
        self.metrics = metrics
        self.logger = logger
        reopenWriter = openWriter
        let database = try openWriter()
        try Self.migrate(database, engine: engine, logger: logger)
        let loaded = try Self.loadApps(database)
        readers = try ReadPool(count: limits.poolSize - 1, open: openReader)
        requests = WorkerThreads(count: readers.count, name: "switchboard-store")
        writer = Locked(database)
        apps.withLock { $0.replaceAll(loaded) }
        // A store on a full or read-only disk opens (reads work) but takes no write: find out now.
        queue.sync {
            writer.withLock { database in
                guard let database else { return }
                do { try Self.probe(database, engine: engine) } catch let error where Self.storageProblem(of: error) != nil {
                    storageFailed(error, what: "opening the store")
                } catch {}
            }
        }
    }

    /// The store a command names: the PostgreSQL database at `url` when there is one, else
    /// SQLite in `directory`.
    public static func open(
        url: String?, directory: String, metrics: Metrics? = nil, logger: Logger = Logger(), limits: Limits = Limits(),
        owner: String = "p_" + RandomID.alphanumeric(12)
    ) throws -> Store {
        if let url { return try Store(postgres: url, metrics: metrics, logger: logger, limits: limits, owner: owner) }
        return try Store(directory: directory, metrics: metrics, logger: logger, limits: limits, owner: owner)
    }

    /// Where a store is and how far its schema is, read without creating or migrating anything.
    public struct Status: Sendable, Encodable {
        public var engine: String
        public var location: String
        /// 0: no schema yet (`serve` makes it at its first start).
        public var schemaVersion: Int
        public var buildSchemaVersion: Int

        enum CodingKeys: String, CodingKey {
            case engine, location
            case schemaVersion = "schema_version"
            case buildSchemaVersion = "build_schema_version"
        }
    }

    /// The status of the store a command names (`switchboard store status`).
    public static func status(url: String?, directory: String) throws -> Status {
        if let url {
            let shown = withoutPassword(url)
            do {
                let database = try PostgresConnection(url: url)
                let exists = try database.query("SELECT to_regclass('schema_version') IS NOT NULL").first?.first?.int64 == 1
                let version = exists ? try schemaVersion(of: database, engine: .postgres) : 0
                return Status(engine: "postgres", location: shown, schemaVersion: version, buildSchemaVersion: migrations.count)
            } catch let error as PostgresError {
                throw FileError(description: "cannot read the store at \(shown): \(error)")
            }
        }
        let path = (directory as NSString).appendingPathComponent("switchboard.db")
        guard FileManager.default.fileExists(atPath: path) else {
            return Status(engine: "sqlite", location: path, schemaVersion: 0, buildSchemaVersion: migrations.count)
        }
        do {
            let database = try SQLiteDatabase(path: path, readOnly: true)
            return Status(
                engine: "sqlite", location: path, schemaVersion: try schemaVersion(of: database, engine: .sqlite),
                buildSchemaVersion: migrations.count)
        } catch let error as SQLiteError {
            throw FileError(description: "cannot read the store '\(path)': \(error.message)")
        }
    }

    /// A URL as logs and errors may show it: its password left out.
    public static func withoutPassword(_ url: String) -> String {
        guard var parts = URLComponents(string: url), parts.password != nil else { return url }
        parts.password = nil
        return parts.string ?? "postgres://…"
    }

    /// What is wrong with the storage, when `error` says (a full disk, a database gone).
    static func storageProblem(of error: any Error) -> String? {
        (error as? any StorageFailure)?.storageProblem
    }

    private static func openWriter(_ path: String, busyTimeoutMillis: Int, checkpointer: SQLiteCheckpointer) throws -> SQLiteDatabase {
        let database = try SQLiteDatabase(path: path, busyTimeoutMillis: busyTimeoutMillis)
        try database.execute("PRAGMA journal_mode = WAL")
        // NORMAL in WAL mode: a crash of the process never loses a committed transaction;
        // a power loss may lose the last few, never consistency.
        try database.execute("PRAGMA synchronous = NORMAL")
        try database.execute("PRAGMA foreign_keys = ON")
        // The WAL is copied into the database file by another thread: a commit that crossed
        // the threshold ran the checkpoint itself, syncing both files, and the writes queued
        // behind it waited (a call setup's p99 at 500/s: 8.5 ms with it, 1.7 ms without).
        database.checkpoint(by: checkpointer)
        return database
    }

    /// A one-page write that changes nothing: throws when the storage refuses writes.
    private static func probe(_ database: any SQLDatabase, engine: Engine) throws {
        switch engine {
        case .sqlite:
            let version = try database.query("PRAGMA user_version").first?.first?.int64 ?? 0
            try database.transaction { try database.execute("PRAGMA user_version = \(version)") }
        case .postgres:
            try database.execute("UPDATE schema_version SET version = version")
        }
    }

    /// The schema version this build writes.
    public static var schemaVersion: Int { migrations.count }

    /// Brings the schema to this build's version, refusing a database from a newer build. On
    /// PostgreSQL, where several servers may start at once, under a lock the transaction holds.
    private static func migrate(_ database: any SQLDatabase, engine: Engine, logger: Logger) throws {
        try database.transaction {
            if engine == .postgres {
                // A migration of a large table may take longer than one statement may.
                try database.execute("SET LOCAL statement_timeout = 0")
                try database.query("SELECT pg_advisory_xact_lock(7350001)")
                try database.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
            }
            let current = try schemaVersion(of: database, engine: engine)
            guard current <= migrations.count else {
                throw StoreNewerThanBuild(version: current, supported: migrations.count)
            }
            for version in current..<migrations.count {
                switch engine {
                case .sqlite:
                    try database.execute(migrations[version])
                    try database.execute("PRAGMA user_version = \(version + 1)")
                case .postgres:
                    try database.execute(postgresSchema(migrations[version]))
                    try database.query("DELETE FROM schema_version")
                    try database.query("INSERT INTO schema_version (version) VALUES (?)", [.integer(Int64(version + 1))])
                }
                logger.info("store migrated", ["version": String(version + 1)])
            }
        }
    }

    /// The schema version a database is at (0: empty).
    static func schemaVersion(of database: any SQLDatabase, engine: Engine) throws -> Int {
        switch engine {
        case .sqlite: return Int(try database.query("PRAGMA user_version").first?.first?.int64 ?? 0)
        case .postgres: return Int(try database.query("SELECT max(version) FROM schema_version").first?.first?.int64 ?? 0)
        }
    }

    /// A migration as PostgreSQL runs it: the one schema, whose two engine-specific words are
    /// written for PostgreSQL here. SQLite's `INTEGER` is 64-bit, PostgreSQL's `BIGINT`; an
    /// `INTEGER PRIMARY KEY AUTOINCREMENT` is a `BIGSERIAL PRIMARY KEY`.
    static func postgresSchema(_ sql: String) -> String {
        sql.replacingOccurrences(of: "INTEGER PRIMARY KEY AUTOINCREMENT", with: "BIGSERIAL PRIMARY KEY")
            .replacingOccurrences(of: " INTEGER", with: " BIGINT")
    }

    /// Runs `body` on the writer queue later, in order with every other write. The writes queued
    /// while the writer is busy go in one transaction (one commit for many); when one of them
    /// fails, each is written alone, so that only that one is lost. When the storage refuses
    /// them (disk full, read-only, database gone), they wait in the backlog with every later
    /// queued write and are written when the storage recovers; other errors are logged.
    public func enqueue(_ what: String, _ body: @escaping @Sendable (any SQLDatabase) throws -> Void) {
        enqueue(Write(what: what, body: body))
    }

    /// Queues `statements`, written in one transaction in order with every other write;
    /// `written` runs on the writer once they are committed (or lost to an error of their own;
    /// `settledWhenKept`: or kept in memory while the storage refuses writes). Statements travel
    /// to the database with the others of their batch in one round trip.
    public func enqueue(_ what: String, statements: [SQLStatement], written: (@Sendable () -> Void)? = nil, settledWhenKept: Bool = false) {
        enqueue(Write(what: what, statements: statements, written: written, settledWhenKept: settledWhenKept))
    }

    private func enqueue(_ write: Write) {
        enum Turn { case none, now, held }
        let delay = limits.commitDelayMillis
        let turn = pending.withLock { pending -> Turn in
            pending.writes.append(write)
            if pending.scheduled { return .none }
            if write.written == nil && delay > 0 {
                if pending.held { return .none }
                pending.held = true
                return .held
            }
            pending.scheduled = true
            return .now
        }
        switch turn {
        case .none: break
        case .now: queue.async { [self] in writePending() }
        case .held:
            queue.asyncAfter(deadline: .now() + .milliseconds(delay)) { [self] in
                pending.withLock { $0.held = false }
                writePending()
            }
        }
    }

    /// Writer queue only: every write queued since the last turn.
    private func writePending() {
        let writes = pending.withLock { pending -> [Write] in
            defer { (pending.writes, pending.scheduled) = ([], false) }
            return pending.writes
        }
        guard !writes.isEmpty else { return }
        if backlog.withLock({ !$0.writes.isEmpty }) {
            writes.forEach(keep)  // behind the writes already waiting, in order
            return
        }
        writer.withLock { database in
            guard let database else {
                logger.error("store write after close", ["what": writes.first?.what ?? "", "count": String(writes.count)])
                return
            }
            do {
                if writes.allSatisfy({ $0.body == nil }) {
                    try database.transaction(running: writes.flatMap(\.statements))
                } else {
                    try database.transaction { for write in writes { try write.run(on: database) } }
                }
                committed(writes)
            } catch let error where Self.storageProblem(of: error) != nil {
                metrics?.increment("switchboard_store_writes_total", ["outcome": "error"], by: Double(writes.count))
                storageFailed(error, what: writes.first?.what ?? "")
                writes.forEach(keep)
            } catch {
                guard writes.count > 1 else { return failed(writes[0], error) }
                writeEach(writes[...], database)
            }
        }
    }

    /// Writer queue only: `writes` one transaction each; from the first the storage refuses,
    /// they wait in the backlog.
    private func writeEach(_ writes: ArraySlice<Write>, _ database: any SQLDatabase) {
        for (index, write) in zip(writes.indices, writes) {
            do {
                try database.transaction { try write.run(on: database) }
                committed([write])
            } catch let error where Self.storageProblem(of: error) != nil {
                metrics?.increment("switchboard_store_writes_total", ["outcome": "error"], by: Double(writes.count - index + writes.startIndex))
                storageFailed(error, what: write.what)
                writes[index...].forEach(keep)
                return
            } catch {
                failed(write, error)
            }
        }
    }

    private func committed(_ writes: [Write]) {
        committed(count: writes.count)
        for write in writes { write.written?() }
    }

    private func committed(count: Int) {
        metrics?.increment("switchboard_store_writes_total", ["outcome": "ok"], by: Double(count))
        metrics?.increment("switchboard_store_commits_total")
    }

    /// A write that failed for a reason of its own (not the storage's): logged and lost.
    private func failed(_ write: Write, _ error: any Error) {
        metrics?.increment("switchboard_store_writes_total", ["outcome": "error"])
        logger.error("store write failed", ["what": write.what, "error": "\(error)"])
        write.written?()  // settled: nothing waits for it any longer
    }

    /// Why the storage does not take writes now ("disk full", "read-only"...), or nil.
    public var storageProblem: String? { backlog.withLock { $0.problem?.problem } }

    /// Writer queue only.
    private func keep(_ write: Write) {
        var write = write
        if write.settledWhenKept, let written = write.written {
            write.written = nil
            written()
        }
        let dropped = backlog.withLock { backlog -> Bool in
            backlog.writes.append(write)
            guard backlog.writes.count > backlogLimit else { return false }
            backlog.writes.removeFirst()
            backlog.dropped += 1
            return true
        }
        if dropped {
            metrics?.increment("switchboard_store_writes_dropped_total")
            logger.error("store backlog full: the oldest waiting write is lost", ["limit": String(backlogLimit)])
        }
        metrics?.set("switchboard_store_backlog", to: Double(backlog.withLock { $0.writes.count }))
    }

    /// Writer queue only: the storage refused a write; retry every second until it recovers.
    private func storageFailed(_ error: any Error, what: String) {
        let refusal = StorageRefusal(problem: Self.storageProblem(of: error) ?? "storage failure", message: "\(error)")
        let (first, schedule) = backlog.withLock { backlog -> (Bool, Bool) in
            let first = backlog.problem == nil
            backlog.problem = refusal
            let schedule = !backlog.retryScheduled
            backlog.retryScheduled = true
            return (first, schedule)
        }
        metrics?.set("switchboard_store_writable", to: 0)
        if first {
            logger.error(
                "storage refuses writes; writes wait in memory and calls are refused until it recovers",
                ["what": what, "problem": refusal.problem, "error": refusal.message])
        }
        if schedule { scheduleRetry() }
    }

    private func scheduleRetry() {
        let retries = backlog.withLock { backlog -> Int in
            defer { backlog.retries += 1 }
            return backlog.retries
        }
        queue.asyncAfter(deadline: .now() + Self.retryDelay(after: retries)) { [self] in
            backlog.withLock { $0.retryScheduled = false }
            if !drainBacklog() {
                backlog.withLock { $0.retryScheduled = true }
                scheduleRetry()
            }
        }
    }

    /// How long the store waits before its next try at storage that refused writes, after
    /// `retries` tries: 1 s, 2 s, 4 s, then 5 s, each a fifth shorter or longer at random (so
    /// that servers sharing a database that came back do not all reconnect at once).
    static func retryDelay(after retries: Int) -> Double {
        min(5, Double(1 << min(retries, 3))) * Double.random(in: 0.8...1.2)
    }

    /// Writer queue only: writes what waits, oldest first (or, with nothing waiting, probes the
    /// storage with a one-page write). True when the storage takes writes again.
    @discardableResult
    private func drainBacklog() -> Bool {
        guard backlog.withLock({ $0.problem != nil || !$0.writes.isEmpty }) else { return true }
        guard !backlog.withLock({ $0.closed }) else { return false }
        return writer.withLock { connection -> Bool in
            do {
                // Connections opened on a read-only disk stay read-only, and SQLite shares the
                // WAL index between the connections of a process; a database server that went
                // away dropped both: open both again (also after a reopening that failed half-way).
                let problem = backlog.withLock { $0.problem?.problem }
                if connection == nil || problem == "read-only" || problem == "database unavailable" {
                    connection?.close()
                    connection = nil
                    readers.renew()
                    connection = try reopenWriter()
                }
                guard let database = connection else { return false }
                if backlog.withLock({ $0.writes.isEmpty }) { try Self.probe(database, engine: engine) }
                while let next = backlog.withLock({ $0.writes.first }) {
                    do {
                        try database.transaction { try next.run(on: database) }
                        committed([next])
                    } catch let error where Self.storageProblem(of: error) != nil {
                        throw error
                    } catch {
                        failed(next, error)
                    }
                    backlog.withLock { _ = $0.writes.removeFirst() }
                }
            } catch {
                metrics?.set("switchboard_store_backlog", to: Double(backlog.withLock { $0.writes.count }))
                logger.debug("storage still refuses writes", ["error": "\(error)"])
                return false
            }
            let dropped = backlog.withLock { backlog -> Int in
                backlog.problem = nil
                backlog.retries = 0
                return backlog.dropped
            }
            metrics?.set("switchboard_store_backlog", to: 0)
            metrics?.set("switchboard_store_writable", to: 1)
            logger.warning("storage takes writes again; every waiting write is stored", ["lost_to_backlog_limit": String(dropped)])
            return true
        }
    }

    /// Runs a read on a read connection of its own (waiting while every one is busy).
    /// A read connection to a database server that went away connects again, once, before the
    /// read fails.
    public func read<T>(_ body: (any SQLDatabase) throws -> T) throws -> T {
        try readers.withConnection { database in
            do {
                return try body(database)
            } catch let error where Self.storageProblem(of: error) == "database unavailable" {
                guard database.reconnect() else { throw error }
                return try body(database)
            }
        }
    }

    /// Waits until every queued write is done (tests, shutdown).
    public func flush() {
        queue.sync { writePending() }
    }

    /// Waits until every request handed to `perform` before has run and answered (tests).
    public func waitForRequests() {
        requests.waitUntilIdle()
    }

    /// Runs `body` on one of the store's request threads (as many as read connections; the
    /// requests start in the order they came), once the writes queued before it are done (so it
    /// reads what the caller wrote: a call's end, its history), and hands its result to
    /// `completion` on that thread. A read of what is never queued (devices and block lists,
    /// written at once by `write`) passes `afterQueuedWrites: false` and does not wait for the
    /// commit in progress. The server reaches the store only through this from its event loop
    /// (`Hub.withStore`).
    ///
    /// `lane` (the app's id) keeps apps apart: each app's requests start in order, the apps take
    /// turns, and one app never holds every request thread (`WorkerThreads`), so that a backlog
    /// of one app's requests does not delay another app's call setup.
    public func perform<T: Sendable>(
        _ body: @escaping @Sendable (Store) throws -> T, afterQueuedWrites: Bool = true, lane: String = "",
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        requests.submit(lane: lane) { [self] in
            if afterQueuedWrites { flush() }
            completion(Result { try body(self) })
        }
    }

    /// Runs `body` with the write connection on the writer queue and waits for it.
    /// Fails with an error whose `storageProblem` is set while the storage refuses writes
    /// (after trying once more: it may have recovered).
    public func write<T: Sendable>(_ body: @Sendable (any SQLDatabase) throws -> T) throws -> T {
        try queue.sync {
            writePending()  // the writes queued before this one go first
            if !drainBacklog(), let refusal = backlog.withLock({ $0.problem }) { throw refusal }
            return try writer.withLock { database in
                guard let database else { throw SQLiteError(code: 21, message: "store is closed") }
                do {
                    let result = try database.transaction { try body(database) }
                    committed(count: 1)
                    return result
                } catch {
                    metrics?.increment("switchboard_store_writes_total", ["outcome": "error"])
                    if Self.storageProblem(of: error) != nil { storageFailed(error, what: "write") }
                    throw error
                }
            }
        }
    }

    /// Finishes queued writes, checkpoints the WAL and closes the file.
    public func close() {
        backlog.withLock { $0.closed = true }
        queue.sync {
            writePending()  // what is held for the commit delay
            let waiting = backlog.withLock { $0.writes.count }
            if waiting > 0 {
                logger.error("closing with writes the storage never took: they are lost", ["count": String(waiting)])
            }
            writer.withLock { database in
                if engine == .sqlite { try? database?.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
                database?.close()
                database = nil
            }
        }
        checkpointer?.close()
        requests.stop()
        readers.close()
    }

    /// Checkpoints of the WAL so far, each on the checkpointer's thread (SQLite; tests).
    public var walCheckpoints: Int { checkpointer?.checkpoints ?? 0 }

    /// `PRAGMA integrity_check`: "ok" when the file is sound. SQLite only: PostgreSQL checks
    /// its own pages.
    public func integrityCheck() throws -> String {
        guard engine == .sqlite else { return "ok" }
        return try queue.sync {
            try writer.withLock { database in
                guard let database else { throw SQLiteError(code: 21, message: "store is closed") }
                let rows = try database.query("PRAGMA integrity_check")
                return rows.compactMap { $0.first?.string }.joined(separator: "; ")
            }
        }
    }
}

/// A database a newer build migrated: this one does not know its schema.
struct StoreNewerThanBuild: Error, CustomStringConvertible {
    var version: Int
    var supported: Int
    var description: String { "database schema version \(version) is newer than this build (\(supported))" }
}

extension ErrorBody {
    /// A read the store could not answer: `503 unavailable` while the database does not answer
    /// or a statement timed out (retry later), `500 internal` for anything else.
    static func storeRead(_ error: any Error, reading what: String) -> ErrorBody {
        if let problem = Store.storageProblem(of: error) {
            return ErrorBody(.unavailable, "storage unavailable (\(problem)): could not read \(what); retry later")
        }
        return ErrorBody(.internal, "could not read \(what)")
    }
}

/// Why the storage takes no writes now, as the store last heard it.
struct StorageRefusal: Error, Sendable, StorageFailure, CustomStringConvertible {
    var problem: String
    var message: String
    var storageProblem: String? { problem }
    var description: String { message }
}
