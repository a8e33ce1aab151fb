// The only Swift file that imports SQLite.

internal import CShims
internal import CSQLite
import Foundation
import SwitchboardSupport

/// A value bound to or read from an SQL statement.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public var int64: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    public var string: String? {
        if case .text(let value) = self { return value }
        return nil
    }

    public var double: Double? {
        switch self {
        case .real(let value): value
        case .integer(let value): Double(value)
        default: nil
        }
    }
}

/// A typed SQLite failure with the result code.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var message: String

    /// A UNIQUE or PRIMARY KEY constraint failed.
    public var isConstraintViolation: Bool { code & 0xFF == SQLITE_CONSTRAINT }
    /// The storage refuses writes: disk full, read-only, an I/O error, or another process's lock
    /// held past the busy timeout. Nothing is wrong with the statement; the same write can
    /// succeed once the storage recovers.
    public var storageProblem: String? {
        switch code & 0xFF {
        case SQLITE_FULL: "disk full"
        case SQLITE_READONLY: "read-only"
        case SQLITE_IOERR: "I/O error"
        case SQLITE_CANTOPEN: "cannot open the database file"
        // Another process held the lock longer than the busy timeout allows.
        case SQLITE_BUSY: "statement timeout"
        default: nil
        }
    }

    public var description: String { "sqlite error \(code): \(message)" }

    public init(code: Int32, message: String) {
        self.code = code
        self.message = message
    }
}

/// One SQLite connection with a cache of prepared statements.
///
/// Not thread-safe: the owner serialises use. `@unchecked Sendable` so a lock (the store's
/// `Locked`) can hand it to the code running under that lock.
public final class SQLiteDatabase: @unchecked Sendable {
    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]
    public let path: String
    /// Checkpoints this connection's WAL in its place (`checkpoint(by:)`); kept while the
    /// connection may call it.
    private var checkpointer: SQLiteCheckpointer?

    /// Opens (creating if needed) the database at `path`. A statement waits at most
    /// `busyTimeoutMillis` for a lock another connection holds.
    public init(path: String, readOnly: Bool = false, busyTimeoutMillis: Int = 5_000) throws {
        self.path = path
        let flags = readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        let status = sqlite3_open_v2(path, &handle, flags | SQLITE_OPEN_NOMUTEX, nil)
        guard status == SQLITE_OK else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(handle)
            throw SQLiteError(code: status, message: message)
        }
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, Int32(clamping: busyTimeoutMillis))
    }

    deinit {
        close()
    }

    /// Finalises statements and closes the connection.
    public func close() {
        for statement in statements.values { sqlite3_finalize(statement) }
        statements.removeAll()
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
        checkpointer = nil
    }

    /// Leaves this connection's checkpoints to `checkpointer`: a commit that grows the WAL
    /// past the checkpointer's threshold asks it for one and returns, where SQLite's automatic
    /// checkpoint would run inside that commit (copying the WAL into the database file and
    /// syncing both while every later write waits).
    public func checkpoint(by checkpointer: SQLiteCheckpointer) {
        guard let handle else { return }
        self.checkpointer = checkpointer
        sqlite3_wal_hook(handle, { context, _, _, pages in
            if let context { Unmanaged<SQLiteCheckpointer>.fromOpaque(context).takeUnretainedValue().walGrew(to: Int(pages)) }
            return SQLITE_OK
        }, Unmanaged.passUnretained(checkpointer).toOpaque())
    }

    /// Runs one or more statements with no parameters and no results.
    public func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        if status != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? "error"
            sqlite3_free(message)
            throw SQLiteError(code: status, message: text)
        }
    }

    /// Runs a statement (prepared once and cached) and returns its rows.
    @discardableResult
    public func query(_ sql: String, _ parameters: [SQLValue] = []) throws -> [[SQLValue]] {
        let statement = try prepared(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (index, value) in parameters.enumerated() {
            try bind(value, at: Int32(index + 1), in: statement)
        }
        var rows: [[SQLValue]] = []
        while true {
            let status = sqlite3_step(statement)
            if status == SQLITE_DONE { break }
            guard status == SQLITE_ROW else { throw error(status) }
            let columns = sqlite3_column_count(statement)
            var row: [SQLValue] = []
            row.reserveCapacity(Int(columns))
            for column in 0..<columns {
                row.append(value(at: column, in: statement))
            }
            rows.append(row)
        }
        return rows
    }

    /// Rows changed by the last statement.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// Runs `body` inside BEGIN IMMEDIATE … COMMIT, rolling back if it throws.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try transaction(beginning: "BEGIN IMMEDIATE", body)
    }

    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw error(status) }
        statements[sql] = statement
        return statement
    }

    private func bind(_ value: SQLValue, at index: Int32, in statement: OpaquePointer) throws {
        let status: Int32
        switch value {
        case .null: status = sqlite3_bind_null(statement, index)
        case .integer(let number): status = sqlite3_bind_int64(statement, index, number)
        case .real(let number): status = sqlite3_bind_double(statement, index, number)
        case .text(let text):
            status = sb_sqlite3_bind_text_transient(statement, index, text, Int32(text.utf8.count))
        case .blob(let bytes):
            status = bytes.withUnsafeBytes { sb_sqlite3_bind_blob_transient(statement, index, $0.baseAddress, Int32($0.count)) }
        }
        guard status == SQLITE_OK else { throw error(status) }
    }

    private func value(at column: Int32, in statement: OpaquePointer) -> SQLValue {
        switch sqlite3_column_type(statement, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, column))
        case SQLITE_TEXT:
            return .text(String(cString: sqlite3_column_text(statement, column)))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, column))
            guard count > 0, let pointer = sqlite3_column_blob(statement, column) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: pointer, count: count)))
        default: return .null
        }
    }

    private func error(_ status: Int32) -> SQLiteError {
        SQLiteError(code: status, message: handle.map { String(cString: sqlite3_errmsg($0)) } ?? "no connection")
    }
}

