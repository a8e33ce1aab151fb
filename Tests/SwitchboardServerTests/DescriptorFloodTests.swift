import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// Opens a TCP connection to 127.0.0.1:`port` without waiting for it (no request is ever sent).
func openIdleConnection(_ port: Int) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    return fd
}

/// `switchboard serve` with 256 descriptors, flooded with plain TCP connects that never send a
/// request: it refuses what it cannot hold cheaply, never spins, logs a few lines, keeps its
/// sessions, and serves again once the flood ends.
@Suite(.serialized, .timeLimit(.minutes(3))) struct DescriptorFloodTests {
    /// (what, extra flags, the counter that must have moved).
    static let floods: [(String, [String], String)] = [
        ("max_connections, derived from the descriptor limit", [], #"switchboard_connections_shed_total{reason="max_connections"}"#),
        ("descriptors run out first (max_connections set above the limit)", ["--max-connections", "2000"], "switchboard_accept_pauses_total"),
    ]

    /// Covers: limit:max_connections, limit:log_repeat_limit
    @Test(arguments: floods.indices)
    func aFloodOfIdleConnectsIsRefusedCheaplyAndTheServerRecovers(index: Int) async throws {
        let (what, flags, counter) = Self.floods[index]
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let serve = try ToolProcess(
            ["serve", "--port", "0", "--data-dir", directory, "--web-root", repositoryRoot + "/web", "--log-level", "info"] + flags,
            shellPrefix: "ulimit -n 256 &&")
        defer { serve.stopNow() }
        let port = try await serve.waitForPort()
        if flags.isEmpty { #expect(serve.standardError.contains("max_connections=128 descriptor_limit=256"), "\(serve.standardError)") }
        let apiKey = try await serve.waitFor(/API key\s+(sbk_\w+)/, inOutput: true, what: "the development app's key")
        let secret = try await serve.waitFor(/API secret\s+(\w+)/, inOutput: true, what: "the development app's secret")
        let claims = AccessTokenIssuer.claims(apiKey: apiKey, identity: "alice", name: nil, grants: Grants(), ttlSeconds: 600)
        let wsURL = "ws://127.0.0.1:\(port)/v1/ws?access_token=" + AccessTokenVerifier.sign(claims, secret: secret)
        let session = try await TestClient.connect(wsURL)
        #expect(try await session.nextEnvelope().type == MessageType.sessionWelcome)

        // The flood: 400 connections held open, then a new one every 5 ms while CPU is measured.
        let logBefore = serve.standardError.utf8.count
        var flood = (0..<400).map { _ in openIdleConnection(port) }
        defer { flood.forEach { _ = close($0) } }
        try await Task.sleep(for: .milliseconds(300))
        let cpuBefore = serve.cpuSeconds
        let started = ContinuousClock.now
        while ContinuousClock.now - started < .seconds(2) {
            flood.append(openIdleConnection(port))
            try await Task.sleep(for: .milliseconds(5))
        }
        let cpu = (serve.cpuSeconds - cpuBefore) / 2
        #expect(cpu < 0.3, "\(what): the server used \(Int(cpu * 100))% of a core during the flood (a spin is 100%)")

        // The session it had keeps working through the flood.
        let ping = try await session.request(MessageType.ping, id: "during")
        #expect(ping.type == MessageType.ok, "\(what)")

        let during = serve.standardError.utf8.dropFirst(logBefore)
        let lines = String(decoding: during, as: UTF8.self).split(separator: "\n")
        #expect(lines.count < 250, "\(what): \(lines.count) log lines during the flood: \(lines.prefix(5))")

        // The flood ends: new connections are served again.
        flood.forEach { _ = close($0) }
        flood = []
        let metrics = try await within(.seconds(10) * testSlowdown, "the server to serve again") {
            while true {
                if let response = try? HTTPClient.perform("GET", "http://127.0.0.1:\(port)/metrics", timeout: .seconds(2)), response.status == 200 {
                    return response.text
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let moved = metrics.split(separator: "\n").first { $0.hasPrefix(counter + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        #expect(moved > 0, "\(what): \(counter) is \(moved)")
        let fresh = try await TestClient.connect(wsURL)
        #expect(try await fresh.nextEnvelope().type == MessageType.sessionWelcome)
        #expect(try await session.request(MessageType.ping, id: "after").type == MessageType.ok)
    }

    /// Covers: limit:log_repeat_limit
    @Test func aRepeatedLogLineIsSuppressedAndCounted() async throws {
        let (sink, lines) = Logger.Sink.memory(repeatLimit: 3, repeatWindow: .milliseconds(200))
        let logger = Logger(sink: sink)
        for index in 0..<50 { logger.warning("accept failed", ["n": String(index)]) }
        logger.warning("something else")
        #expect(lines().filter { $0.contains("msg=\"accept failed\"") }.count == 3)
        #expect(lines().contains { $0.contains("msg=\"something else\"") }, "other messages have their own allowance")
        let summary = try await within(.seconds(5), "the summary line") {
            while true {
                if let line = lines().first(where: { $0.contains("suppressed=") }) { return line }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(summary.contains("msg=\"accept failed\" suppressed=47 window_seconds=0.2"), "\(summary)")
        // A new window: lines are written again.
        logger.warning("accept failed", ["n": "again"])
        #expect(lines().last?.contains("n=again") == true)
    }

    /// A separated logger (the push tasks') writes to the same place under the same limit, with
    /// an allowance of its own.
    @Test func aSeparatedLoggerWritesToTheSamePlaceWithItsOwnAllowance() {
        let (sink, lines) = Logger.Sink.memory(repeatLimit: 2, repeatWindow: .seconds(60))
        let logger = Logger(sink: sink)
        let push = logger.with("component", "push").separated()
        for _ in 0..<5 { logger.warning("flood") }
        for _ in 0..<5 { push.warning("flood") }
        #expect(lines().filter { $0.contains("msg=flood") && !$0.contains("component=push") }.count == 2)
        #expect(lines().filter { $0.contains("msg=flood component=push") }.count == 2)
    }
}
