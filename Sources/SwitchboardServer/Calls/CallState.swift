import SwitchboardProtocol

/// Why a call action was refused.
enum CallError: Error, Equatable {
    case notFound
    case notParticipant
    /// The call is past the point where this makes sense (answered, ended...).
    case invalidState(String)
    /// Another device of this user answered first.
    case alreadyAnswered

    var body: ErrorBody {
        switch self {
        case .notFound: ErrorBody(.notFound, "no such call")
        case .notParticipant: ErrorBody(.forbidden, "you are not a participant of this call")
        case .invalidState(let detail): ErrorBody(.conflict, detail)
        case .alreadyAnswered: ErrorBody(.conflict, "the call was already answered on another device")
        }
    }
}

/// One call as a value: events in, effects out. No sockets, no clock reads: the caller passes
/// `now` and performs the effects (sending events, pushes, timers, storage).
struct CallState: Equatable {
    enum Phase: Equatable {
        case ringing
        case accepted
        case ended(CallOutcome)
    }

    /// Where one callee stands.
    enum CalleeStatus: String, Equatable {
        case ringing, accepted, declined, missed, busy, unreachable
    }

    /// A device of a participant: a registered device id, or `session:<peer id>` for a
    /// connection without one.
    typealias DeviceKey = String

    /// What the owner of the call must do.
    enum Effect: Equatable {
        /// Send `type` with `data` to every device of `identity` (except one).
        case notify(identity: String, type: String, data: JSONValue, except: DeviceKey?)
        case cancelRingTimer
        /// A missed-call notice as an alert push to the callee's regular token (never VoIP).
        case missedCallAlert(identity: String)
        /// The call ended: write history, release the room.
        case finished
    }

    let id: String
    let appID: String
    let caller: String
    /// The caller's device placing the call; nil when it was placed over REST without naming
    /// one (the first of the caller's devices to join the call's room then takes it).
    private(set) var callerDevice: DeviceKey?
    let callees: [String]
    private(set) var phase = Phase.ringing
    private(set) var status: [String: CalleeStatus]
    /// Which device of each accepting callee answered (none when it answered over REST without
    /// naming one: its first device to join the call's room takes the call).
    private(set) var answeredOn: [String: DeviceKey] = [:]
    private(set) var callerToldRinging = false
    let createdAt: ContinuousClock.Instant
    let ringExpiresAt: ContinuousClock.Instant
    /// Wall-clock milliseconds, for history and payloads.
    let createdAtMillis: Int64
    let ringExpiresAtMillis: Int64
    private(set) var answeredAtMillis: Int64?
    private(set) var endedAtMillis: Int64?
    private(set) var endedBy: String?
    private(set) var endReason: String?

    init(
        id: String, appID: String, caller: String, callerDevice: DeviceKey?, callees: [String], busy: Set<String>,
        unreachable: Set<String>, now: ContinuousClock.Instant, nowMillis: Int64, ringTimeout: Duration
    ) {
        self.id = id
        self.appID = appID
        self.caller = caller
        self.callerDevice = callerDevice
        self.callees = callees
        createdAt = now
        ringExpiresAt = now + ringTimeout
        createdAtMillis = nowMillis
        ringExpiresAtMillis = nowMillis + Int64(ringTimeout.components.seconds * 1000)
        var status: [String: CalleeStatus] = [:]
        for callee in callees {
            status[callee] = busy.contains(callee) ? .busy : unreachable.contains(callee) ? .unreachable : .ringing
        }
        self.status = status
    }

    var isGroup: Bool { callees.count > 1 }
    var isRinging: Bool { phase == .ringing }
    var isEnded: Bool { if case .ended = phase { true } else { false } }
    var outcome: CallOutcome? { if case .ended(let outcome) = phase { outcome } else { nil } }

    /// The callees still ringing.
    var ringingCallees: [String] { callees.filter { status[$0] == .ringing } }

    private var base: [String: JSONValue] { ["call_id": .string(id)] }

    private func data(_ extra: [String: JSONValue]) -> JSONValue {
        .object(base.merging(extra) { _, new in new })
    }

    /// Right after creation: ends a call nobody can take (everyone busy or unreachable).
    mutating func start(nowMillis: Int64) -> [Effect] {
        var effects: [Effect] = []
        for callee in callees where status[callee] == .busy {
            effects.append(.notify(identity: caller, type: "call.busy", data: data(["callee": .string(callee)]), except: nil))
        }
        guard ringingCallees.isEmpty else { return effects }
        let allBusy = callees.allSatisfy { status[$0] == .busy }
        return effects + finish(allBusy ? .busy : .failed, by: nil, reason: allBusy ? "busy" : "unreachable", nowMillis: nowMillis)
    }

    /// A callee's device was reached (WebSocket delivery, APNs accepted the push, or the device
    /// acknowledged the ring). The caller hears `call.ringing` once.
    mutating func reached(callee: String) -> [Effect] {
        guard isRinging || phase == .accepted, status[callee] == .ringing, !callerToldRinging else { return [] }
        callerToldRinging = true
        return [.notify(identity: caller, type: "call.ringing", data: data(["callee": .string(callee)]), except: nil)]
    }

