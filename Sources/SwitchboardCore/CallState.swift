import SwitchboardProtocol
import SwitchboardSupport

/// Why a call action was refused.
package enum CallError: Error, Equatable {
    case notFound
    case notParticipant
    /// The call is over.
    case ended
    /// It no longer rings for this user (declined, missed...).
    case notRinging
    /// Only a ringing call can be cancelled.
    case notCancellable
    /// Another device of this user answered first.
    case alreadyAnswered

    package var body: ErrorBody {
        switch self {
        case .notFound: ErrorBody(.notFound, "no such call", reason: CallRefusal.unknownCall.rawValue)
        case .notParticipant:
            ErrorBody(.forbidden, "you are not a participant of this call", reason: CallRefusal.notParticipant.rawValue)
        case .ended: ErrorBody(.conflict, "the call has already ended", reason: CallRefusal.callEnded.rawValue)
        case .notRinging: ErrorBody(.conflict, "the call is no longer ringing for you", reason: CallRefusal.notRinging.rawValue)
        case .notCancellable:
            ErrorBody(.conflict, "only a ringing call can be cancelled; end it instead", reason: CallRefusal.notCancellable.rawValue)
        case .alreadyAnswered:
            ErrorBody(.conflict, "the call was already answered on another device", reason: CallRefusal.answeredElsewhere.rawValue)
        }
    }
}

