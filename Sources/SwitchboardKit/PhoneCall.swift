import Foundation
import SwitchboardProtocol

/// What the call manager tells the app.
public enum CallManagerEvent: Sendable, Equatable {
    case incoming(UUID, CallUpdate)
    case outgoingStarted(UUID)
    /// The call is up (answered here, or the callee answered an outgoing call).
    case connected(UUID)
    case ended(UUID, CallEndedReason)
    /// The user ended (or declined) the call on this device.
    case endedLocally(UUID)
    /// The system did not show an incoming call (Do Not Disturb, a Focus, the block list...);
    /// the server was told, so the caller hears "unavailable" at once.
    case reportRefused(UUID, CallSystemError)
    /// The system activated (true) or deactivated the audio session: start or stop media.
    /// `call`: the call whose media runs now (up here and not on hold: after "Hold & Accept",
    /// the new one), or the one that had it when the session went; nil when none is known.
    case audioActive(Bool, call: UUID?)
    /// A call is up here but the system has not activated the audio session within
    /// `CallManager.audioActivationTimeout` (an iOS fault apps meet in the field): there is no
    /// audio until it does. Offer the user a way on (hold and resume the call, which asks the
    /// system again, or end it).
    case audioNotActivated(UUID)
    /// The call's microphone was muted or unmuted (the system's mute action: its button,
    /// AirPods, or `CallManager.setMuted`): mute the app's audio input, and keep the audio
    /// session and its upstream running (live translation goes on while muted).
    case muted(UUID, Bool)
    /// iOS 26: the user turned the system's live translation of the call on or off.
    case translating(UUID, Bool, localLanguage: String, remoteLanguage: String)
    /// The user put the call on hold here (pause media) or took it off.
    case held(UUID, Bool)
    /// The other side put the call on hold, or took it off.
    case remoteHeld(UUID, by: String, onHold: Bool)
}

/// One call on this phone, as a value: what happens to it goes in, what to do comes out (the
/// manager performs it). No clock, no system, no network here; like the server's `CallState`.
///
/// The rule it keeps above all: the system's call UI hears about a call's end only once it
/// has shown the call (its report completion came back), so an end decided earlier waits for
/// that completion, and a call that ended is never left ringing when it is shown again.
struct PhoneCall: Equatable {
    enum Phase: Equatable {
        /// Ringing here (incoming).
        case ringing
        /// Answered here; waiting for the server to confirm.
        case answering
        /// Placed here; the callee has not answered.
        case calling
        /// Up.
        case active
        case ended(CallEndedReason)
    }

    /// Where the system's call UI stands with the call.
    enum Report: Equatable {
        /// Asked to show it; its completion has not come back.
        case pending
        /// It shows the call (or showed it).
        case shown
        /// It refused to show it.
        case refused(CallSystemError)
    }

    /// What the manager must do.
    enum Effect: Equatable {
        /// Ask the system to show the call (`reportNewIncomingCall`).
        case report(CallUpdate)
        /// Tell the system the call ended (`reportCall(endedAt:reason:)`).
        case endOnSystem(CallEndedReason)
        /// Tell the system the outgoing call connected.
        case connectedOnSystem
        /// Send a call request to the server (no reply awaited).
        case tellServer(type: String, CallActionRequest)
        /// Send `call.hold`.
        case tellServerHold(Bool)
        case event(CallManagerEvent)
    }

    let id: UUID
    let incoming: Bool
    private(set) var phase: Phase
    private(set) var report: Report
    private(set) var update: CallUpdate
    /// The call's room on the server, once known.
    var room: String?
    private(set) var onHold = false
    /// When it ended (for forgetting old calls).
    private(set) var endedAt: Date?

    private var callID: String { id.uuidString.lowercased() }

    var isEnded: Bool { if case .ended = phase { true } else { false } }
    var endReason: CallEndedReason? { if case .ended(let reason) = phase { reason } else { nil } }

    // MARK: Creating

    /// An incoming call (a VoIP push, an alert push or a WebSocket invite): shown, then ringing.
    static func incoming(_ id: UUID, update: CallUpdate, room: String? = nil) -> (PhoneCall, [Effect]) {
        let call = PhoneCall(id: id, incoming: true, phase: .ringing, report: .pending, update: update, room: room)
        return (call, [.report(update), .event(.incoming(id, update))])
    }

    /// A call placed here: the system shows it through its start action.
    static func outgoing(_ id: UUID, update: CallUpdate, room: String?) -> PhoneCall {
        PhoneCall(id: id, incoming: false, phase: .calling, report: .shown, update: update, room: room)
    }

    /// A call the system already shows that this run of the app did not report (left by an
    /// earlier run) and the server says still rings for this user.
    static func adopted(_ id: UUID, update: CallUpdate) -> PhoneCall {
        PhoneCall(id: id, incoming: true, phase: .ringing, report: .shown, update: update)
    }

    // MARK: The system's call UI

    /// Another push or invite for a known call. A push must be reported whatever it is for
    /// (PushKit), so it is: the system refuses a live duplicate (`callUUIDAlreadyExists`, which
    /// counts as a report), and a call that ended but is shown again is ended in the completion.
    /// When the system says no report is needed (`mustReport` false, iOS 26.4), nothing is
    /// shown again, live or ended (no ghost ring for a call declined or answered elsewhere).
    mutating func reportAgain(mustReport: Bool = true) -> [Effect] {
        guard mustReport else { return [] }
        if case .refused = report { report = .pending }
        if report == .shown { report = .pending }
        return [.report(update)]
    }

