import Foundation
import SwitchboardProtocol
import SwitchboardSystem

extension Store {
    /// What `copy(sqlite:toPostgres:)` copied and checked.
    public struct CopyReport: Sendable, Encodable {
        public var from: String
        /// The database, without its password.
        public var to: String
        public var schemaVersion: Int
        /// Rows per table, the same in both (checked after the copy).
        public var tables: [String: Int]
        public var rows: Int
        /// Rows read back from the target and found equal, column by column, to the source's.
        public var rowsCompared: Int
        /// Users whose history pages, calls whose records and apps read the same from both
        /// stores through the store's own reads.
        public var readsCompared: Int
        public var seconds: Double

        enum CodingKeys: String, CodingKey {
            case from, to, tables, rows, seconds
            case schemaVersion = "schema_version"
            case rowsCompared = "rows_compared"
            case readsCompared = "reads_compared"
        }
    }

    /// Why a copy did not happen or did not check out.
    public struct CopyRefusal: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Rows per `INSERT` when copying (PostgreSQL takes at most 65,535 parameters per statement).
    static let copyBatchRows = 500

    /// Copies every row of the SQLite store in `directory` (apps and their keys, push
    /// credentials, devices, tokens, block lists, calls, history, traces, provider tokens) into
    /// the PostgreSQL database at `url`, in one transaction, and checks it: the same count in
    /// every table and sampled rows equal column by column before it commits (a copy that does
    /// not match is rolled back), then the same answers to the store's own reads (apps, history
    /// pages, call records and traces). The source is brought to this build's schema
    /// first (as `serve` would) and is not changed otherwise; the target must hold no rows.
    /// Refused while a server runs on the directory: its writes during the copy would be lost.
    public static func copy(sqlite directory: String, toPostgres url: String) throws -> CopyReport {
        let started = Date()
        let file = (directory as NSString).appendingPathComponent("switchboard.db")
        guard FileManager.default.fileExists(atPath: file) else {
            throw CopyRefusal(description: "no store in '\(directory)' (no switchboard.db there)")
        }
        let lock: DirectoryLock
        do {
            lock = try DirectoryLock(
                directory: directory, infoFile: (directory as NSString).appendingPathComponent("switchboard.lock"),
                holder: "pid \(getpid()), switchboard store migrate")
        } catch {
            if case .held(_, let holder) = error {
                throw CopyRefusal(description: "a server is using '\(directory)' (\(holder)): stop it first, so that no write is lost")
            }
            throw CopyRefusal(description: error.description)
        }
        defer { lock.release() }

        let sourceStore = try Store(directory: directory)  // migrates it forward, like serve
        defer { sourceStore.close() }
        let targetStore = try Store(postgres: url)
        defer { targetStore.close() }
        let shown = withoutPassword(url)
        let source = try SQLiteDatabase(path: file, readOnly: true)
        defer { source.close() }
        let target: PostgresConnection
        do { target = try PostgresConnection(url: url) } catch {
            throw CopyRefusal(description: "cannot connect to \(shown): \(error)")
        }
        defer { target.close() }

        let tables = try source.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .compactMap { $0.first?.string }
        let occupied = try tables.filter { try target.query("SELECT EXISTS (SELECT 1 FROM \($0))") == [[.integer(1)]] }
        guard occupied.isEmpty else {
            throw CopyRefusal(
                description: "the target \(shown) already holds rows (in \(occupied.joined(separator: ", "))): migrate into an empty database")
        }

        var counts: [String: Int] = [:], rowsCompared = 0
        try target.transaction {
            try target.execute("SET LOCAL statement_timeout = 0")
            for table in tables {
                counts[table] = try copyRows(of: table, from: source, to: target)
            }
            // The trace's sequence continues after the copied entries.
            try target.query(
                "SELECT setval(pg_get_serial_sequence('call_trace', 'seq'), COALESCE(max(seq), 1), max(seq) IS NOT NULL) FROM call_trace")
            // Checked before it commits: a copy that does not match is not kept.
            for table in tables {
                let there = try target.query("SELECT count(*) FROM \(table)").first?.first?.int64 ?? -1
                guard there == Int64(counts[table] ?? 0) else {
                    throw CopyRefusal(description: "\(table): \(counts[table] ?? 0) rows copied but \(there) in the target")
                }
                rowsCompared += try compareSampledRows(of: table, source: source, target: target)
            }
        }
        // Then the store's own reads, through connections of their own.
        let readsCompared = try compareReads(sourceStore, targetStore, source: source)

        return CopyReport(
            from: file, to: shown, schemaVersion: schemaVersion, tables: counts, rows: counts.values.reduce(0, +),
            rowsCompared: rowsCompared, readsCompared: readsCompared, seconds: Date().timeIntervalSince(started))
    }

