import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// The review's defects, each against a simulated call UI as strict as CallKit and the real
/// server: asynchronous report completions, refused reports, re-shown UUIDs, timed-out actions,
/// "Hold & Accept", unknown calls. Every test also asserts that no rule was broken.
@Suite(.serialized, .timeLimit(.minutes(3))) struct CallKitRulesTests {
    func state(_ client: SwitchboardClient, _ id: UUID) async -> JSONValue? {
        try? await client.callState(id.uuidString.lowercased(), http: CurlHTTPTransport())
    }

    /// D3: a push for a call that was cancelled before it arrived is reported, and ended only
    /// once CallKit's (slow) report completion came back.
    @Test func aCancelledCallsPushIsEndedOnlyAfterTheReportCompleted() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 21, system: SimulatedCallSystem(reportCompletionDelay: .milliseconds(300)))
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await alice.request(MessageType.callCancel, encoding: CallActionRequest(callID: id.uuidString.lowercased()))
        try await bob.receivePush()
        try await eventually("the call to end") { bob.ended(id) != nil }
        #expect(bob.ended(id) == .remoteEnded)
        let timeline = bob.system.timeline
        let completed = try #require(timeline.firstIndex(of: "report \(id) completed"))
        let ended = try #require(timeline.firstIndex { $0.hasPrefix("ended \(id)") })
        #expect(completed < ended, "\(timeline)")
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// D4: a late push for a call this phone already ended (answered elsewhere) shows it again,
    /// as a device does; it is ended at once with the stored reason and never rings on.
    @Test func aLatePushForAnEndedCallIsShownAgainAndEndedWithItsReason() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let phone = try await stack.phone("bob", device: "b-phone", seed: 22)
        try await phone.client.connect()
        let web = try await caller(stack, "bob")
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await eventually("the phone to ring over its connection") { phone.system.call(id) != nil }
        try await web.request(MessageType.callAnswer, encoding: CallActionRequest(callID: id.uuidString.lowercased()))
        try await eventually("answered elsewhere") { phone.ended(id) == .answeredElsewhere }

        try await phone.receivePush()  // the VoIP push for the same call arrives late
        try await eventually("the re-shown call to end") { phone.system.call(id)?.timesShown == 2 && phone.system.call(id)?.ended != nil }
        #expect(phone.ended(id) == .answeredElsewhere, "ended with the reason it had")
        #expect(phone.system.liveCalls.isEmpty, "nothing rings")
        #expect(phone.system.violations.isEmpty, "\(phone.system.violations)")
        await alice.disconnect()
        await web.disconnect()
        await phone.client.disconnect()
    }

    /// D7: CallKit refuses the report (Do Not Disturb; a protected app; sensitive participants):
    /// the server hears it at once, with the refusal's own filter in the callee's trace, and the
    /// caller hears "unavailable" in seconds instead of ringing for 45.
    @Test(arguments: [
        (CallSystemError.filteredByDoNotDisturb, "do_not_disturb"), (.callIsProtected, "protected_app"),
        (.filteredBySensitiveParticipants, "sensitive_participants"),
    ])
    func aReportRefusedByTheSystemMakesTheCallerHearUnavailableAtOnce(refusal: CallSystemError, filter: String) async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let system = SimulatedCallSystem()
        system.filterAllReports(refusal)
        let bob = try await stack.phone("bob", device: "b-phone", seed: 23, system: system)
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await bob.receivePush()
        try await eventually("the caller to hear it", within: .seconds(5) * kitSlowdown) {
            let call = await state(alice, id)
            return call?["state"] == "ended" && call?["end_reason"] == "unavailable"
        }
        #expect(bob.managerEvents.withLock { $0 }.contains(.reportRefused(id, refusal)))
        #expect(bob.system.call(id) == nil, "never shown")
        let response = try await HTTPClient.request(
            "GET", stack.baseURL + "/v1/calls/\(id.uuidString.lowercased())/trace", headers: [("Authorization", "Bearer " + stack.token("bob"))])
        let trace = try JSONDecoder().decode(JSONValue.self, from: Data(response.body))
        guard case .array(let entries)? = trace["trace"] else { throw Timeout(what: "bob's trace: \(trace)") }
        #expect(entries.first { $0["event"] == "filtered" }?["filter"]?.stringValue == filter, "\(entries)")
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// D6: an answer the server cannot confirm in time is failed before CallKit's deadline (the
    /// action never times out), no media starts, and the call ends.
    @Test func anAnswerTheServerCannotConfirmIsFailedBeforeCallKitsDeadline() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        // A phone whose server is out of reach (nothing listens there): the answer cannot be confirmed.
        let system = SimulatedCallSystem(actionTimeout: .seconds(2) * kitSlowdown)
        let bob = try Phone(
            stack: stack, identity: "bob", device: "b-phone", seed: 24, system: system, serverTimeout: .seconds(30),
            serverURL: URL(string: "http://127.0.0.1:1")!)
        let id = UUID()
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 45_000
        bob.deliver(["call_id": id.uuidString.lowercased(), "caller": ["identity": "alice", "name": "Alice"], "ring_expires_at": later])
        try await eventually("the report to complete") { bob.system.call(id)?.reported == true }
        #expect(await bob.system.userAnswers(id) == false, "failed, not left to time out")
        try await eventually("the call to end") { bob.ended(id) != nil }
        #expect(bob.ended(id) == .failed)
        #expect(!bob.managerEvents.withLock { $0 }.contains(.connected(id)), "no media for a dead call")
        #expect(!bob.system.audioActive)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await bob.client.disconnect()
    }

    /// D6: when CallKit does time an answer out, the call ends and a late confirmation from the
    /// server starts nothing; the server hears the call end.
    @Test func anAnswerCallKitTimedOutEndsTheCallAndALateConfirmationStartsNothing() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 25)
        try await bob.client.connect()
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await eventually("the phone to ring") { bob.system.call(id)?.reported == true }
        // CallKit gives up on the answer the moment it is asked (as after a long stall).
        let manager = bob.manager
        manager.callSystem(perform: .answer(id), completion: ActionCompletion { _ in })
        manager.callSystem(timedOutPerforming: .answer(id))
        try await eventually("the call to end on the server") { await state(alice, id)?["state"] == "ended" }
        await manager.settle()  // every task the manager started (the answer's request among them) is done
        #expect(!bob.managerEvents.withLock { $0 }.contains(.connected(id)))
        #expect(bob.managerEvents.withLock { $0 }.contains(.ended(id, .failed)))
        // The timeout is played by hand (the manager fails an answer before CallKit's deadline,
        // so the simulator never times one out); what the manager did about it, ending the call
        // on the call UI, broke no rule.
        #expect(bob.system.call(id)?.ended == .failed)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// D10: CallKit asks to end a call this run of the app does not know (the app was relaunched
    /// for the action): the server still hears it.
    @Test func anEndForACallTheManagerDoesNotKnowStillReachesTheServer() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 26)
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        // The call UI shows the call from an earlier run; this manager never saw it.
        bob.system.reportNewIncomingCall(id, update: CallUpdate(handle: "alice", displayName: "Alice", hasVideo: false)) { _ in }
        try await eventually("it to be shown") { bob.system.call(id)?.reported == true }
        #expect(await bob.system.userEnds(id))
        try await eventually("the server to hear the decline") { await state(alice, id)?["outcome"] == "declined" }
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// D11: CallKit refuses to start an outgoing call (too many calls): the server's call is
    /// cancelled and the error reaches the app.
    @Test func aStartCallKitRefusesCancelsTheCallOnTheServer() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let alice = try await stack.phone("alice", device: "a-phone", seed: 27)
        let bob = try await caller(stack, "bob")
        alice.system.failNextRequest(with: .maximumCallGroupsReached)
        await #expect(throws: CallSystemError.maximumCallGroupsReached) { _ = try await alice.manager.startCall(to: ["bob"]) }
        try await eventually("the call cancelled on the server") {
            let response = try? await HTTPClient.request(
                "GET", stack.baseURL + "/v1/calls", headers: [("Authorization", "Bearer " + stack.token("alice"))])
            return response?.text.contains("\"cancelled\"") == true
        }
        #expect(alice.manager.liveCallIDs.isEmpty)
        #expect(alice.system.violations.isEmpty, "\(alice.system.violations)")
        await bob.disconnect()
        await alice.client.disconnect()
    }

    /// D8: a second call during a call, taken with "Hold & Accept": the first goes on hold (the
    /// other side hears it), audio is deactivated and activated again, and the second is up;
    /// "End & Accept" ends the first on the server.
    @Test func holdAndAcceptThenEndAndAcceptAsCallKitPerformsThem() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 28)
        try await bob.client.connect()
        let alice = try await caller(stack, "alice")
        let carol = try await caller(stack, "carol")
        let dave = try await caller(stack, "dave")
        let aliceEvents = alice.events()
        let heard = Locked<[JSONValue]>([])
        let listener = Task { for await event in aliceEvents { if case .event("call.held", let data, _) = event { heard.withLock { $0.append(data) } } } }
        defer { listener.cancel() }
        let first = try await createCall(alice, to: "bob")
        try await eventually("the first call to ring") { bob.system.call(first)?.reported == true }
        #expect(await bob.system.userAnswers(first))
        try await eventually("the first call to be up") { bob.managerEvents.withLock { $0 }.contains(.connected(first)) }

        let secondReply = try await carol.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"], busyPolicy: .ring))
        let second = try #require(UUID(uuidString: secondReply?["call_id"]?.stringValue ?? ""))
        try await eventually("the second call to ring") { bob.system.call(second)?.reported == true }
        #expect(await bob.system.userAnswers(second) == false, "a plain Accept is not offered over an active call")
        #expect(await bob.system.userAnswersHoldingActive(second))
        #expect(bob.system.call(first)?.held == true)
        try await eventually("alice to hear the hold") { heard.withLock { $0 }.contains { $0["by"] == "bob" && $0["on_hold"] == true } }
        #expect(await state(alice, first)?["on_hold"] == ["bob"])
        // CallKit deactivates the session for the hold and activates it again for the answer.
        let audio = bob.system.timeline.filter { $0 == "audio activated" || $0 == "audio deactivated" }
        #expect(audio == ["audio activated", "audio deactivated", "audio activated"], "\(audio)")
        #expect(bob.managerEvents.withLock { $0 }.contains(.held(first, true)))
        try await eventually("the second call to be up") { await state(carol, second)?["state"] == "accepted" }
        // Each activation names the call whose media runs: the first, then the one answered.
        @Sendable func activations() -> [UUID?] {
            bob.managerEvents.withLock { $0 }.compactMap { if case .audioActive(true, let call) = $0 { call } else { nil } }
        }
        try await eventually("the app to hear both activations") { activations().count == 2 }
        #expect(activations() == [first, second])

        // A third call: "End & Accept" ends the one up (the second) on the server.
        let thirdReply = try await dave.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"], busyPolicy: .ring))
        let third = try #require(UUID(uuidString: thirdReply?["call_id"]?.stringValue ?? ""))
        try await eventually("the third call to ring") { bob.system.call(third)?.reported == true }
        #expect(await bob.system.userAnswersEndingActive(third))
        try await eventually("the second call to end on the server") { await state(carol, second)?["state"] == "ended" }
        // The last calls end (the first, held, ended last): CallKit deactivates the session when
        // the third ends, and the app hears it.
        #expect(await bob.system.userEnds(third))
        #expect(await bob.system.userEnds(first), "\(bob.system.timeline)")
        #expect(bob.system.timeline.filter { $0 == "audio activated" || $0 == "audio deactivated" }.last == "audio deactivated")
        try await eventually("the app to hear audio stop") {
            bob.managerEvents.withLock { $0 }.compactMap { if case .audioActive(let active, _) = $0 { active } else { nil } }.last == false
        }
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        for client in [alice, carol, dave] { await client.disconnect() }
        await bob.client.disconnect()
    }

    /// The phone tells the server it rang (call.ack): the trace shows `ringing_shown` once
    /// CallKit confirmed the report.
    @Test func aShownCallIsAcknowledgedInTheTrace() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 29)
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await bob.receivePush()
        try await eventually("ringing_shown in the trace") {
            let response = try? await HTTPClient.request(
                "GET", stack.baseURL + "/v1/calls/\(id.uuidString.lowercased())/trace", headers: [("Authorization", "Bearer " + stack.token("alice"))])
            return response?.text.contains("ringing_shown") == true
        }
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// D13: at launch, a call CallKit still shows from an earlier run is matched with the
    /// server: over there, it is ended here.
    @Test func atLaunchCallsLeftInTheCallUIAreReconciledWithTheServer() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 30)
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        bob.system.reportNewIncomingCall(id, update: CallUpdate(handle: "alice", displayName: "Alice", hasVideo: false)) { _ in }
        try await eventually("it to be shown") { bob.system.call(id)?.reported == true }
        try await alice.request(MessageType.callCancel, encoding: CallActionRequest(callID: id.uuidString.lowercased()))
        await bob.manager.reconcileWithSystem()
        #expect(bob.ended(id) == .unanswered || bob.ended(id) == .remoteEnded, "\(String(describing: bob.ended(id)))")
        #expect(bob.system.liveCalls.isEmpty)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// Requests about calls the system does not know fail as CallKit's do (`unknownCallUUID`).
    @Test func aRequestForAnUnknownCallFails() async throws {
        let system = SimulatedCallSystem()
        await #expect(throws: CallSystemError.unknownCallUUID) { try await system.request(.end(UUID())) }
    }

    /// An action the app neither fulfils nor fails times out as CallKit's does: the delegate
    /// hears it, the rule broken is recorded, and one the app fulfils in time does not time out.
    @Test func anActionNeitherFulfilledNorFailedTimesOut() async throws {
        final class Delegate: CallSystemDelegate {
            let timedOut = Locked<[CallAction]>([])
            let fulfils: Bool
            init(fulfils: Bool) { self.fulfils = fulfils }
            func callSystem(perform action: CallAction, completion: ActionCompletion) { if fulfils { completion.fulfill() } }
            func callSystem(timedOutPerforming action: CallAction) { timedOut.withLock { $0.append(action) } }
            func callSystem(didChangeAudioActive active: Bool) {}
            func callSystemDidReset() {}
        }
        for fulfils in [false, true] {
            let system = SimulatedCallSystem(actionTimeout: .milliseconds(300) * kitSlowdown, reportCompletionDelay: .zero)
            let delegate = Delegate(fulfils: fulfils)
            system.delegate = delegate
            let id = UUID()
            let reported: CallSystemError? = await withCheckedContinuation { done in
                system.reportNewIncomingCall(id, update: CallUpdate(handle: "alice", displayName: "Alice", hasVideo: false)) { done.resume(returning: $0) }
            }
            #expect(reported == nil)
            #expect(await system.userAnswers(id) == fulfils)
            if fulfils {
                // Answered: its timer is cancelled, and only an unanswered action can time out
                // (the answer is settled once), so this holds for good, with no wait.
                #expect(delegate.timedOut.withLock { $0 }.isEmpty)
                #expect(system.violations.isEmpty, "\(system.violations)")
            } else {
                #expect(delegate.timedOut.withLock { $0 } == [.answer(id)])
                #expect(system.violations.contains { $0.contains("neither fulfilled nor failed") }, "\(system.violations)")
            }
        }
    }
}