    /// The system's answer to a report.
    mutating func reportCompleted(_ error: CallSystemError?) -> [Effect] {
        switch error {
        case nil, .callUUIDAlreadyExists?:
            let firstShown = report != .shown
            report = .shown
            if let reason = endReason { return [.endOnSystem(reason)] }  // it ended meanwhile: end what is shown
            // The phone really rings: the server's trace says so, and knows this device rings.
            return firstShown && incoming && phase == .ringing && error == nil
                ? [.tellServer(type: MessageType.callAck, CallActionRequest(callID: callID))] : []
        case .some(let refusal):
            guard report == .pending else { return [] }
            report = .refused(refusal)
            guard !isEnded else { return [] }  // over already (a stale push): nothing to tell
            phase = .ended(.failed)
            // Not shown, so nothing to end on the system; the caller must hear it at once.
            return [
                .tellServer(type: MessageType.callDecline, CallActionRequest(callID: callID, reason: "filtered", filter: refusal.filter)),
                .event(.reportRefused(id, refusal)), .event(.ended(id, .failed)),
            ]
        }
    }

    /// The call ended without the user's doing here (the server said so, the push was stale,
    /// an answer could not be confirmed...). The system hears it once it has shown the call.
    mutating func end(_ reason: CallEndedReason, at now: Date) -> [Effect] {
        guard !isEnded else { return [] }
        phase = .ended(reason)
        endedAt = now
        var effects: [Effect] = [.event(.ended(id, reason))]
        if report == .shown { effects.insert(.endOnSystem(reason), at: 0) }
        return effects
    }

    // MARK: The user's actions

    /// The user answered here: true when the answer goes to the server (the action waits).
    mutating func userAnswers() -> Bool {
        guard phase == .ringing else { return false }
        phase = .answering
        return true
    }

    /// The server took the answer: the call is up, unless the system gave up on it meanwhile
    /// (then the server hears the call end, so the caller is not left in a call nobody has).
    mutating func answerConfirmed() -> [Effect] {
        switch phase {
        case .answering:
            phase = .active
            return [.event(.connected(id))]
        case .ended:
            return [.tellServer(type: MessageType.callEnd, CallActionRequest(callID: callID, reason: "answer_timed_out"))]
        default:
            return []
        }
    }

    /// The server refused the answer; `refusal` says why.
    mutating func answerRefused(_ refusal: CallRefusal?, at now: Date) -> [Effect] {
        let reason: CallEndedReason
        switch refusal {
        case .answeredElsewhere?: reason = .answeredElsewhere
        case .callEnded?, .notRinging?, .notCancellable?: reason = .remoteEnded
        default: reason = .failed
        }
        return end(reason, at: now)
    }

    /// The system timed out an action (CallKit's `timedOutPerforming`). An answer that timed
    /// out ends the call: no media for it, and the server is told.
    mutating func actionTimedOut(_ action: CallAction, at now: Date) -> [Effect] {
        guard case .answer = action, phase == .answering else { return [] }
        return end(.failed, at: now) + [.tellServer(type: MessageType.callEnd, CallActionRequest(callID: callID, reason: "answer_timed_out"))]
    }

    /// The user ended the call here (declined it while it rang, cancelled it while it called).
    mutating func userEnds(at now: Date) -> [Effect] {
        guard !isEnded else { return [] }
        let type = endingMessage
        phase = .ended(.remoteEnded)
        endedAt = now
        return [.event(.endedLocally(id)), .tellServer(type: type, CallActionRequest(callID: callID, reason: "hangup"))]
    }

    /// How this phone ends the call on the server from where it stands: a decline while it
    /// rings, a cancel while it calls, an end once up.
    private var endingMessage: String {
        switch phase {
        case .ringing: MessageType.callDecline
        case .calling: MessageType.callCancel
        default: MessageType.callEnd
        }
    }

    /// The user put the call on hold here, or took it off (CallKit's "Hold & Accept" does too).
    mutating func userHolds(_ held: Bool) -> [Effect] {
        guard phase == .active || phase == .answering || phase == .calling, held != onHold else { return [] }
        onHold = held
        return [.tellServerHold(held), .event(.held(id, held))]
    }

    // MARK: The server

    /// The callee answered a call placed here.
    mutating func accepted() -> [Effect] {
        guard !incoming, phase == .calling else { return [] }
        phase = .active
        return [.connectedOnSystem, .event(.connected(id))]
    }

    /// The system refused to start a call placed here: the server's call is cancelled.
    mutating func startFailed(at now: Date) -> [Effect] {
        guard !isEnded else { return [] }
        phase = .ended(.failed)
        endedAt = now
        return [.tellServer(type: MessageType.callCancel, CallActionRequest(callID: callID, reason: "start_failed")), .event(.ended(id, .failed))]
    }

    /// The system dropped every call (CallKit's `providerDidReset`): nothing is shown any more;
    /// the server ends the call.
    mutating func reset(at now: Date) -> [Effect] {
        guard !isEnded else { return [] }
        let type = endingMessage
        phase = .ended(.failed)
        endedAt = now
        return [.tellServer(type: type, CallActionRequest(callID: callID, reason: "reset")), .event(.ended(id, .failed))]
    }
}