/// Checkpoints a WAL database on a thread and a connection of its own, once a commit left
/// `pages` pages or more in the WAL (SQLite's default threshold: 1,000): passive checkpoints,
/// which copy what no reader still needs and never wait for the writer nor hold it up. The
/// WAL starts over from its beginning at the first commit after a checkpoint that copied all
/// of it.
public final class SQLiteCheckpointer: Sendable {
    public let pages: Int
    private let path: String
    private let busyTimeoutMillis: Int
    private let connection: Locked<SQLiteDatabase?>
    private let queue = DispatchQueue(label: "switchboard.sqlite.checkpoint")
    /// A checkpoint is asked for and has not started yet.
    private let asked = Locked(false)
    private let done = Locked(0)

    public init(path: String, pages: Int = 1000, busyTimeoutMillis: Int) throws {
        self.pages = pages
        self.path = path
        self.busyTimeoutMillis = busyTimeoutMillis
        connection = Locked(try SQLiteDatabase(path: path, busyTimeoutMillis: busyTimeoutMillis))
    }

    /// Checkpoints run so far (each copies what it can).
    public var checkpoints: Int { done.withLock { $0 } }

    /// A commit left `pages` pages in the WAL (on the committing thread: returns at once).
    fileprivate func walGrew(to pages: Int) {
        guard pages >= self.pages, asked.withLock({ asked in defer { asked = true }; return !asked }) else { return }
        queue.async { [self] in
            asked.withLock { $0 = false }
            connection.withLock { database in
                // A checkpoint that cannot run now (the disk full or read-only, the file gone)
                // runs at the next commit past the threshold, on a connection opened again (one
                // opened on a read-only disk stays read-only); the writer reports the storage's
                // problems.
                do {
                    if database == nil { database = try SQLiteDatabase(path: path, busyTimeoutMillis: busyTimeoutMillis) }
                    try database?.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    done.withLock { $0 += 1 }
                } catch {
                    database?.close()
                    database = nil
                }
            }
        }
    }

    /// Waits for a checkpoint under way and closes the connection.
    public func close() {
        queue.sync {}
        connection.withLock { database in
            database?.close()
            database = nil
        }
    }
}
