import Foundation
import SwitchboardSupport
import SwitchboardSystem
import Testing

@testable import SwitchboardServer

/// The PostgreSQL `scripts/with-postgres.sh` started for this run (`make test` does), if any.
enum TestPostgres {
    static let url = ProcessInfo.processInfo.environment["SWITCHBOARD_TEST_POSTGRES_URL"]
    /// Set by the script: without a server the PostgreSQL tests fail instead of being skipped.
    /// In CI too: a CI job that forgot the script fails instead of running SQLite alone.
    static let required = ProcessInfo.processInfo.environment["SWITCHBOARD_TEST_POSTGRES_REQUIRED"] == "1"
        || ProcessInfo.processInfo.environment["CI"] != nil
    static var runs: Bool { url != nil || required }
    static let skipReason: Comment = "needs PostgreSQL: run through scripts/with-postgres.sh (make test does)"

    /// A place of its own for one test on the run's server: a schema, which its connections
    /// use through the URL's `search_path` (a schema costs the server far less than a database,
    /// which it copies from a template); `drop` removes it.
    static func database() throws -> (url: String, drop: @Sendable () -> Void) {
        let admin = try #require(url, "SWITCHBOARD_TEST_POSTGRES_URL is not set: run through scripts/with-postgres.sh")
        let name = "t_" + RandomID.alphanumeric(12).lowercased()
        try PostgresConnection(url: admin).execute("CREATE SCHEMA \(name)")
        let own = admin + (admin.contains("?") ? "&" : "?") + "options=-c%20search_path%3D\(name)"
        return (own, { try? PostgresConnection(url: admin).execute("DROP SCHEMA IF EXISTS \(name) CASCADE") })
    }

    /// Fails unless `store` reads from PostgreSQL (SQLite has no `version()`), in the schema of
    /// `url` (its `search_path`): a test meant for PostgreSQL never runs on SQLite by mistake.
    static func expectOnPostgres(_ store: Store, url: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let row = try store.read { try $0.query("SELECT version(), current_schema()") }.first ?? []
        let schema = url.firstMatch(of: /search_path%3D(\w+)/).map { String($0.1) }
        #expect(store.engine == .postgres, sourceLocation: sourceLocation)
        #expect(row.first?.string?.hasPrefix("PostgreSQL ") == true, "\(row)", sourceLocation: sourceLocation)
        #expect(schema == nil || row.last?.string == schema, "\(row)", sourceLocation: sourceLocation)
    }
}

/// libpq through `PostgresConnection`, against a real PostgreSQL 15 on loopback.
@Suite(.enabled(if: TestPostgres.runs, TestPostgres.skipReason), .timeLimit(.minutes(3)))
struct PostgresConnectionTests {
    @Test func valuesTravelAsParametersAndComeBackTyped() throws {
        let (url, drop) = try TestPostgres.database()
        defer { drop() }
        let db = try PostgresConnection(url: url)
        #expect(db.serverVersion >= 150_000)
        try db.execute("CREATE TABLE t (i BIGINT, r DOUBLE PRECISION, s TEXT, b BYTEA, f BOOLEAN, n TEXT)")
        let text = "it's \"quoted\"; DROP TABLE t; -- é😀"
        try db.execute("SELECT 1")
        _ = try db.query(
            "INSERT INTO t VALUES ($1, $2, $3, $4, $5::boolean, $6)",
            [.integer(Int64.min), .real(2.5), .text(text), .blob([0, 1, 0xFF]), .integer(1), .null])
        let rows = try db.query("SELECT i, r, s, b, f, n FROM t")
        #expect(rows == [[.integer(Int64.min), .real(2.5), .text(text), .blob([0, 1, 0xFF]), .integer(1), .null]])
        #expect(try db.query("SELECT count(*) FROM t WHERE s = $1", [.text(text)]) == [[.integer(1)]], "a parameter is never SQL")
    }

    @Test func errorsCarryTheirSQLStateAndLeaveTheConnectionUsable() throws {
        let (url, drop) = try TestPostgres.database()
        defer { drop() }
        let db = try PostgresConnection(url: url)
        try db.execute("CREATE TABLE devices (id TEXT PRIMARY KEY)")
        _ = try db.query("INSERT INTO devices VALUES ($1)", [.text("a")])
        do {
            _ = try db.query("INSERT INTO devices VALUES ($1)", [.text("a")])
            Issue.record("a second row with the same key was taken")
        } catch {
            #expect(error.uniqueViolation, "\(error)")
            #expect(!error.connectionLost)
        }
        #expect(throws: PostgresError.self) { try db.execute("SELEKT 1") }
        #expect(try db.query("SELECT count(*) FROM devices") == [[.integer(1)]])
    }