/// One call as a value: events in, effects out. No sockets, no clock reads: the caller passes
/// `now` and performs the effects (sending events, pushes, timers, storage).
package struct CallState: Equatable {
    package enum Phase: Equatable {
        case ringing
        case accepted
        case ended(CallOutcome)
    }

    /// Where one callee stands.
    package enum CalleeStatus: String, Equatable {
        /// `unavailable`: every device that rang filtered the call (Do Not Disturb, block list).
        case ringing, accepted, declined, missed, busy, unreachable, unavailable
    }

    /// A device of a participant: a registered device id, or `session:<peer id>` for a
    /// connection without one.
    package typealias DeviceKey = String

    /// A callee's device that can ring without a connection (an iPhone with a push token), as
    /// the call sees it: which pushes it can take. The call decides which it gets.
    package struct PhoneDevice: Equatable, Sendable {
        package let id: DeviceKey
        /// CallKit is on and it has a VoIP token.
        package let voip: Bool
        /// It has a regular APNs token.
        package let alert: Bool

        package init(id: DeviceKey, voip: Bool, alert: Bool) {
            self.id = id
            self.voip = voip
            self.alert = alert
        }
    }

    /// The pushes a call sends.
    package enum Push: Equatable, Sendable {
        /// The invite through PushKit: CallKit shows it (it must be reported to CallKit at once).
        case voipInvite
        /// The invite as a visible alert, on a device without CallKit (mainland China, or off).
        case alertInvite
        /// A missed-call notice: always an alert, never VoIP (a VoIP push must ring).
        case missedCall
    }

    /// How one push of the call is sent, decided by the call: what the owner hands APNs.
    package struct PushDelivery: Equatable, Sendable {
        /// How long the sender may keep trying (retries after a throttle or a lost connection).
        package let deadline: ContinuousClock.Instant
        /// The push is worth sending only while the call rings: a VoIP push must make the phone
        /// ring, so one sent after the call stopped would ring a call that is over.
        package let onlyWhileRinging: Bool
        /// `apns-expiration`, seconds since 1970: APNs keeps an undelivered VoIP invite until
        /// the ring expires and no longer; nil (an alert): APNs' own default.
        package let expiresAtSeconds: Int64?
        /// `apns-collapse-id`: a call's alerts replace each other on the lock screen (the
        /// missed-call notice replaces the invite's alert).
        package let collapseID: String?
    }

    /// What APNs said of one push of an invite.
    package enum PushOutcome: Equatable, Sendable {
        /// APNs took it: the device will be woken.
        case accepted
        /// APNs answered with an error (a dead token, a wrong topic, a final throttle): this
        /// device will not ring.
        case refused
        /// No answer (the connection failed, the deadline passed, no credentials): nobody
        /// knows, so the device keeps its place in the ringing.
        case unanswered
    }

    /// What the owner of the call must do, in order.
    package enum Effect: Equatable {
        /// Send `event` to every device of `identity` (except one).
        case notify(identity: String, event: CallEvent, except: DeviceKey?)
        /// Deliver the invite to every connection of `callee`; the owner tells the call which
        /// devices it reached (`rang`) and that the callee was reached (`reached`).
        case ringConnections(callee: String)
        /// Send `push` to `device` of `callee`.
        case push(Push, callee: String, device: DeviceKey)
        /// Call `ringTimedOut` after this long, unless `cancelRingTimer` comes first.
        case armRingTimer(after: Duration)
        case cancelRingTimer
        /// Write the call's record as it now stands (last in a transition that changed it).
        case save
        /// The call ended: write each participant's history entry.
        case recordHistory
        /// The call ended: release its room and forget it.
        case finished
    }

    package let id: String
    package let appID: String
    package let caller: String
    /// The caller's device placing the call; nil when it was placed over REST without naming
    /// one (the first of the caller's devices to join the call's room then takes it).
    package private(set) var callerDevice: DeviceKey?
    package let callees: [String]
    package private(set) var phase = Phase.ringing
    package private(set) var status: [String: CalleeStatus]
    /// Which device of each accepting callee answered (none when it answered over REST without
    /// naming one: its first device to join the call's room takes the call).
    package private(set) var answeredOn: [String: DeviceKey] = [:]
    /// The session (connection) that holds each participant's side: the one that placed or
    /// answered the call, or, for a side taken over REST, the first of that device's sessions
    /// to join the call's room. The room admits that session only: a `device_id` is the
    /// client's word, and another device of the same user could say the same one.
    package private(set) var seats: [String: String] = [:]
    /// The devices of each callee the call was sent to (connections and pushes), and those
    /// that filtered it: a callee whose every device filtered it is unavailable.
    package private(set) var rungDevices: [String: Set<DeviceKey>] = [:]
    package private(set) var filteredDevices: [String: Set<DeviceKey>] = [:]
    /// Each callee's phones known when the call started: the invite's and the missed-call
    /// notice's pushes go to them.
    package let phones: [String: [PhoneDevice]]
    /// The participants who put the call on hold.
    package private(set) var onHold: Set<String> = []
    package private(set) var callerToldRinging = false
    package let createdAt: ContinuousClock.Instant
    package let ringExpiresAt: ContinuousClock.Instant
    /// Wall-clock milliseconds, for history and payloads.
    package let createdAtMillis: Int64
    package let ringExpiresAtMillis: Int64
    package private(set) var answeredAtMillis: Int64?
    package private(set) var endedAtMillis: Int64?
    package private(set) var endedBy: String?
    package private(set) var endReason: String?

    /// A call from `caller` to `callees`. A callee already in an answered call (`inCall`) is
    /// busy unless the caller asked to ring anyway (`busyPolicy`); one with neither a
    /// connection (`connected`) nor a phone that takes a push (`phones`) is unreachable; the
    /// others ring.
    package init(
        id: String, appID: String, caller: String, callerDevice: DeviceKey?, callerSeat: String? = nil, callees: [String],
        inCall: Set<String> = [],
        busyPolicy: BusyPolicy = .reject, connected: Set<String>, phones: [String: [PhoneDevice]], now: ContinuousClock.Instant,
        nowMillis: Int64, ringTimeout: Duration
    ) {
        self.id = id
        self.appID = appID
        self.caller = caller
        self.callerDevice = callerDevice
        if let callerSeat { seats[caller] = callerSeat }
        self.callees = callees
        createdAt = now
        ringExpiresAt = now + ringTimeout
        createdAtMillis = nowMillis
        ringExpiresAtMillis = nowMillis + Int64(ringTimeout.components.seconds * 1000)
        self.phones = phones.mapValues { $0.filter { $0.voip || $0.alert } }
        var status: [String: CalleeStatus] = [:]
        for callee in callees {
            let reachable = connected.contains(callee) || !(self.phones[callee] ?? []).isEmpty
            let busy = busyPolicy == .reject && inCall.contains(callee)
            status[callee] = busy ? .busy : reachable ? .ringing : .unreachable
        }
        self.status = status
    }

    package var isGroup: Bool { callees.count > 1 }
    package var isRinging: Bool { phase == .ringing }
    package var isEnded: Bool { if case .ended = phase { true } else { false } }
    package var outcome: CallOutcome? { if case .ended(let outcome) = phase { outcome } else { nil } }

    /// The callees still ringing.
    package var ringingCallees: [String] { callees.filter { status[$0] == .ringing } }

    /// Right after creation: saves the call, then rings every callee who can ring (its
    /// connections, and each phone by the push it takes: VoIP where CallKit is on, else an
    /// alert) under the ring timer; tells the caller who is busy. A call nobody can take
    /// (everyone busy or unreachable) ends at once.
    package mutating func start(nowMillis: Int64) -> [Effect] {
        var effects: [Effect] = [.save]
        if !ringingCallees.isEmpty { effects.append(.armRingTimer(after: ringExpiresAt - createdAt)) }
        for callee in ringingCallees {
            effects.append(.ringConnections(callee: callee))
            for phone in phones[callee] ?? [] {
                effects.append(.push(phone.voip ? .voipInvite : .alertInvite, callee: callee, device: phone.id))
                rungDevices[callee, default: []].insert(phone.id)
            }
        }
        for callee in callees where status[callee] == .busy {
            effects.append(.notify(identity: caller, event: .busy(callID: id, callee: callee), except: nil))
        }
        guard ringingCallees.isEmpty else { return effects }
        let allBusy = callees.allSatisfy { status[$0] == .busy }
        return effects + finish(allBusy ? .busy : .failed, by: nil, reason: allBusy ? "busy" : "unreachable", nowMillis: nowMillis)
    }

    /// The missed-call notices of `callee`: one alert to each of its phones that takes one.
    private func missedCallNotices(_ callee: String) -> [Effect] {
        (phones[callee] ?? []).filter(\.alert).map { .push(.missedCall, callee: callee, device: $0.id) }
    }

    /// How `push` is sent now: a VoIP invite is tried until the ring expires and only while
    /// the call rings; an alert (an invite without CallKit, a missed-call notice) for 30 s.
    package func delivery(of push: Push, now: ContinuousClock.Instant) -> PushDelivery {
        switch push {
        case .voipInvite:
            PushDelivery(deadline: ringExpiresAt, onlyWhileRinging: true, expiresAtSeconds: ringExpiresAtMillis / 1000, collapseID: nil)
        case .alertInvite, .missedCall:
            PushDelivery(deadline: now + .seconds(30), onlyWhileRinging: false, expiresAtSeconds: nil, collapseID: id)
        }
    }

    /// What APNs said of an invite's push to `device` of `callee`: accepted, the callee was
    /// reached; refused, that device is out of the ringing (`deviceOut`); unanswered, nothing
    /// changes. A missed-call notice's answer changes nothing either.
    package mutating func pushAnswered(
        _ push: Push, callee: String, device: DeviceKey, outcome: PushOutcome, nowMillis: Int64
    ) -> [Effect] {
        guard push != .missedCall else { return [] }
        switch outcome {
        case .accepted: return reached(callee: callee)
        case .refused: return (try? deviceOut(callee, device: device, nowMillis: nowMillis)) ?? []
        case .unanswered: return []
        }
    }

    /// A callee's device was reached (WebSocket delivery, APNs accepted the push, or the device
    /// acknowledged the ring). The caller hears `call.ringing` once.
    package mutating func reached(callee: String) -> [Effect] {
        guard isRinging || phase == .accepted, status[callee] == .ringing, !callerToldRinging else { return [] }
        callerToldRinging = true
        return [.notify(identity: caller, event: .ringing(callID: id, callee: callee), except: nil)]
    }

    /// The first answer wins; a second answer from the same user's other device is refused.
    /// `seat`: the session that answered, which alone may then take the callee's side in the
    /// call's room (nil over REST).
    package mutating func answer(by callee: String, device: DeviceKey?, seat: String? = nil, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard let current = status[callee] else { throw .notParticipant }
        if current == .accepted {
            if answeredOn[callee] == device && (seat == nil || seats[callee] == nil || seats[callee] == seat) { return [] }  // asked again
            throw .alreadyAnswered
        }
        guard !isEnded else { throw .ended }
        guard current == .ringing else { throw .notRinging }
        status[callee] = .accepted
        if let device { answeredOn[callee] = device }
        if let seat { seats[callee] = seat }
        var effects: [Effect] = []
        if phase == .ringing {
            phase = .accepted
            answeredAtMillis = nowMillis
        }
        let accepted = CallEvent.accepted(callID: id, by: callee)
        effects.append(.notify(identity: caller, event: accepted, except: nil))
        for other in callees where other != callee && status[other] == .accepted {
            effects.append(.notify(identity: other, event: accepted, except: nil))
        }
        effects.append(.notify(identity: callee, event: .answeredElsewhere(callID: id, device: device), except: device))
        if ringingCallees.isEmpty { effects.append(.cancelRingTimer) }
        return effects + [.save]
    }

    /// A decline ends a 1:1 call; in a group it stops only that callee's ringing.
    package mutating func decline(by callee: String, device: DeviceKey?, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard let current = status[callee] else { throw .notParticipant }
        guard !isEnded else { throw .ended }
        guard current == .ringing else { throw .notRinging }
        status[callee] = .declined
        let effects: [Effect] = [
            .notify(identity: callee, event: .declinedElsewhere(callID: id, device: device), except: device),
            .notify(identity: caller, event: .declined(callID: id, by: callee), except: nil),
        ]
        return effects + afterCalleeStopped(nowMillis: nowMillis, ifNoneRinging: .declined, by: callee, reason: "declined") + [.save]
    }

    /// The call went to `devices` of `callee` (its connections, its phones by push).
    package mutating func rang(_ callee: String, devices: Set<DeviceKey>) {
        guard status[callee] == .ringing else { return }
        rungDevices[callee, default: []].formUnion(devices)
    }

    /// A device of `callee` did not show the call (Do Not Disturb, Focus, block list) or could not
    /// be reached (APNs refused its token). Once every device it went to is out, the callee is
    /// unavailable and the caller hears it at once, not after the ring timeout.
    package mutating func deviceOut(_ callee: String, device: DeviceKey, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard let current = status[callee] else { throw .notParticipant }
        guard !isEnded else { throw .ended }
        guard current == .ringing else { return [] }
        filteredDevices[callee, default: []].insert(device)
        guard let rung = rungDevices[callee], rung.isSubset(of: filteredDevices[callee] ?? []) else { return [] }
        status[callee] = .unavailable
        let effects: [Effect] = [.notify(identity: caller, event: .unavailable(callID: id, callee: callee), except: nil)]
        return effects + afterCalleeStopped(nowMillis: nowMillis, ifNoneRinging: .missed, by: nil, reason: "unavailable") + [.save]
    }

    /// A callee stopped ringing: a call nobody answered ends once nobody rings (declined if
    /// anyone declined, else `outcome`); an answered one only loses its ring timer.
    private mutating func afterCalleeStopped(nowMillis: Int64, ifNoneRinging outcome: CallOutcome, by: String?, reason: String) -> [Effect] {
        guard ringingCallees.isEmpty else { return [] }
        guard phase == .ringing else { return [.cancelRingTimer] }
        let anyDeclined = callees.contains { status[$0] == .declined }
        return finish(anyDeclined ? .declined : outcome, by: anyDeclined ? by ?? callees.first { status[$0] == .declined } : by,
            reason: anyDeclined ? "declined" : reason, nowMillis: nowMillis)
    }

    /// A participant puts the call on hold (or takes it off): the others hear it.
    package mutating func hold(by identity: String, onHold held: Bool) throws(CallError) -> [Effect] {
        guard identity == caller || status[identity] != nil else { throw .notParticipant }
        guard !isEnded else { throw .ended }
        guard phase == .accepted, identity == caller || status[identity] == .accepted else { throw .notRinging }
        guard held != onHold.contains(identity) else { return [] }
        if held { onHold.insert(identity) } else { onHold.remove(identity) }
        let event = CallEvent.held(callID: id, by: identity, onHold: held)
        let others = ([caller] + callees).filter { $0 != identity && ($0 == caller || status[$0] == .accepted) }
        return others.map { .notify(identity: $0, event: event, except: nil) } + [.save]
    }

    /// The caller hangs up while it rings: every ringing callee is told, and gets a missed-call notice.
    package mutating func cancel(by identity: String, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard identity == caller else { throw .notParticipant }
        guard !isEnded else { throw .ended }
        guard phase == .ringing else { throw .notCancellable }
        var effects: [Effect] = []
        for callee in ringingCallees {
            status[callee] = .missed
            effects.append(.notify(identity: callee, event: .cancelled(callID: id), except: nil))
            effects += missedCallNotices(callee)
        }
        return effects + finish(.cancelled, by: identity, reason: "cancelled", nowMillis: nowMillis) + [.save]
    }

    /// The ring timeout: every callee still ringing missed it. A call nobody answered ends.
    package mutating func ringTimedOut(nowMillis: Int64) -> [Effect] {
        guard !isEnded, !ringingCallees.isEmpty || phase == .ringing else { return [] }
        var effects: [Effect] = []
        for callee in ringingCallees {
            status[callee] = .missed
            effects.append(.notify(identity: callee, event: .missed(callID: id, reason: "timeout"), except: nil))
            effects += missedCallNotices(callee)
        }
        if phase == .ringing {
            let anyDeclined = callees.contains { status[$0] == .declined }
            effects += finish(anyDeclined ? .declined : .missed, by: nil, reason: "timeout", nowMillis: nowMillis)
        } else {
            effects.append(.cancelRingTimer)  // the timer that fired is spent
        }
        return effects + [.save]
    }

    /// A participant ends the call. While it rings, the caller's end is a cancel and a
    /// callee's a decline.
    package mutating func end(by identity: String, device: DeviceKey?, reason: String?, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard identity == caller || status[identity] != nil else { throw .notParticipant }
        guard !isEnded else { throw .ended }
        if phase == .ringing {
            if identity == caller { return try cancel(by: identity, nowMillis: nowMillis) }
            return try decline(by: identity, device: device, nowMillis: nowMillis)
        }
        if identity != caller && status[identity] != .accepted {
            // A group callee who never answered stops ringing.
            return try decline(by: identity, device: device, nowMillis: nowMillis)
        }
        var effects: [Effect] = []
        for callee in ringingCallees {
            status[callee] = .missed
            effects.append(.notify(identity: callee, event: .missed(callID: id, reason: "ended"), except: nil))
            effects += missedCallNotices(callee)
        }
        return effects + finish(.completed, by: identity, reason: reason ?? "hangup", nowMillis: nowMillis) + [.save]
    }

    /// Whether session `seat` on `device` of `identity` may be in the call's room: the
    /// caller's calling session, and each callee's answering session once it answered, while
    /// the call is not over. A side taken over REST goes to the first session that asks on
    /// the device it named (any of that user's devices when it named none), and is that
    /// session's from then on. The other devices and sessions of a participant stay out: the
    /// call is on the connection that took it.
    package mutating func admitToRoom(identity: String, device: DeviceKey, seat: String) -> Bool {
        guard !isEnded else { return false }
        if identity == caller {
            if callerDevice == nil { callerDevice = device }
            guard callerDevice == device else { return false }
        } else {
            guard status[identity] == .accepted else { return false }
            if answeredOn[identity] == nil { answeredOn[identity] = device }
            guard answeredOn[identity] == device else { return false }
        }
        if seats[identity] == nil { seats[identity] = seat }
        return seats[identity] == seat
    }

    /// The server ends the call for a reason of its own: `max_duration` (it lasted
    /// `max_call_duration_seconds`) or `unattended` (nobody in it has been connected for
    /// `call_unattended_seconds`). An answered call is `completed` (callees still ringing in a
    /// group missed it); one still ringing has `failed`.
    package mutating func endByServer(reason: String, nowMillis: Int64) -> [Effect] {
        guard !isEnded else { return [] }
        guard phase == .accepted else { return fail(reason: reason, nowMillis: nowMillis) }
        var effects: [Effect] = []
        for callee in ringingCallees {
            status[callee] = .missed
            effects.append(.notify(identity: callee, event: .missed(callID: id, reason: "ended"), except: nil))
        }
        return effects + finish(.completed, by: nil, reason: reason, nowMillis: nowMillis) + [.save]
    }

    /// The participants in the call now: the caller and every callee who answered (while it
    /// rings, the caller alone).
    package var present: [String] { [caller] + callees.filter { status[$0] == .accepted } }

    /// The call cannot go on (server restart, internal failure).
    package mutating func fail(reason: String, nowMillis: Int64) -> [Effect] {
        guard !isEnded else { return [] }
        for callee in ringingCallees { status[callee] = .missed }
        return finish(.failed, by: nil, reason: reason, nowMillis: nowMillis) + [.save]
    }

    private mutating func finish(_ outcome: CallOutcome, by: String?, reason: String, nowMillis: Int64) -> [Effect] {
        phase = .ended(outcome)
        endedAtMillis = nowMillis
        endedBy = by
        endReason = reason
        onHold = []
        let ended = CallEvent.ended(callID: id, outcome: outcome, by: by, reason: reason)
        var effects: [Effect] = [.cancelRingTimer]
        for identity in [caller] + callees {
            effects.append(.notify(identity: identity, event: ended, except: nil))
        }
        return effects + [.recordHistory, .finished]
    }

    /// The other participants, as `identity`'s history lists them.
    package func peers(of identity: String) -> [String] {
        identity == caller ? callees : [caller] + callees.filter { $0 != identity }
    }

    /// The history outcome of `identity`'s side.
    package func historyOutcome(for identity: String) -> HistoryOutcome {
        let ended = outcome ?? .failed
        if identity == caller {
            switch ended {
            case .completed: return .completed
            case .missed: return .noAnswer
            case .declined: return .declined
            case .cancelled: return .cancelled
            case .busy: return .busy
            case .failed: return .failed
            }
        }
        switch status[identity] {
        case .accepted: return ended == .failed ? .failed : .completed
        case .declined: return .declined
        case .busy: return .busy
        case .missed, .ringing: return ended == .failed ? .failed : .missed
        case .unreachable, .unavailable, nil: return ended == .failed ? .failed : .missed
        }
    }

    /// The state as `GET /v1/calls/{id}` shows it.
    package var summary: JSONValue {
        let phaseName: String
        switch phase {
        case .ringing: phaseName = "ringing"
        case .accepted: phaseName = "accepted"
        case .ended: phaseName = "ended"
        }
        var callees: [JSONValue] = []
        for callee in self.callees {
            callees.append(["identity": .string(callee), "status": .string(status[callee]?.rawValue ?? "unknown")])
        }
        return [
            "call_id": .string(id), "state": .string(phaseName), "outcome": outcome.map { .string($0.rawValue) } ?? .null,
            "caller": .string(caller), "callees": .array(callees), "created_at": .int(createdAtMillis),
            "ring_expires_at": .int(ringExpiresAtMillis), "answered_at": answeredAtMillis.map(JSONValue.int) ?? .null,
            "ended_at": endedAtMillis.map(JSONValue.int) ?? .null, "ended_by": endedBy.map(JSONValue.string) ?? .null,
            "end_reason": endReason.map(JSONValue.string) ?? .null, "on_hold": .array(onHold.sorted().map(JSONValue.string)),
        ]
    }
}

