import Foundation
import SwitchboardSupport
import SwitchboardSystem

/// HAProxy (Debian's `haproxy`) in front of a cluster's nodes on loopback, as
/// docs/scaling.md configures it: any connection to any node that is ready, WebSockets
/// through, `/readyz` as the health check every 500 ms (a draining node is out at its first
/// failed check).
public final class LoadBalancer: Sendable {
    public let port: Int
    public var url: String { "http://127.0.0.1:\(port)" }
    private let directory: String
    private let process: ChildProcess

    public static let executable = "/usr/sbin/haproxy"
    public static var installed: Bool { FileManager.default.isExecutableFile(atPath: executable) }

    /// The configuration for nodes on `backends` (their ports), listening on `port`.
    public static func configuration(port: Int, backends: [Int]) -> String {
        """
        global
            # Two descriptors per connection (client and node side): within the tests' limit.
            maxconn 4000

        defaults
            mode http
            timeout connect 2s
            timeout client 60s
            timeout server 60s
            # A WebSocket stays open as long as its pings keep it alive.
            timeout tunnel 1h
            timeout http-request 10s

        frontend switchboard
            bind 127.0.0.1:\(port)
            default_backend nodes

        backend nodes
            balance leastconn
            option httpchk GET /readyz
            http-check expect status 200
            default-server inter 500ms fall 1 rise 1
        \(backends.enumerated().map { "    server node\($0.offset + 1) 127.0.0.1:\($0.element) check" }.joined(separator: "\n"))

        """
    }

    /// Starts HAProxy for nodes on `backends` and returns once it answers for them.
    public init(backends: [Int]) throws {
        port = try freeLoopbackPort()
        directory = NSTemporaryDirectory() + "switchboard-haproxy-" + RandomID.alphanumeric(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Self.configuration(port: port, backends: backends).write(toFile: directory + "/haproxy.cfg", atomically: true, encoding: .utf8)
        process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = ["-f", directory + "/haproxy.cfg", "-db"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try ToolProcess.launch(process)
        let deadline = ContinuousClock.now + .seconds(10) * ToolProcess.slowdown
        while ContinuousClock.now < deadline {
            if let response = try? HTTPClient.perform("GET", url + "/readyz", timeout: .milliseconds(500)), response.status == 200 { return }
            guard process.isRunning else { throw ToolProcess.Failure(description: "haproxy exited (\(process.terminationStatus))") }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw ToolProcess.Failure(description: "haproxy did not pass a ready node on \(port)")
    }

    public func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }
}
