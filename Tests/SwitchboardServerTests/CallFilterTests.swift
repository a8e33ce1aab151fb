import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// A phone that does not show a call (Do Not Disturb, Focus, block list), or one APNs will not
/// reach, is out of the ringing: once every device the call went to is out, the caller hears
/// `call.unavailable` at once instead of 45 s of ringback. Hold is told to the other side.
@Suite(.timeLimit(.minutes(3))) struct CallFilterTests {
    @Test func aFilteredCallOnTheOnlyPhoneMakesTheCallerHearUnavailableAtOnce() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 11)
        let alice = try await fixture.connect("alice", device: "a-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        try await fixture.waitForPushes(1, type: "voip", callID: callID)

        // Woken by the push, the phone's CallKit report fails with Do Not Disturb: it says so.
        let phone = try await fixture.connect("bob", device: "b-phone")
        let filtered = try await phone.request(
            MessageType.callDecline, id: "f", encoding: CallActionRequest(callID: callID, reason: "filtered", filter: .doNotDisturb))
        #expect(filtered.type == MessageType.ok, "\(String(describing: filtered.error))")
        #expect(try await event(alice, "call.unavailable").data?["callee"] == "bob")
        let ended = try await event(alice, "call.ended")
        #expect(ended.data?["outcome"] == "missed")
        #expect(ended.data?["reason"] == "unavailable")

        fixture.server.server.store.flush()
        let history = try await fixture.get("/v1/calls", as: "alice")
        guard case .array(let calls)? = history["calls"] else { throw Timeout(what: "alice's history") }
        #expect(calls.first?["outcome"] == "no_answer")
        #expect(calls.first?["end_reason"] == "unavailable")
        let trace = try await fixture.get("/v1/calls/\(callID)/trace", as: "alice")
        guard case .array(let entries)? = trace["trace"] else { throw Timeout(what: "the trace") }
        #expect(entries.contains { $0["event"] == "filtered" && $0["device"] == "b-phone" && $0["filter"] == nil }, "\(entries)")
        let bobs = try await fixture.get("/v1/calls/\(callID)/trace", as: "bob")
        guard case .array(let bobsEntries)? = bobs["trace"] else { throw Timeout(what: "bob's trace") }
        #expect(bobsEntries.contains { $0["event"] == "filtered" && $0["filter"] == "do_not_disturb" }, "bob reads why: \(bobsEntries)")
        #expect(!entries.contains { $0["event"] == "declined" }, "a filtered call is not a decline")
        #expect(!entries.contains { $0["channel"] == "alert_push" }, "no missed-call alert for a call the phone filtered (pushes are traced as they go)")
    }

    @Test func aFilteredPhoneLeavesTheCallRingingOnTheUsersOtherDevices() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 12)
        let alice = try await fixture.connect("alice", device: "a-web")
        let web = try await fixture.connect("bob", device: "b-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        _ = try await event(web, "call.incoming")
        let phone = try await fixture.connect("bob", device: "b-phone")
        _ = try await event(phone, "call.incoming")
        #expect(try await phone.request(
            MessageType.callDecline, id: "f", encoding: CallActionRequest(callID: callID, reason: "filtered", filter: .blockList)).type == MessageType.ok)
        // The browser still rings and can answer.
        let answered = try await fixture.act(web, MessageType.callAnswer, callID)
        #expect(answered.data?["state"] == "accepted", "\(String(describing: answered.error))")
        #expect(try await event(alice, "call.accepted").data?["by"] == "bob")
    }

    @Test func aPushAPNsRefusesTakesThatDeviceOutOfTheRinging() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let phone = try await fixture.registerPhone("bob", device: "b-phone", seed: 13)
        fixture.sandbox.setToken(phone.voip, .bad)
        let alice = try await fixture.connect("alice", device: "a-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        #expect(try await event(alice, "call.unavailable").data?["callee"] == "bob")
        #expect(try await event(alice, "call.ended").data?["reason"] == "unavailable")
        _ = callID
    }

    @Test func holdIsToldToTheOtherSideAndShownInTheCall() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let alice = try await fixture.connect("alice", device: "a-web")
        let bob = try await fixture.connect("bob", device: "b-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        _ = try await event(bob, "call.incoming")
        #expect(try await fixture.act(bob, MessageType.callAnswer, callID).type == MessageType.ok)

        let held = try await bob.request(MessageType.callHold, id: "h", encoding: CallHoldRequest(callID: callID, onHold: true))
        #expect(held.data?["on_hold"] == ["bob"])
        let heard = try await event(alice, "call.held")
        #expect(heard.data?["by"] == "bob" && heard.data?["on_hold"] == true)
        // Over REST too, and the call's state says who holds.
        let resumed = try await HTTPClient.request(
            "POST", fixture.server.baseURL + "/v1/calls/\(callID)/hold?device_id=b-web",
            headers: [("Authorization", "Bearer " + fixture.token("bob"))], body: Array(#"{"on_hold":false}"#.utf8))
        #expect(resumed.status == 200, "\(resumed.text)")
        #expect(try await event(alice, "call.held").data?["on_hold"] == false)
        #expect(try await fixture.get("/v1/calls/\(callID)", as: "alice")["on_hold"] == [])
        let stranger = try await HTTPClient.request(
            "POST", fixture.server.baseURL + "/v1/calls/\(callID)/hold", headers: [("Authorization", "Bearer " + fixture.token("mallory"))],
            body: Array(#"{"on_hold":true}"#.utf8))
        #expect(stranger.status == 403)

        fixture.server.server.store.flush()
        let trace = try await fixture.get("/v1/calls/\(callID)/trace", as: "alice")
        guard case .array(let entries)? = trace["trace"] else { throw Timeout(what: "the trace") }
        #expect(entries.contains { $0["event"] == "held" } && entries.contains { $0["event"] == "resumed" })
    }

    @Test func refusedActionsSayWhyInAStableReason() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let alice = try await fixture.connect("alice", device: "a-web")
        let phone = try await fixture.connect("bob", device: "b-phone")
        let web = try await fixture.connect("bob", device: "b-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        _ = try await event(phone, "call.incoming")
        #expect(try await fixture.act(phone, MessageType.callAnswer, callID).type == MessageType.ok)
        let second = try await fixture.act(web, MessageType.callAnswer, callID)
        #expect(second.error?.code == .conflict)
        #expect(second.error?.reason == CallRefusal.answeredElsewhere.rawValue)
        #expect(try await fixture.act(alice, MessageType.callCancel, callID).error?.reason == CallRefusal.notCancellable.rawValue)
        #expect(try await fixture.act(alice, MessageType.callEnd, callID).type == MessageType.ok)
        #expect(try await fixture.act(phone, MessageType.callEnd, callID).error?.reason == CallRefusal.callEnded.rawValue)
        let unknown = try await fixture.act(alice, MessageType.callAnswer, UUID().uuidString.lowercased())
        #expect(unknown.error?.code == .notFound && unknown.error?.reason == CallRefusal.unknownCall.rawValue)
    }
}
