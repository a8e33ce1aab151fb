import SwitchboardProtocol
import Foundation

/// A call UI that runs anywhere and enforces what iOS enforces, so call flows are tested
/// without a phone:
///
/// - a VoIP push whose handler returns without reporting a call is a violation (iOS kills the
///   app, and stops delivering pushes after repeats);
/// - every action must be fulfilled or failed within `actionTimeout`;
/// - one UUID per call (a second report gets `callUUIDAlreadyExists`, which still counts);
/// - no more than `maximumCallGroups` calls at once: answering one more fails;
/// - audio may start only after the system activated it.
///
/// Everything is recorded in `timeline`; tests assert on it and on `violations`.
public final class SimulatedCallSystem: CallSystem, @unchecked Sendable {
    // Safety: all state is in `state`, under its lock; `delegate` is set once at start.

    /// A call as the simulated call UI knows it.
    public struct Call: Sendable, Equatable {
        /// Its UUID (the server's call id).
        public var id: UUID
        /// What the UI shows.
        public var update: CallUpdate
        /// Whether this device placed it.
        public var outgoing: Bool
        /// Whether it was answered (or connected, for an outgoing call).
        public var answered = false
        /// Whether it is on hold.
        public var held = false
        /// Whether the microphone is muted.
        public var muted = false
        /// Why it ended, once it has.
        public var ended: CallEndedReason?
        /// Whether the user ended it here.
        public var endedByUser = false
    }

    private struct State {
        var calls: [UUID: Call] = [:]
        var timeline: [String] = []
        var violations: [String] = []
        var pushInProgress = false
        var reportedDuringPush = false
        var audioActive = false
        var pendingActions = 0
    }

    /// Receives the user's actions; `CallManager` sets itself.
    public weak var delegate: (any CallSystemDelegate)?
    /// Time an action has to be fulfilled or failed.
    public let actionTimeout: Duration
    /// Calls that may be up at once.
    public let maximumCallGroups: Int
    private let state = Locked(State())

    /// A simulated call UI with iOS's limits.
    public init(actionTimeout: Duration = .seconds(10), maximumCallGroups: Int = 1) {
        self.actionTimeout = actionTimeout
        self.maximumCallGroups = maximumCallGroups
    }

    /// What happened, in order.
    public var timeline: [String] { state.withLock { $0.timeline } }
    /// Broken rules; empty in a correct app.
    public var violations: [String] { state.withLock { $0.violations } }
    /// The calls the UI knows.
    public var calls: [Call] { state.withLock { Array($0.calls.values) } }
    /// The call with `id`, if the UI knows it.
    public func call(_ id: UUID) -> Call? { state.withLock { $0.calls[id] } }
    /// Calls shown and not ended.
    public var liveCalls: [Call] { state.withLock { $0.calls.values.filter { $0.ended == nil } } }
    /// Actions performed and not yet fulfilled or failed.
    public var pendingActions: Int { state.withLock { $0.pendingActions } }

    private func note(_ entry: String) {
        state.withLock { $0.timeline.append(entry) }
    }

    // MARK: PushKit

    /// Delivers a VoIP push the way PushKit does: `handler` runs synchronously and must report
    /// a call before it returns.
    public func deliverVoIPPush(_ payload: [String: Any], to handler: ([String: Any], @escaping @Sendable () -> Void) -> Void) {
        state.withLock {
            $0.pushInProgress = true
            $0.reportedDuringPush = false
            $0.timeline.append("push delivered")
        }
        handler(payload) { [weak self] in self?.note("push completion called") }
        state.withLock {
            $0.pushInProgress = false
            if !$0.reportedDuringPush {
                $0.violations.append("a VoIP push was not reported to the call UI before its handler returned: the app would be killed")
                $0.timeline.append("VIOLATION unreported push")
            }
        }
    }

    // MARK: CallSystem

