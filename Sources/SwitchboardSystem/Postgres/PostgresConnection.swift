internal import CLibPQ
import Foundation

/// A PostgreSQL failure: the server's SQLSTATE and message, or why the connection failed.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// The SQLSTATE of an error the server reported (`23505`: a unique violation); nil when
    /// there was no answer (the connection failed or was lost).
    public var sqlState: String?
    public var message: String

    /// The server did not answer: it is down, restarting, or the connection was cut.
    public var connectionLost: Bool { sqlState == nil || sqlState!.hasPrefix("08") || sqlState == "57P01" }
    /// The statement ran (or waited for a lock) longer than `statement_timeout` allows.
    public var timedOut: Bool { sqlState == "57014" }
    /// A unique or primary-key constraint refused the row.
    public var uniqueViolation: Bool { sqlState == "23505" }

    public var description: String { sqlState.map { "\(message) (SQLSTATE \($0))" } ?? message }
}

extension PostgresError: StorageFailure {
    /// A server that does not answer takes no writes for now; anything else is about the
    /// statement.
    public var storageProblem: String? { connectionLost ? "database unavailable" : timedOut ? "statement timeout" : nil }
}

/// One connection to a PostgreSQL server through libpq. Calls block: they are for the store's
/// own threads, never the event loop. One thread at a time.
///
/// Safety of `@unchecked Sendable`: the connection moves between threads but is used by one at
/// a time (its owner's lock or queue); libpq allows that.
public final class PostgresConnection: SQLDatabase, @unchecked Sendable {
    private var connection: OpaquePointer?
    /// Statements as written (`?`), prepared on this session: the server parses and plans each
    /// once, not at every run. Forgotten when the session is new (a reconnect).
    private var prepared: [String: String] = [:]
    /// At most this many statements are prepared per session; past it they run unprepared.
    static let preparedLimit = 512
    public private(set) var changes = 0

    /// Statements run on every new session: after connecting and after each reconnect.
    private let setup: [String]

    /// Connects with a libpq connection string or URL (`postgres://user@host:port/db?sslmode=…`)
    /// and runs `setup` (`SET statement_timeout = …`) on the new session.
    public init(url: String, setup: [String] = []) throws(PostgresError) {
        self.setup = setup
        guard let connection = PQconnectdb(url) else { throw PostgresError(message: "out of memory connecting to PostgreSQL") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.text(PQerrorMessage(connection))
            PQfinish(connection)
            throw PostgresError(message: "cannot connect to PostgreSQL: \(message)")
        }
        // Notices ("relation … already exists, skipping") are not errors: libpq would print
        // each to standard error.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        self.connection = connection
        for statement in setup { try execute(statement) }
    }

    deinit { close() }

    public func close() {
        if let connection { PQfinish(connection) }
        connection = nil
    }

    /// Whether the connection is up, as libpq last saw it.
    public var isConnected: Bool { connection.map { PQstatus($0) == CONNECTION_OK } ?? false }

    /// Connects again on the same parameters (after the server went away). True when it is up.
    @discardableResult
    public func reconnect() -> Bool {
        guard let connection else { return false }
        PQreset(connection)
        prepared = [:]
        guard PQstatus(connection) == CONNECTION_OK else { return false }
        do {
            for statement in setup { try execute(statement) }
        } catch { return false }
        return true
    }

    /// The server's version number (150004 for 15.4).
    public var serverVersion: Int { connection.map { Int(PQserverVersion($0)) } ?? 0 }

    /// Runs statements without parameters or results (several, separated by `;`, in one call).
    public func execute(_ sql: String) throws(PostgresError) {
        _ = try run { PQexec($0, sql) }
    }

