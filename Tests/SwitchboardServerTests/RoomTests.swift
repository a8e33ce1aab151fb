import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import Testing

/// A connected peer for room tests.
struct Peer {
    let client: TestClient
    let peerID: String
    let resumeToken: String

    static func connect(_ server: TestServer, _ identity: String, grants: Grants = Grants(room: "*", roomJoin: true)) async throws -> Peer {
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token(identity, grants: grants))
        let welcome = try await client.nextEnvelope()
        return Peer(
            client: client, peerID: try #require(welcome.data?["peer_id"]?.stringValue),
            resumeToken: try #require(welcome.data?["resume_token"]?.stringValue))
    }

    @discardableResult
    func join(_ room: String, metadata: JSONValue? = nil) async throws -> Envelope {
        try await client.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room, metadata: metadata))
    }

    /// The next sequenced event.
    func event(timeout: Duration = .seconds(15) * testSlowdown) async throws -> Envelope {
        let envelope = try await client.nextEnvelope(timeout: timeout)
        guard envelope.seq != nil else { throw UnexpectedMessage(description: "not an event: \(envelope)") }
        return envelope
    }

    /// alice and bob in `room` on `server`, once alice has heard bob join.
    static func pair(in room: String, on server: TestServer) async throws -> (alice: Peer, bob: Peer) {
        let alice = try await Peer.connect(server, "alice")
        let bob = try await Peer.connect(server, "bob")
        try await alice.join(room)
        try await bob.join(room)
        _ = try await alice.event()
        return (alice, bob)
    }
}

func basicAuth(_ app: App) -> (String, String) {
    ("Authorization", "Basic " + Data("\(app.apiKey):\(app.apiSecret)".utf8).base64EncodedString())
}

