import Foundation
import SwitchboardProtocol
import Testing

import SwitchboardCore

/// The call state machine on its own, with a fixed clock.
@Suite(.timeLimit(.minutes(3))) struct CallStateTests {
    let t0 = ContinuousClock.now

    /// A call from alice's a-phone; every callee is connected unless `unreachable` says not.
    func call(
        _ callees: [String] = ["bob"], inCall: Set<String> = [], busyPolicy: BusyPolicy = .reject, unreachable: Set<String> = [],
        phones: [String: [CallState.PhoneDevice]] = [:]
    ) -> CallState {
        CallState(
            id: "c1", appID: "app", caller: "alice", callerDevice: "a-phone", callees: callees, inCall: inCall, busyPolicy: busyPolicy,
            connected: Set(callees).subtracting(unreachable), phones: phones, now: t0, nowMillis: 1000, ringTimeout: .seconds(45))
    }

    /// What every transition must keep, whatever the call: the record is saved exactly when the
    /// call's summary changed, last; an end writes history and forgets the call once and stops
    /// the ring timer; a call whose last ringing callee stopped stops the ring timer; effects
    /// name participants only; a missed-call notice goes only to a callee who just missed it.
    func checkInvariants(before: CallState, after: CallState, _ effects: [CallState.Effect], _ what: String) {
        let saves = effects.filter { $0 == .save }.count
        #expect(saves == (before.summary != after.summary ? 1 : 0), "saved when changed: \(what)")
        if saves == 1 { #expect(effects.last == .save, "the save comes last: \(what)") }
        let ended = !before.isEnded && after.isEnded
        #expect(effects.filter { $0 == .recordHistory }.count == (ended ? 1 : 0), "history once, at the end: \(what)")
        #expect(effects.filter { $0 == .finished }.count == (ended ? 1 : 0), "finished once, at the end: \(what)")
        if ended || (!before.ringingCallees.isEmpty && after.ringingCallees.isEmpty) {
            #expect(effects.contains(.cancelRingTimer), "the ring timer stops with the last ring: \(what)")
        }
        checkSnapshotJSON(after, what)
        let participants = Set([after.caller] + after.callees)
        for effect in effects {
            switch effect {
            case .notify(let identity, _, _): #expect(participants.contains(identity), "\(what)")
            case .push(.missedCall, let callee, _):
                #expect(before.status[callee] == .ringing && after.status[callee] == .missed, "a notice only for a missed ring: \(what)")
            case .push(_, let callee, _), .ringConnections(let callee): #expect(after.callees.contains(callee), "\(what)")
            default: break
            }
        }
    }

    /// The event types sent to `identity`, in order.
    func types(_ effects: [CallState.Effect], to identity: String) -> [String] {
        effects.compactMap { effect in
            if case .notify(let who, let event, _) = effect, who == identity { return event.type }
            return nil
        }
    }

    enum Step {
        case answer(String, String), decline(String, String), cancel(String), end(String, String), timeout, reached(String)
        /// The call went to these devices of a callee.
        case rang(String, [String])
        /// A device of a callee filtered the call (or APNs refused its token).
        case out(String, String)
        case hold(String, Bool)
        /// APNs answered the invite's push to a device of a callee.
        case pushed(String, String, CallState.PushOutcome)
    }

    func run(_ state: inout CallState, _ step: Step) throws -> [CallState.Effect] {
        switch step {
        case .answer(let who, let device): return try state.answer(by: who, device: device, nowMillis: 2000)
        case .decline(let who, let device): return try state.decline(by: who, device: device, nowMillis: 2000)
        case .cancel(let who): return try state.cancel(by: who, nowMillis: 2000)
        case .end(let who, let device): return try state.end(by: who, device: device, reason: nil, nowMillis: 3000)
        case .timeout: return state.ringTimedOut(nowMillis: 46_000)
        case .reached(let who): return state.reached(callee: who)
        case .rang(let who, let devices):
            state.rang(who, devices: Set(devices))
            return []
        case .out(let who, let device): return try state.deviceOut(who, device: device, nowMillis: 2500)
        case .hold(let who, let held): return try state.hold(by: who, onHold: held)
        case .pushed(let who, let device, let outcome):
            return state.pushAnswered(.voipInvite, callee: who, device: device, outcome: outcome, nowMillis: 2500)
        }
    }

    // Table: (callees, steps, final outcome, caller history, per-callee history)
    static let scenarios: [(String, [String], [Step], CallOutcome, HistoryOutcome, [String: HistoryOutcome])] = [
        ("answered then hung up", ["bob"], [.reached("bob"), .answer("bob", "b-phone"), .end("alice", "a-phone")], .completed, .completed, ["bob": .completed]),
        ("declined", ["bob"], [.decline("bob", "b-ipad")], .declined, .declined, ["bob": .declined]),
        ("cancelled while ringing", ["bob"], [.cancel("alice")], .cancelled, .cancelled, ["bob": .missed]),
        ("nobody answered", ["bob"], [.timeout], .missed, .noAnswer, ["bob": .missed]),
        ("callee ends while ringing = decline", ["bob"], [.end("bob", "b-phone")], .declined, .declined, ["bob": .declined]),
        ("caller ends while ringing = cancel", ["bob"], [.end("alice", "a-phone")], .cancelled, .cancelled, ["bob": .missed]),
        ("group: one declines, one answers", ["bob", "carol"], [.decline("bob", "b-phone"), .answer("carol", "c-phone"), .end("carol", "c-phone")], .completed, .completed, ["bob": .declined, "carol": .completed]),
        ("group: one answers, the other misses", ["bob", "carol"], [.answer("bob", "b-phone"), .timeout, .end("alice", "a-phone")], .completed, .completed, ["bob": .completed, "carol": .missed]),
        ("group: everyone declines", ["bob", "carol"], [.decline("bob", "b"), .decline("carol", "c")], .declined, .declined, ["bob": .declined, "carol": .declined]),
        ("every device filtered: unavailable at once", ["bob"], [.rang("bob", ["b-phone", "b-ipad"]), .out("bob", "b-phone"), .out("bob", "b-ipad")], .missed, .noAnswer, ["bob": .missed]),
        ("one device filtered, another answers", ["bob"], [.rang("bob", ["b-phone", "b-web"]), .out("bob", "b-phone"), .answer("bob", "b-web"), .end("alice", "a-phone")], .completed, .completed, ["bob": .completed]),
        ("group: one unavailable, one declines", ["bob", "carol"], [.rang("bob", ["b-phone"]), .rang("carol", ["c-phone"]), .out("bob", "b-phone"), .decline("carol", "c-phone")], .declined, .declined, ["bob": .missed, "carol": .declined]),
        ("APNs refuses the only phone: unavailable at once", ["bob"], [.pushed("bob", "b-phone", .refused)], .missed, .noAnswer, ["bob": .missed]),
        ("a push unanswered keeps the phone ringing", ["bob"], [.pushed("bob", "b-phone", .unanswered), .pushed("bob", "b-phone", .accepted), .answer("bob", "b-phone"), .end("bob", "b-phone")], .completed, .completed, ["bob": .completed]),
        ("held and resumed, then hung up", ["bob"], [.answer("bob", "b-phone"), .hold("bob", true), .hold("alice", true), .hold("bob", false), .end("bob", "b-phone")], .completed, .completed, ["bob": .completed]),
    ]

    @Test(arguments: scenarios.indices)
    func scenario(index: Int) throws {
        let (_, callees, steps, outcome, callerHistory, calleeHistory) = Self.scenarios[index]
        var state = call(callees, phones: Dictionary(uniqueKeysWithValues: callees.map { ($0, [Self.iPhone($0)]) }))
        _ = state.start(nowMillis: 1000)
        var effects: [CallState.Effect] = []
        for step in steps {
            let before = state
            let stepEffects = try run(&state, step)
            checkInvariants(before: before, after: state, stepEffects, "\(Self.scenarios[index].0): \(step)")
            effects += stepEffects
        }
        #expect(state.outcome == outcome)
        #expect(state.historyOutcome(for: "alice") == callerHistory)
        for (callee, expected) in calleeHistory { #expect(state.historyOutcome(for: callee) == expected, "\(callee)") }
        #expect(effects.filter { $0 == .finished }.count == 1, "finished exactly once")
        #expect(types(effects, to: "alice").last == "call.ended")
    }

    /// The snapshot a cluster stores at every transition, written without an encoder
    /// (`jsonMembers`), holds what Foundation's encoder would write and reads back as itself.
    func checkSnapshotJSON(_ state: CallState, _ what: String) {
        let snapshot = state.snapshot
        let members = snapshot.jsonMembers
        #expect(Set(members.map(\.0)).count == members.count, "no member twice: \(what)")
        let written = JSONValue.object(Dictionary(uniqueKeysWithValues: members))
        let encoded = (try? JSONEncoder().encode(snapshot)).flatMap { try? JSONDecoder().decode(JSONValue.self, from: $0) }
        #expect(written == encoded, "as the encoder writes it: \(what)")
        let read = (try? JSONEncoder().encode(written)).flatMap { try? JSONDecoder().decode(CallState.Snapshot.self, from: $0) }
        #expect(read == snapshot, "reads back: \(what)")
    }

    /// The callee's iPhone (`b-phone` for bob, as the scenarios name devices), with CallKit and
    /// both tokens.
    static func iPhone(_ callee: String) -> CallState.PhoneDevice {
        CallState.PhoneDevice(id: callee.prefix(1) + "-phone", voip: true, alert: true)
    }

    /// Who is rung and how, decided by the call at its start: every connection of a callee
    /// who can ring, each phone by VoIP where CallKit is on and by an alert where it is not,
    /// none for a busy or unreachable callee; the record saved first, the ring timer armed once.
    @Test func theStartRingsEachCalleeTheWayItsDevicesTake() {
        let phones: [String: [CallState.PhoneDevice]] = [
            "bob": [CallState.PhoneDevice(id: "b-phone", voip: true, alert: true)],
            "carol": [CallState.PhoneDevice(id: "c-phone", voip: false, alert: true), CallState.PhoneDevice(id: "c-old", voip: false, alert: false)],
            "erin": [CallState.PhoneDevice(id: "e-phone", voip: true, alert: true)],
        ]
        var state = CallState(
            id: "c1", appID: "app", caller: "alice", callerDevice: "a-phone", callees: ["bob", "carol", "dave", "erin"], inCall: ["erin"],
            connected: ["bob"], phones: phones, now: t0, nowMillis: 1000, ringTimeout: .seconds(30))
        let effects = state.start(nowMillis: 1000)
        #expect(effects == [
            .save, .armRingTimer(after: .seconds(30)),
            .ringConnections(callee: "bob"), .push(.voipInvite, callee: "bob", device: "b-phone"),
            .ringConnections(callee: "carol"), .push(.alertInvite, callee: "carol", device: "c-phone"),
            .notify(identity: "alice", event: .busy(callID: "c1", callee: "erin"), except: nil),
        ])
        #expect(state.status["dave"] == .unreachable, "no connection and no phone that takes a push")
        #expect(state.status["carol"] == .ringing, "a phone without CallKit still rings, by an alert")
        // The pushed phones count as rung: carol is unavailable once her phone filtered the call.
        let out = try? state.deviceOut("carol", device: "c-phone", nowMillis: 2000)
        #expect(out?.contains(.notify(identity: "alice", event: .unavailable(callID: "c1", callee: "carol"), except: nil)) == true)
        // At the ring timeout, a missed-call notice to each phone that takes an alert, never by VoIP.
        let timedOut = state.ringTimedOut(nowMillis: 31_000)
        #expect(timedOut.filter { if case .push = $0 { true } else { false } } == [.push(.missedCall, callee: "bob", device: "b-phone")])
        #expect(state.ringTimedOut(nowMillis: 31_001).isEmpty, "a second timeout changes nothing")
    }

    /// Every refusal, in the state it arises in (the outside reviews' cases among them): the
    /// error, and a call left exactly as it was.
    static let refusals: [(String, [String], [Step], Step, CallError)] = [
        ("a second device answers after the first", ["bob"], [.answer("bob", "b-phone")], .answer("bob", "b-ipad"), .alreadyAnswered),
        ("an answer after the caller cancelled", ["bob"], [.cancel("alice")], .answer("bob", "b-phone"), .ended),
        ("an answer after the ring timeout", ["bob"], [.timeout], .answer("bob", "b-phone"), .ended),
        ("an answer after declining in a group", ["bob", "carol"], [.decline("bob", "b-phone")], .answer("bob", "b-ipad"), .notRinging),
        ("a decline after answering", ["bob"], [.answer("bob", "b-phone")], .decline("bob", "b-ipad"), .notRinging),
        ("a cancel once answered", ["bob"], [.answer("bob", "b-phone")], .cancel("alice"), .notCancellable),
        ("a cancel by a callee", ["bob"], [], .cancel("bob"), .notParticipant),
        ("a hold while it rings", ["bob"], [], .hold("alice", true), .notRinging),
        ("a hold by a group callee who has not answered", ["bob", "carol"], [.answer("bob", "b-phone")], .hold("carol", true), .notRinging),
        ("an end after the end", ["bob"], [.answer("bob", "b-phone"), .end("alice", "a-phone")], .end("bob", "b-phone"), .ended),
        ("a filtered device after the end", ["bob"], [.decline("bob", "b-phone")], .out("bob", "b-ipad"), .ended),
        ("a stranger answers", ["bob"], [], .answer("mallory", "m-phone"), .notParticipant),
        ("a stranger ends", ["bob"], [.answer("bob", "b-phone")], .end("mallory", "m-phone"), .notParticipant),
        ("a stranger holds", ["bob"], [.answer("bob", "b-phone")], .hold("mallory", true), .notParticipant),
    ]

    @Test(arguments: refusals.indices)
    func aRefusedActionChangesNothing(index: Int) throws {
        let (what, callees, steps, refused, error) = Self.refusals[index]
        var state = call(callees)
        _ = state.start(nowMillis: 1000)
        for step in steps { _ = try run(&state, step) }
        let before = state
        #expect(throws: error, "\(what)") { _ = try run(&state, refused) }
        #expect(state == before, "\(what): nothing changed")
    }

    @Test func theFirstAnswerWinsAndTheOtherDevicesHearAnsweredElsewhere() throws {
        var state = call()
        let effects = try state.answer(by: "bob", device: "b-phone", nowMillis: 2000)
        #expect(effects.contains(.notify(identity: "bob", event: .answeredElsewhere(callID: "c1", device: "b-phone"), except: "b-phone")))
        #expect(types(effects, to: "alice") == ["call.accepted"])
        #expect(throws: CallError.alreadyAnswered) { try state.answer(by: "bob", device: "b-ipad", nowMillis: 2001) }
        #expect(try state.answer(by: "bob", device: "b-phone", nowMillis: 2002).isEmpty, "the winner asking again is harmless")
    }

    @Test func aDeclineElsewhereReachesTheOtherDevicesAndEndsAOneToOneCall() throws {
        var state = call()
        let effects = try state.decline(by: "bob", device: "b-ipad", nowMillis: 2000)
        #expect(effects.contains(.notify(identity: "bob", event: .declinedElsewhere(callID: "c1", device: "b-ipad"), except: "b-ipad")))
        #expect(state.outcome == .declined)
        #expect(throws: CallError.self) { try state.answer(by: "bob", device: "b-phone", nowMillis: 2001) }
    }

    @Test func theCallerHearsRingingOnceAndCancelsWithMissedCallNoticesOnly() throws {
        var state = call(["bob", "carol"], phones: ["bob": [Self.iPhone("bob")], "carol": [Self.iPhone("carol")]])
        #expect(types(state.reached(callee: "bob"), to: "alice") == ["call.ringing"])
        #expect(state.reached(callee: "carol").isEmpty)
        let effects = try state.cancel(by: "alice", nowMillis: 2000)
        #expect(effects.contains(.push(.missedCall, callee: "bob", device: "b-phone")))
        #expect(effects.contains(.push(.missedCall, callee: "carol", device: "c-phone")))
        #expect(types(effects, to: "bob") == ["call.cancelled", "call.ended"])
        #expect(throws: CallError.notParticipant) { try state.cancel(by: "bob", nowMillis: 2001) }
    }

    @Test func busyAndUnreachableCalleesEndTheCallAtOnce() {
        var busy = call(inCall: ["bob"])
        let effects = busy.start(nowMillis: 1000)
        #expect(busy.outcome == .busy)
        #expect(types(effects, to: "alice") == ["call.busy", "call.ended"])
        var nobody = call(unreachable: ["bob"])
        _ = nobody.start(nowMillis: 1000)
        #expect(nobody.outcome == .failed)
        var partly = call(["bob", "carol"], inCall: ["bob"])
        _ = partly.start(nowMillis: 1000)
        #expect(partly.isRinging, "carol still rings")
    }

    /// Call waiting: a callee already in a call rings anyway when the caller asks for it, and
    /// is busy otherwise.
    @Test func aCalleeInAnotherCallRingsOnlyUnderTheRingPolicy() {
        var waiting = call(inCall: ["bob"], busyPolicy: .ring)
        let effects = waiting.start(nowMillis: 1000)
        #expect(waiting.isRinging)
        #expect(effects.contains(.ringConnections(callee: "bob")))
        #expect(types(effects, to: "alice").isEmpty)
        var rejected = call(["bob", "carol"], inCall: ["bob"], busyPolicy: .reject)
        _ = rejected.start(nowMillis: 1000)
        #expect(rejected.status == ["bob": .busy, "carol": .ringing])
    }

    /// How each push goes out, as the call decides: a VoIP invite only while it rings, tried
    /// and kept by APNs until the ring expires; alerts for 30 s, collapsing on the call's id.
    @Test func eachPushIsSentTheWayTheCallDecides() {
        let state = call()
        let now = t0 + .seconds(3)
        let voip = state.delivery(of: .voipInvite, now: now)
        #expect(voip.deadline == t0 + .seconds(45) && voip.onlyWhileRinging)
        #expect(voip.expiresAtSeconds == 46 && voip.collapseID == nil)
        for push in [CallState.Push.alertInvite, .missedCall] {
            let alert = state.delivery(of: push, now: now)
            #expect(alert.deadline == now + .seconds(30) && !alert.onlyWhileRinging, "\(push)")
            #expect(alert.expiresAtSeconds == nil && alert.collapseID == "c1", "\(push)")
        }
    }

    /// What an answer from APNs does, by push and outcome: only an invite's answer counts; an
    /// accepted one tells the caller the call rings (once), a refused one takes that device out.
    @Test func apnsAnswersMoveOnlyInvites() {
        var state = call(["bob"], unreachable: ["bob"], phones: ["bob": [Self.iPhone("bob"), CallState.PhoneDevice(id: "b-ipad", voip: true, alert: false)]])
        _ = state.start(nowMillis: 1000)
        func answered(_ push: CallState.Push, _ device: String, _ outcome: CallState.PushOutcome) -> [CallState.Effect] {
            state.pushAnswered(push, callee: "bob", device: device, outcome: outcome, nowMillis: 1500)
        }
        #expect(answered(.missedCall, "b-phone", .refused).isEmpty)
        #expect(answered(.voipInvite, "b-phone", .unanswered).isEmpty)
        #expect(types(answered(.voipInvite, "b-phone", .accepted), to: "alice") == ["call.ringing"])
        #expect(answered(.alertInvite, "b-phone", .accepted).isEmpty, "the caller heard it once")
        #expect(answered(.voipInvite, "b-phone", .refused).isEmpty, "the iPad still rings")
        let last = state.pushAnswered(.voipInvite, callee: "bob", device: "b-ipad", outcome: .refused, nowMillis: 1700)
        #expect(types(last, to: "alice") == ["call.unavailable", "call.ended"])
        #expect(state.outcome == .missed)
    }

    /// Who the call's room admits after each history: (what happened, identity, device, admitted).
    static let roomAdmissions: [(String, [Step], String, String, Bool)] = [
        ("ringing: the caller's calling device", [], "alice", "a-phone", true),
        ("ringing: the caller's other device", [], "alice", "a-ipad", false),
        ("ringing: a callee who has not answered", [], "bob", "b-phone", false),
        ("ringing: a stranger", [], "mallory", "m-phone", false),
        ("answered: the answering device", [.answer("bob", "b-phone")], "bob", "b-phone", true),
        ("answered: the callee's other device", [.answer("bob", "b-phone")], "bob", "b-ipad", false),
        ("answered: the caller", [.answer("bob", "b-phone")], "alice", "a-phone", true),
        ("answered: a stranger", [.answer("bob", "b-phone")], "mallory", "m-phone", false),
        ("declined: the declining device", [.decline("bob", "b-phone")], "bob", "b-phone", false),
        ("ended: the caller", [.answer("bob", "b-phone"), .end("alice", "a-phone")], "alice", "a-phone", false),
        ("ended: the answering device", [.answer("bob", "b-phone"), .end("alice", "a-phone")], "bob", "b-phone", false),
        ("group: a callee still ringing", [.answer("bob", "b-phone")], "carol", "c-phone", false),
        ("group: a callee who declined", [.decline("carol", "c-phone"), .answer("bob", "b-phone")], "carol", "c-phone", false),
    ]

    @Test(arguments: roomAdmissions.indices)
    func theCallsRoomAdmitsOnlyTheDevicesThatTookTheCall(index: Int) throws {
        let (what, steps, identity, device, admitted) = Self.roomAdmissions[index]
        var state = call(["bob", "carol"])
        _ = state.start(nowMillis: 1000)
        for step in steps { _ = try run(&state, step) }
        let result = state.admitToRoom(identity: identity, device: device, seat: "session-of-" + device)
        #expect(result == admitted, "\(what)")
    }

    /// A side belongs to the session that took it: another connection saying the same
    /// `device_id` (another device of the same user, which learned the id from
    /// `call.answered_elsewhere`) stays out, before the answering session joins and after.
    @Test func aSideBelongsToTheSessionThatTookItNotToWhoeverNamesItsDevice() throws {
        var state = CallState(
            id: "c1", appID: "app", caller: "alice", callerDevice: "a-phone", callerSeat: "p_alice", callees: ["bob"], connected: ["bob"],
            phones: [:], now: t0, nowMillis: 1000, ringTimeout: .seconds(45))
        _ = try state.answer(by: "bob", device: "b-phone", seat: "p_bob", nowMillis: 2000)
        let admitted = [
            ("bob", "b-phone", "p_thief"), ("alice", "a-phone", "p_alice_ipad"), ("bob", "b-phone", "p_bob"), ("alice", "a-phone", "p_alice"),
            ("bob", "b-phone", "p_thief"),
        ].map { state.admitToRoom(identity: $0.0, device: $0.1, seat: $0.2) }
        #expect(
            admitted == [false, false, true, true, false],
            "another session naming the answering device stays out, before the seat's session joins and after")
        #expect(throws: CallError.alreadyAnswered) { try state.answer(by: "bob", device: "b-phone", seat: "p_thief", nowMillis: 2001) }
    }

    @Test func aSideTakenWithoutADeviceGoesToTheFirstDeviceThatJoins() throws {
        var state = CallState(
            id: "c1", appID: "app", caller: "alice", callerDevice: nil, callees: ["bob"], connected: ["bob"], phones: [:], now: t0,
            nowMillis: 1000, ringTimeout: .seconds(45))
        _ = try state.answer(by: "bob", device: nil, nowMillis: 2000)
        let admitted = [
            ("alice", "a-ipad", "s1"), ("alice", "a-phone", "s2"), ("bob", "b-phone", "s3"), ("bob", "b-ipad", "s4"), ("bob", "b-phone", "s3"),
            ("bob", "b-phone", "s5"),
        ].map { state.admitToRoom(identity: $0.0, device: $0.1, seat: $0.2) }
        #expect(
            admitted == [true, false, true, false, true, false],
            "the first session of each side takes it; other devices, and other sessions of its device, stay out")
    }

    @Test func aDeviceThatFilteredTheCallMakesItsUserUnavailableOnlyWhenNoOtherDeviceRings() throws {
        var state = call()
        state.rang("bob", devices: ["b-phone", "b-web"])
        #expect(try state.deviceOut("bob", device: "b-phone", nowMillis: 2000).isEmpty, "the browser still rings")
        #expect(state.isRinging)
        #expect(try state.deviceOut("bob", device: "b-phone", nowMillis: 2001).isEmpty, "the same device twice changes nothing")
        let effects = try state.deviceOut("bob", device: "b-web", nowMillis: 2002)
        #expect(types(effects, to: "alice") == ["call.unavailable", "call.ended"])
        #expect(effects.contains(.notify(identity: "alice", event: .unavailable(callID: "c1", callee: "bob"), except: nil)))
        #expect(state.outcome == .missed)
        #expect(state.endReason == "unavailable")
        #expect(effects.contains(.cancelRingTimer), "the caller does not wait for the ring timeout")
        #expect(!effects.contains { if case .push(.missedCall, _, _) = $0 { true } else { false } }, "a filtered call leaves no missed-call alert")
        // A device connecting later still rings: it joins the ones the call went to.
        var later = call()
        later.rang("bob", devices: ["b-phone"])
        later.rang("bob", devices: ["b-tablet"])
        #expect(try later.deviceOut("bob", device: "b-phone", nowMillis: 2000).isEmpty)
        #expect(later.isRinging)
    }

    @Test func holdIsToldToTheOtherParticipantsOnlyWhenItChanges() throws {
        var state = call(["bob", "carol"])
        #expect(throws: CallError.notRinging) { try state.hold(by: "alice", onHold: true) }  // not answered yet
        _ = try state.answer(by: "bob", device: "b-phone", nowMillis: 2000)
        let held = try state.hold(by: "bob", onHold: true)
        #expect(held == [.notify(identity: "alice", event: .held(callID: "c1", by: "bob", onHold: true), except: nil), .save], "carol has not answered")
        #expect(try state.hold(by: "bob", onHold: true).isEmpty, "holding twice says nothing")
        #expect(state.summary["on_hold"] == ["bob"])
        #expect(throws: CallError.notRinging) { try state.hold(by: "carol", onHold: true) }
        #expect(throws: CallError.notParticipant) { try state.hold(by: "mallory", onHold: true) }
        _ = try state.end(by: "alice", device: "a-phone", reason: nil, nowMillis: 3000)
        #expect(state.summary["on_hold"] == [])
        #expect(throws: CallError.ended) { try state.hold(by: "bob", onHold: false) }
    }

    @Test func refusalsCarryAStableReason() throws {
        var state = call()
        _ = try state.answer(by: "bob", device: "b-phone", nowMillis: 2000)
        #expect(throws: CallError.alreadyAnswered) { try state.answer(by: "bob", device: "b-ipad", nowMillis: 2001) }
        #expect(CallError.alreadyAnswered.body.reason == CallRefusal.answeredElsewhere.rawValue)
        #expect(throws: CallError.notCancellable) { try state.cancel(by: "alice", nowMillis: 2002) }
        _ = try state.end(by: "alice", device: "a-phone", reason: nil, nowMillis: 3000)
        #expect(throws: CallError.ended) { try state.end(by: "bob", device: "b-phone", reason: nil, nowMillis: 3001) }
        #expect(throws: CallError.ended) { try state.deviceOut("bob", device: "b-phone", nowMillis: 3002) }
        for error in [CallError.notFound, .notParticipant, .ended, .notRinging, .notCancellable, .alreadyAnswered] {
            #expect(error.body.reason.flatMap(CallRefusal.init(rawValue:)) != nil, "\(error)")
        }
    }

    @Test func everyCallEventReadsBackAsItself() {
        let events: [CallEvent] = [
            .incoming(callID: "c1", invite: ["call_id": "c1", "video": true]), .ringing(callID: "c1", callee: "bob"),
            .accepted(callID: "c1", by: "bob"), .answeredElsewhere(callID: "c1", device: "b"), .answeredElsewhere(callID: "c1", device: nil),
            .declined(callID: "c1", by: "bob"), .declinedElsewhere(callID: "c1", device: "b"), .busy(callID: "c1", callee: "bob"),
            .unavailable(callID: "c1", callee: "bob"), .cancelled(callID: "c1"), .missed(callID: "c1", reason: "timeout"),
            .ended(callID: "c1", outcome: .completed, by: "alice", reason: "hangup"), .ended(callID: "c1", outcome: .failed, by: nil, reason: "x"),
            .held(callID: "c1", by: "bob", onHold: true),
        ]
        for event in events {
            #expect(CallEvent(type: event.type, data: event.data) == event, "\(event)")
        }
        #expect(Set(events.map(\.kind)) == Set(CallEvent.Kind.allCases))
        #expect(CallEvent(type: "call.ended", data: ["call_id": "c1", "outcome": "bogus"]) == nil)
        #expect(CallEvent(type: "room.data", data: ["call_id": "c1"]) == nil)
    }

    @Test func strangersCannotActOnACall() {
        var state = call()
        #expect(throws: CallError.notParticipant) { try state.answer(by: "mallory", device: "m", nowMillis: 2000) }
        #expect(throws: CallError.notParticipant) { try state.end(by: "mallory", device: "m", reason: nil, nowMillis: 2000) }
    }
}
