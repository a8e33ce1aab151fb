import Foundation
import SwitchboardSupport
import SwitchboardSystem

/// A port on 127.0.0.1 nothing listens on now (the kernel's pick, released at once).
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw ToolProcess.Failure(description: "no free port on 127.0.0.1") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// A Redis server of its own for a test (Debian's `redis-server`), on loopback, keeping
/// nothing on disk; it can be stopped and started again on the same port, as an operator
/// restarting Redis would.
public final class RedisServer: Sendable {
    public let port: Int
    public var url: String { "redis://127.0.0.1:\(port)/0" }
    private let directory: String
    private let process = Locked<ChildProcess?>(nil)

    public static let executable = "/usr/bin/redis-server"
    public static var installed: Bool { FileManager.default.isExecutableFile(atPath: executable) }

    public init() throws {
        port = try freeLoopbackPort()
        directory = NSTemporaryDirectory() + "switchboard-redis-" + RandomID.alphanumeric(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try start()
    }

    /// Starts it and returns once it answers `PING`.
    public func start() throws {
        let child = ChildProcess()
        child.executableURL = URL(fileURLWithPath: Self.executable)
        child.arguments = [
            "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory,
            "--logfile", directory + "/redis.log", "--daemonize", "no",
        ]
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try ToolProcess.launch(child)
        process.withLock { $0 = child }
        let url = try RedisURL(self.url)
        let deadline = ContinuousClock.now + .seconds(10) * ToolProcess.slowdown
        while ContinuousClock.now < deadline {
            if let reply = try? RedisConnection.blocking(url, [["PING"]], timeout: .milliseconds(200)), reply.first?.text == "PONG" { return }
            guard child.isRunning else { throw ToolProcess.Failure(description: "redis-server exited (\(child.terminationStatus))") }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw ToolProcess.Failure(description: "redis-server did not answer on \(port)")
    }

    /// Its process (to stop it with SIGSTOP: it then answers nothing, its connections open).
    public var pid: Int32? { process.withLock { $0?.isRunning == true ? $0?.processIdentifier : nil } }

    /// Stops it (SIGTERM) and waits for it to go: every connection to it is cut.
    public func stop() {
        guard let child = process.withLock({ $0 }), child.isRunning else { return }
        child.terminate()
        child.waitUntilExit()
    }

    /// Stops it and removes its directory.
    public func destroy() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// One command, answered (for a test's checks).
    public func command(_ arguments: [String]) throws -> RedisValue? {
        try RedisConnection.blocking(try RedisURL(url), [arguments]).first
    }
}