    /// The first answer wins; a second answer from the same user's other device is refused.
    mutating func answer(by callee: String, device: DeviceKey?, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard let current = status[callee] else { throw .notParticipant }
        if current == .accepted {
            if answeredOn[callee] == device { return [] }  // the same device asking again
            throw .alreadyAnswered
        }
        guard current == .ringing, !isEnded else { throw .invalidState("the call is no longer ringing for you") }
        status[callee] = .accepted
        if let device { answeredOn[callee] = device }
        var effects: [Effect] = []
        if phase == .ringing {
            phase = .accepted
            answeredAtMillis = nowMillis
        }
        let accepted = data(["by": .string(callee)])
        effects.append(.notify(identity: caller, type: "call.accepted", data: accepted, except: nil))
        for other in callees where other != callee && status[other] == .accepted {
            effects.append(.notify(identity: other, type: "call.accepted", data: accepted, except: nil))
        }
        effects.append(
            .notify(identity: callee, type: "call.answered_elsewhere", data: data(["device": device.map(JSONValue.string) ?? .null]), except: device))
        if ringingCallees.isEmpty { effects.append(.cancelRingTimer) }
        return effects
    }

    /// A decline ends a 1:1 call; in a group it stops only that callee's ringing.
    mutating func decline(by callee: String, device: DeviceKey?, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard let current = status[callee] else { throw .notParticipant }
        guard current == .ringing, !isEnded else { throw .invalidState("the call is no longer ringing for you") }
        status[callee] = .declined
        var effects: [Effect] = [
            .notify(identity: callee, type: "call.declined_elsewhere", data: data(["device": device.map(JSONValue.string) ?? .null]), except: device),
            .notify(identity: caller, type: "call.declined", data: data(["by": .string(callee)]), except: nil),
        ]
        if ringingCallees.isEmpty && phase == .ringing {
            effects += finish(.declined, by: callee, reason: "declined", nowMillis: nowMillis)
        } else if ringingCallees.isEmpty {
            effects.append(.cancelRingTimer)
        }
        return effects
    }

    /// The caller hangs up while it rings: every ringing callee is told, and gets a missed-call notice.
    mutating func cancel(by identity: String, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard identity == caller else { throw .notParticipant }
        guard phase == .ringing else { throw .invalidState("only a ringing call can be cancelled; end it instead") }
        var effects: [Effect] = []
        for callee in ringingCallees {
            status[callee] = .missed
            effects.append(.notify(identity: callee, type: "call.cancelled", data: data(["reason": "cancelled"]), except: nil))
            effects.append(.missedCallAlert(identity: callee))
        }
        return effects + finish(.cancelled, by: identity, reason: "cancelled", nowMillis: nowMillis)
    }

    /// The ring timeout: every callee still ringing missed it. A call nobody answered ends.
    mutating func ringTimedOut(nowMillis: Int64) -> [Effect] {
        guard !isEnded else { return [] }
        var effects: [Effect] = []
        for callee in ringingCallees {
            status[callee] = .missed
            effects.append(.notify(identity: callee, type: "call.missed", data: data(["reason": "timeout"]), except: nil))
            effects.append(.missedCallAlert(identity: callee))
        }
        if phase == .ringing {
            let anyDeclined = callees.contains { status[$0] == .declined }
            effects += finish(anyDeclined ? .declined : .missed, by: nil, reason: "timeout", nowMillis: nowMillis)
        }
        return effects
    }

    /// A participant ends the call. While it rings, the caller's end is a cancel and a
    /// callee's a decline.
    mutating func end(by identity: String, device: DeviceKey?, reason: String?, nowMillis: Int64) throws(CallError) -> [Effect] {
        guard identity == caller || status[identity] != nil else { throw .notParticipant }
        guard !isEnded else { throw .invalidState("the call has already ended") }
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
            effects.append(.notify(identity: callee, type: "call.missed", data: data(["reason": "ended"]), except: nil))
            effects.append(.missedCallAlert(identity: callee))
        }
        return effects + finish(.completed, by: identity, reason: reason ?? "hangup", nowMillis: nowMillis)
    }

    /// Whether `device` of `identity` may be in the call's room: the caller's calling device,
    /// and each callee's answering device once it answered, while the call is not over. A side
    /// taken over REST without a device id goes to the first of that user's devices that asks.
    /// The other devices of a participant stay out: the call is on the device that took it.
    mutating func admitToRoom(identity: String, device: DeviceKey) -> Bool {
        guard !isEnded else { return false }
        if identity == caller {
            if callerDevice == nil { callerDevice = device }
            return callerDevice == device
        }
        guard status[identity] == .accepted else { return false }
        if answeredOn[identity] == nil { answeredOn[identity] = device }
        return answeredOn[identity] == device
    }

    /// The call cannot go on (server restart, internal failure).
    mutating func fail(reason: String, nowMillis: Int64) -> [Effect] {
        guard !isEnded else { return [] }
        for callee in ringingCallees { status[callee] = .missed }
        return finish(.failed, by: nil, reason: reason, nowMillis: nowMillis)
    }

    private mutating func finish(_ outcome: CallOutcome, by: String?, reason: String, nowMillis: Int64) -> [Effect] {
        phase = .ended(outcome)
        endedAtMillis = nowMillis
        endedBy = by
        endReason = reason
        let ended = data([
            "outcome": .string(outcome.rawValue), "by": by.map(JSONValue.string) ?? .null, "reason": .string(reason),
        ])
        var effects: [Effect] = [.cancelRingTimer]
        for identity in [caller] + callees {
            effects.append(.notify(identity: identity, type: "call.ended", data: ended, except: nil))
        }
        effects.append(.finished)
        return effects
    }

    /// The other participants, as `identity`'s history lists them.
    func peers(of identity: String) -> [String] {
        identity == caller ? callees : [caller] + callees.filter { $0 != identity }
    }

    /// The history outcome of `identity`'s side.
    func historyOutcome(for identity: String) -> HistoryOutcome {
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
        case .unreachable, nil: return ended == .failed ? .failed : .missed
        }
    }

    /// The state as `GET /v1/calls/{id}` shows it.
    var summary: JSONValue {
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
            "end_reason": endReason.map(JSONValue.string) ?? .null,
        ]
    }
}