    /// Runs one statement with parameters (`?`, or PostgreSQL's own `$1`, `$2`…) and returns
    /// its rows. Values travel as text; integers, floating-point numbers, booleans (as 0 or 1),
    /// text and `bytea` come back typed.
    @discardableResult
    public func query(_ sql: String, _ parameters: [SQLValue] = []) throws(PostgresError) -> [[SQLValue]] {
        let statement = try preparedName(of: sql)
        let texts: [String?] = parameters.map(Self.parameterText)
        var pointers = texts.map { $0.flatMap { strdup($0) } }
        defer { pointers.forEach { free($0) } }
        return try pointers.withUnsafeMutableBufferPointer { buffer throws(PostgresError) -> [[SQLValue]] in
            let values = UnsafeRawPointer(buffer.baseAddress).map { $0.assumingMemoryBound(to: UnsafePointer<CChar>?.self) }
            switch statement {
            case .prepared(let name): return try run { PQexecPrepared($0, name, Int32(texts.count), values, nil, nil, 0) }
            case .unprepared(let text): return try run { PQexecParams($0, text, Int32(texts.count), nil, values, nil, nil, 0) }
            }
        }
    }

    private enum Statement {
        case prepared(String)
        case unprepared(String)
    }

    /// The name `sql` is prepared under on this session, preparing it the first time.
    private func preparedName(of sql: String) throws(PostgresError) -> Statement {
        if let name = prepared[sql] { return .prepared(name) }
        let text = numbered(sql)
        guard prepared.count < Self.preparedLimit else { return .unprepared(text) }
        let name = "sb\(prepared.count)"
        _ = try run { PQprepare($0, name, text, 0, nil) }
        prepared[sql] = name
        return .prepared(name)
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try transaction(beginning: "BEGIN", body)
    }

    /// Statements sent in one pipeline before their results are read: a batch's results are
    /// a few dozen bytes each, far below what the socket holds, so the two sides never wait
    /// on each other.
    static let pipelineLimit = 256

    /// Runs `statements` in one transaction, sent together with its `BEGIN` and `COMMIT`
    /// through libpq's pipeline mode: one round trip (per `pipelineLimit` statements) instead
    /// of one each. The first failure is thrown, and the transaction rolled back.
    public func transaction(running statements: [SQLStatement]) throws(PostgresError) {
        guard let connection else { throw PostgresError(message: "the PostgreSQL connection is closed") }
        let prepared = try statements.map { statement throws(PostgresError) in try preparedName(of: statement.sql) }
        guard PQenterPipelineMode(connection) == 1 else {
            throw PostgresError(message: "cannot enter pipeline mode: \(Self.text(PQerrorMessage(connection)))")
        }
        var failure: PostgresError?
        var committed = false
        var start = 0
        pipelines: repeat {
            let end = min(statements.count, start + Self.pipelineLimit)
            var sent = 0
            var complete = true
            if start == 0 { complete = PQsendQueryParams(connection, "BEGIN", 0, nil, nil, nil, nil, 0) == 1 }
            if complete { sent += start == 0 ? 1 : 0 }
            for index in start..<end where complete {
                complete = send(statements[index].parameters, as: prepared[index], on: connection)
                if complete { sent += 1 }
            }
            let last = end == statements.count
            if complete && last {
                complete = PQsendQueryParams(connection, "COMMIT", 0, nil, nil, nil, nil, 0) == 1
                if complete { sent += 1 }
            }
            guard PQpipelineSync(connection) == 1 else { break }
            for _ in 0..<sent {
                while let result = PQgetResult(connection) {
                    defer { PQclear(result) }
                    if failure == nil, PQresultStatus(result) == PGRES_FATAL_ERROR { failure = Self.error(in: result, on: connection) }
                }
            }
            guard let sync = PQgetResult(connection) else { break }
            let synced = PQresultStatus(sync) == PGRES_PIPELINE_SYNC
            PQclear(sync)
            guard complete, synced, failure == nil else { break pipelines }
            committed = last
            start = end
        } while !committed
        if !committed && failure == nil {
            failure = PostgresError(message: "PostgreSQL did not answer the pipeline: \(Self.text(PQerrorMessage(connection)))")
        }
        PQexitPipelineMode(connection)
        if let failure {
            if !failure.connectionLost { try? execute("ROLLBACK") }
            throw failure
        }
    }

