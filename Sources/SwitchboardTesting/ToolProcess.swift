import Foundation
internal import CShims
import SwitchboardProtocol
import SwitchboardSupport

/// One of the project's executables (`switchboard serve`, `switchboard apns-sandbox`...) run as
/// a child process, its output collected as it comes, every wait bounded by a deadline.
///
/// ```swift
/// let serve = try ToolProcess(["serve", "--port", "0", "--data-dir", dir])
/// let port = try await serve.waitForPort()
/// ```
public final class ToolProcess: Sendable {
    /// Why a wait ended without what it waited for; says what that was and what was seen.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    private let process: ChildProcess
    private let input = Pipe()
    private let output = Locked("")
    private let errors = Locked("")
    /// Output readers still running (each ends at its pipe's end).
    private let readersLeft = Locked(0)

    /// How much slower than usual the tests run (`SWITCHBOARD_TEST_SLOWDOWN`): every wait here
    /// stretches by this much.
    public static let slowdown = Int(ProcessInfo.processInfo.environment["SWITCHBOARD_TEST_SLOWDOWN"] ?? "") ?? 1

    /// Starts `switchboard` with `arguments`. `shellPrefix` runs it through `/bin/sh -c` after
    /// those shell words (`ulimit -n 256 &&`), with `exec` so the pid stays the tool's.
    public init(_ arguments: [String], executable: String = "switchboard", shellPrefix: String? = nil, environment: [String: String] = [:]) throws {
        let process = ChildProcess()
        let path = productsDirectory + "/" + executable
        if let shellPrefix {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            let quoted = ([path] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
            process.arguments = ["-c", "\(shellPrefix) exec \(quoted.joined(separator: " "))"]
        } else {
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
        }
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        self.process = process
        for (pipe, sink) in [(out, output), (err, errors)] {
            readersLeft.withLock { $0 += 1 }
            let readersLeft = self.readersLeft
            Self.collect(pipe.fileHandleForReading, into: sink) { readersLeft.withLock { $0 -= 1 } }
        }
        try Self.launch(process)
    }

    /// Appends what `handle` gives to `sink` as it comes, on a thread of its own (not a
    /// `readabilityHandler`, a dispatch source on Linux), until its end; then `ended`.
    public static func collect(_ handle: FileHandle, into sink: Locked<String>, ended: @escaping @Sendable () -> Void = {}) {
        Thread.detachNewThread {
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                sink.withLock { $0 += String(decoding: chunk, as: UTF8.self) }
            }
            ended()
        }
    }

    /// Starts `process`. Every child a test starts goes through here: `ChildProcess`, not
    /// Foundation's `Process`, whose `run()` on Linux reads past a buffer now and then
    /// (swift-corelibs-foundation#5472, see `ChildProcess`).
    public static func launch(_ process: ChildProcess) throws {
        try process.run()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// Writes `line` and a newline to its standard input (which stays open until `closeInput`).
    public func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    public func closeInput() {
        try? input.fileHandleForWriting.close()
    }

    public var pid: Int32 { process.processIdentifier }
    public var isRunning: Bool { process.isRunning }
    /// What it printed on standard output and standard error so far.
    public var standardOutput: String { output.withLock { $0 } }
    public var standardError: String { errors.withLock { $0 } }

    /// Waits until `standardError` (or `standardOutput`) matches `pattern`, and returns the
    /// first capture; fails at `timeout` or when the process exits first, saying so. It
    /// suspends between looks: tests share a few threads, and a blocked one stalls the others.
    public func waitFor(
        _ pattern: Regex<(Substring, Substring)>, inOutput: Bool = false, timeout: Duration = .seconds(15), what: String
    ) async throws -> String {
        let deadline = ContinuousClock.now + timeout * Self.slowdown
        while true {
            let text = inOutput ? standardOutput : standardError
            if let match = text.firstMatch(of: pattern) { return String(match.1) }
            if !process.isRunning {
                try await Task.sleep(for: .milliseconds(50))  // the last output may still be in the pipe
                let late = inOutput ? standardOutput : standardError
                if let match = late.firstMatch(of: pattern) { return String(match.1) }
                throw Failure(description: "the process exited (\(process.terminationStatus)) before \(what); it printed: \(late.suffix(2000))")
            }
            guard ContinuousClock.now < deadline else {
                throw Failure(description: "timed out after \(timeout) waiting for \(what); it printed: \(text.suffix(2000))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// `switchboard serve`: the port of its `listening` line.
    public func waitForPort(timeout: Duration = .seconds(15)) async throws -> Int {
        Int(try await waitFor(/msg=listening .*?port=(\d+)/, timeout: timeout, what: "the listening line")) ?? 0
    }

    /// Waits for the process to exit (killing it at `timeout`) and for its output to be read;
    /// returns its status.
    @discardableResult
    public func waitForExit(timeout: Duration = .seconds(15)) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout * Self.slowdown
        while process.isRunning || readersLeft.withLock({ $0 }) > 0 {
            guard ContinuousClock.now < deadline else {
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
                throw Failure(description: "the process did not exit within \(timeout); it printed: \(standardError.suffix(2000))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return process.terminationStatus
    }

    /// SIGTERM, then waits for the exit.
    @discardableResult
    public func stop(timeout: Duration = .seconds(15)) async throws -> Int32 {
        if process.isRunning { process.terminate() }
        return try await waitForExit(timeout: timeout)
    }

    /// For cleanup (`defer`): SIGTERM, and SIGKILL if it is still there after a few seconds.
    public func stopNow() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = ContinuousClock.now + .seconds(5)
        while process.isRunning && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// SIGKILL: no shutdown code runs. Returns once it is gone (its last output may still be
    /// arriving: `waitForExit` waits for that too).
    public func kill9() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// Whether it ended by a signal (SIGKILL, an uncaught SIGTERM) rather than by exiting.
    public var endedBySignal: Bool { !process.isRunning && process.terminationReason == .uncaughtSignal }

    /// Waits until its standard output has `count` lines, at most `timeout`; returns them.
    public func waitForLines(_ count: Int, timeout: Duration = .seconds(15), what: String) async throws -> [Substring] {
        let deadline = ContinuousClock.now + timeout * Self.slowdown
        while true {
            let lines = standardOutput.split(separator: "\n")
            if lines.count >= count { return lines }
            guard process.isRunning else { throw Failure(description: "the process exited before \(what); it printed: \(standardError.suffix(2000))") }
            guard ContinuousClock.now < deadline else { throw Failure(description: "timed out after \(timeout) waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// CPU time (user and system) the process has used, in seconds, from `/proc`.
    public var cpuSeconds: Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3; utime and stime are fields 14 and 15.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// Runs blocking work (a socket read with a timeout, a wait on a process) on a thread of its
/// own and suspends until it is done: the tests share a few threads (two on a two-core
/// machine), and one held in a blocking call stalls every test waiting for it.
public func offThePool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
    }
}