    /// The columns of `table`, in order.
    private static func columns(of table: String, in source: SQLiteDatabase) throws -> [String] {
        try source.query("PRAGMA table_info(\(table))").compactMap { $0[1].string }
    }

    /// Copies `table` page by page (by rowid), `copyBatchRows` rows per statement; its row count.
    private static func copyRows(of table: String, from source: SQLiteDatabase, to target: PostgresConnection) throws -> Int {
        let names = try columns(of: table, in: source)
        let list = names.joined(separator: ", ")
        let row = "(" + Array(repeating: "?", count: names.count).joined(separator: ", ") + ")"
        var last = Int64.min, copied = 0
        while true {
            let page = try source.query(
                "SELECT rowid, \(list) FROM \(table) WHERE rowid > ? ORDER BY rowid LIMIT ?",
                [.integer(last), .integer(Int64(copyBatchRows))])
            guard let end = page.last?.first?.int64 else { return copied }
            let values = page.flatMap { $0.dropFirst() }
            try target.query(
                "INSERT INTO \(table) (\(list)) VALUES " + Array(repeating: row, count: page.count).joined(separator: ", "), values)
            copied += page.count
            last = end
        }
    }

    /// Reads up to 50 rows of `table` spread over it from the source and finds each, equal in
    /// every column, in the target. The number compared.
    private static func compareSampledRows(of table: String, source: SQLiteDatabase, target: PostgresConnection) throws -> Int {
        let names = try columns(of: table, in: source)
        let total = try source.query("SELECT count(*) FROM \(table)").first?.first?.int64 ?? 0
        guard total > 0 else { return 0 }
        let step = max(1, total / 50)
        let sample = try source.query(
            "SELECT \(names.joined(separator: ", ")) FROM (SELECT *, row_number() OVER (ORDER BY rowid) - 1 AS n FROM \(table)) "
                + "WHERE n % ? = 0 OR n = ? - 1",
            [.integer(step), .integer(total)])
        let match = names.map { "\($0) IS NOT DISTINCT FROM ?" }.joined(separator: " AND ")
        for row in sample {
            let found = try target.query("SELECT count(*) FROM \(table) WHERE \(match)", row).first?.first?.int64
            guard found == 1 else {
                throw CopyRefusal(description: "\(table): a row of the source is not in the target as it was (\(names.first ?? "") = \(row.first.map { "\($0)" } ?? "?"))")
            }
        }
        return sample.count
    }

    /// The store's own reads answered by both stores: every app, and for sampled users and calls
    /// their history pages and call records. The number compared.
    private static func compareReads(_ source: Store, _ target: Store, source database: SQLiteDatabase) throws -> Int {
        guard try source.allApps() == target.allApps() else { throw CopyRefusal(description: "the apps read differently from the target") }
        var compared = 1
        let users = try database.query(
            "SELECT app_id, user_id FROM (SELECT DISTINCT app_id, user_id FROM call_history) ORDER BY random() LIMIT 20")
        for user in users {
            let (app, id) = (user[0].string ?? "", user[1].string ?? "")
            var before: Int64?
            for _ in 0..<3 {
                let here = try source.history(appID: app, userID: id, limit: 50, before: before)
                guard here == (try target.history(appID: app, userID: id, limit: 50, before: before)) else {
                    throw CopyRefusal(description: "the history of a user (app \(app)) reads differently from the target")
                }
                compared += 1
                guard here.count == 50, let last = here.last?["created_at"]?.intValue else { break }
                before = last
            }
        }
        for call in try database.query("SELECT id, app_id FROM calls ORDER BY random() LIMIT 50") {
            let (id, app) = (call[0].string ?? "", call[1].string ?? "")
            let here = try source.callSummary(id: id, appID: app), there = try target.callSummary(id: id, appID: app)
            guard here?.summary == there?.summary, here?.callees == there?.callees, here?.caller == there?.caller else {
                throw CopyRefusal(description: "call \(id) reads differently from the target")
            }
            guard try source.trace(callID: id) == target.trace(callID: id) else {
                throw CopyRefusal(description: "the trace of call \(id) reads differently from the target")
            }
            compared += 1
        }
        return compared
    }
}
