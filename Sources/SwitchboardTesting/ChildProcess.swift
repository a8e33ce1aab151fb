import Foundation
internal import CShims
import SwitchboardSupport

/// A child process started with `posix_spawn`, with the part of `Process`'s interface the tests
/// use. Foundation's `Process.run()` on Linux copies 256 bytes of every `/proc/self/fd` entry's
/// name whatever its length (swift-corelibs-foundation#5472); with many descriptors open, a
/// test process died of it now and then ("Bad pointer dereference"). This one lists nothing:
/// the child closes every descriptor above 2 itself (`posix_spawn_file_actions_addclosefrom_np`).
///
/// Standard input, output and error are a `Pipe` (the child gets one end; this process closes
/// its copy of it once the child runs, so a reader sees the end of the output when the child
/// exits), a `FileHandle`, or nil (inherited).
public final class ChildProcess: @unchecked Sendable {
    // Safety: configured before `run()` by one thread; afterwards only `state` changes, locked.
    public var executableURL: URL?
    public var arguments: [String] = []
    public var environment: [String: String]?
    public var standardInput: Any?
    public var standardOutput: Any?
    public var standardError: Any?

    public enum TerminationReason: Sendable { case exit, uncaughtSignal }

    private struct State {
        var pid: Int32 = 0
        var status: Int32?
    }
    private let state = Locked(State())

    public init() {}

    public var processIdentifier: Int32 { state.withLock { $0.pid } }

    public func run() throws {
        guard let path = executableURL?.path else { throw POSIXError(.ENOENT) }
        let environment = (self.environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        let input = Self.descriptor(standardInput, childReads: true)
        let output = Self.descriptor(standardOutput, childReads: false)
        let error = Self.descriptor(standardError, childReads: false)
        var pid: Int32 = 0
        let status = argv.withUnsafeBufferPointer { argvBuffer in
            envp.withUnsafeBufferPointer { envpBuffer in
                sb_spawn(path, argvBuffer.baseAddress, envpBuffer.baseAddress, input, output, error, &pid)
            }
        }
        guard status == 0 else { throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO) }
        state.withLock { $0.pid = pid }
        // The child has its ends of the pipes; ours would hold them open past its exit.
        if let pipe = standardInput as? Pipe { try? pipe.fileHandleForReading.close() }
        for case let pipe as Pipe in [standardOutput, standardError] { try? pipe.fileHandleForWriting.close() }
    }

    private static func descriptor(_ stream: Any?, childReads: Bool) -> Int32 {
        switch stream {
        case let pipe as Pipe: childReads ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor
        case let handle as FileHandle: handle.fileDescriptor
        default: -1
        }
    }

    /// Whether it still runs (an exit is collected here, once).
    public var isRunning: Bool {
        state.withLock { state in
            guard state.pid > 0 else { return false }
            if state.status != nil { return false }
            var status: Int32 = 0
            let result = waitpid(state.pid, &status, WNOHANG)
            if result == state.pid || (result < 0 && errno == ECHILD) {
                state.status = status
                return false
            }
            return true
        }
    }

    /// Its exit status, or the signal that ended it.
    public var terminationStatus: Int32 {
        guard !isRunning, let status = state.withLock({ $0.status }) else { return 0 }
        return Self.signalled(status) ? status & 0x7f : (status >> 8) & 0xff
    }

    public var terminationReason: TerminationReason {
        guard !isRunning, let status = state.withLock({ $0.status }) else { return .exit }
        return Self.signalled(status) ? .uncaughtSignal : .exit
    }

    private static func signalled(_ status: Int32) -> Bool { (status & 0x7f) != 0 && (status & 0x7f) != 0x7f }

    /// SIGTERM.
    public func terminate() {
        let pid = processIdentifier
        if pid > 0 && isRunning { kill(pid, SIGTERM) }
    }

    public func waitUntilExit() {
        while isRunning { Thread.sleep(forTimeInterval: 0.005) }
    }
}