    /// Sends one statement of a pipeline; false when libpq could not.
    private func send(_ parameters: [SQLValue], as statement: Statement, on connection: OpaquePointer) -> Bool {
        let texts: [String?] = parameters.map(Self.parameterText)
        var pointers = texts.map { $0.flatMap { strdup($0) } }
        defer { pointers.forEach { free($0) } }
        return pointers.withUnsafeMutableBufferPointer { buffer -> Bool in
            let values = UnsafeRawPointer(buffer.baseAddress).map { $0.assumingMemoryBound(to: UnsafePointer<CChar>?.self) }
            switch statement {
            case .prepared(let name): return PQsendQueryPrepared(connection, name, Int32(texts.count), values, nil, nil, 0) == 1
            case .unprepared(let text): return PQsendQueryParams(connection, text, Int32(texts.count), nil, values, nil, nil, 0) == 1
            }
        }
    }

    /// `sql` with each `?` outside quotes as `$1`, `$2`…
    private func numbered(_ sql: String) -> String {
        var out = ""
        var index = 0
        var quote: Character?
        for character in sql {
            if let open = quote {
                if character == open { quote = nil }
                out.append(character)
            } else if character == "'" || character == "\"" {
                quote = character
                out.append(character)
            } else if character == "?" {
                index += 1
                out += "$\(index)"
            } else {
                out.append(character)
            }
        }
        return out
    }

    // MARK: Results

    private func run(_ send: (OpaquePointer) -> OpaquePointer?) throws(PostgresError) -> [[SQLValue]] {
        guard let connection else { throw PostgresError(message: "the PostgreSQL connection is closed") }
        guard let result = send(connection) else {
            throw PostgresError(message: "no answer from PostgreSQL: \(Self.text(PQerrorMessage(connection)))")
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
            changes = PQcmdTuples(result).flatMap { Int(String(cString: $0)) } ?? 0
            return []
        case PGRES_TUPLES_OK:
            changes = Int(PQntuples(result))
            return Self.rows(result)
        default:
            throw Self.error(in: result, on: connection)
        }
    }

    /// The failure a result reports: the server's SQLSTATE and message.
    private static func error(in result: OpaquePointer, on connection: OpaquePointer) -> PostgresError {
        let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let message = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
            ?? text(PQerrorMessage(connection))
        return PostgresError(sqlState: state, message: message)
    }

    private static func rows(_ result: OpaquePointer) -> [[SQLValue]] {
        let count = PQntuples(result), columns = PQnfields(result)
        let types = (0..<columns).map { PQftype(result, $0) }
        return (0..<count).map { row in
            (0..<columns).map { column in
                if PQgetisnull(result, row, column) != 0 { return .null }
                let text = String(cString: PQgetvalue(result, row, column))
                switch types[Int(column)] {
                case 20, 21, 23: return Int64(text).map(SQLValue.integer) ?? .text(text)  // int8, int2, int4
                case 700, 701, 1700: return Double(text).map(SQLValue.real) ?? .text(text)  // float4, float8, numeric
                case 16: return .integer(text == "t" ? 1 : 0)  // bool
                case 17: return .blob(bytes(ofBytea: PQgetvalue(result, row, column)))
                default: return .text(text)
                }
            }
        }
    }

    private static func bytes(ofBytea text: UnsafePointer<CChar>?) -> [UInt8] {
        guard let text else { return [] }
        var length = 0
        guard let raw = text.withMemoryRebound(to: UInt8.self, capacity: 1, { PQunescapeBytea($0, &length) }) else { return [] }
        defer { PQfreemem(raw) }
        return Array(UnsafeBufferPointer(start: raw, count: length))
    }

    private static func parameterText(_ value: SQLValue) -> String? {
        switch value {
        case .null: nil
        case .integer(let number): String(number)
        case .real(let number): "\(number)"
        case .text(let text): text
        case .blob(let bytes): "\\x" + bytes.map { String(format: "%02x", $0) }.joined()
        }
    }

    private static func text(_ pointer: UnsafePointer<CChar>?) -> String {
        pointer.map { String(cString: $0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
    }
}
