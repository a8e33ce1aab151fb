import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

@Suite(.timeLimit(.minutes(3))) struct WebSocketTests {
    @Test func validTokenInQueryOpensASessionWithAWelcome() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("alice"))
        let welcome = try await client.nextEnvelope()
        #expect(welcome.type == MessageType.sessionWelcome)
        #expect(welcome.seq == nil, "session.welcome opens a connection and carries no seq")
        #expect(welcome.data?["peer_id"]?.stringValue?.hasPrefix("p_") == true)
        #expect(welcome.data?["resume_token"]?.stringValue?.count == 32)
        #expect(welcome.data?["identity"] == "alice")
        #expect(welcome.data?["limits"]?["max_message_bytes"] == .int(64 * 1024))

        let info = try await client.request(MessageType.sessionInfo, id: 7)
        #expect(info.type == MessageType.ok)
        #expect(info.id == .int(7))
        #expect(info.data?["identity"] == "alice")
        #expect(info.data?["grants"]?["call"] == true)
        client.socket.close()
    }

    @Test func bearerHeaderIsAccepted() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try await TestClient.connect(
            server.webSocketURL, headers: [("Authorization", "Bearer " + server.token("bob"))])
        #expect(try await client.nextEnvelope().data?["identity"] == "bob")
        client.socket.close()
    }

    /// Sends a WebSocket upgrade as plain HTTP and returns the status and error code.
    func upgrade(_ server: TestServer, query: String = "", headers: [(String, String)] = []) async throws -> (Int, ErrorCode?) {
        let response = try await HTTPClient.request(
            "GET", server.baseURL + "/v1/ws" + query,
            headers: [
                ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ] + headers, timeout: .seconds(3))
        let code = try? JSONDecoder().decode(ErrorEnvelope.self, from: Data(response.body)).error.code
        return (response.status, code)
    }

    /// Covers: error:unauthorized, error:token_expired
    @Test func missingOrBadTokensAreRefusedWith401BeforeTheUpgrade() async throws {
        let server = try TestServer()
        defer { server.stop() }
        #expect(try await upgrade(server) == (401, .unauthorized))
        #expect(try await upgrade(server, query: "?access_token=garbage") == (401, .unauthorized))
        let forged = server.token("alice").dropLast(3) + "AAA"
        #expect(try await upgrade(server, query: "?access_token=\(forged)") == (401, .unauthorized))
        #expect(try await upgrade(server, headers: [("Authorization", "Bearer nope")]) == (401, .unauthorized))
        let expired = server.token("alice", ttl: 60, now: Date().addingTimeInterval(-3600))
        #expect(try await upgrade(server, query: "?access_token=\(expired)") == (401, .tokenExpired))

        // The real client sees the refusal as an error with the HTTP status.
        await #expect(throws: WebSocketClientError.self) {
            _ = try await TestClient.connect(server.webSocketURL + "?access_token=garbage")
        }
        #expect(server.server.metrics.counter("switchboard_connections_refused_total", ["reason": "unauthorized"]) >= 4)
    }

    /// Covers: error:malformed_json, error:bad_request, error:unknown_type
    @Test func malformedJSONGetsAnErrorAndTheConnectionStaysOpen() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token())
        _ = try await client.nextEnvelope()

        client.sendRaw("{not json")
        let malformed = try await client.nextEnvelope()
        #expect(malformed.type == MessageType.error)
        #expect(malformed.id == nil, "a reply to a message with no usable id carries id: null")
        #expect(malformed.error?.code == .malformedJSON)

        client.sendRaw(#"[1,2,3]"#)
        #expect(try await client.nextEnvelope().error?.code == .badRequest)

        // A lone surrogate escape (JSON's grammar allows it, its parsers refuse it): the reply
        // keeps the request's id when it can still be read, in a signal (simdjson's path) too.
        client.sendRaw(#"{"type":"room.join","id":"s1","data":{"room":"\ud800"}}"#)
        let surrogate = try await client.nextEnvelope()
        #expect(surrogate.error?.code == .malformedJSON)
        #expect(surrogate.id == "s1")
        client.sendRaw(#"{"type":"signal","id":9,"data":{"room":"r","to":"p","signal":{"sdp":"\udc00"}}}"#)
        #expect(try await client.nextEnvelope().id == 9)
        client.sendRaw(#"{"type":"ping","id":"\ud800"}"#)
        #expect(try await client.nextEnvelope().id == nil, "an id that is itself unreadable")
        client.sendRaw(#"{"id"#)
        #expect(try await client.nextEnvelope().error?.code == .malformedJSON)

        // Nesting deeper than the parsers allow (jansson: 2048 levels) is refused, not recursed into.
        for depth in [3000, 30_000] {
            client.sendRaw(#"{"type":"ping","id":1,"data":"# + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}")
            #expect(try await client.nextEnvelope().error?.code == .malformedJSON)
        }

        client.sendRaw(#"{"type":"ping"}"#)
        #expect(try await client.nextEnvelope().error?.code == .badRequest)

        let unknown = try await client.request("no.such.thing", id: "u1")
        #expect(unknown.error?.code == .unknownType)
        #expect(unknown.id == "u1")

        let ping = try await client.request(MessageType.ping, id: "p1")
        #expect(ping.type == MessageType.ok)
        #expect(ping.id == "p1")
        #expect(ping.data?["server_time"] != nil)
        client.socket.close()
    }

    @Test func everyRequestGetsExactlyOneReplyInOrder() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token())
        _ = try await client.nextEnvelope()
        for index in 0..<50 {
            client.sendRaw(#"{"type":"ping","id":\#(index)}"#)
        }
        for index in 0..<50 {
            let reply = try await client.nextEnvelope()
            #expect(reply.id == .int(Int64(index)))
        }
        await #expect(throws: Timeout.self) { _ = try await client.next(timeout: .milliseconds(200)) }
        client.socket.close()
    }

    /// A message of exactly `max_message_bytes` is served; one byte more closes with 1009.
    /// Covers: limit:max_message_bytes, close:1009
    @Test func oversizedMessageClosesWith1009() async throws {
        let server = try TestServer { $0.limits.maxMessageBytes = 4096 }
        defer { server.stop() }
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token())
        _ = try await client.nextEnvelope()
        func message(_ size: Int) -> String {
            let frame = (#"{"type":"ping","id":1,"data":{"pad":""#, #""}}"#)
            return frame.0 + String(repeating: "x", count: size - frame.0.utf8.count - frame.1.utf8.count) + frame.1
        }
        #expect(message(4096).utf8.count == 4096)
        client.sendRaw(message(4096))
        #expect(try await client.nextEnvelope().type == MessageType.ok, "a message at the limit is served")
        client.sendRaw(message(4097))
        #expect(try await client.closeCode() == 1009)
    }

    /// Covers: limit:idle_timeout_seconds, limit:ping_interval_seconds
    @Test func silentPeerIsClosedByTheIdleTimeout() async throws {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 1
            $0.limits.idleTimeoutSeconds = 2
        }
        defer { server.stop() }
        // A raw socket completes the handshake and then never answers the server's pings.
        let socket = try RawSocket(port: server.server.port)
        defer { socket.close() }
        try socket.requestUpgrade(token: server.token())
        let started = ContinuousClock.now
        let received = try await socket.readUntilClosed(limit: .seconds(10) * testSlowdown)
        let elapsed = ContinuousClock.now - started
        #expect(String(decoding: received.prefix(12), as: UTF8.self) == "HTTP/1.1 101")
        #expect(received.contains(0x89), "the server pinged before giving up")
        // Not before the idle timeout (less the sweep's granularity); the upper bound only stops
        // a wait that would never end.
        #expect(elapsed >= .seconds(1.5), "closed after \(elapsed)")
    }

    /// A ping flood never reaches the application (libwebsockets answers pings itself); the
    /// kernel's byte count does, and the flooder is dropped while a normal client stays.
    /// Covers: limit:max_receive_bytes_per_second
    @Test func aPingFloodIsDroppedByTheReceiveRateLimit() async throws {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 1  // keepalive visits every 250 ms
            $0.limits.maxReceiveBytesPerSecond = 64 * 1024
        }
        defer { server.stop() }
        let calm = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token())
        _ = try await calm.nextEnvelope()
        let socket = try RawSocket(port: server.server.port)
        defer { socket.close() }
        try socket.requestUpgrade(token: server.token())
        #expect(try await socket.readHandshakeResponse().hasPrefix("HTTP/1.1 101"))
        let (elapsed, sent) = try await socket.floodPings(for: .seconds(10))
        #expect(elapsed < .seconds(10), "the flood was still accepted after 10 s (\(sent) bytes)")
        try await within(.seconds(5), "the server to count the drop") {
            while server.server.metrics.counter("switchboard_disconnects_total", ["reason": "receive_rate"]) < 1 {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(try await calm.request(MessageType.ping).type == MessageType.ok, "the calm client stays")
        calm.socket.close()
    }

    /// A flood the server hears (unsolicited pongs: each counts as the peer's sign of life, so
    /// the connection is never silent and no ping falls due) is counted too, at least once a
    /// ping interval, and dropped.
    @Test func aFloodThatIsNeverSilentIsDroppedByTheReceiveRateLimit() async throws {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 1
            $0.limits.maxReceiveBytesPerSecond = 64 * 1024
        }
        defer { server.stop() }
        let socket = try RawSocket(port: server.server.port)
        defer { socket.close() }
        try socket.requestUpgrade(token: server.token())
        #expect(try await socket.readHandshakeResponse().hasPrefix("HTTP/1.1 101"))
        let (elapsed, sent) = try await socket.floodPings(for: .seconds(10), opcode: 0xA)
        #expect(elapsed < .seconds(10), "the flood was still accepted after 10 s (\(sent) bytes)")
        try await within(.seconds(5), "the server to count the drop") {
            while server.server.metrics.counter("switchboard_disconnects_total", ["reason": "receive_rate"]) < 1 {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// An identity that keeps reconnecting (a flooder cut off again and again) is refused
    /// before the upgrade once it has used its connects; other identities are not.
    /// Covers: limit:connects_per_identity_per_minute
    @Test func reconnectingPastTheConnectLimitIsRefusedWithRetryAfter() async throws {
        let server = try TestServer { $0.limits.connectsPerIdentityPerMinute = 3 }
        defer { server.stop() }
        func upgrade(_ identity: String) async throws -> String {
            let socket = try RawSocket(port: server.server.port)
            defer { socket.close() }
            try socket.requestUpgrade(token: server.token(identity))
            return try await socket.readHandshakeResponse()
        }
        let started = ContinuousClock.now
        for _ in 0..<3 { #expect(try await upgrade("mallory").hasPrefix("HTTP/1.1 101")) }
        let refused = try await upgrade("mallory")
        let elapsed = Int((ContinuousClock.now - started).components.seconds)
        #expect(refused.split(separator: "\r\n").first?.split(separator: " ").dropFirst().first == "429", "\(refused)")
        // One connect every 20 s at 3 a minute: the next is at most 20 s away, less what the
        // connects above took (seconds under the sanitizers).
        let retryAfter = refused.lowercased().firstMatch(of: /retry-after: (\d+)/).flatMap { Int($0.1) }
        #expect(retryAfter.map { (max(1, 19 - elapsed)...20).contains($0) } == true, "\(refused) after \(elapsed) s")
        #expect(try await upgrade("alice").hasPrefix("HTTP/1.1 101"), "other identities connect")
        #expect(server.server.metrics.counter("switchboard_connections_refused_total", ["reason": "rate_limited"]) == 1)
    }

    @Test func respondingClientIsKeptAliveByPings() async throws {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 1
            $0.limits.idleTimeoutSeconds = 2
        }
        defer { server.stop() }
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token())
        _ = try await client.nextEnvelope()
        try await Task.sleep(for: .seconds(3.5))
        #expect(try await client.request(MessageType.ping).type == MessageType.ok)
        client.socket.close()
    }

    /// A server that pings after a second of silence (and drops after 30 s), and a raw session
    /// on it.
    private func sessionPingedEverySecond() async throws -> (TestServer, RawSocket) {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 1
            $0.limits.idleTimeoutSeconds = 30
        }
        let socket = try RawSocket(port: server.server.port)
        _ = try await socket.openSession(token: server.token())
        return (server, socket)
    }

    /// An idle client that answers is pinged once per ping interval: not once per idle
    /// timeout (the keepalive visits it again a ping interval after each ping) and not more.
    @Test func anIdleClientIsPingedOncePerPingInterval() async throws {
        let (server, socket) = try await sessionPingedEverySecond()
        defer { server.stop() }
        defer { socket.close() }
        // Read and answer on a thread of its own: a pong that waits for this task to be
        // scheduled again (the whole suite shares two cores) would hold the next ping back.
        let (pings, log) = try await offThePool { () -> (Int, [String]) in
            var pings = 0
            var log: [String] = []
            let start = ContinuousClock.now
            let deadline = start + .seconds(5.5)
            while ContinuousClock.now < deadline {
                let frame: (UInt8, [UInt8])
                do { frame = try socket.blockingReadFrame(limit: deadline - ContinuousClock.now) } catch {
                    log.append("\(ContinuousClock.now - start): \(error)")
                    break
                }
                log.append("\(ContinuousClock.now - start): opcode \(frame.0)")
                if frame.0 == 0x9 {
                    pings += 1
                    _ = socket.send(socket.maskedFrame(opcode: 0xA, frame.1))
                }
            }
            return (pings, log)
        }
        // Five intervals: a ping at about 1, 2, 3, 4 and 5 s (each a tick late at most), so 4
        // or 5 here even on a slow host; one per idle timeout would be none.
        #expect((3...6).contains(pings), "\(pings) pings in 5.5 s: \(log)")
    }

    /// Connections opened together are not pinged together: each first ping comes after a
    /// ping interval of silence (never sooner) and a random part of half another, so that the
    /// pings of a node's clients, who all reconnect at once after a restart, stay spread.
    @Test func theFirstPingsOfConnectionsOpenedTogetherAreSpread() async throws {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 2
            $0.limits.idleTimeoutSeconds = 30
        }
        defer { server.stop() }
        // Opened together, each timed from before its TCP connect: the server counts silence
        // from the upgrade, so no first ping can come sooner than an interval after that
        // (timing from the welcome instead failed on a loaded host, whose welcomes came late).
        let firstPings = try await withThrowingTaskGroup(of: Duration?.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    let opened = ContinuousClock.now
                    let socket = try RawSocket(port: server.server.port)
                    defer { socket.close() }
                    _ = try await socket.openSession(token: server.token())
                    return try await offThePool { () -> Duration? in
                        while let frame = try? socket.blockingReadFrame(limit: .seconds(6) * testSlowdown) {
                            if frame.0 == 0x9 { return ContinuousClock.now - opened }
                        }
                        return nil
                    }
                }
            }
            return try await group.reduce(into: [Duration?]()) { $0.append($1) }
        }
        let pinged = firstPings.compactMap { $0 }
        #expect(pinged.count == 8, "first pings: \(firstPings)")
        #expect(pinged.allSatisfy { $0 >= .seconds(1.95) }, "first pings: \(pinged)")
        // Spread over a second: eight that each waited exactly an interval would be within a
        // slot or two of each other (eight spread at random fall within 150 ms once in about
        // 70,000 runs).
        let spread = (pinged.max() ?? .zero) - (pinged.min() ?? .zero)
        #expect(spread >= .milliseconds(150), "first pings within \(spread): \(pinged)")
    }

    /// A pong that comes after the next visit was due (a slow client, a busy host): the next
    /// ping still comes a ping interval after it, not only when the idle timeout is near.
    @Test func aLatePongIsFollowedByTheNextPingAnIntervalLater() async throws {
        let (server, socket) = try await sessionPingedEverySecond()
        defer { server.stop() }
        defer { socket.close() }
        let gap = try await offThePool { () -> Duration? in
            guard let first = try? socket.blockingReadFrame(limit: .seconds(5)), first.0 == 0x9 else { return nil }
            Thread.sleep(forTimeInterval: 1.6)  // past the visit a second after the ping
            _ = socket.send(socket.maskedFrame(opcode: 0xA, first.1))
            let answered = ContinuousClock.now
            while let frame = try? socket.blockingReadFrame(limit: .seconds(6)) {
                if frame.0 == 0x9 { return ContinuousClock.now - answered }
            }
            return nil
        }
        let next = try #require(gap, "no ping within 6 s of a late pong")
        #expect(next < .seconds(3), "the next ping came \(next) after the late pong")
    }

    /// Covers: limit:send_queue_bytes, close:1008
    @Test func clientThatDoesNotReadIsDroppedAsASlowConsumer() async throws {
        let server = try TestServer { $0.limits.sendQueueBytes = 4096 }
        defer { server.stop() }
        let socket = try RawSocket(port: server.server.port, receiveBuffer: 4096)
        defer { socket.close() }
        try socket.requestUpgrade(token: server.token())
        // RFC 6455 4.1: a client sends nothing more until the server's handshake has arrived.
        #expect(try await socket.readHandshakeResponse().hasPrefix("HTTP/1.1 101"))
        // Ask for many replies and never read one: the kernel buffers fill, then the send queue.
        let metrics = server.server.metrics
        let deadline = ContinuousClock.now + .seconds(60)
        // Writes block once the buffers are full: on a thread of their own.
        try await offThePool {
            var sent = 0
            while metrics.counter("switchboard_disconnects_total", ["reason": "slow_consumer"]) == 0 && ContinuousClock.now < deadline {
                do {
                    for _ in 0..<500 { try socket.writeTextFrame(#"{"type":"session.info","id":\#(sent)}"#); sent += 1 }
                } catch {
                    break  // the server closed the connection
                }
            }
        }
        try await within(.seconds(10) * testSlowdown, "the slow consumer to be dropped") {
            while metrics.counter("switchboard_disconnects_total", ["reason": "slow_consumer"]) == 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        // Reading now, it gets what the kernel held, then the close: 1008 "send queue full".
        var close: [UInt8]?
        while close == nil {
            let (opcode, payload) = try await socket.readFrame(limit: .seconds(10) * testSlowdown)
            if opcode == 0x8 { close = payload }
        }
        #expect(close?.prefix(2) == [0x03, 0xF0], "close code 1008")
        #expect(String(decoding: close?.dropFirst(2) ?? [], as: UTF8.self) == "send queue full")
        // The server is still fine for everyone else.
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token())
        #expect(try await client.nextEnvelope().type == MessageType.sessionWelcome)
        client.socket.close()
    }

    /// Covers: close:1001
    @Test func gracefulShutdownClosesWebSocketsWith1001() async throws {
        let server = try TestServer()
        let clients = try await withThrowingTaskGroup(of: TestClient.self) { group in
            for index in 0..<3 {
                group.addTask { try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("user\(index)")) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        for client in clients { _ = try await client.nextEnvelope() }
        let stopped = Task.detached { server.stop() }
        for client in clients {
            #expect(try await client.closeCode() == 1001)
        }
        await stopped.value
        await #expect(throws: (any Error).self) { _ = try await HTTPClient.request("GET", server.baseURL + "/healthz", timeout: .seconds(2)) }
    }

    @Test func echoEndpointExistsOnlyWhenEnabled() async throws {
        let plain = try TestServer()
        await #expect(throws: WebSocketClientError.self) { _ = try await TestClient.connect("ws://127.0.0.1:\(plain.server.port)/v1/echo") }
        plain.stop()

        let server = try TestServer { $0.enableEcho = true }
        defer { server.stop() }
        let client = try await TestClient.connect("ws://127.0.0.1:\(server.server.port)/v1/echo")
        client.sendRaw("hello")
        #expect(try await client.next() == .text("hello"))
        let large = String(repeating: "z", count: 200_000)
        client.sendRaw(large)
        #expect(try await client.next() == .text(large))
        client.socket.close()
    }

    /// A reply is written as soon as the loop's turn ends, but never ahead of what
    /// libwebsockets owes the same connection: a ping and a request in one write get the pong
    /// first, then the reply; a request and a close in one write get nothing after the close.
    @Test func aReplyNeverOvertakesThePongOrTheCloseItFollows() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let socket = try RawSocket(port: server.server.port)
        defer { socket.close() }
        _ = try await socket.openSession(token: server.token())
        for round in 0..<20 {
            let payload = Array("p\(round)".utf8)
            let request = Array(#"{"type":"ping","id":\#(round)}"#.utf8)
            #expect(socket.send(socket.maskedFrame(opcode: 0x9, payload) + socket.maskedFrame(opcode: 0x1, request)))
            let first = try await socket.readFrame(limit: .seconds(5) * testSlowdown)
            #expect(first.opcode == 0xA && first.payload == payload, "round \(round): the pong first, got opcode \(first.opcode)")
            let second = try await socket.readFrame(limit: .seconds(5) * testSlowdown)
            let reply = try JSONDecoder().decode(JSONValue.self, from: Data(second.payload))
            #expect(second.opcode == 0x1 && reply["id"] == .int(Int64(round)), "round \(round): then the reply")
        }
        let close = socket.maskedFrame(opcode: 0x8, [0x03, 0xE8])
        #expect(socket.send(socket.maskedFrame(opcode: 0x1, Array(#"{"type":"ping","id":99}"#.utf8)) + close))
        var opcodes: [UInt8] = []
        while opcodes.last != 0x8 {
            opcodes.append(try await socket.readFrame(limit: .seconds(5) * testSlowdown).opcode)
        }
        #expect(opcodes.allSatisfy { $0 == 0x1 || $0 == 0x8 } && opcodes.count <= 2, "\(opcodes)")
        await #expect(throws: Timeout.self, "nothing after the close") {
            _ = try await socket.readFrame(limit: .milliseconds(300))
        }
    }

    /// Frames queued together leave in one write, each with its own header: lengths on both
    /// sides of the 7-bit, 16-bit and 64-bit encodings, in order, none lost or merged.
    @Test func aBurstOfEchoesComesBackFrameByFrame() async throws {
        let server = try TestServer { $0.enableEcho = true }
        defer { server.stop() }
        let client = try await TestClient.connect("ws://127.0.0.1:\(server.server.port)/v1/echo")
        let sizes = [0, 1, 125, 126, 127, 65_535, 65_536, 70_000] + (0..<200).map { 20 + $0 % 300 }
        let messages = sizes.enumerated().map { index, size in
            String(repeating: Character(UnicodeScalar(UInt8(97 + index % 26))), count: size)
        }
        for message in messages { client.sendRaw(message) }
        for message in messages {
            #expect(try await client.next() == .text(message))
        }
        client.socket.close()
    }
}

/// A blocking TCP client for what a WebSocket library would not do (stay silent, for example).
final class RawSocket: @unchecked Sendable {  // one fd, used by one thread at a time
    private let fd: Int32
    private var closed = false

    init(port: Int, receiveBuffer: Int32? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard status == 0 else { throw Timeout(what: "a TCP connection (errno \(errno))") }
    }

    func write(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard Glibc.write(fd, bytes, bytes.count) == bytes.count else { throw Timeout(what: "a socket write") }
    }

    /// Writes a WebSocket upgrade request for `/v1/ws` with this access token (and more of the
    /// query: `&resume_token=…`).
    func requestUpgrade(token: String, query: String = "") throws {
        try write(
            "GET /v1/ws?access_token=\(token)\(query) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
                + "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
    }

    /// Upgrades to a session and returns its first message (`session.welcome` or `.resumed`).
    func openSession(token: String, query: String = "") async throws -> JSONValue {
        try requestUpgrade(token: token, query: query)
        let head = try await readHandshakeResponse()
        guard head.hasPrefix("HTTP/1.1 101") else { throw Timeout(what: "the upgrade, got \(head)") }
        return try await readJSON()
    }

    /// The next text message as JSON (pings are answered; other control frames skipped).
    func readJSON(limit: Duration = .seconds(5) * testSlowdown) async throws -> JSONValue {
        let deadline = ContinuousClock.now + limit
        while true {
            let (opcode, payload) = try await readFrame(limit: deadline - ContinuousClock.now)
            switch opcode {
            case 0x1: return try JSONDecoder().decode(JSONValue.self, from: Data(payload))
            case 0x8: throw Timeout(what: "a message (the server closed: \(payload.prefix(2)))")
            case 0x9: _ = send(maskedFrame(opcode: 0xA, payload))
            default: continue
            }
        }
    }

    /// Reads one whole frame from the server (unmasked, RFC 6455 5.1), within `limit`, on a
    /// thread of its own (a blocking read must not hold one of the tests' few threads).
    func readFrame(limit: Duration) async throws -> (opcode: UInt8, payload: [UInt8]) {
        let frame = try await offThePool { try self.blockingReadFrame(limit: limit) }
        return (frame.0, frame.1)
    }

    func blockingReadFrame(limit: Duration) throws -> (UInt8, [UInt8]) {
        let deadline = ContinuousClock.now + limit
        func exactly(_ count: Int) throws -> [UInt8] {
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: max(count, 1))
            while bytes.count < count {
                let left = deadline - ContinuousClock.now
                guard left > .zero else { throw Timeout(what: "a frame from the server") }
                var timeout = timeval(tv_sec: Int(left.components.seconds), tv_usec: Int(left.components.attoseconds / 1_000_000_000_000) + 1)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                let got = read(fd, &buffer, count - bytes.count)
                if got == 0 { throw Timeout(what: "a frame (the connection ended)") }
                if got < 0 {
                    if errno == EAGAIN || errno == EINTR { continue }
                    throw Timeout(what: "a frame (errno \(errno))")
                }
                bytes += buffer[0..<got]
            }
            return bytes
        }
        let head = try exactly(2)
        var length = Int(head[1] & 0x7F)
        if length == 126 {
            length = try exactly(2).reduce(0) { $0 << 8 | Int($1) }
        } else if length == 127 {
            length = try exactly(8).reduce(0) { $0 << 8 | Int($1) }
        }
        return (head[0] & 0x0F, try exactly(length))
    }

    /// Sends masked pings (1,000 of 4 bytes per write: 10 KB) for `duration` or until the
    /// server stops taking them, on a thread of its own; returns how long and how many bytes.
    func floodPings(for duration: Duration, opcode: UInt8 = 0x9) async throws -> (elapsed: Duration, bytes: Int) {
        let ping: [UInt8] = [0x80 | opcode, 0x84, 1, 2, 3, 4, 0x71, 0x6F, 0x70, 0x6D]
        let batch = Array((0..<1000).map { _ in ping }.joined())
        return try await offThePool {
            let started = ContinuousClock.now
            var sent = 0
            while ContinuousClock.now - started < duration, self.send(batch) { sent += batch.count }
            return (ContinuousClock.now - started, sent)
        }
    }

    /// A masked client frame (RFC 6455 5.3).
    func maskedFrame(opcode: UInt8, _ payload: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = [0x80 | opcode]
        if payload.count < 126 {
            frame.append(0x80 | UInt8(payload.count))
        } else {
            frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        }
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        frame += mask
        frame += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        return frame
    }

    /// The connection dies as a network failure kills it: a TCP reset, no close frame.
    func reset() {
        var noLinger = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &noLinger, socklen_t(MemoryLayout<linger>.size))
        close()
    }

    /// The connection ends with a TCP FIN and no close frame (a process that exits mid-session).
    func shutdownWithoutClosing() {
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Sends one masked text frame, as a client must (RFC 6455 5.3).
    func writeTextFrame(_ text: String) throws {
        guard send(maskedFrame(opcode: 0x1, Array(text.utf8))) else { throw Timeout(what: "a socket write (errno \(errno))") }
    }

    /// Sends bytes without raising SIGPIPE; false once the peer has closed or reset.
    func send(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBufferPointer { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return false }
            sent += count
        }
        return true
    }

    /// Reads the HTTP response head (up to the blank line), byte by byte so nothing after it is
    /// taken; within 10 s (on a thread of its own).
    func readHandshakeResponse() async throws -> String {
        try await offThePool { try self.blockingHandshakeResponse() }
    }

    /// The response head, read on the calling thread.
    func blockingHandshakeResponse() throws -> String {
        var timeout = timeval(tv_sec: 10 * testSlowdown, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var head: [UInt8] = []
        var byte: UInt8 = 0
        while !head.suffix(4).elementsEqual([13, 10, 13, 10]) {
            let count = read(fd, &byte, 1)
            guard count == 1 else {
                throw Timeout(what: count == 0 ? "the handshake response (the server closed the connection first)" : "the handshake response")
            }
            head.append(byte)
        }
        return String(decoding: head, as: UTF8.self)
    }

    /// One HTTP response on a kept-alive connection: its head, then its body by
    /// `Content-Length` (on a thread of its own).
    func readHTTPResponse() async throws -> String {
        try await offThePool {
            let head = try self.blockingHandshakeResponse()
            let length = head.lowercased().firstMatch(of: /content-length: *([0-9]+)/).flatMap { Int($0.1) } ?? 0
            var body = [UInt8](repeating: 0, count: length)
            var offset = 0
            while offset < length {
                let count = body.withUnsafeMutableBytes { read(self.fd, $0.baseAddress! + offset, length - offset) }
                guard count > 0 else { throw Timeout(what: "the response's body") }
                offset += count
            }
            return head + String(decoding: body, as: UTF8.self)
        }
    }

    /// Reads until the peer closes; fails after `limit` (on a thread of its own).
    func readUntilClosed(limit: Duration) async throws -> [UInt8] {
        try await offThePool { try self.blockingReadUntilClosed(limit: limit) }
    }

    private func blockingReadUntilClosed(limit: Duration) throws -> [UInt8] {
        var timeout = timeval(tv_sec: Int(limit.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count == 0 { return received }
            if count < 0 { throw Timeout(what: "the server to close the socket") }
            received.append(contentsOf: buffer[0..<count])
        }
    }

    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }
}