    /// Shows an incoming call (see `CallSystem`).
    public func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void) {
        let error = state.withLock { state -> CallSystemError? in
            if state.pushInProgress { state.reportedDuringPush = true }
            if state.calls[id] != nil {
                state.timeline.append("report \(id) refused: callUUIDAlreadyExists")
                return .callUUIDAlreadyExists
            }
            state.calls[id] = Call(id: id, update: update, outgoing: false)
            state.timeline.append("incoming \(id) from \(update.displayName)")
            return nil
        }
        completion(error)
    }

    /// Ends a call on the call UI (see `CallSystem`).
    public func reportCall(_ id: UUID, endedAt: Date, reason: CallEndedReason) {
        state.withLock { state in
            guard var call = state.calls[id], call.ended == nil else { return }
            call.ended = reason
            state.calls[id] = call
            state.timeline.append("ended \(id): \(reason.rawValue)")
            if state.calls.values.allSatisfy({ $0.ended != nil }) { state.audioActive = false }
        }
    }

    /// Marks an outgoing call connected (see `CallSystem`).
    public func reportOutgoingCallConnected(_ id: UUID) {
        note("outgoing \(id) connected")
    }

    /// Asks the system to perform an action the app started (see `CallSystem`).
    public func request(_ action: CallAction) async throws {
        if case .start(let id, let handle, let video) = action {
            state.withLock { $0.calls[id] = Call(id: id, update: CallUpdate(handle: handle, displayName: handle, hasVideo: video), outgoing: true) }
        }
        guard await perform(action) else { throw CallSystemError.unknown }
    }

    /// Called by the media layer before it plays or records audio (see `CallSystem`).
    public func mediaWillStartAudio(_ id: UUID) {
        state.withLock { state in
            if !state.audioActive {
                state.violations.append("audio started for \(id) before the system activated the audio session")
                state.timeline.append("VIOLATION audio before activation")
            } else {
                state.timeline.append("audio started \(id)")
            }
        }
    }

    // MARK: The user

    /// The user taps Answer.
    @discardableResult
    public func userAnswers(_ id: UUID) async -> Bool {
        let refused = state.withLock { state -> Bool in
            let active = state.calls.values.filter { $0.answered && $0.ended == nil && !$0.held }.count
            return active >= maximumCallGroups
        }
        if refused {
            note("answer \(id) refused: maximumCallGroups \(maximumCallGroups)")
            return false
        }
        return await perform(.answer(id))
    }

    /// The user taps Decline or hangs up.
    @discardableResult
    public func userEnds(_ id: UUID) async -> Bool {
        state.withLock { state in
            if var call = state.calls[id] {
                call.endedByUser = true
                state.calls[id] = call
            }
        }
        return await perform(.end(id))
    }

    /// The user taps Mute.
    @discardableResult
    public func userSetsMuted(_ id: UUID, _ muted: Bool) async -> Bool { await perform(.setMuted(id, muted)) }

    /// The user puts the call on hold or takes it off.
    @discardableResult
    public func userSetsHeld(_ id: UUID, _ held: Bool) async -> Bool { await perform(.setHeld(id, held)) }

    /// The system resets (CallKit's `providerDidReset`): every call is gone.
    public func reset() {
        state.withLock { state in
            for id in state.calls.keys where state.calls[id]?.ended == nil { state.calls[id]?.ended = .failed }
            state.audioActive = false
            state.timeline.append("provider reset")
        }
        delegate?.callSystemDidReset()
    }

    /// Hands an action to the app and waits up to `actionTimeout` for its answer.
    private func perform(_ action: CallAction) async -> Bool {
        guard let delegate else { return false }
        note("action \(describe(action))")
        state.withLock { $0.pendingActions += 1 }
        let timeout = actionTimeout
        let answer: Bool? = await withCheckedContinuation { (continuation: CheckedContinuation<Bool?, Never>) in
            let once = ActionCompletion { success in continuation.resume(returning: success) }
            delegate.callSystem(perform: action, completion: once)
            Task {
                try? await Task.sleep(for: timeout)
                once.timeOut { continuation.resume(returning: nil) }
            }
        }
        state.withLock { $0.pendingActions -= 1 }
        guard let success = answer else {
            state.withLock {
                $0.violations.append("action \(describe(action)) was neither fulfilled nor failed within \(actionTimeout)")
                $0.timeline.append("VIOLATION action timed out")
            }
            return false
        }
        note("\(success ? "fulfilled" : "failed") \(describe(action))")
        guard success else { return false }
        var activate = false
        state.withLock { state in
            switch action {
            case .answer(let id):
                state.calls[id]?.answered = true
                activate = !state.audioActive
                if activate { state.audioActive = true }
            case .start(let id, _, _):
                state.calls[id]?.answered = true
                activate = !state.audioActive
                if activate { state.audioActive = true }
            case .end(let id):
                if state.calls[id]?.ended == nil { state.calls[id]?.ended = .remoteEnded }
            case .setMuted(let id, let muted): state.calls[id]?.muted = muted
            case .setHeld(let id, let held): state.calls[id]?.held = held
            case .playDTMF: break
            }
        }
        if activate {
            note("audio activated")
            delegate.callSystem(didChangeAudioActive: true)
        }
        return true
    }

    private func describe(_ action: CallAction) -> String {
        switch action {
        case .start(let id, let handle, _): "start \(id) to \(handle)"
        case .answer(let id): "answer \(id)"
        case .end(let id): "end \(id)"
        case .setMuted(let id, let muted): "mute \(id) \(muted)"
        case .setHeld(let id, let held): "hold \(id) \(held)"
        case .playDTMF(let id, let digits): "dtmf \(id) \(digits)"
        }
    }
}