@Suite(.timeLimit(.minutes(3))) struct RoomTests {
    @Test(arguments: StoreEngine.available)
    func joinListsThePeersAlreadyThereAndTellsThem(engine: StoreEngine) async throws {
        let server = try TestServer(engine: engine)
        defer { server.stop() }
        let alice = try await Peer.connect(server, "alice")
        let bob = try await Peer.connect(server, "bob")
        let first = try await alice.join("lobby", metadata: ["role": "host"])
        #expect(first.type == MessageType.ok)
        #expect(first.data?["peers"] == .array([]))
        #expect(first.data?["peer_id"]?.stringValue == alice.peerID)

        let second = try await bob.join("lobby")
        let peers = try #require(second.data?["peers"])
        #expect(peers == .array([["peer_id": .string(alice.peerID), "identity": "alice", "name": "Alice", "metadata": ["role": "host"]]]))

        let joined = try await alice.event()
        #expect(joined.type == "room.peer_joined")
        #expect(joined.seq == 1)
        #expect(joined.data?["peer"]?["peer_id"]?.stringValue == bob.peerID)
        #expect(joined.data?["peer"]?["identity"] == "bob")
        try await bob.client.expectSilence()
    }

    /// Covers: error:forbidden
    @Test func joiningWithoutAGrantForTheRoomIsForbidden() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let limited = try await Peer.connect(server, "carol", grants: Grants(room: "team-1", roomJoin: true))
        #expect(try await limited.join("team-1").type == MessageType.ok)
        #expect(try await limited.join("team-2").error?.code == .forbidden)
        let prefixed = try await Peer.connect(server, "dave", grants: Grants(room: "team-*", roomJoin: true))
        #expect(try await prefixed.join("team-2").type == MessageType.ok)
        #expect(try await prefixed.join("other").error?.code == .forbidden)
        let noJoin = try await Peer.connect(server, "erin", grants: Grants(room: "team-1"))
        #expect(try await noJoin.join("team-1").error?.code == .forbidden)
        #expect(try await noJoin.join("bad name!").error?.code == .badRequest)
    }

    /// Covers: limit:max_room_participants, error:room_full
    @Test func aFullRoomRefusesTheNextPeer() async throws {
        let server = try TestServer { $0.limits.maxRoomParticipants = 2 }
        defer { server.stop() }
        let peers = [try await Peer.connect(server, "a"), try await Peer.connect(server, "b"), try await Peer.connect(server, "c")]
        #expect(try await peers[0].join("small").type == MessageType.ok)
        #expect(try await peers[1].join("small").type == MessageType.ok)
        let refused = try await peers[2].join("small")
        #expect(refused.error?.code == .roomFull)
        // A peer leaving makes room.
        _ = try await peers[1].client.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: "small"))
        #expect(try await peers[2].join("small").type == MessageType.ok)
    }

    /// 200 peers join a room and then vanish without closing: they never read or answer a ping
    /// again, as phones that lost their network (their TCP connections stay open). While two
    /// other peers keep signalling, the server finds every one by its missing pongs, closes it,
    /// and after the resume grace removes it from the room; nothing of them is left.
    @Test func halfOpenPeersAreFoundAndCleanedUpWhileOthersKeepTalking() async throws {
        let server = try TestServer {
            $0.limits.pingIntervalSeconds = 1
            // Long enough for all 200 to join first, also beside the other suites on 2 cores
            // and under the sanitizers' slowdown.
            $0.limits.idleTimeoutSeconds = 8 * testSlowdown
            $0.limits.resumeGraceSeconds = 1
            $0.limits.maxRoomParticipants = 256
        }
        defer { server.stop() }
        let watcher = try await Peer.connect(server, "watcher")
        try await watcher.join("crowd")
        let alice = try await Peer.connect(server, "alice")
        let bob = try await Peer.connect(server, "bob")
        try await alice.join("busy")
        try await bob.join("busy")
        _ = try await alice.event()  // bob joined

        let ghosts = 200
        var sockets: [RawSocket] = []
        defer { sockets.forEach { $0.close() } }
        for index in 0..<ghosts {
            let socket = try RawSocket(port: server.server.port)
            sockets.append(socket)
            try socket.requestUpgrade(token: server.token("ghost\(index)", grants: Grants(room: "*", roomJoin: true)))
            #expect(try await socket.readHandshakeResponse().hasPrefix("HTTP/1.1 101"))
            try socket.writeTextFrame(#"{"type":"room.join","id":"j","data":{"room":"crowd"}}"#)
        }
        // On a loaded machine the first ghosts may already be found out before the last one
        // joined: those leaves count too.
        var joined = 0
        var left = 0
        var reasons: Set<String> = []
        while joined < ghosts {
            let event = try await watcher.event()
            if event.type == "room.peer_joined" { joined += 1 }
            if event.type == "room.peer_left" {
                left += 1
                reasons.insert(event.data?["reason"]?.stringValue ?? "")
            }
        }
        let lostSoFar = server.server.metrics.counter("switchboard_disconnects_total", ["reason": "lost"])
        #expect(server.server.metrics.gauge("switchboard_connections") + lostSoFar == Double(ghosts + 3))

        // Alice and Bob keep signalling the whole time.
        let load = Task { () -> (relayed: Int, failures: Int) in
            var relayed = 0
            var failures = 0
            let offer: JSONValue = ["type": "offer", "sdp": "v=0"]
            while !Task.isCancelled {
                let sent = try? await alice.client.request(MessageType.signal, encoding: SignalRequest(room: "busy", to: bob.peerID, signal: offer))
                let received = try? await bob.event()
                if sent?.type == MessageType.ok && received?.type == "signal" { relayed += 1 } else { failures += 1 }
            }
            return (relayed, failures)
        }
        let deadline = ContinuousClock.now + .seconds(20) * testSlowdown
        while left < ghosts && ContinuousClock.now < deadline {
            let event = try await watcher.event(timeout: deadline - .now)
            if event.type == "room.peer_left" {
                left += 1
                reasons.insert(event.data?["reason"]?.stringValue ?? "")
            }
        }
        load.cancel()
        let traffic = await load.value
        #expect(left == ghosts, "every vanished peer left the room")
        #expect(reasons == ["disconnected"])
        // A request that waited past its timeout beside the other suites on a loaded machine is
        // a failure here: the signalling must go on, nearly all of it relayed.
        #expect(traffic.failures <= max(2, traffic.relayed / 20), "the signalling went on (\(traffic.relayed) relayed, \(traffic.failures) failed)")
        #expect(traffic.relayed > 0)
        #expect(server.server.metrics.gauge("switchboard_connections") == 3)
        #expect(server.server.metrics.counter("switchboard_disconnects_total", ["reason": "lost"]) == Double(ghosts))
        let room = try await HTTPClient.request("GET", server.baseURL + "/v1/rooms/crowd", headers: [basicAuth(server.app)])
        let body = try JSONDecoder().decode(JSONValue.self, from: Data(room.body))
        guard case .array(let peers)? = body["peers"] else { throw UnexpectedMessage(description: "no peers in \(body)") }
        #expect(peers.map { $0["identity"] } == ["watcher"])
        #expect(try await alice.client.request(MessageType.ping).type == MessageType.ok)
    }

    /// Covers: error:not_in_room
    @Test(arguments: StoreEngine.available)
    func signalsReachOnePeerInTheRoomAndNothingLeavesIt(engine: StoreEngine) async throws {
        let server = try TestServer(engine: engine)
        defer { server.stop() }
        let (alice, bob) = try await Peer.pair(in: "call", on: server)
        let carol = try await Peer.connect(server, "carol")
        try await carol.join("elsewhere")

        let offer: JSONValue = ["type": "offer", "sdp": "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n"]
        let sent = try await alice.client.request(MessageType.signal, encoding: SignalRequest(room: "call", to: bob.peerID, signal: offer))
        #expect(sent.type == MessageType.ok)
        let received = try await bob.event()
        #expect(received.type == "signal")
        #expect(received.data?["from"]?.stringValue == alice.peerID)
        #expect(received.data?["room"] == "call")
        #expect(received.data?["signal"] == offer)

        // To a peer that is not in the room: an error, nothing relayed.
        let outside = try await alice.client.request(MessageType.signal, encoding: SignalRequest(room: "call", to: carol.peerID, signal: offer))
        #expect(outside.error?.code == .notFound)
        // From a peer that is not in the room: an error, nothing relayed.
        let intruder = try await carol.client.request(MessageType.signal, encoding: SignalRequest(room: "call", to: bob.peerID, signal: offer))
        #expect(intruder.error?.code == .notInRoom)
        try await carol.client.expectSilence()
        try await bob.client.expectSilence()
    }

    /// A signal larger than the server's receive buffer (4 KiB: a video call's SDP offer runs to
    /// several) arrives in pieces and is relayed whole, in order with the small ones around it.
    @Test func aSignalLargerThanTheReceiveBufferIsRelayedWhole() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let (alice, bob) = try await Peer.pair(in: "call", on: server)
        let lines = (0..<300).map { "a=candidate:\($0) 1 udp 2122260223 192.0.2.\($0 % 250) \(50_000 + $0) typ host é\u{1F4DE}\r\n" }
        let big: JSONValue = ["type": "offer", "sdp": .string("v=0\r\n" + lines.joined())]
        #expect(JSONText.serialize(big).count > 3 * 4096)
        let signals: [JSONValue] = [["n": 1], big, ["n": 3]]
        for signal in signals {
            let sent = try await alice.client.request(MessageType.signal, encoding: SignalRequest(room: "call", to: bob.peerID, signal: signal))
            #expect(sent.type == MessageType.ok)
        }
        for signal in signals {
            #expect(try await bob.event().data?["signal"] == signal)
        }
    }

    @Test func dataGoesToOnePeerOrToAllOthers() async throws {
        let server = try TestServer { $0.limits.maxDataBytes = 1024 }
        defer { server.stop() }
        let peers = [try await Peer.connect(server, "a"), try await Peer.connect(server, "b"), try await Peer.connect(server, "c")]
        for peer in peers { try await peer.join("chat") }
        _ = try await peers[0].event()
        _ = try await peers[0].event()
        _ = try await peers[1].event()

        let direct = try await peers[0].client.request(MessageType.data, encoding: DataRequest(room: "chat", to: peers[1].peerID, data: ["text": "hi b"]))
        #expect(direct.type == MessageType.ok)
        let toB = try await peers[1].event()
        #expect(toB.type == "room.data")
        #expect(toB.data?["data"] == ["text": "hi b"])
        #expect(toB.data?["from"]?.stringValue == peers[0].peerID)
        try await peers[2].client.expectSilence()

        _ = try await peers[0].client.request(MessageType.data, encoding: DataRequest(room: "chat", data: ["text": "hi all"]))
        #expect(try await peers[1].event().data?["data"] == ["text": "hi all"])
        #expect(try await peers[2].event().data?["data"] == ["text": "hi all"])
        try await peers[0].client.expectSilence()

        let big = try await peers[0].client.request(
            MessageType.data, encoding: DataRequest(room: "chat", data: .string(String(repeating: "x", count: 2000))))
        #expect(big.error?.code == .payloadTooLarge)
    }

    @Test func leavingTellsTheOthersAndEndsRelay() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let (alice, bob) = try await Peer.pair(in: "r", on: server)
        #expect(try await bob.client.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: "r")).type == MessageType.ok)
        let left = try await alice.event()
        #expect(left.type == "room.peer_left")
        #expect(left.data?["peer_id"]?.stringValue == bob.peerID)
        #expect(left.data?["reason"] == "left")
        let late = try await bob.client.request(MessageType.signal, encoding: SignalRequest(room: "r", to: alice.peerID, signal: ["type": "bye"]))
        #expect(late.error?.code == .notInRoom)
        #expect(try await bob.client.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: "r")).error?.code == .notInRoom)
    }

    /// Covers: close:1000
    @Test func aCleanCloseLeavesAtOnce() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let alice = try await Peer.connect(server, "alice")
        try await alice.join("r")
        let bob = try RawSocket(port: server.server.port)
        defer { bob.close() }
        _ = try await bob.openSession(token: server.token("bob", grants: Grants(room: "*", roomJoin: true)))
        try bob.writeTextFrame(#"{"type":"room.join","id":"j","data":{"room":"r"}}"#)
        #expect(try await bob.readJSON()["type"] == "ok")
        _ = try await alice.event()
        _ = bob.send(bob.maskedFrame(opcode: 0x8, [0x03, 0xE8]))
        let (opcode, payload) = try await bob.readFrame(limit: .seconds(5) * testSlowdown)
        #expect(opcode == 0x8 && payload.prefix(2) == [0x03, 0xE8], "the server answers a normal closure with 1000")
        let left = try await alice.event(timeout: .seconds(2) * testSlowdown)
        #expect(left.data?["reason"] == "left")
    }

    @Test func resumeWithinGraceKeepsThePeerAndReplaysMissedEventsInOrder() async throws {
        let server = try TestServer { $0.limits.resumeGraceSeconds = 10 }
        defer { server.stop() }
        let alice = try await Peer.connect(server, "alice")
        let bob = try await Peer.connect(server, "bob")
        try await alice.join("r")
        try await bob.join("r")
        let bobJoined = try await alice.event()
        #expect(bobJoined.seq == 1)

        // Bob's connection drops (not a clean close); his session waits for him.
        bob.client.socket.close(code: 4000, reason: "network lost")
        _ = try await bob.client.closeCode()
        try await within(.seconds(5) * testSlowdown, "the server to see bob's connection go") {
            while server.server.metrics.gauge("switchboard_connections") > 1 { try await Task.sleep(for: .milliseconds(10)) }
        }
        _ = try await alice.client.request(MessageType.data, encoding: DataRequest(room: "r", to: bob.peerID, data: ["n": 1]))
        _ = try await alice.client.request(MessageType.data, encoding: DataRequest(room: "r", to: bob.peerID, data: ["n": 2]))
        let carol = try await Peer.connect(server, "carol")
        try await carol.join("r")
        _ = try await alice.event()  // carol joined
        try await alice.client.expectSilence()  // no peer_left for bob

        let resumed = try await TestClient.connect(
            server.webSocketURL + "?access_token=\(server.token("bob", grants: Grants(room: "*", roomJoin: true)))"
                + "&resume_token=\(bob.resumeToken)&last_seq=0")
        let hello = try await resumed.nextEnvelope()
        #expect(hello.type == MessageType.sessionResumed)
        #expect(hello.data?["peer_id"]?.stringValue == bob.peerID)
        #expect(hello.data?["replay_count"] == 3)
        let replayed = [try await resumed.nextEnvelope(), try await resumed.nextEnvelope(), try await resumed.nextEnvelope()]
        #expect(replayed.map(\.seq) == [1, 2, 3])
        #expect(replayed.map(\.type) == ["room.data", "room.data", "room.peer_joined"])
        #expect(replayed[0].data?["data"] == ["n": 1])
        #expect(replayed[1].data?["data"] == ["n": 2])

        // Still in the room under the same peer id: signals reach the new connection.
        _ = try await alice.client.request(MessageType.signal, encoding: SignalRequest(room: "r", to: bob.peerID, signal: ["type": "bye"]))
        let next = try await resumed.nextEnvelope()
        #expect(next.type == "signal")
        #expect(next.seq == 4)
        let info = try await resumed.request(MessageType.sessionInfo)
        #expect(info.data?["peer_id"]?.stringValue == bob.peerID)
        #expect(info.data?["rooms"] == ["r"])
    }

    @Test func resumeAfterSomeEventsReplaysOnlyTheMissedOnes() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let alice = try await Peer.connect(server, "alice")
        let bob = try await Peer.connect(server, "bob")
        try await alice.join("r")
        try await bob.join("r")
        _ = try await alice.client.request(MessageType.data, encoding: DataRequest(room: "r", to: bob.peerID, data: 1))
        #expect(try await bob.event().seq == 1)
        bob.client.socket.close(code: 4000)
        _ = try await bob.client.closeCode()
        try await within(.seconds(5) * testSlowdown, "the server to see bob's connection go") {
            while server.server.metrics.gauge("switchboard_connections") > 1 { try await Task.sleep(for: .milliseconds(10)) }
        }
        _ = try await alice.client.request(MessageType.data, encoding: DataRequest(room: "r", to: bob.peerID, data: 2))
        let resumed = try await TestClient.connect(
            server.webSocketURL + "?access_token=\(server.token("bob", grants: Grants(room: "*", roomJoin: true)))"
                + "&resume_token=\(bob.resumeToken)&last_seq=1")
        #expect(try await resumed.nextEnvelope().data?["replay_count"] == 1)
        let missed = try await resumed.nextEnvelope()
        #expect(missed.seq == 2)
        #expect(missed.data?["data"] == 2)
    }

    /// Covers: limit:resume_grace_seconds
    @Test func afterTheGracePeriodOthersHearDisconnectedAndResumeFails() async throws {
        let server = try TestServer { $0.limits.resumeGraceSeconds = 1 }
        defer { server.stop() }
        let (alice, bob) = try await Peer.pair(in: "r", on: server)
        bob.client.socket.close(code: 4000)
        let started = ContinuousClock.now
        let left = try await alice.event(timeout: .seconds(5))
        #expect(left.type == "room.peer_left")
        #expect(left.data?["reason"] == "disconnected")
        #expect(ContinuousClock.now - started >= .milliseconds(800))

        let late = try await TestClient.connect(
            server.webSocketURL + "?access_token=\(server.token("bob", grants: Grants(room: "*", roomJoin: true)))"
                + "&resume_token=\(bob.resumeToken)&last_seq=0")
        let welcome = try await late.nextEnvelope()
        #expect(welcome.type == MessageType.sessionWelcome)
        #expect(welcome.data?["resume_failed"] == true)
        #expect(welcome.data?["peer_id"]?.stringValue != bob.peerID)
    }

    @Test func resumeTokenOfSomeoneElseIsNotHonoured() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let bob = try await Peer.connect(server, "bob")
        bob.client.socket.close(code: 4000)
        _ = try await bob.client.closeCode()
        let mallory = try await TestClient.connect(
            server.webSocketURL + "?access_token=\(server.token("mallory"))&resume_token=\(bob.resumeToken)&last_seq=0")
        let welcome = try await mallory.nextEnvelope()
        #expect(welcome.type == MessageType.sessionWelcome)
        #expect(welcome.data?["peer_id"]?.stringValue != bob.peerID)
    }

    @Test(arguments: StoreEngine.available)
    func anAdminClosesARoomAndItsPeersHear(engine: StoreEngine) async throws {
        let server = try TestServer(engine: engine)
        defer { server.stop() }
        let (alice, bob) = try await Peer.pair(in: "doomed", on: server)

        // A user token without the admin grant may not.
        let denied = try await HTTPClient.request(
            "DELETE", server.baseURL + "/v1/rooms/doomed", headers: [("Authorization", "Bearer " + server.token("alice"))])
        #expect(denied.status == 403)

        let listed = try await HTTPClient.request("GET", server.baseURL + "/v1/rooms", headers: [basicAuth(server.app)])
        #expect(listed.status == 200)
        #expect(listed.text.contains("\"doomed\""))

        let deleted = try await HTTPClient.request("DELETE", server.baseURL + "/v1/rooms/doomed", headers: [basicAuth(server.app)])
        #expect(deleted.status == 204)
        for peer in [alice, bob] {
            let closed = try await peer.event()
            #expect(closed.type == "room.closed")
            #expect(closed.data?["reason"] == "deleted")
        }
        let gone = try await HTTPClient.request("GET", server.baseURL + "/v1/rooms/doomed", headers: [basicAuth(server.app)])
        #expect(gone.status == 404)
        let info = try await alice.client.request(MessageType.sessionInfo)
        #expect(info.data?["rooms"] == .array([]))
    }

    @Test(arguments: StoreEngine.available)
    func serverDataAndKickFromTheRESTAPI(engine: StoreEngine) async throws {
        let server = try TestServer(engine: engine)
        defer { server.stop() }
        let (alice, bob) = try await Peer.pair(in: "r", on: server)

        let admin = ("Authorization", "Bearer " + server.token("ops", grants: Grants(admin: true)))
        let sent = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/rooms/r/data", headers: [admin], body: Array(#"{"data":{"notice":"recording"}}"#.utf8))
        #expect(sent.status == 204)
        for peer in [alice, bob] {
            let event = try await peer.event()
            #expect(event.type == "room.data")
            #expect(event.data?["from"] == .null)
            #expect(event.data?["data"] == ["notice": "recording"])
        }

        let kicked = try await HTTPClient.request("DELETE", server.baseURL + "/v1/rooms/r/peers/\(bob.peerID)", headers: [admin])
        #expect(kicked.status == 204)
        let closed = try await bob.event()
        #expect(closed.type == "room.closed")
        #expect(closed.data?["reason"] == "kicked")
        let left = try await alice.event()
        #expect(left.data?["reason"] == "kicked")
    }

    /// Covers: limit:empty_room_timeout_seconds
    @Test(arguments: StoreEngine.available)
    func roomsCreatedByRESTHaveUniqueNamesAndCloseWhenEmpty(engine: StoreEngine) async throws {
        let server = try TestServer(engine: engine) { $0.limits.emptyRoomTimeoutSeconds = 1 }
        defer { server.stop() }
        var names: Set<String> = []
        for _ in 0..<5 {
            let created = try await HTTPClient.request("POST", server.baseURL + "/v1/rooms", headers: [basicAuth(server.app)], body: [])
            #expect(created.status == 201)
            let room = try JSONDecoder().decode(RoomInfo.self, from: Data(created.body))
            #expect(room.maxParticipants == 8)
            names.insert(room.name)
        }
        #expect(names.count == 5)

        // A user token with a prefix grant gets a name under its prefix.
        let user = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/rooms",
            headers: [("Authorization", "Bearer " + server.token("u", grants: Grants(room: "team-*", roomJoin: true)))],
            body: Array(#"{"max_participants":4}"#.utf8))
        #expect(user.status == 201)
        let userRoom = try JSONDecoder().decode(RoomInfo.self, from: Data(user.body))
        #expect(userRoom.name.hasPrefix("team-"))
        #expect(userRoom.maxParticipants == 4)
        let exact = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/rooms",
            headers: [("Authorization", "Bearer " + server.token("u", grants: Grants(room: "one", roomJoin: true)))], body: [])
        #expect(exact.status == 403)

        // A joined-then-left room closes after the timeout too.
        let alice = try await Peer.connect(server, "alice")
        try await alice.join(userRoom.name)
        // A probe room made now with the same timeout: once it is gone, the timeout has passed.
        let probe = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/rooms", headers: [basicAuth(server.app)], body: Array(#"{"empty_timeout_seconds":1}"#.utf8))
        let probeName = try #require(try JSONDecoder().decode(JSONValue.self, from: Data(probe.body))["name"]?.stringValue)
        try await within(.seconds(10), "the probe room to close") {
            while try await HTTPClient.request("GET", server.baseURL + "/v1/rooms/\(probeName)", headers: [basicAuth(server.app)]).status != 404 {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let stillThere = try await HTTPClient.request("GET", server.baseURL + "/v1/rooms/\(userRoom.name)", headers: [basicAuth(server.app)])
        #expect(stillThere.status == 200, "a room with a peer in it stays")
        _ = try await alice.client.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: userRoom.name))
        let created = names
        try await within(.seconds(5), "the empty room to close") {
            while true {
                let listed = try await HTTPClient.request("GET", server.baseURL + "/v1/rooms", headers: [basicAuth(server.app)])
                if !listed.text.contains(userRoom.name) && !created.contains(where: { listed.text.contains($0) }) { return }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    @Test func turnCredentialsFollowCoturnsRESTScheme() async throws {
        let server = try TestServer {
            $0.turnURLs = ["turn:127.0.0.1:3478?transport=udp"]
            $0.stunURLs = ["stun:127.0.0.1:3478"]
            $0.turnSecret = "coturn-shared-secret"
            $0.turnTTLSeconds = 600
        }
        defer { server.stop() }
        let before = Int64(Date().timeIntervalSince1970)
        let response = try await HTTPClient.request(
            "GET", server.baseURL + "/v1/turn", headers: [("Authorization", "Bearer " + server.token("alice"))])
        let after = Int64(Date().timeIntervalSince1970)
        #expect(response.status == 200)
        let credentials = try JSONDecoder().decode(TurnCredentials.self, from: Data(response.body))
        #expect(credentials.ttl == 600)
        let turn = try #require(credentials.iceServers.first { $0.username != nil })
        let username = try #require(turn.username)
        #expect(username == "\(credentials.expiresAt):alice")
        let expected = Data(Crypto.hmac(.sha1, key: Array("coturn-shared-secret".utf8), message: Array(username.utf8))).base64EncodedString()
        #expect(turn.credential == expected)
        #expect((before + 600)...(after + 600) ~= credentials.expiresAt, "expires ttl seconds after the request")
        #expect(!response.text.contains("coturn-shared-secret"))
        let anonymous = try await HTTPClient.request("GET", server.baseURL + "/v1/turn")
        #expect(anonymous.status == 401)
    }

    /// Covers: limit:messages_per_second, limit:message_burst, error:rate_limited
    @Test func messagesOverTheRateGetRateLimited() async throws {
        let server = try TestServer {
            $0.limits.messagesPerSecond = 5
            $0.limits.messageBurst = 5
        }
        defer { server.stop() }
        let alice = try await Peer.connect(server, "alice")
        for index in 0..<20 { alice.client.sendRaw(#"{"type":"ping","id":\#(index)}"#) }
        var codes: [String] = []
        for _ in 0..<20 { codes.append(try await alice.client.nextEnvelope().error?.code.rawValue ?? "ok") }
        #expect(codes.prefix(5).allSatisfy { $0 == "ok" }, "the burst passes whole: \(codes)")
        #expect(codes.filter { $0 == "rate_limited" }.count >= 10)
    }
}
