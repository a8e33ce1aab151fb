import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import Testing

/// A call's room (`call-<id>`) belongs to the call: only the caller's calling device and each
/// answering callee's device are admitted, whatever a token's room grant says, and the room
/// closes when the call ends.
@Suite(.timeLimit(.minutes(3))) struct CallRoomTests {
    /// Every kind of grant a stranger might hold, `--dev-tokens`' own among them.
    static let strangerGrants: [(String, Grants)] = [
        ("every room", Grants(room: "*", roomJoin: true)),
        ("every room and calls (a development token)", Grants(room: "*", roomJoin: true, call: true)),
        ("the call- prefix", Grants(room: "call-*", roomJoin: true, call: true)),
        ("admin", Grants(admin: true)),
        ("admin and every room", Grants(room: "*", roomJoin: true, call: true, admin: true)),
    ]

    /// A connection of `identity` as `device`, with `grants`.
    static func connect(_ server: TestServer, _ identity: String, device: String, grants: Grants = Grants(call: true)) async throws -> Peer {
        let url = server.webSocketURL + "?access_token=" + server.token(identity, grants: grants) + "&device_id=" + device
        let client = try await TestClient.connect(url)
        let welcome = try await client.nextEnvelope()
        return Peer(
            client: client, peerID: try #require(welcome.data?["peer_id"]?.stringValue),
            resumeToken: try #require(welcome.data?["resume_token"]?.stringValue))
    }

    static func rest(_ server: TestServer, _ method: String, _ path: String, _ credentials: (String, String), body: String? = nil) async throws -> HTTPClientResponse {
        try await HTTPClient.request(method, server.baseURL + path, headers: [credentials], body: body.map { Array($0.utf8) })
    }

    /// Reads `peer`'s messages until `barrier` (a `room.data` carrying it) arrives and returns
    /// what came before it.
    static func messages(_ peer: Peer, until barrier: String) async throws -> [Envelope] {
        var before: [Envelope] = []
        while true {
            let envelope = try await peer.client.nextEnvelope()
            if envelope.type == "room.data", envelope.data?["data"]?["barrier"] == .string(barrier) { return before }
            before.append(envelope)
        }
    }

    @Test func aCallsRoomAdmitsOnlyTheCallingAndTheAnsweringDeviceWhateverTheGrants() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let alice = try await Self.connect(server, "alice", device: "a-phone")
        let aliceTablet = try await Self.connect(server, "alice", device: "a-tablet")
        let bobPhone = try await Self.connect(server, "bob", device: "b-phone")
        let bobTablet = try await Self.connect(server, "bob", device: "b-tablet")

        let created = try await alice.client.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        let callID = try #require(created.data?["call_id"]?.stringValue)
        let room = try #require(created.data?["media"]?["room"]?.stringValue)
        #expect(room == "call-" + callID)

        // While it rings: the caller's calling device may wait in the room; nobody else.
        #expect(try await alice.join(room).type == MessageType.ok)
        #expect(try await aliceTablet.join(room).error?.code == .forbidden, "the caller's other device")
        #expect(try await bobPhone.join(room).error?.code == .forbidden, "a callee who has not answered")

        let answered = try await bobPhone.client.request(MessageType.callAnswer, encoding: CallActionRequest(callID: callID))
        #expect(answered.type == MessageType.ok)
        #expect(try await bobPhone.join(room).type == MessageType.ok)
        #expect(try await bobTablet.join(room).error?.code == .forbidden, "the callee's other device: the call is on the phone")

        // Strangers with every kind of grant: no join, no signal, no data, no metadata.
        var strangers: [Peer] = []
        for (index, (what, grants)) in Self.strangerGrants.enumerated() {
            let mallory = try await Self.connect(server, "mallory", device: "m-\(index)", grants: grants)
            strangers.append(mallory)
            #expect(try await mallory.join(room).error?.code == .forbidden, "join with \(what)")
            #expect(try await mallory.join(room.uppercased()).error?.code == .forbidden, "the reserved prefix in any case, with \(what)")
            let signal = try await mallory.client.request(
                MessageType.signal, encoding: SignalRequest(room: room, to: alice.peerID, signal: ["type": "offer", "sdp": "v=0"]))
            #expect(signal.error?.code == .notInRoom, "signal with \(what)")
            let data = try await mallory.client.request(MessageType.data, encoding: DataRequest(room: room, data: ["text": "hi"]))
            #expect(data.error?.code == .notInRoom, "data with \(what)")
            let direct = try await mallory.client.request(MessageType.data, encoding: DataRequest(room: room, to: bobPhone.peerID, data: ["text": "hi"]))
            #expect(direct.error?.code == .notInRoom, "data to one peer with \(what)")
            let metadata = try await mallory.client.request(MessageType.roomSetMetadata, encoding: RoomMetadataRequest(room: room, metadata: ["x": 1]))
            #expect(metadata.error?.code == .forbidden, "metadata with \(what)")
            // Over REST, with the same token: no read, no data, no kick, no close, not even listed.
            let bearer = ("Authorization", "Bearer " + server.token("mallory", grants: grants))
            #expect(try await Self.rest(server, "GET", "/v1/rooms/\(room)", bearer).status == 403, "REST read with \(what)")
            #expect(try await Self.rest(server, "POST", "/v1/rooms/\(room)/data", bearer, body: #"{"data":{"x":1}}"#).status == 403, "REST data with \(what)")
            #expect(try await Self.rest(server, "DELETE", "/v1/rooms/\(room)/peers/\(bobPhone.peerID)", bearer).status == 403, "REST kick with \(what)")
            #expect(try await Self.rest(server, "DELETE", "/v1/rooms/\(room)", bearer).status == 403, "REST close with \(what)")
            let listed = try await Self.rest(server, "GET", "/v1/rooms", bearer)
            #expect(!listed.text.contains(room), "listed to a token with \(what)")
        }

        // Nothing reached the participants: each hears only the other (and call events) before a barrier.
        #expect(try await bobPhone.client.request(MessageType.data, encoding: DataRequest(room: room, to: alice.peerID, data: ["barrier": "1"])).type == MessageType.ok)
        #expect(try await alice.client.request(MessageType.data, encoding: DataRequest(room: room, to: bobPhone.peerID, data: ["barrier": "2"])).type == MessageType.ok)
        let strangerIDs = Set(strangers.map(\.peerID))
        for (peer, barrier) in [(alice, "1"), (bobPhone, "2")] {
            for envelope in try await Self.messages(peer, until: barrier) {
                #expect(envelope.type != "signal" && envelope.type != "room.data", "nothing relayed: \(envelope)")
                let from = envelope.data?["from"]?.stringValue ?? envelope.data?["peer"]?["peer_id"]?.stringValue
                #expect(from.map { !strangerIDs.contains($0) } ?? true, "nothing from a stranger: \(envelope)")
            }
        }

        // The app's own credentials may inspect the room and send to it, not close it or kick.
        let app = basicAuth(server.app)
        let inspected = try await Self.rest(server, "GET", "/v1/rooms/\(room)", app)
        #expect(inspected.status == 200)
        #expect(inspected.text.contains(alice.peerID) && inspected.text.contains(bobPhone.peerID))
        #expect(try await Self.rest(server, "GET", "/v1/rooms", app).text.contains(room))
        #expect(try await Self.rest(server, "DELETE", "/v1/rooms/\(room)", app).status == 409)
        #expect(try await Self.rest(server, "DELETE", "/v1/rooms/\(room)/peers/\(bobPhone.peerID)", app).status == 409)

        // The call ends: its room closes for both, and nobody can join it again.
        #expect(try await alice.client.request(MessageType.callEnd, encoding: CallActionRequest(callID: callID)).type == MessageType.ok)
        for peer in [alice, bobPhone] {
            let closed = try await event(peer.client, "room.closed")
            #expect(closed.data?["room"] == .string(room))
            #expect(closed.data?["reason"] == "call_ended")
        }
        #expect(try await alice.join(room).error?.code == .forbidden, "the caller, after the end")
        #expect(try await bobPhone.join(room).error?.code == .forbidden, "the answering device, after the end")
        #expect(try await strangers[0].join(room).error?.code == .forbidden, "a stranger, after the end")
        #expect(try await Self.rest(server, "GET", "/v1/rooms/\(room)", app).status == 404)
        let info = try await alice.client.request(MessageType.sessionInfo)
        #expect(info.data?["rooms"] == .array([]), "no session stays in a closed call room")
    }

    @Test func theCallPrefixIsNeverAnOrdinaryRoomAndACallCannotNameItsRoom() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let mallory = try await Self.connect(server, "mallory", device: "m", grants: Grants(room: "*", roomJoin: true, call: true, admin: true))
        for name in ["call-lobby", "call-00000000-0000-0000-0000-000000000000", "Call-x", "CALL-"] {
            #expect(try await mallory.join(name).error?.code == .forbidden, "\(name)")
        }
        #expect(try await Self.rest(server, "POST", "/v1/rooms", basicAuth(server.app), body: #"{"prefix":"call-"}"#).status == 400)
        let prefixed = ("Authorization", "Bearer " + server.token("mallory", grants: Grants(room: "call-*", roomJoin: true)))
        #expect(try await Self.rest(server, "POST", "/v1/rooms", prefixed).status == 400, "a room grant under call- creates nothing")

        // A call whose media names a room would open that room to its callees.
        _ = try await Self.connect(server, "bob", device: "b")
        let named = try await mallory.client.request(
            MessageType.callCreate, data: ["callees": ["bob"], "media": ["type": "room", "room": "board-meeting"]])
        #expect(named.error?.code == .badRequest)
        let unnamed = try await mallory.client.request(MessageType.callCreate, data: ["callees": ["bob"], "media": ["type": "room"]])
        #expect(unnamed.data?["media"]?["room"]?.stringValue?.hasPrefix("call-") == true)
    }

    @Test func aSidePlacedOrAnsweredOverRESTWithoutADeviceGoesToTheFirstDeviceThatJoins() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let bobPhone = try await Self.connect(server, "bob", device: "b-phone")
        let bobTablet = try await Self.connect(server, "bob", device: "b-tablet")
        let aliceBearer = ("Authorization", "Bearer " + server.token("alice"))
        let created = try await Self.rest(server, "POST", "/v1/calls", aliceBearer, body: #"{"callees":["bob"]}"#)
        #expect(created.status == 201)
        let call = try JSONDecoder().decode(JSONValue.self, from: Data(created.body))
        let callID = try #require(call["call_id"]?.stringValue)
        let room = "call-" + callID
        let bobBearer = ("Authorization", "Bearer " + server.token("bob"))
        #expect(try await Self.rest(server, "POST", "/v1/calls/\(callID)/answer", bobBearer).status == 200)

        let aliceLaptop = try await Self.connect(server, "alice", device: "a-laptop")
        let alicePhone = try await Self.connect(server, "alice", device: "a-phone")
        #expect(try await aliceLaptop.join(room).type == MessageType.ok, "the caller's first device takes the call")
        #expect(try await alicePhone.join(room).error?.code == .forbidden)
        #expect(try await bobTablet.join(room).type == MessageType.ok, "the callee's first device takes the call")
        #expect(try await bobPhone.join(room).error?.code == .forbidden)
    }

    @Test func aGroupCallsRoomHoldsEveryParticipantWhateverTheDefaultRoomLimit() async throws {
        let server = try TestServer { $0.limits.maxRoomParticipants = 2 }
        defer { server.stop() }
        let alice = try await Self.connect(server, "alice", device: "a")
        let callees = ["bob", "carol", "dave"]
        var peers: [Peer] = []
        for callee in callees { peers.append(try await Self.connect(server, callee, device: callee + "-phone")) }
        let created = try await alice.client.request(MessageType.callCreate, encoding: CallCreateRequest(callees: callees))
        let callID = try #require(created.data?["call_id"]?.stringValue)
        #expect(try await alice.join("call-" + callID).type == MessageType.ok)
        for peer in peers {
            #expect(try await peer.client.request(MessageType.callAnswer, encoding: CallActionRequest(callID: callID)).type == MessageType.ok)
            #expect(try await peer.join("call-" + callID).type == MessageType.ok)
        }
    }

    /// A call whose media is an outside service's: the descriptor reaches the callee as sent
    /// (over the connection and in the call's state), no room is made for it, and the call runs
    /// as any other. A descriptor over `max_data_bytes` is refused.
    @Test func aCallWithExternalMediaCarriesItsDescriptorAndHasNoRoom() async throws {
        let server = try TestServer { $0.limits.maxDataBytes = 256 }
        defer { server.stop() }
        let alice = try await Self.connect(server, "alice", device: "a")
        let bob = try await Self.connect(server, "bob", device: "b")
        let descriptor: JSONValue = ["vendor": "sfu.example.com", "session": "s-42", "token": "opaque"]
        let created = try await alice.client.request(
            MessageType.callCreate, id: "c", encoding: CallCreateRequest(callees: ["bob"], media: .external(descriptor)))
        let callID = try #require(created.data?["call_id"]?.stringValue, "\(created)")
        #expect(created.data?["media"] == ["type": "external", "descriptor": descriptor], "\(created)")
        let incoming = try await event(bob.client, "call.incoming")
        #expect(incoming.data?["media"] == ["type": "external", "descriptor": descriptor])
        #expect(try await bob.client.request(MessageType.callAnswer, id: "a", encoding: CallActionRequest(callID: callID)).type == MessageType.ok)
        _ = try await event(alice.client, "call.accepted")
        // No room: the call's name is not a room anyone may join, participants included.
        #expect(try await alice.join("call-\(callID)").error?.code == .forbidden)
        let rooms = try await Self.rest(server, "GET", "/v1/rooms", basicAuth(server.app))
        #expect(!rooms.text.contains(callID), "\(rooms.text)")
        #expect(try await alice.client.request(MessageType.callEnd, id: "e", encoding: CallActionRequest(callID: callID)).type == MessageType.ok)

        let big: JSONValue = ["vendor": .string(String(repeating: "v", count: 300))]
        let refused = try await alice.client.request(MessageType.callCreate, id: "big", encoding: CallCreateRequest(callees: ["bob"], media: .external(big)))
        #expect(refused.error?.code == .payloadTooLarge, "\(refused)")
    }

    static func entries(_ page: JSONValue) -> [JSONValue] {
        if case .array(let items)? = page["calls"] { return items }
        return []
    }

    @Test func historyShowsLiveCallsWithTheirStateAndPagesStrictly() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let alice = try await Self.connect(server, "alice", device: "a")
        let bob = try await Self.connect(server, "bob", device: "b")
        let aliceBearer = ("Authorization", "Bearer " + server.token("alice"))
        @Sendable func history(_ query: String = "") async throws -> JSONValue {
            let response = try await Self.rest(server, "GET", "/v1/calls" + query, aliceBearer)
            #expect(response.status == 200, "\(response.text)")
            return try JSONDecoder().decode(JSONValue.self, from: Data(response.body))
        }

        // An ended call first, then a live one.
        let first = try await alice.client.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        let firstID = try #require(first.data?["call_id"]?.stringValue)
        #expect(try await alice.client.request(MessageType.callCancel, encoding: CallActionRequest(callID: firstID)).type == MessageType.ok)
        server.server.store.flush()
        try await Task.sleep(for: .milliseconds(5))  // a later created_at (milliseconds)
        let second = try await alice.client.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        let secondID = try #require(second.data?["call_id"]?.stringValue)

        let ringing = try await history()
        guard case .array(let entries)? = ringing["calls"] else { throw UnexpectedMessage(description: "\(ringing)") }
        #expect(entries.count == 2)
        #expect(entries.first?["call_id"] == .string(secondID))
        #expect(entries.first?["state"] == "ringing")
        #expect(entries.first?["outcome"] == .null)
        #expect(entries.first?["peers"] == ["bob"])
        #expect(entries.last?["call_id"] == .string(firstID))
        #expect(entries.last?["state"] == "ended")
        #expect(entries.last?["outcome"] == "cancelled")

        #expect(try await bob.client.request(MessageType.callAnswer, encoding: CallActionRequest(callID: secondID)).type == MessageType.ok)
        #expect(Self.entries(try await history()).first?["state"] == "accepted")

        // Paging: one at a time, the live call first, then the ended one, then nothing.
        let page1 = try await history("?limit=1")
        #expect(Self.entries(page1).map { $0["call_id"] } == [.string(secondID)])
        let cursor = try #require(page1["next_before"]?.intValue)
        let page2 = try await history("?limit=1&before=\(cursor)")
        #expect(Self.entries(page2).map { $0["call_id"] } == [.string(firstID)])
        let page3 = try await history("?limit=1&before=\(try #require(page2["next_before"]?.intValue))")
        #expect(page3["calls"] == .array([]))
        #expect(page3["next_before"] == nil)

        for bad in ["?limit=0", "?limit=201", "?limit=ten", "?before=yesterday"] {
            #expect(try await Self.rest(server, "GET", "/v1/calls" + bad, aliceBearer).status == 400, "\(bad)")
        }
    }
}