/// A reconnect storm: a hundred SDK clients lose their connections at the same moment (each
/// connection reset, as a network failure does it), and every one comes back by itself and
/// resumes its session.
@Suite(.timeLimit(.minutes(3))) struct ReconnectStormTests {
    @Test func aHundredClientsDroppedAtOnceAllResumeBySelf() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let metrics = try #require(stack.server?.metrics)
        var clients: [SwitchboardClient] = []
        for index in 0..<100 {
            let token = stack.token("user\(index)")
            var options = SwitchboardClient.Options()
            options.initialBackoff = .milliseconds(50)
            let client = try SwitchboardClient(serverURL: stack.url, deviceID: "d\(index)", options: options) { token }
            try await client.connect()
            clients.append(client)
        }
        #expect(metrics.gauge("switchboard_connections") == 100)
        for client in clients { await client.simulateNetworkDrop() }
        try await eventually("every client to resume", within: .seconds(30)) {
            metrics.counter("switchboard_resumes_total", ["outcome": "resumed"]) >= 100
        }
        #expect(metrics.counter("switchboard_resumes_total", ["outcome": "failed"]) == 0, "no session was lost")
        // Each drop was a reset, never a close frame: the server saw it as lost, or (a resume
        // that overtook its noticing the reset) closed the dead connection as replaced (4001).
        let lost = metrics.counter("switchboard_disconnects_total", ["reason": "lost"])
        let replaced = metrics.counter("switchboard_disconnects_total", ["reason": "server_4001"])
        #expect(lost + replaced == 100, "\(lost) lost, \(replaced) replaced")
        #expect(metrics.counter("switchboard_disconnects_total", ["reason": "peer"]) == 0, "no drop was a close")
        try await eventually("every connection back") { metrics.gauge("switchboard_connections") == 100 }
        for (index, client) in clients.enumerated() {
            try await eventually("client \(index) to say it is connected") { await client.isConnected }
        }
        for client in clients { await client.disconnect() }
    }
}