    @Test func aTransactionIsWholeOrNothing() throws {
        let (url, drop) = try TestPostgres.database()
        defer { drop() }
        let db = try PostgresConnection(url: url)
        try db.execute("CREATE TABLE calls (id TEXT PRIMARY KEY)")
        struct Abandoned: Error {}
        #expect(throws: Abandoned.self) {
            try db.transaction {
                _ = try db.query("INSERT INTO calls VALUES ('one')")
                throw Abandoned()
            }
        }
        try db.transaction { _ = try db.query("INSERT INTO calls VALUES ('two')") }
        #expect(try db.query("SELECT id FROM calls") == [[.text("two")]])
    }

    /// A connection the server cuts fails its next query as lost, and comes back on reconnect.
    @Test func aCutConnectionIsSeenAsLostAndReconnects() throws {
        let (url, drop) = try TestPostgres.database()
        defer { drop() }
        let db = try PostgresConnection(url: url)
        let pid = try #require(try db.query("SELECT pg_backend_pid()").first?.first?.int64)
        let other = try PostgresConnection(url: url)
        #expect(try other.query("SELECT pg_terminate_backend($1::integer)", [.integer(pid)]) == [[.integer(1)]])
        do {
            _ = try db.query("SELECT 1", [])
            Issue.record("a query on a terminated connection succeeded")
        } catch {
            #expect(error.connectionLost, "\(error)")
        }
        #expect(db.reconnect())
        #expect(try db.query("SELECT 1") == [[.integer(1)]])
    }

    /// Statements sent together (libpq's pipeline mode, more than one pipeline's worth) are one
    /// transaction: all of them or, when one fails, none, on a connection still usable.
    @Test func statementsSentTogetherAreOneTransaction() throws {
        let (url, drop) = try TestPostgres.database()
        defer { drop() }
        let db = try PostgresConnection(url: url)
        try db.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, s TEXT)")
        func rows(_ ids: Range<Int>) -> [SQLStatement] {
            ids.map { SQLStatement("INSERT INTO t VALUES (?, ?)", [.integer(Int64($0)), .text("row \($0)")]) }
        }
        try db.transaction(running: rows(0..<600))
        #expect(try db.query("SELECT count(*), min(id), max(id) FROM t") == [[.integer(600), .integer(0), .integer(599)]])
        for failing in [rows(1_000..<1_002) + rows(5..<6) + rows(1_002..<1_003), rows(2_000..<2_400) + rows(7..<8)] {
            do {
                try db.transaction(running: failing)
                Issue.record("a transaction with a duplicate key was committed")
            } catch {
                #expect(error.uniqueViolation, "\(error)")
            }
            #expect(try db.query("SELECT count(*) FROM t") == [[.integer(600)]], "none of its rows, in any of its pipelines")
        }
        try db.transaction(running: [])
        try db.transaction(running: rows(600..<601))
        #expect(try db.query("SELECT count(*) FROM t") == [[.integer(601)]])
    }

    @Test func aServerThatIsNotThereIsACleanError() throws {
        let port = try #require(ReservedPort(on: ["127.0.0.1"]))
        do {
            _ = try PostgresConnection(url: "postgres://sb@127.0.0.1:\(port.port)/postgres?connect_timeout=2")
            Issue.record("connected to nothing")
        } catch {
            #expect(error.connectionLost)
            #expect(error.description.contains("cannot connect to PostgreSQL"))
        }
    }

    /// TLS to the database when the URL asks for it: `sslmode=require` encrypts,
    /// `verify-full` also checks the server's certificate against `sslrootcert` and refuses one
    /// it does not chain to; `disable` shows the check below can tell the difference. A reconnect
    /// keeps TLS, and a store opened on such a URL reads over it.
    @Test func tlsToTheDatabaseIsWhatTheURLAsksFor() throws {
        let environment = ProcessInfo.processInfo.environment
        let ca = try #require(environment["SWITCHBOARD_TEST_POSTGRES_CA"], "with-postgres.sh names the server's certificate")
        let otherCA = try #require(environment["SWITCHBOARD_TEST_POSTGRES_OTHER_CA"])
        let (url, drop) = try TestPostgres.database()
        defer { drop() }
        func with(_ parameters: String) -> String { url + (url.contains("?") ? "&" : "?") + parameters }
        func usesTLS(_ db: any SQLDatabase) throws -> Bool {
            try db.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") == [[.integer(1)]]
        }
        #expect(try !usesTLS(PostgresConnection(url: with("sslmode=disable"))))
        #expect(try usesTLS(PostgresConnection(url: with("sslmode=require"))))
        let verified = try PostgresConnection(url: with("sslmode=verify-full&sslrootcert=\(ca)"))
        #expect(try usesTLS(verified))
        #expect(verified.reconnect())
        #expect(try usesTLS(verified), "a reconnect keeps TLS")
        do {
            _ = try PostgresConnection(url: with("sslmode=verify-full&sslrootcert=\(otherCA)"))
            Issue.record("a server whose certificate is not trusted was accepted")
        } catch {
            #expect(error.description.contains("certificate verify failed"), "\(error)")
        }
        let store = try Store(postgres: with("sslmode=verify-full&sslrootcert=\(ca)"))
        defer { store.close() }
        #expect(try store.read(usesTLS))
        #expect(try store.write { try $0.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") } == [[.integer(1)]], "the write connection too")
    }
}
