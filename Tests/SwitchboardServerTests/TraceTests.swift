import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// The push trace of one group call that goes through every documented event, each with the
/// user, device and channel it belongs to.
@Suite(.timeLimit(.minutes(3))) struct TraceTests {
    /// Covers: trace:delivered, trace:queued_for_resume, trace:delivered_on_connect, trace:push_sent, trace:apns_accepted
    /// Covers: trace:apns_refused, trace:ringing_shown, trace:filtered, trace:answered, trace:declined, trace:held
    /// Covers: trace:resumed, trace:ended
    @Test func aCallsTraceRecordsEveryDocumentedEventWhereItHappened() async throws {
        let fixture = try CallFixture { $0.limits.resumeGraceSeconds = 60 }
        defer { fixture.stop() }
        let metrics = fixture.server.server.metrics
        let alice = try await fixture.connect("alice", device: "a-web")
        let bobWeb = try await fixture.connect("bob", device: "b-web")
        try await fixture.registerPhone("bob", device: "b-phone", seed: 31)
        let carolPhone = try await fixture.registerPhone("carol", device: "c-phone", seed: 32)
        fixture.sandbox.setToken(carolPhone.voip, .bad)
        // Dave's connection dies just before the call: his session waits to be resumed.
        let daveToken = fixture.token("dave")
        let daveSocket = try await WebSocketClient.connect(
            to: URL(string: fixture.server.webSocketURL + "?access_token=\(daveToken)&device_id=d-web")!, on: clientLoop)
        let dave = TestClient(daveSocket)
        let daveWelcome = try await dave.nextEnvelope()
        let daveResume = try #require(daveWelcome.data?["resume_token"]?.stringValue)
        daveSocket.abort()
        try await within(.seconds(10) * testSlowdown, "dave's drop") {
            while metrics.gauge("switchboard_connections") > 2 { try await Task.sleep(for: .milliseconds(20)) }
        }

        let callID = try await fixture.call(alice, to: ["bob", "carol", "dave"])
        _ = try await event(bobWeb, "call.incoming")
        // Carol's web client comes online while it rings; dave resumes.
        let carolWeb = try await fixture.connect("carol", device: "c-web")
        _ = try await event(carolWeb, "call.incoming")
        let daveBack = try await TestClient.connect(
            fixture.server.webSocketURL + "?access_token=\(daveToken)&device_id=d-web&resume_token=\(daveResume)&last_seq=0")
        #expect(try await daveBack.nextEnvelope().type == MessageType.sessionResumed)
        _ = try await event(daveBack, "call.incoming")
        // Bob's phone shows the call and says so.
        let bobPhone = try await fixture.connect("bob", device: "b-phone")
        #expect(try await fixture.act(bobPhone, MessageType.callAck, callID).type == MessageType.ok)
        // Dave's phone filters it; carol declines; bob answers on the web, holds and resumes.
        let filtered = try await daveBack.request(
            MessageType.callDecline, id: "f", encoding: CallActionRequest(callID: callID, reason: "filtered", filter: .doNotDisturb))
        #expect(filtered.type == MessageType.ok, "\(filtered)")
        #expect(try await fixture.act(carolWeb, MessageType.callDecline, callID).type == MessageType.ok)
        #expect(try await fixture.act(bobWeb, MessageType.callAnswer, callID).type == MessageType.ok)
        for held in [true, false] {
            let reply = try await bobWeb.request(MessageType.callHold, id: .string("h\(held)"), encoding: CallHoldRequest(callID: callID, onHold: held))
            #expect(reply.type == MessageType.ok, "\(reply)")
        }
        #expect(try await fixture.act(alice, MessageType.callEnd, callID).type == MessageType.ok)

        // The pushes' outcomes come last (asynchronously): wait for both.
        let trace = try await within(.seconds(10) * testSlowdown, "the whole trace") { () -> [JSONValue] in
            while true {
                let body = try await fixture.get("/v1/calls/\(callID)/trace", as: "alice")
                guard case .array(let entries)? = body["trace"] else { throw Timeout(what: "a trace") }
                let events = Set(entries.compactMap { $0["event"]?.stringValue })
                if events.isSuperset(of: ["apns_accepted", "apns_refused", "ended"]) { return entries }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        func entry(_ event: String) -> JSONValue? { trace.first { $0["event"]?.stringValue == event } }
        let expected: [(event: String, user: String, device: String, channel: String)] = [
            ("delivered", "bob", "b-web", "websocket"),
            ("queued_for_resume", "dave", "d-web", "websocket"),
            ("delivered_on_connect", "carol", "c-web", "websocket"),
            ("push_sent", "bob", "b-phone", "voip_push"),
            ("apns_accepted", "bob", "b-phone", "voip_push"),
            ("apns_refused", "carol", "c-phone", "voip_push"),
            ("ringing_shown", "bob", "b-phone", "device"),
            ("filtered", "dave", "d-web", "device"),
            ("declined", "carol", "c-web", "device"),
            ("answered", "bob", "b-web", "device"),
            ("held", "bob", "b-web", "device"),
            ("resumed", "bob", "b-web", "device"),
            ("ended", "alice", "a-web", "device"),
        ]
        for step in expected {
            let found = try #require(entry(step.event), "no \(step.event) in \(trace)")
            #expect(found["user"]?.stringValue == step.user, "\(step.event): \(found)")
            #expect(found["device"]?.stringValue == step.device, "\(step.event): \(found)")
            #expect(found["channel"]?.stringValue == step.channel, "\(step.event): \(found)")
        }
        #expect(entry("apns_refused")?["reason"] == "BadDeviceToken")
        #expect(entry("filtered")?["filter"] == nil, "why dave's phone did not show it is dave's to read")
        let davesTrace = try await fixture.get("/v1/calls/\(callID)/trace", as: "dave")
        guard case .array(let davesEntries)? = davesTrace["trace"] else { throw Timeout(what: "dave's trace") }
        #expect(davesEntries.first { $0["event"] == "filtered" }?["filter"] == "do_not_disturb")
        let documented = Set(expected.map(\.event))
        let recorded = Set(trace.compactMap { entry in entry["event"]?.stringValue })
        #expect(recorded.isSubset(of: documented), "only documented events: \(trace)")
        for client in [alice, bobWeb, carolWeb, daveBack, bobPhone] { client.socket.close() }
    }
}