// MARK: - Continuation

extension CallState {
    /// Everything a call needs to go on, as it stands, for another node to continue it
    /// (`CallState(continuing:now:nowMillis:)`): the times on the wall clock, since the
    /// monotonic clock is each process's own.
    package struct Snapshot: Codable, Equatable, Sendable {
        var id: String
        var appID: String
        var caller: String
        var callerDevice: String?
        var callees: [String]
        var phase: String
        var outcome: CallOutcome?
        var status: [String: String]
        var answeredOn: [String: String]
        var seats: [String: String]
        var rungDevices: [String: [String]]
        var filteredDevices: [String: [String]]
        var phones: [String: [Phone]]
        var onHold: [String]
        var callerToldRinging: Bool
        var createdAtMillis: Int64
        var ringExpiresAtMillis: Int64
        var answeredAtMillis: Int64?
        var endedAtMillis: Int64?
        var endedBy: String?
        var endReason: String?

        struct Phone: Codable, Equatable, Sendable {
            var id: String
            var voip: Bool
            var alert: Bool
        }

        /// The snapshot's members in the JSON its `Codable` conformance reads (a nil member
        /// left out), built without an encoder: a call in a cluster writes its snapshot at
        /// every transition, and Foundation's encoder cost more than the rest of the save.
        package var jsonMembers: [(String, JSONValue)] {
            func strings(_ list: [String]) -> JSONValue { .array(list.map(JSONValue.string)) }
            func object<Value>(_ map: [String: Value], _ value: (Value) -> JSONValue) -> JSONValue {
                .object(map.mapValues(value))
            }
            var members: [(String, JSONValue)] = [
                ("id", .string(id)), ("appID", .string(appID)), ("caller", .string(caller)),
            ]
            members.reserveCapacity(21)
            if let callerDevice { members.append(("callerDevice", .string(callerDevice))) }
            members.append(("callees", strings(callees)))
            members.append(("phase", .string(phase)))
            if let outcome { members.append(("outcome", .string(outcome.rawValue))) }
            members.append(("status", object(status, JSONValue.string)))
            members.append(("answeredOn", object(answeredOn, JSONValue.string)))
            members.append(("seats", object(seats, JSONValue.string)))
            members.append(("rungDevices", object(rungDevices, strings)))
            members.append(("filteredDevices", object(filteredDevices, strings)))
            members.append((
                "phones",
                object(phones) { list in
                    .array(list.map { ["id": .string($0.id), "voip": .bool($0.voip), "alert": .bool($0.alert)] })
                }
            ))
            members.append(("onHold", strings(onHold)))
            members.append(("callerToldRinging", .bool(callerToldRinging)))
            members.append(("createdAtMillis", .int(createdAtMillis)))
            members.append(("ringExpiresAtMillis", .int(ringExpiresAtMillis)))
            if let answeredAtMillis { members.append(("answeredAtMillis", .int(answeredAtMillis))) }
            if let endedAtMillis { members.append(("endedAtMillis", .int(endedAtMillis))) }
            if let endedBy { members.append(("endedBy", .string(endedBy))) }
            if let endReason { members.append(("endReason", .string(endReason))) }
            return members
        }
    }

