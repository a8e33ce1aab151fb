/// A connection the store's SQL runs on: SQLite's file (`SQLiteDatabase`) or a PostgreSQL
/// server (`PostgresConnection`). Statements are written once for both, with `?` for each
/// parameter (PostgreSQL's `$1`, `$2`… are written for it).
public protocol SQLDatabase: AnyObject {
    /// Statements without parameters or results.
    func execute(_ sql: String) throws
    /// One statement with its parameters; its rows.
    @discardableResult
    func query(_ sql: String, _ parameters: [SQLValue]) throws -> [[SQLValue]]
    /// Rows the last statement changed.
    var changes: Int { get }
    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    func transaction<T>(_ body: () throws -> T) throws -> T
    /// Closes the connection; every later call fails.
    func close()
    /// Connects again after the connection was lost (a database server that restarted); true
    /// when it is up. A connection that cannot be lost (SQLite's) says false.
    func reconnect() -> Bool
    /// Runs `statements` in one transaction, none of their rows read. A client-server engine
    /// sends them together (one round trip); the default runs them one by one.
    func transaction(running statements: [SQLStatement]) throws
}

/// A statement and its parameters, written without reading its rows (an insert, an upsert).
public struct SQLStatement: Sendable {
    public var sql: String
    public var parameters: [SQLValue]

    public init(_ sql: String, _ parameters: [SQLValue]) {
        self.sql = sql
        self.parameters = parameters
    }
}

extension SQLDatabase {
    @discardableResult
    public func query(_ sql: String) throws -> [[SQLValue]] { try query(sql, []) }

    public func transaction(running statements: [SQLStatement]) throws {
        try transaction { for statement in statements { try query(statement.sql, statement.parameters) } }
    }

    /// `begin`, then `body`: committed when it returns, rolled back when it throws.
    func transaction<T>(beginning begin: String, _ body: () throws -> T) throws -> T {
        try execute(begin)
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }
}

/// An error that can say the storage takes no writes for now (a full or read-only disk, a
/// database server that went away): the store keeps what it was asked to write and retries.
public protocol StorageFailure: Error {
    /// What is wrong with the storage ("disk full", "database unavailable"…), or nil when the
    /// error is about the statement, not the storage.
    var storageProblem: String? { get }
}

extension SQLiteDatabase: SQLDatabase {
    public func reconnect() -> Bool { false }
}
extension SQLiteError: StorageFailure {}
