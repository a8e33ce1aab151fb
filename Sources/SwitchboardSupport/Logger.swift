import Dispatch
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

    /// Where lines go, and how often one message may repeat there.
    public final class Sink: Sendable {
        private let write: @Sendable (String) -> Void
        let repeats: RepeatLimiter

        /// `repeatLimit`: lines one message (level and `msg`) may write per `repeatWindow`;
        /// beyond it they are counted and one summary line says how many were suppressed.
        /// 0: no limit.
        public init(
            repeatLimit: Int = RepeatLimiter.defaultLimit, repeatWindow: Duration = RepeatLimiter.defaultWindow,
            _ write: @escaping @Sendable (String) -> Void
        ) {
            self.write = write
            repeats = RepeatLimiter(limit: repeatLimit, window: repeatWindow)
        }

        /// Standard error, one write per line.
        public static let standardError = standardError(repeatLimit: RepeatLimiter.defaultLimit)

        /// Standard error with its own repeat limit.
        public static func standardError(repeatLimit: Int) -> Sink {
            Sink(repeatLimit: repeatLimit) { line in
                let bytes = Array((line + "\n").utf8)
                bytes.withUnsafeBufferPointer { _ = Foundation.write(2, $0.baseAddress, $0.count) }
            }
        }

        /// Keeps lines in memory (for tests that check what was logged).
        public static func memory(
            repeatLimit: Int = RepeatLimiter.defaultLimit, repeatWindow: Duration = RepeatLimiter.defaultWindow
        ) -> (Sink, @Sendable () -> [String]) {
            let lines = Locked<[String]>([])
            let sink = Sink(repeatLimit: repeatLimit, repeatWindow: repeatWindow) { line in lines.withLock { $0.append(line) } }
            return (sink, { lines.withLock { $0 } })
        }

        /// The same destination with a repeat limiter of its own, so that a component running
        /// on its own threads (the push tasks) takes no lock the server's loop takes to log.
        public func separate() -> Sink { Sink(repeatLimit: repeats.limit, repeatWindow: repeats.window, write) }

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

    /// This logger writing through a sink with its own repeat limiter (`Sink.separate`).
    public func separated() -> Logger {
        var copy = self
        copy.sink = sink.separate()
        return copy
    }

    public func log(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        guard level >= minimumLevel else { return }
        let sink = self.sink
        let admitted = sink.repeats.admit(level: level, message: message) { suppressed in
            sink.emit(Self.summary(level, message, suppressed: suppressed, window: sink.repeats.window))
        }
        guard admitted else { return }
        var line = "ts=\(Self.timestamp()) level=\(level.name) msg=\(Self.quote(message))"
        for (key, value) in metadata { line += " \(key)=\(Self.quote(value))" }
        for (key, value) in fields { line += " \(key)=\(Self.quote(value))" }
        sink.emit(line)
    }

    /// The line that stands for `suppressed` lines of one message.
    static func summary(_ level: Level, _ message: String, suppressed: Int, window: Duration) -> String {
        let seconds = Double(window.components.seconds) + Double(window.components.attoseconds) / 1e18
        return "ts=\(timestamp()) level=\(level.name) msg=\(quote(message)) suppressed=\(suppressed) "
            + "window_seconds=\(seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)) "
            + "note=\"more lines of this message than log_repeat_limit allows\""
    }

    public func debug(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.debug, message, fields) }
    public func info(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.info, message, fields) }
    public func warning(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.error, message, fields) }

    /// A value as one token of a `key=value` line: plain when it is letters, digits and a few
    /// marks, else quoted with `"` and `\` escaped and every control character, line or
    /// paragraph separator and invisible format character written as an escape (`\n`,
    /// `\u2028`). Read scalar by scalar: Swift counts `\r\n` as one `Character`, and a value
    /// must never end a line or start another, whatever its graphemes.
    public static func quote(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII
                ? (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "-_.:/@+*".unicodeScalars.contains(scalar))
                : !needsEscape(scalar) && !scalar.properties.isWhitespace
        }
        if plain { return value }
        var escaped = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\r": escaped += "\\r"
            case "\t": escaped += "\\t"
            case _ where needsEscape(scalar):
                let hex = String(scalar.value, radix: 16, uppercase: true)
                escaped += scalar.value > 0xFFFF ? "\\U" + String(repeating: "0", count: 8 - hex.count) + hex
                    : "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped + "\""
    }

    /// Controls (C0, DEL, C1: NEL among them), line and paragraph separators, and format
    /// characters (bidirectional overrides, zero-width ones): nothing a log line shows as it is.
    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .unassigned, .privateUse: true
        default: false
        }
    }

    /// Now, as the logs write it (`2026-11-30T21:51:40.123Z`), without Foundation's date
    /// formatters (they load ICU's data: about 6 MB of memory).
    public static func timestamp() -> String {
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

/// Bounds how often one message is logged: at most `limit` lines per `window` for each
/// (level, message); the rest of the window is counted, and when it ends one summary line says
/// how many were suppressed. A flood (failed accepts, refused connections, store errors) costs
/// a few lines per window instead of filling a disk.
public final class RepeatLimiter: Sendable {
    public static let defaultLimit = 100
    public static let defaultWindow = Duration.seconds(10)

    private struct Entry {
        var started: ContinuousClock.Instant
        var count = 0
        var suppressed = 0
        var flushScheduled = false
    }

    public let limit: Int
    public let window: Duration
    private let entries = Locked<[String: Entry]>([:])
    private let pruned = Locked(ContinuousClock.now)

    public init(limit: Int, window: Duration = defaultWindow) {
        self.limit = limit
        self.window = window
    }

    /// Whether a line of `message` may be written now. `summarize` is called (now or when the
    /// window ends, on another thread) with the count of lines suppressed in a window.
    func admit(level: Logger.Level, message: String, summarize: @escaping @Sendable (Int) -> Void) -> Bool {
        guard limit > 0 else { return true }
        let key = level.name + "\u{0}" + message
        let now = ContinuousClock.now
        var flushNow = 0
        var scheduleFlush = false
        let admitted = entries.withLock { entries -> Bool in
            var entry = entries[key] ?? Entry(started: now)
            if now - entry.started >= window {
                flushNow = entry.suppressed
                entry = Entry(started: now)
            }
            entry.count += 1
            let admitted = entry.count <= limit
            if !admitted {
                entry.suppressed += 1
                if !entry.flushScheduled {
                    entry.flushScheduled = true
                    scheduleFlush = true
                }
            }
            entries[key] = entry
            return admitted
        }
        if flushNow > 0 { summarize(flushNow) }
        if scheduleFlush {
            let started = entries.withLock { $0[key]?.started } ?? now
            let delay = max(.zero, window - (now - started))
            DispatchQueue.global().asyncAfter(deadline: .now() + Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18) {
                [self] in flush(key, windowStarted: started, summarize)
            }
        }
        prune(now)
        return admitted
    }

    /// The window that began at `windowStarted` is over: reports what it suppressed, once.
    private func flush(_ key: String, windowStarted: ContinuousClock.Instant, _ summarize: @Sendable (Int) -> Void) {
        let suppressed = entries.withLock { entries -> Int in
            guard var entry = entries[key], entry.started == windowStarted, entry.suppressed > 0 else { return 0 }
            let count = entry.suppressed
            entry.suppressed = 0
            entry.count = Int.max / 2  // the rest of the window stays suppressed, counted anew
            entry.flushScheduled = false
            entries[key] = entry
            return count
        }
        if suppressed > 0 { summarize(suppressed) }
    }

    /// Forgets messages whose window ended with nothing suppressed (every window at most).
    private func prune(_ now: ContinuousClock.Instant) {
        let due = pruned.withLock { last -> Bool in
            guard now - last >= window else { return false }
            last = now
            return true
        }
        guard due else { return }
        entries.withLock { entries in
            entries = entries.filter { now - $0.value.started < window || $0.value.suppressed > 0 }
        }
    }
}

/// Shortens secrets and tokens before they reach a log line or a response.
public enum Redact {
    /// The first 8 characters and an ellipsis: enough to tell two tokens apart, not to use one.
    public static func token(_ value: String) -> String {
        value.count <= 8 ? String(repeating: "*", count: value.count) : String(value.prefix(8)) + "…"
    }
}