    package var snapshot: Snapshot {
        let phaseName: String
        switch phase {
        case .ringing: phaseName = "ringing"
        case .accepted: phaseName = "accepted"
        case .ended: phaseName = "ended"
        }
        return Snapshot(
            id: id, appID: appID, caller: caller, callerDevice: callerDevice, callees: callees, phase: phaseName, outcome: outcome,
            status: status.mapValues(\.rawValue), answeredOn: answeredOn, seats: seats, rungDevices: rungDevices.mapValues { $0.sorted() },
            filteredDevices: filteredDevices.mapValues { $0.sorted() },
            phones: phones.mapValues { $0.map { Snapshot.Phone(id: $0.id, voip: $0.voip, alert: $0.alert) } }, onHold: onHold.sorted(),
            callerToldRinging: callerToldRinging, createdAtMillis: createdAtMillis, ringExpiresAtMillis: ringExpiresAtMillis,
            answeredAtMillis: answeredAtMillis, endedAtMillis: endedAtMillis, endedBy: endedBy, endReason: endReason)
    }

    /// The call a snapshot describes, continued at `now` (`nowMillis` on the wall clock): its
    /// ring deadline falls as far from now as the wall clock says. Nil when the snapshot does
    /// not describe a call (an unknown phase or status).
    package init?(continuing snapshot: Snapshot, now: ContinuousClock.Instant, nowMillis: Int64) {
        var status: [String: CalleeStatus] = [:]
        for (callee, name) in snapshot.status {
            guard let value = CalleeStatus(rawValue: name) else { return nil }
            status[callee] = value
        }
        switch snapshot.phase {
        case "ringing": phase = .ringing
        case "accepted": phase = .accepted
        case "ended": phase = .ended(snapshot.outcome ?? .failed)
        default: return nil
        }
        id = snapshot.id
        appID = snapshot.appID
        caller = snapshot.caller
        callerDevice = snapshot.callerDevice
        callees = snapshot.callees
        self.status = status
        answeredOn = snapshot.answeredOn
        seats = snapshot.seats
        rungDevices = snapshot.rungDevices.mapValues(Set.init)
        filteredDevices = snapshot.filteredDevices.mapValues(Set.init)
        phones = snapshot.phones.mapValues { $0.map { PhoneDevice(id: $0.id, voip: $0.voip, alert: $0.alert) } }
        onHold = Set(snapshot.onHold)
        callerToldRinging = snapshot.callerToldRinging
        createdAtMillis = snapshot.createdAtMillis
        ringExpiresAtMillis = snapshot.ringExpiresAtMillis
        createdAt = now - .milliseconds(nowMillis - snapshot.createdAtMillis)
        ringExpiresAt = now + .milliseconds(snapshot.ringExpiresAtMillis - nowMillis)
        answeredAtMillis = snapshot.answeredAtMillis
        endedAtMillis = snapshot.endedAtMillis
        endedBy = snapshot.endedBy
        endReason = snapshot.endReason
    }

    /// How long the ring timer has left at `now` (zero once the deadline passed), while anyone
    /// still rings; nil when nobody does.
    package func ringTimeLeft(at now: ContinuousClock.Instant) -> Duration? {
        guard !isEnded, !ringingCallees.isEmpty else { return nil }
        return max(.zero, ringExpiresAt - now)
    }
}
