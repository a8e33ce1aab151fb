import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// What the docs promise and no test held the code to (an audit of the suite found each):
/// without these, dropping any of them would leave `make test` green.
@Suite(.timeLimit(.minutes(3))) struct DocumentedBehaviourTests {
    func bearer(_ token: String) -> (String, String) { ("Authorization", "Bearer " + token) }

    /// `POST /v1/dev/tokens` exists only with `--dev-tokens` (protocol.md): without the gate
    /// any server would mint every-grant tokens for anyone.
    @Test func developmentTokensAreIssuedOnlyWithDevTokens() async throws {
        let body = Array(#"{"identity":"alice","name":"Alice"}"#.utf8)
        let plain = try TestServer()
        defer { plain.stop() }
        let refused = try await HTTPClient.request("POST", plain.baseURL + "/v1/dev/tokens", body: body)
        #expect(refused.status == 404, "\(refused.text)")
        let development = try TestServer { $0.devTokens = true }
        defer { development.stop() }
        let issued = try await HTTPClient.request("POST", development.baseURL + "/v1/dev/tokens", body: body)
        #expect(issued.status == 201, "\(issued.text)")
    }

    /// A binary frame is not part of the protocol: `bad_request`, and the connection stays.
    @Test func aBinaryFrameIsAnsweredBadRequest() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token())
        _ = try await client.nextEnvelope()
        client.socket.send(OutboundFrame(Array(#"{"type":"ping","id":1}"#.utf8), binary: true))
        let reply = try await client.nextEnvelope()
        #expect(reply.error?.code == .badRequest)
        #expect(try await client.request(MessageType.ping).type == MessageType.ok)
    }

    /// A resume with a token of another identity is not honoured: a fresh session for the
    /// token's own user, never the other's.
    @Test func aResumeWithAnotherUsersTokenGetsAFreshSession() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let bob = try await Peer.connect(server, "bob")
        bob.client.socket.close(code: 4000)
        _ = try await bob.client.closeCode()
        let mallory = try RawSocket(port: server.server.port)
        defer { mallory.close() }
        let hello = try await mallory.openSession(
            token: server.token("mallory", grants: Grants(room: "*", roomJoin: true)), query: "&resume_token=\(bob.resumeToken)&last_seq=0")
        #expect(hello["type"] == "session.welcome")
        #expect(hello["data"]?["resume_failed"] == true)
        #expect(hello["data"]?["identity"] == "mallory")
        #expect(hello["data"]?["peer_id"]?.stringValue != bob.peerID)
    }

    /// A REST refusal names the field at fault, fractions in integer fields included (Foundation
    /// used to report those with no field).
    @Test func aRESTRefusalNamesTheFieldAtFault() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let call = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(server.token())], body: Array(#"{"callees":["bob"],"ring_timeout_seconds":30.5}"#.utf8))
        #expect(call.status == 400 && call.text.contains("ring_timeout_seconds"), "\(call.text)")
        let token = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/tokens", headers: [basicAuth(server.app)], body: Array(#"{"identity":"a","ttl":1.5}"#.utf8))
        #expect(token.status == 400 && token.text.contains("'ttl'"), "\(token.text)")
    }
}

