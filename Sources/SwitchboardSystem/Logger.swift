import SwitchboardProtocol
import Foundation

/// A structured logger writing one `key=value` line per event:
/// `ts=2026-11-30T21:51:40.123Z level=info msg="call created" call=6F1C… user=alice`.
///
/// Never pass a secret, a JWT or a whole device token as a value: use `Redact`.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case debug, info, warning, error

        public var name: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .warning: "warn"
            case .error: "error"
            }
        }

        public init?(name: String) {
            guard let level = Level.allCases.first(where: { $0.name == name || "\($0)" == name }) else { return nil }
            self = level
        }

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// Where lines go.
    public final class Sink: Sendable {
        private let write: @Sendable (String) -> Void

        public init(_ write: @escaping @Sendable (String) -> Void) {
            self.write = write
        }

        /// Standard error, one write per line.
        public static let standardError = Sink { line in
            let bytes = Array((line + "\n").utf8)
            bytes.withUnsafeBufferPointer { _ = Foundation.write(2, $0.baseAddress, $0.count) }
        }

        /// Keeps lines in memory (for tests that check what was logged).
        public static func memory() -> (Sink, @Sendable () -> [String]) {
            let lines = Locked<[String]>([])
            let sink = Sink { line in lines.withLock { $0.append(line) } }
            return (sink, { lines.withLock { $0 } })
        }

        func emit(_ line: String) { write(line) }
    }

    public var minimumLevel: Level
    public var sink: Sink
    /// Fields added to every line (component, session id...).
    public var metadata: [(String, String)]

    public init(minimumLevel: Level = .info, sink: Sink = .standardError, metadata: [(String, String)] = []) {
        self.minimumLevel = minimumLevel
        self.sink = sink
        self.metadata = metadata
    }

    /// A logger that adds `key=value` to every line.
    public func with(_ key: String, _ value: String) -> Logger {
        var copy = self
        copy.metadata.append((key, value))
        return copy
    }

    public func log(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        guard level >= minimumLevel else { return }
        var line = "ts=\(Self.timestamp()) level=\(level.name) msg=\(Self.quote(message))"
        for (key, value) in metadata { line += " \(key)=\(Self.quote(value))" }
        for (key, value) in fields { line += " \(key)=\(Self.quote(value))" }
        sink.emit(line)
    }

    public func debug(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.debug, message, fields) }
    public func info(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.info, message, fields) }
    public func warning(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.error, message, fields) }

    static func quote(_ value: String) -> String {
        let plain = !value.isEmpty && value.allSatisfy { $0.isLetter || $0.isNumber || "-_.:/@+*…".contains($0) }
        if plain { return value }
        var escaped = "\""
        for character in value {
            switch character {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\r": escaped += "\\r"
            case "\t": escaped += "\\t"
            default: escaped.append(character)
            }
        }
        return escaped + "\""
    }

    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
            parts.tm_hour, parts.tm_min, parts.tm_sec, Int(now.tv_nsec / 1_000_000))
    }
}

/// Shortens secrets and tokens before they reach a log line or a response.
public enum Redact {
    /// The first 8 characters and an ellipsis: enough to tell two tokens apart, not to use one.
    public static func token(_ value: String) -> String {
        value.count <= 8 ? String(repeating: "*", count: value.count) : String(value.prefix(8)) + "…"
    }
}

/// The logger used by C libraries' own diagnostics, which have no context to carry one.
public enum SystemLog {
    private static let current = Locked(Logger())

    public static var logger: Logger {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
}

/// Failures of the system layer.
public enum SystemError: Error, Sendable, CustomStringConvertible {
    case listenFailed(host: String, port: Int)
    case crypto(String)
    case sqlite(code: Int32, message: String)
    case http(String)

    public var description: String {
        switch self {
        case .listenFailed(let host, let port): "cannot listen on \(host):\(port)"
        case .crypto(let message): "crypto: \(message)"
        case .sqlite(let code, let message): "sqlite error \(code): \(message)"
        case .http(let message): "http: \(message)"
        }
    }
}
