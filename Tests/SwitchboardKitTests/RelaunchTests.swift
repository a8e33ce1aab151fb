import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardSupport
import Testing

/// A REST transport whose `GET /v1/calls/…` gets a proxy's HTML error page while `failing` is
/// set (the WebSocket still works): what a phone behind a broken proxy sees.
final class ProxyErrorHTTP: HTTPTransport {
    let failing = Locked(true)
    private let real = CurlHTTPTransport()
    func send(_ method: String, _ url: URL, bearer: String, json: Data?) async throws -> (status: Int, body: Data) {
        if failing.withLock({ $0 }), url.path.hasPrefix("/v1/calls/") { return (502, Data("<html><body>Bad gateway</body></html>".utf8)) }
        return try await real.send(method, url, bearer: bearer, json: json)
    }
}

/// The endings around reconcile and relaunch (issue: defect 6), each through the simulated call
/// system and a real server; every test also checks that no CallKit rule was broken.
@Suite(.serialized, .timeLimit(.minutes(3))) struct RelaunchTests {
    /// A phone that cannot ask the server about a pushed call it answered (REST fails, the
    /// WebSocket works) keeps the call up past the ring's end: giving up asking is no reason
    /// to end a call that is up. It used to end it as unanswered, and the caller stayed in it.
    @Test func aCallAnsweredHereStaysUpWhenTheServerCannotBeAsked() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let http = ProxyErrorHTTP()
        let bob = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 40, serverTimeout: .seconds(1), http: http)
        try await bob.register()
        let alice = try await caller(stack)
        let reply = try await alice.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"], ringTimeoutSeconds: 5))
        let id = try #require(UUID(uuidString: reply?["call_id"]?.stringValue ?? ""))
        try await bob.receivePush()
        #expect(await bob.system.userAnswers(id))
        // Past the ring's end, when the phone stops asking.
        try await Task.sleep(for: .seconds(6))
        #expect(bob.ended(id) == nil, "\(bob.system.timeline)")
        let state = try await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport())
        #expect(state["state"] == "accepted", "\(state)")
        #expect(await bob.system.userEnds(id))
        try await eventually("the server to hear the end") {
            (try? await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport()))?["state"] == "ended"
        }
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// The app is killed during calls and relaunched: a call it had answered and one it had
    /// placed are still live on the server. At launch both end on the phone and on the server
    /// (the callee hears the end, the ringing callee stops ringing); a call answered on another
    /// device of the user is only ended here, as answered elsewhere.
    @Test func atRelaunchTheCallsThisPhoneWasInEndOnTheServerToo() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let suite = "switchboard.tests.relaunch." + UUID().uuidString
        // Three calls at once: more groups than CallKit's two by default.
        let system = SimulatedCallSystem(maximumCallGroups: 3)
        let first = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 41, system: system, callers: CallerDirectory(suiteName: suite))
        try await first.register()
        let alice = try await caller(stack)
        let carol = try await caller(stack, "carol")
        let dave = try await caller(stack, "dave")
        // One that rings here when the app is killed, then is answered on bob's tablet; an
        // incoming call answered here; one placed here that rings.
        let elsewhere = try await createCall(dave, to: "bob")
        try await first.receivePush()
        let answered = try await createCall(alice, to: "bob")
        try await first.receivePush()
        #expect(await system.userAnswers(answered))
        let placed = try await first.manager.startCall(to: ["carol"])
        // Killed: this run says nothing more (its session goes), the call UI keeps the calls.
        // (Its question to the server about the last push is answered within milliseconds.)
        try await Task.sleep(for: .milliseconds(500))
        await first.manager.settle()
        await first.client.disconnect()
        let tablet = try await caller(stack, "bob")
        try await tablet.request(MessageType.callAnswer, encoding: CallActionRequest(callID: elsewhere.uuidString.lowercased()))
        #expect(system.call(answered)?.ended == nil && system.call(placed)?.ended == nil && system.call(elsewhere)?.ended == nil)

        let second = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 41, system: system, callers: CallerDirectory(suiteName: suite))
        await second.manager.reconcileWithSystem()
        #expect(system.call(answered)?.ended != nil)
        #expect(system.call(placed)?.ended != nil)
        #expect(system.call(elsewhere)?.ended == .answeredElsewhere)
        for (id, who) in [(answered, alice), (placed, carol)] {
            try await eventually("the server to end \(id)") {
                (try? await who.callState(id.uuidString.lowercased(), http: CurlHTTPTransport()))?["state"] == "ended"
            }
        }
        let other = try await dave.callState(elsewhere.uuidString.lowercased(), http: CurlHTTPTransport())
        #expect(other["state"] == "accepted", "the other device's call goes on: \(other)")
        #expect(system.violations.isEmpty, "\(system.violations)")
        for client in [alice, carol, dave, tablet, second.client] { await client.disconnect() }
    }

    /// The app relaunched for an action: CallKit hands it the decline of a call the earlier run
    /// showed before `CallManager` exists. The action waits for the manager, which ends the
    /// call on the server; it used to be failed, and the decline lost.
    @Test func aDeclineDeliveredBeforeTheManagerExistsReachesTheServer() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        // The phone registered by the earlier run.
        let earlier = try await stack.phone("bob", device: "b-phone", seed: 42)
        await earlier.client.disconnect()
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        let system = SimulatedCallSystem()
        system.reportNewIncomingCall(id, update: CallUpdate(handle: "alice", displayName: "Alice", hasVideo: false)) { _ in }
        try await eventually("it to be shown") { system.call(id)?.reported == true }
        let declined = Task { await system.userEnds(id) }
        try await Task.sleep(for: .milliseconds(300))
        let bob = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 42, system: system)
        #expect(await declined.value, "the action waited for the manager and was fulfilled")
        try await eventually("the server to end the call") {
            (try? await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport()))?["state"] == "ended"
        }
        #expect(system.violations.isEmpty, "\(system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// An answer for a call this run does not know (shown by an earlier run, not reconciled
    /// yet) is adopted: the UUID is the server's call id, the answer goes to the server and the
    /// action is fulfilled once the server took it. It used to be failed.
    @Test func anAnswerForACallThisRunDoesNotKnowIsAdopted() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let system = SimulatedCallSystem()
        let bob = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 43, system: system)
        try await bob.register()
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        // Shown by the earlier run; this run has not heard of it (its push not handled yet).
        system.reportNewIncomingCall(id, update: CallUpdate(handle: "alice", displayName: "Alice", hasVideo: false)) { _ in }
        try await eventually("it to be shown") { system.call(id)?.reported == true }
        #expect(await system.userAnswers(id))
        let state = try await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport())
        #expect(state["state"] == "accepted", "\(state)")
        #expect(await system.userEnds(id))
        #expect(system.violations.isEmpty, "\(system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }
}