/// The documented behaviour of calls and pushes, with the APNs sandbox behind the server.
@Suite(.timeLimit(.minutes(3))) struct DocumentedCallBehaviourTests {
    /// The VoIP push carries `apns-expiration` = the ring's end and no collapse id; the
    /// missed-call alert carries the call's id as `apns-collapse-id` (calls.md, push.md).
    @Test func pushesCarryTheirExpirationAndCollapseIDOnTheWire() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 11)
        let alice = try await fixture.connect("alice", device: "a-web")
        let callID = try await fixture.call(alice, to: ["bob"], timeout: 30)
        try await fixture.waitForPushes(1, type: "voip", callID: callID)
        let voip = try #require(fixture.pushes(type: "voip", callID: callID).first)
        let ringExpires = try #require(voip.payload?["ring_expires_at"]?.intValue)
        #expect(voip.expiration == ringExpires / 1000)
        #expect(voip.collapseID == nil)
        #expect(try await fixture.act(alice, MessageType.callCancel, callID).type == MessageType.ok)
        try await within(.seconds(5), "the missed-call alert") {
            while fixture.sandbox.records.first(where: { $0.pushType == "alert" && $0.collapseID == callID }) == nil {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Large metadata never makes the VoIP payload pass APNs' 5,120 bytes: it is left out,
    /// and the push still rings.
    @Test func theVoIPPayloadStaysUnderApplesLimitWithLargeMetadata() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 12)
        let alice = try await fixture.connect("alice", device: "a-web")
        let metadata: JSONValue = ["notes": .string(String(repeating: "m", count: 12_000))]
        let reply = try await alice.request(
            MessageType.callCreate, id: "big", encoding: CallCreateRequest(callees: ["bob"], metadata: metadata))
        let callID = try #require(reply.data?["call_id"]?.stringValue)
        try await fixture.waitForPushes(1, type: "voip", callID: callID)
        let voip = try #require(fixture.pushes(type: "voip", callID: callID).first)
        #expect(voip.payloadBytes.count <= 5_120)
        #expect(voip.payload?["metadata"] == nil)
        #expect(voip.payload?["UUID"]?.stringValue == callID.uppercased())
    }

    /// A re-registered device with a rotated VoIP token is rung on the new token only.
    @Test func aRotatedDeviceTokenReplacesTheOldOne() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let old = try await fixture.registerPhone("bob", device: "b-phone", seed: 21)
        let new = try await fixture.registerPhone("bob", device: "b-phone", seed: 22)
        let devices = try await fixture.get("/v1/devices", as: "bob")
        guard case .array(let list)? = devices["devices"] else { throw Timeout(what: "bob's devices") }
        #expect(list.count == 1)
        #expect(list.first?["voip_token"]?.stringValue == String(new.voip.prefix(8)) + "…")
        let alice = try await fixture.connect("alice", device: "a-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        try await fixture.waitForPushes(1, type: "voip", callID: callID)
        #expect(fixture.pushes(type: "voip", callID: callID).map(\.token) == [new.voip])
        #expect(fixture.pushes(type: "voip", token: old.voip).isEmpty)
    }

    /// The `Idempotency-Key` header makes a retried `POST /v1/calls` return the same call.
    @Test func theIdempotencyKeyHeaderMakesOneCall() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        func create() async throws -> String? {
            let response = try await HTTPClient.request(
                "POST", fixture.server.baseURL + "/v1/calls",
                headers: [("Authorization", "Bearer " + fixture.token("alice")), ("Idempotency-Key", "tap-7")],
                body: Array(#"{"callees":["bob"]}"#.utf8))
            return try JSONDecoder().decode(JSONValue.self, from: Data(response.body))["call_id"]?.stringValue
        }
        let first = try #require(try await create())
        #expect(try await create() == first)
    }

    /// A group call ended while a callee still rings: that callee hears `call.missed` with
    /// reason `ended`; a call nobody can be reached for ends `failed` / `unreachable`.
    @Test func missedBecauseEndedAndFailedBecauseUnreachable() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let alice = try await fixture.connect("alice", device: "a-web")
        let bob = try await fixture.connect("bob", device: "b-web")
        let carol = try await fixture.connect("carol", device: "c-web")
        let callID = try await fixture.call(alice, to: ["bob", "carol"])
        _ = try await event(bob, "call.incoming")
        _ = try await event(carol, "call.incoming")
        #expect(try await fixture.act(bob, MessageType.callAnswer, callID).type == MessageType.ok)
        #expect(try await fixture.act(alice, MessageType.callEnd, callID).type == MessageType.ok)
        let missed = try await event(carol, "call.missed")
        #expect(missed.data?["reason"] == "ended")

        let nobody = try await fixture.call(alice, to: ["nobody-at-all"])
        let ended = try await within(.seconds(5), "the unreachable call's record") { () -> JSONValue in
            while true {
                let call = try await fixture.get("/v1/calls/\(nobody)", as: "alice")
                if call["state"] == "ended" { return call }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(ended["outcome"] == "failed")
        #expect(ended["end_reason"] == "unreachable")
    }

    /// Each call's setup is measured: `switchboard_call_setup_seconds` counts it.
    @Test func theCallSetupTimeIsMeasured() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 31)
        let alice = try await fixture.connect("alice", device: "a-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        try await fixture.waitForPushes(1, type: "voip", callID: callID)
        try await within(.seconds(5), "the setup to be counted") {
            while true {
                let page = try await HTTPClient.request("GET", fixture.server.baseURL + "/metrics").text
                if page.contains("switchboard_call_setup_seconds_count 1") { return }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }
}
