import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// Documented limits exercised through the server at their edge: just under, at, and just past
/// each, with the documented answer. (Limits with a test elsewhere say so with `Covers:`; the
/// list in docs/configuration.md is checked against those lines by `LimitCoverageTests`.)
@Suite(.timeLimit(.minutes(3))) struct LimitsTests {
    func basic(_ app: App) -> (String, String) {
        ("Authorization", "Basic " + Data("\(app.apiKey):\(app.apiSecret)".utf8).base64EncodedString())
    }

    func bearer(_ token: String) -> (String, String) { ("Authorization", "Bearer " + token) }

    func code(_ response: HTTPClientResponse) -> String? {
        (try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))?["error"]?["code"]?.stringValue
    }

    /// Covers: limit:max_token_ttl_seconds
    @Test func tokensAreIssuedUpToTheLongestLifetimeAndNoLonger() async throws {
        let server = try TestServer { $0.limits.maxTokenTTLSeconds = 120 }
        defer { server.stop() }
        let url = server.baseURL + "/v1/tokens"
        for (ttl, status) in [(119, 201), (120, 201), (121, 400)] {
            let response = try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: Array(#"{"identity":"bob","ttl":\#(ttl)}"#.utf8))
            #expect(response.status == status, "ttl \(ttl): \(response.text)")
            if status == 400 {
                #expect(code(response) == "bad_request")
                #expect(response.text.contains("1 to 120 seconds"), "\(response.text)")
            } else {
                let token = try #require((try JSONDecoder().decode(JSONValue.self, from: Data(response.body)))["token"]?.stringValue)
                let secret = server.app.apiSecret
                let claims = try AccessTokenVerifier().verify(token) { _ in secret }
                #expect(claims.iat.map { claims.exp - $0 } == Int64(ttl), "a lifetime of exactly \(ttl) s")
            }
        }
    }

    /// A token exactly `max_token_bytes` long is accepted; one byte over is refused before it is
    /// parsed, on the WebSocket and over REST.
    /// Covers: limit:max_token_bytes
    @Test func theLongestTokenAcceptedIsTheLimitExactly() async throws {
        // Tokens whose length grows with the name; the limit is set to one of them.
        func token(nameLength: Int, app: App) -> String {
            let claims = AccessTokenIssuer.claims(
                apiKey: app.apiKey, identity: "alice", name: String(repeating: "n", count: nameLength), grants: Grants(), ttlSeconds: 600)
            return AccessTokenVerifier.sign(claims, secret: app.apiSecret)
        }
        let app = App.make(name: "Sized", bundleID: "com.example.sized")
        let atLimit = token(nameLength: 200, app: app)
        let limit = atLimit.utf8.count
        let over = (201...210).lazy.map { token(nameLength: $0, app: app) }.first { $0.utf8.count == limit + 1 }
            ?? (201...210).lazy.map { token(nameLength: $0, app: app) }.first { $0.utf8.count > limit }!
        let under = token(nameLength: 150, app: app)
        let server = try TestServer { $0.limits.maxTokenBytes = limit }
        defer { server.stop() }
        try server.server.store.insert(app)
        for (what, candidate, accepted) in [("under", under, true), ("at", atLimit, true), ("over", over, false)] {
            let response = try await HTTPClient.request("GET", server.baseURL + "/v1/devices", headers: [bearer(candidate)])
            #expect(response.status == (accepted ? 200 : 401), "\(what) the limit (\(candidate.utf8.count) of \(limit) bytes): \(response.text)")
            if !accepted {
                #expect(code(response) == "unauthorized")
                #expect(response.text.contains("\(limit)"), "the refusal names the limit: \(response.text)")
            }
            let upgrade = Result { try RawSocket(port: server.server.port) }
            let socket = try upgrade.get()
            defer { socket.close() }
            try socket.requestUpgrade(token: candidate)
            let head = try await socket.readHandshakeResponse()
            #expect(head.hasPrefix(accepted ? "HTTP/1.1 101" : "HTTP/1.0 401"), "\(what): \(head.prefix(40))")
        }
    }

    /// `exp` and `nbf` are allowed `token_leeway_seconds` of clock skew, no more.
    /// Covers: limit:token_leeway_seconds, error:token_expired
    @Test func tokensOutsideTheLeewayAreRefused() async throws {
        let server = try TestServer { $0.limits.tokenLeewaySeconds = 30 }
        defer { server.stop() }
        // Each token is made just before it is used, with margins no slow machine eats up.
        func token(exp: Int64, nbf: Int64? = nil) -> String {
            let now = Int64(Date().timeIntervalSince1970)
            var claims = AccessTokenIssuer.claims(apiKey: server.app.apiKey, identity: "alice", name: nil, grants: Grants(), ttlSeconds: 60)
            claims.exp = now + exp
            claims.nbf = nbf.map { now + $0 }
            return AccessTokenVerifier.sign(claims, secret: server.app.apiSecret)
        }
        let cases: [(String, Int64, Int64?, String?)] = [
            ("expired 10 s ago, within the leeway", -10, nil, nil),
            ("expired 50 s ago, past it", -50, nil, "token_expired"),
            ("valid from 10 s from now, within the leeway", 600, 10, nil),
            ("valid from 50 s from now, past it", 600, 50, "unauthorized"),
        ]
        for (what, exp, nbf, refusal) in cases {
            let response = try await HTTPClient.request("GET", server.baseURL + "/v1/devices", headers: [bearer(token(exp: exp, nbf: nbf))])
            #expect(response.status == (refusal == nil ? 200 : 401), "\(what): \(response.text)")
            #expect(code(response) == refusal, "\(what)")
            let socket = try RawSocket(port: server.server.port)
            defer { socket.close() }
            try socket.requestUpgrade(token: token(exp: exp, nbf: nbf))
            #expect(try await socket.readHandshakeResponse().hasPrefix(refusal == nil ? "HTTP/1.1 101" : "HTTP/1.0 401"), "\(what) on the WebSocket")
        }
    }

    /// Covers: limit:max_rooms_per_peer
    @Test func aPeerMayBeInAtMostMaxRoomsPerPeer() async throws {
        let server = try TestServer { $0.limits.maxRoomsPerPeer = 3 }
        defer { server.stop() }
        let alice = try await Peer.connect(server, "alice")
        for room in ["a", "b", "c"] { #expect(try await alice.join(room).type == MessageType.ok, "room \(room)") }
        let fourth = try await alice.join("d")
        #expect(fourth.error?.code == .rateLimited, "\(fourth)")
        #expect(fourth.error?.message.contains("at most 3 rooms") == true)
        #expect(try await alice.join("a").type == MessageType.ok, "a room it is in already does not count twice")
        #expect(try await alice.client.request(MessageType.roomLeave, id: "l", encoding: RoomLeaveRequest(room: "b")).type == MessageType.ok)
        #expect(try await alice.join("d").type == MessageType.ok, "leaving one makes room for another")
        // Per peer: another session of the same user has its own count.
        let again = try await Peer.connect(server, "alice")
        #expect(try await again.join("e").type == MessageType.ok)
    }

    /// Covers: limit:max_rooms_per_app
    @Test func anAppMayHaveAtMostMaxRoomsPerAppOverRESTAndTheWebSocket() async throws {
        let server = try TestServer { $0.limits.maxRoomsPerApp = 2 }
        defer { server.stop() }
        let url = server.baseURL + "/v1/rooms"
        #expect(try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: Array("{}".utf8)).status == 201)
        let alice = try await Peer.connect(server, "alice")
        #expect(try await alice.join("second").type == MessageType.ok, "the second room, at the limit")
        let third = try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: Array("{}".utf8))
        #expect(third.status == 429, "\(third.text)")
        #expect(code(third) == "rate_limited")
        #expect(third.text.contains("already has 2 rooms"))
        #expect(try await alice.join("third").error?.code == .rateLimited)
        // Another app is not affected.
        let other = App.make(name: "Other", bundleID: "com.example.other")
        try server.server.store.insert(other)
        #expect(try await HTTPClient.request("POST", url, headers: [basic(other)], body: Array("{}".utf8)).status == 201)
    }

    /// A room's own participant limit and empty timeout over REST: 2–256 and 1–86400.
    /// Covers: limit:max_room_participants, limit:empty_room_timeout_seconds
    @Test func aRoomsOwnLimitsAreCheckedAtTheirRangesEdges() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let url = server.baseURL + "/v1/rooms"
        for (body, status) in [
            (#"{"max_participants":1}"#, 400), (#"{"max_participants":2}"#, 201), (#"{"max_participants":256}"#, 201),
            (#"{"max_participants":257}"#, 400), (#"{"empty_timeout_seconds":0}"#, 400), (#"{"empty_timeout_seconds":1}"#, 201),
            (#"{"empty_timeout_seconds":86400}"#, 201), (#"{"empty_timeout_seconds":86401}"#, 400),
        ] {
            let response = try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: Array(body.utf8))
            #expect(response.status == status, "\(body): \(response.text)")
            if status == 400 { #expect(code(response) == "bad_request") }
        }
        // A room of 2 takes exactly 2 peers.
        let created = try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: Array(#"{"max_participants":2}"#.utf8))
        let name = try #require((try JSONDecoder().decode(JSONValue.self, from: Data(created.body)))["name"]?.stringValue)
        let peers = [try await Peer.connect(server, "a"), try await Peer.connect(server, "b"), try await Peer.connect(server, "c")]
        #expect(try await peers[0].join(name).type == MessageType.ok)
        #expect(try await peers[1].join(name).type == MessageType.ok)
        #expect(try await peers[2].join(name).error?.code == .roomFull)
    }

    /// `data`, peer metadata and room metadata up to `max_data_bytes` as encoded JSON; one byte
    /// more is `payload_too_large` (413 over REST).
    /// Covers: limit:max_data_bytes, error:payload_too_large
    @Test func dataAndMetadataAreBoundedByMaxDataBytesExactly() async throws {
        let limit = 64
        let server = try TestServer { $0.limits.maxDataBytes = limit }
        defer { server.stop() }
        // A JSON string of n characters encodes to n + 2 bytes.
        let fits = JSONValue.string(String(repeating: "a", count: limit - 2))
        let tooBig = JSONValue.string(String(repeating: "a", count: limit - 1))
        let alice = try await Peer.connect(server, "alice", grants: Grants(room: "*", roomJoin: true, admin: true))
        #expect(try await alice.join("r", metadata: tooBig).error?.code == .payloadTooLarge, "peer metadata over")
        #expect(try await alice.join("r", metadata: fits).type == MessageType.ok, "peer metadata at the limit")
        let bob = try await Peer.connect(server, "bob")
        try await bob.join("r")
        #expect(try await alice.client.request(MessageType.data, id: "d1", encoding: DataRequest(room: "r", data: fits)).type == MessageType.ok)
        #expect(try await alice.client.request(MessageType.data, id: "d2", encoding: DataRequest(room: "r", data: tooBig)).error?.code == .payloadTooLarge)
        let setOK = try await alice.client.request(MessageType.roomSetMetadata, id: "m1", data: ["room": "r", "metadata": fits])
        #expect(setOK.type == MessageType.ok, "\(setOK)")
        let setBig = try await alice.client.request(MessageType.roomSetMetadata, id: "m2", data: ["room": "r", "metadata": tooBig])
        #expect(setBig.error?.code == .payloadTooLarge)
        let rest = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/rooms/r/data", headers: [basic(server.app)], body: Array(#"{"data":"\#(String(repeating: "a", count: limit - 1))"}"#.utf8))
        #expect(rest.status == 413, "\(rest.text)")
        #expect(code(rest) == "payload_too_large")
    }

    /// Covers: limit:max_callees
    @Test func aCallRingsAtMostMaxCallees() async throws {
        let server = try TestServer { $0.limits.maxCallees = 3 }
        defer { server.stop() }
        let token = server.token("alice", grants: Grants(call: true))
        let alice = try await TestClient.connect(server.webSocketURL + "?access_token=" + token)
        _ = try await alice.nextEnvelope()
        let three = try await alice.request(MessageType.callCreate, id: "c3", encoding: CallCreateRequest(callees: ["b", "c", "d"]))
        #expect(three.type == MessageType.ok, "\(three)")
        let four = try await alice.request(MessageType.callCreate, id: "c4", encoding: CallCreateRequest(callees: ["b", "c", "d", "e"]))
        #expect(four.error?.code == .badRequest)
        #expect(four.error?.message.contains("1 to 3 users") == true, "\(four)")
        let rest = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(token)], body: Array(#"{"callees":["b","c","d","e"]}"#.utf8))
        #expect(rest.status == 400)
        #expect(code(rest) == "bad_request")
        alice.socket.close()
    }

    /// Calls one user may start in a minute: the one past it is refused and rings nobody.
    /// Covers: limit:invites_per_minute, error:rate_limited
    @Test func callsPastInvitesPerMinuteAreRefusedAndRingNobody() async throws {
        let server = try TestServer { $0.limits.invitesPerMinute = 3 }
        defer { server.stop() }
        let grants = Grants(room: "*", roomJoin: true, call: true)
        let alice = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("alice", grants: grants))
        _ = try await alice.nextEnvelope()
        let erin = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("erin", grants: grants))
        _ = try await erin.nextEnvelope()
        for (index, callee) in ["bob", "carol", "dave"].enumerated() {
            let reply = try await alice.request(MessageType.callCreate, id: .string("c\(index)"), encoding: CallCreateRequest(callees: [callee]))
            #expect(reply.type == MessageType.ok, "call \(index + 1) of 3: \(reply)")
        }
        let fourth = try await alice.request(MessageType.callCreate, id: "c4", encoding: CallCreateRequest(callees: ["erin"]))
        #expect(fourth.error?.code == .rateLimited, "\(fourth)")
        let rest = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(server.token("alice", grants: grants))], body: Array(#"{"callees":["erin"]}"#.utf8))
        #expect(rest.status == 429)
        #expect(code(rest) == "rate_limited")
        #expect(server.server.metrics.counter("switchboard_calls_refused_total", ["reason": "rate_limited"]) == 2)
        // Erin never rang: a message sent after the refusals reaches her first.
        _ = try await erin.request(MessageType.roomJoin, id: "j", encoding: RoomJoinRequest(room: "barrier"))
        _ = try await alice.request(MessageType.roomJoin, id: "j", encoding: RoomJoinRequest(room: "barrier"))
        _ = try await alice.request(MessageType.data, id: "d", encoding: DataRequest(room: "barrier", data: "after"))
        var seen: [String] = []
        while seen.last != "room.data" { seen.append(try await erin.nextEnvelope().type) }
        #expect(!seen.contains("call.incoming"), "\(seen)")
        // Another caller is not limited by alice's calls.
        let bob = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("bob", grants: grants))
        _ = try await bob.nextEnvelope()
        #expect(try await bob.request(MessageType.callCreate, id: "b", encoding: CallCreateRequest(callees: ["erin"])).type == MessageType.ok)
        for client in [alice, erin, bob] { client.socket.close() }
    }

    /// A resume replays at most `resume_buffer_events`: missing exactly that many resumes; one
    /// more and the session is replaced (`resume_failed`).
    /// Covers: limit:resume_buffer_events
    @Test func aResumeReplaysUpToTheBufferAndNoMore() async throws {
        let server = try TestServer {
            $0.limits.resumeBufferEvents = 4
            $0.limits.resumeGraceSeconds = 60
        }
        defer { server.stop() }
        let grants = Grants(room: "*", roomJoin: true)
        func dropAndMiss(_ count: Int, room: String) async throws -> Envelope {
            let alice = try await Peer.connect(server, "alice")
            let bob = try await Peer.connect(server, "bob")
            try await alice.join(room)
            try await bob.join(room)
            _ = try await alice.event()
            bob.client.socket.abort()
            try await within(.seconds(10) * testSlowdown, "the drop") {
                while server.server.metrics.gauge("switchboard_connections") > 1 { try await Task.sleep(for: .milliseconds(20)) }
            }
            for n in 0..<count {
                _ = try await alice.client.request(MessageType.data, id: .string("d\(n)"), encoding: DataRequest(room: room, to: bob.peerID, data: .int(Int64(n))))
            }
            let resumed = try await TestClient.connect(
                server.webSocketURL + "?access_token=\(server.token("bob", grants: grants))&resume_token=\(bob.resumeToken)&last_seq=0")
            defer {
                resumed.socket.close()
                alice.client.socket.close()
            }
            return try await resumed.nextEnvelope()
        }
        let atLimit = try await dropAndMiss(4, room: "at")
        #expect(atLimit.type == MessageType.sessionResumed, "\(atLimit)")
        #expect(atLimit.data?["replay_count"] == 4)
        let past = try await dropAndMiss(5, room: "past")
        #expect(past.type == MessageType.sessionWelcome, "\(past)")
        #expect(past.data?["resume_failed"] == true)
    }

    /// A request that has not arrived in full within `http_timeout_seconds` is dropped; one that
    /// arrives slowly but in time is answered.
    /// Covers: limit:http_timeout_seconds
    @Test func anHTTPRequestThatDoesNotArriveInTimeIsDropped() async throws {
        let server = try TestServer { $0.limits.httpTimeoutSeconds = 5 }
        defer { server.stop() }
        // On a thread of its own: a busy cooperative pool must not stretch the pause past the limit.
        let port = server.server.port
        let answer = try await offThePool {
            let slow = try RawSocket(port: port)
            defer { slow.close() }
            try slow.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            usleep(300_000)
            try slow.write("\r\n")
            return try slow.blockingHandshakeResponse()
        }
        #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(60))")

        let stalled = try RawSocket(port: server.server.port)
        defer { stalled.close() }
        let started = ContinuousClock.now
        try stalled.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        let received = try await stalled.readUntilClosed(limit: .seconds(20) * testSlowdown)
        #expect(received.isEmpty, "dropped without an answer: \(String(decoding: received, as: UTF8.self).prefix(60))")
        #expect(ContinuousClock.now - started >= .seconds(4), "not dropped before its time")
        #expect(try await HTTPClient.request("GET", server.baseURL + "/healthz").status == 200)
    }

    /// On SIGTERM the server closes WebSockets with 1001 and gives them up to
    /// `shutdown_grace_seconds` to go: a peer that does not read (its close frame stuck behind
    /// replies it never takes) holds the exit back that long and no longer; a peer that reads
    /// lets it exit at once.
    /// Covers: limit:shutdown_grace_seconds, close:1001
    @Test func shutdownWaitsForClosingPeersUpToTheGraceAndNoLonger() async throws {
        for (grace, reads) in [(2, false), (30, true)] {
            let directory = try makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let serve = try ToolProcess([
                "serve", "--port", "0", "--data-dir", directory, "--web-root", repositoryRoot + "/web",
                "--shutdown-grace-seconds", String(grace), "--send-queue-bytes", String(64 << 20), "--message-burst", "100000",
                "--messages-per-second", "100000",
            ])
            defer { serve.stopNow() }
            let port = try await serve.waitForPort()
            let apiKey = try await serve.waitFor(/API key\s+(sbk_\w+)/, inOutput: true, what: "the development app's key")
            let secret = try await serve.waitFor(/API secret\s+(\w+)/, inOutput: true, what: "the development app's secret")
            let token = AccessTokenVerifier.sign(
                AccessTokenIssuer.claims(apiKey: apiKey, identity: "alice", name: nil, grants: Grants(), ttlSeconds: 600), secret: secret)
            let peer = try RawSocket(port: port, receiveBuffer: 4096)
            defer { peer.close() }
            _ = try await peer.openSession(token: token)
            if !reads {
                // Replies pile up behind a peer that never reads: kernel buffers, then the queue.
                try await offThePool {
                    for index in 0..<20_000 { _ = peer.send(peer.maskedFrame(opcode: 0x1, Array(#"{"type":"session.info","id":\#(index)}"#.utf8))) }
                }
                // Every reply queued (counted as it is queued): megabytes more than any buffer.
                try await within(.seconds(20) * testSlowdown, "the replies to be queued") {
                    while true {
                        let metrics = try await HTTPClient.request("GET", "http://127.0.0.1:\(port)/metrics").text
                        let line = metrics.split(separator: "\n").first { $0.hasPrefix("switchboard_messages_out_total ") }
                        if let line, let count = Double(line.split(separator: " ").last ?? ""), count > 20_000 { return }
                        try await Task.sleep(for: .milliseconds(50))
                    }
                }
            }
            let started = ContinuousClock.now
            kill(serve.pid, SIGTERM)
            if reads {
                let (opcode, payload) = try await peer.readFrame(limit: .seconds(5) * testSlowdown)
                #expect(opcode == 0x8 && payload.prefix(2) == [0x03, 0xE9], "a close frame with 1001")
                _ = peer.send(peer.maskedFrame(opcode: 0x8, [0x03, 0xE9]))
            }
            #expect(try await serve.waitForExit(timeout: .seconds(Int64(grace) + 10) * testSlowdown) == 0)
            let took = ContinuousClock.now - started
            if reads {
                #expect(took < .seconds(grace), "a peer that takes its close frame does not make it wait (\(took))")
            } else {
                #expect(took >= .seconds(grace) - .milliseconds(200), "a peer that cannot take it is given the whole grace (\(took))")
            }
        }
    }

    /// Messages on /v1/echo up to `echo_max_message_bytes`; one byte more closes with 1009.
    /// Covers: limit:echo_max_message_bytes, close:1009
    @Test func theEchoEndpointTakesMessagesUpToItsOwnLimit() async throws {
        let server = try TestServer {
            $0.enableEcho = true
            $0.limits.echoMaxMessageBytes = 4096
        }
        defer { server.stop() }
        let echo = try await TestClient.connect("ws://127.0.0.1:\(server.server.port)/v1/echo")
        let atLimit = String(repeating: "e", count: 4096)
        echo.socket.send(text: atLimit)
        #expect(try await echo.next() == .text(atLimit))
        echo.socket.send(text: atLimit + "e")
        #expect(try await echo.closeCode() == 1009)
    }

    /// `0` turns the receive limit off: a ping flood that a limit would cut is let through.
    /// Covers: limit:max_receive_bytes_per_second
    @Test func aReceiveRateOfZeroLimitsNothing() async throws {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 1  // keepalive visits every 250 ms
            $0.limits.maxReceiveBytesPerSecond = 0
        }
        defer { server.stop() }
        let socket = try RawSocket(port: server.server.port)
        defer { socket.close() }
        try socket.requestUpgrade(token: server.token())
        #expect(try await socket.readHandshakeResponse().hasPrefix("HTTP/1.1 101"))
        // The flood that `aPingFloodIsDroppedByTheReceiveRateLimit` sees cut at 64 KiB/s, for
        // 3 s: far past the 4 s burst that limit allows.
        let (_, sent) = try await socket.floodPings(for: .seconds(3))
        #expect(sent > 4 * 64 * 1024 + 3 * 64 * 1024, "the flood went through (\(sent) bytes)")
        #expect(server.server.metrics.counter("switchboard_disconnects_total", ["reason": "receive_rate"]) == 0)
        try socket.writeTextFrame(#"{"type":"ping","id":"p"}"#)
        var reply = try await socket.readJSON(limit: .seconds(30) * testSlowdown)
        while reply["id"] != "p" { reply = try await socket.readJSON(limit: .seconds(30) * testSlowdown) }
        #expect(reply["type"] == "ok", "the connection still serves")
    }

    /// A call may ring 5 to 180 s; outside that it is refused, and without one it rings the
    /// server's `ring_timeout_seconds`.
    /// Covers: limit:ring_timeout_seconds
    @Test func aCallsRingTimeoutIsCheckedAtItsRangesEdges() async throws {
        let server = try TestServer { $0.limits.ringTimeoutSeconds = 77 }
        defer { server.stop() }
        let alice = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("alice"))
        _ = try await alice.nextEnvelope()
        for (seconds, accepted) in [(4, false), (5, true), (180, true), (181, false)] {
            let reply = try await alice.request(
                MessageType.callCreate, id: .string("t\(seconds)"), encoding: CallCreateRequest(callees: ["bob\(seconds)"], ringTimeoutSeconds: seconds))
            #expect((reply.type == MessageType.ok) == accepted, "\(seconds) s: \(reply)")
            if !accepted { #expect(reply.error?.code == .badRequest) }
        }
        let plain = try await alice.request(MessageType.callCreate, id: "plain", encoding: CallCreateRequest(callees: ["bob"]))
        let callID = try #require(plain.data?["call_id"]?.stringValue)
        let state = try await HTTPClient.request(
            "GET", server.baseURL + "/v1/calls/\(callID)", headers: [bearer(server.token("alice"))])
        let summary = try JSONDecoder().decode(JSONValue.self, from: Data(state.body))
        let created = try #require(summary["created_at"]?.intValue)
        let expires = try #require(summary["ring_expires_at"]?.intValue)
        #expect(expires - created == 77_000, "\(summary)")
        alice.socket.close()
    }

    /// A store failure that is not the disk's (here a table gone from under the server) is
    /// `500 internal`, logged, with nothing of the cause in the answer; the server serves on,
    /// and the same requests work once the store is sound again.
    /// Covers: error:internal
    @Test func anUnexpectedStoreFailureIsInternalAndTheServerServesOn() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let token = server.token("alice")
        func register() async throws -> HTTPClientResponse {
            try await HTTPClient.request("PUT", server.baseURL + "/v1/devices/web-1", headers: [bearer(token)], body: Array(#"{"platform":"web"}"#.utf8))
        }
        func history() async throws -> HTTPClientResponse {
            try await HTTPClient.request("GET", server.baseURL + "/v1/calls", headers: [bearer(token)])
        }
        #expect(try await register().status == 200)
        #expect(try await history().status == 200)
        let database = try SQLiteDatabase(path: server.dataDirectory + "/switchboard.db")
        defer { database.close() }
        try database.execute("ALTER TABLE devices RENAME TO devices_away; ALTER TABLE call_history RENAME TO call_history_away")
        for response in [try await register(), try await history()] {
            #expect(response.status == 500, "\(response.text)")
            #expect(code(response) == "internal")
            #expect(!response.text.contains("devices_away") && !response.text.contains("no such table"), "no internals: \(response.text)")
        }
        #expect(try await HTTPClient.request("GET", server.baseURL + "/healthz").status == 200)
        try database.execute("ALTER TABLE devices_away RENAME TO devices; ALTER TABLE call_history_away RENAME TO call_history")
        #expect(try await register().status == 200)
        #expect(try await history().status == 200)
    }
}
