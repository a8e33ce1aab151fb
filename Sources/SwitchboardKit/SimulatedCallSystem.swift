import Foundation
import SwitchboardProtocol
import SwitchboardSupport

/// A call UI that runs anywhere and behaves as strictly as CallKit, so call flows are tested
/// without a phone, and the SDK's mistakes show up as `violations`:
///
/// - a VoIP push whose handler returns without reporting a call (iOS kills the app, and stops
///   delivering pushes after repeats);
/// - a report's completion comes later, on another queue (`reportCompletionDelay`); ending a
///   call before it came back is a violation (CallKit may drop that end and ring on);
/// - reports can be refused: Do Not Disturb, the block list, no entitlement
///   (`failNextReport(with:)`, `filterAllReports`);
/// - a UUID that already ended may be shown again by a new report (`endedUUIDsShowAgain`), as
///   devices do: the app must end it;
/// - every action must be fulfilled or failed before its deadline (`actionTimeout`); past it the
///   delegate hears `timedOutPerforming`, the action counts as neither, and an answer's call ends;
/// - at most `maximumCallGroups` calls up at once, one per group: a second call is answered by
///   "End & Accept" or "Hold & Accept" (`userAnswersEndingActive`, `userAnswersHoldingActive`),
///   and starting one more fails with `maximumCallGroupsReached`;
/// - requests about unknown calls fail with `unknownCallUUID`;
/// - audio only after activation; the session is deactivated when the last call ends or goes on
///   hold, and activated again when it comes off hold.
///
/// Everything is recorded in `timeline`; tests assert on it and on `violations`.
public final class SimulatedCallSystem: CallSystem, @unchecked Sendable {
    // Safety: all state is in `state`, under its lock; the delegate is in `inbox`.

    /// A call as the simulated call UI knows it.
    public struct Call: Sendable, Equatable {
        /// Its UUID (the server's call id).
        public var id: UUID
        /// What the UI shows.
        public var update: CallUpdate
        /// Whether this device placed it.
        public var outgoing: Bool
        /// Whether the report's completion came back (always true for an outgoing call).
        public var reported: Bool
        /// Whether it was answered (or connected, for an outgoing call).
        public var answered = false
        /// Whether it is on hold.
        public var held = false
        /// Whether the microphone is muted.
        public var muted = false
        /// Whether the system translates the call (iOS 26).
        public var translating = false
        /// Why it ended, once it has.
        public var ended: CallEndedReason?
        /// Whether the user ended it here.
        public var endedByUser = false
        /// How many times it was shown (a re-shown ended UUID counts again).
        public var timesShown = 1
    }

    private struct State {
        var calls: [UUID: Call] = [:]
        var timeline: [String] = []
        var violations: [String] = []
        var pushInProgress = false
        /// The call the push being handled is for, when its payload names one.
        var pushCallID: UUID?
        var reportedDuringPush = false
        var audioActive = false
        var pendingActions = 0
        var nextReportErrors: [CallSystemError] = []
        var nextRequestErrors: [CallSystemError] = []
        var filterAll: CallSystemError?
        var withholdsActivation = false
    }

    /// When true, the audio session is never activated (iOS's missing `didActivate`, which apps
    /// meet in the field): a call answered meanwhile has no audio until it is set back to false.
    public var withholdsAudioActivation: Bool {
        get { state.withLock { $0.withholdsActivation } }
        set {
            state.withLock { $0.withholdsActivation = newValue }
            updateAudio()
        }
    }

    /// Receives the user's actions; an action before there is one waits for it, as with
    /// `CallKitSystem` (`ActionInbox`).
    public var delegate: (any CallSystemDelegate)? {
        get { inbox.delegate }
        set { inbox.delegate = newValue }
    }
    private let inbox = ActionInbox()
    /// Time an action has to be fulfilled or failed.
    public let actionTimeout: Duration
    /// Calls that may be up at once (CallKit's `maximumCallGroups`; one call per group).
    public let maximumCallGroups: Int
    /// How long a report's completion takes to come back (on another queue).
    public let reportCompletionDelay: Duration
    /// Whether a new report of a UUID that ended shows it again (as a device may) rather than
    /// refusing it with `callUUIDAlreadyExists`.
    public let endedUUIDsShowAgain: Bool
    private let state = Locked(State())
    private let queue = DispatchQueue(label: "switchboard.simulated-call-ui")

    /// A simulated call UI with iOS's limits.
    public init(
        actionTimeout: Duration = .seconds(10), maximumCallGroups: Int = 2, reportCompletionDelay: Duration = .milliseconds(20),
        endedUUIDsShowAgain: Bool = true
    ) {
        self.actionTimeout = actionTimeout
        self.maximumCallGroups = maximumCallGroups
        self.reportCompletionDelay = reportCompletionDelay
        self.endedUUIDsShowAgain = endedUUIDsShowAgain
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
    /// The UUIDs of the calls shown and not ended (see `CallSystem`).
    public var liveCallIDs: [UUID] { liveCalls.map(\.id) }
    /// Actions performed and not yet fulfilled or failed.
    public var pendingActions: Int { state.withLock { $0.pendingActions } }
    /// Whether the audio session is active now.
    public var audioActive: Bool { state.withLock { $0.audioActive } }

    /// The next report is refused with `error` (then reports work again).
    public func failNextReport(with error: CallSystemError) { state.withLock { $0.nextReportErrors.append(error) } }
    /// Every report is refused with `error` (Do Not Disturb on), or none with nil.
    public func filterAllReports(_ error: CallSystemError?) { state.withLock { $0.filterAll = error } }
    /// The next request is refused with `error`.
    public func failNextRequest(with error: CallSystemError) { state.withLock { $0.nextRequestErrors.append(error) } }

    private func note(_ entry: String) {
        state.withLock { $0.timeline.append(entry) }
    }

    private func violation(_ text: String) {
        state.withLock {
            $0.violations.append(text)
            $0.timeline.append("VIOLATION " + text)
        }
    }

    // MARK: PushKit

    /// Delivers a VoIP push the way PushKit does: `handler` runs synchronously and must report
    /// a call before it returns.
    public func deliverVoIPPush(_ payload: [String: Any], to handler: ([String: Any], @escaping @Sendable () -> Void) -> Void) {
        deliverVoIPPush(payload, mustReport: true) { payload, _, completion in handler(payload, completion) }
    }

    /// Delivers a VoIP push as PushKit does from iOS 26.4 on, with its metadata's
    /// `mustReport`: when true, `handler` must report a call before it returns; when false it
    /// need not, and a report it makes is noted (the timeline says "reported").
    public func deliverVoIPPush(
        _ payload: [String: Any], mustReport: Bool, to handler: ([String: Any], Bool, @escaping @Sendable () -> Void) -> Void
    ) {
        state.withLock {
            $0.pushInProgress = true
            $0.pushCallID = (payload["call_id"] as? String).flatMap(UUID.init(uuidString:))
            $0.reportedDuringPush = false
            $0.timeline.append(mustReport ? "push delivered" : "push delivered (no report needed)")
        }
        handler(payload, mustReport) { [weak self] in self?.note("push completion called") }
        let reported = state.withLock { state -> Bool in
            state.pushInProgress = false
            return state.reportedDuringPush
        }
        if mustReport && !reported {
            violation("a VoIP push was not reported to the call UI before its handler returned: the app would be killed")
        }
    }

    // MARK: CallSystem

    /// Shows an incoming call (see `CallSystem`); the completion comes later, on another queue.
    public func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void) {
        let error = state.withLock { state -> CallSystemError? in
            // Only a report of the push's own call counts (another call's, shown meanwhile from
            // a WebSocket invite, does not); any report counts for a push that names none.
            if state.pushInProgress && (state.pushCallID == nil || state.pushCallID == id) { state.reportedDuringPush = true }
            if !state.nextReportErrors.isEmpty { return state.nextReportErrors.removeFirst() }
            if let filter = state.filterAll { return filter }
            if let existing = state.calls[id], existing.ended == nil || !endedUUIDsShowAgain { return .callUUIDAlreadyExists }
            return nil
        }
        if let error {
            note("report \(id) refused: \(error)")
        } else {
            state.withLock { state in
                let shown = (state.calls[id]?.timesShown ?? 0) + 1
                var call = Call(id: id, update: update, outgoing: false, reported: false)
                call.timesShown = shown
                state.calls[id] = call
                state.timeline.append("incoming \(id) from \(update.displayName)")
            }
        }
        queue.asyncAfter(deadline: .now() + Self.seconds(reportCompletionDelay)) { [weak self] in
            if error == nil { self?.state.withLock { $0.calls[id]?.reported = true } }
            self?.note("report \(id) completed")
            completion(error)
        }
    }

    /// Ends a call on the call UI (see `CallSystem`). Ending a call whose report has not
    /// completed is a violation: the system may not know the call yet and drop the end; so is
    /// ending one it never showed (CallKit ignores it silently; the app's logic is wrong).
    public func reportCall(_ id: UUID, endedAt: Date, reason: CallEndedReason) {
        let problem = state.withLock { state -> String? in
            guard var call = state.calls[id] else { return "call \(id) was ended, which the call UI never showed" }
            guard call.ended == nil else { return nil }
            guard call.reported else { return "call \(id) was ended before its report completed: CallKit may ring on" }
            call.ended = reason
            state.calls[id] = call
            state.timeline.append("ended \(id): \(reason.rawValue)")
            return nil
        }
        if let problem {
            violation(problem)
            return
        }
        updateAudio()
    }

    /// Marks an outgoing call connected (see `CallSystem`).
    public func reportOutgoingCallConnected(_ id: UUID) {
        note("outgoing \(id) connected")
    }

    /// Asks the system to perform an action the app started (see `CallSystem`).
    public func request(_ action: CallAction) async throws {
        let refusal = state.withLock { state -> CallSystemError? in
            if !state.nextRequestErrors.isEmpty { return state.nextRequestErrors.removeFirst() }
            if case .start = action {
                let live = state.calls.values.filter { $0.ended == nil }.count
                return live >= maximumCallGroups ? .maximumCallGroupsReached : nil
            }
            // A call whose report has not completed is not known to the system yet.
            return state.calls[action.callID].map { $0.ended == nil && $0.reported } == true ? nil : .unknownCallUUID
        }
        if let refusal {
            note("request \(describe(action)) refused: \(refusal)")
            throw refusal
        }
        if case .start(let id, let handle, let video) = action {
            state.withLock {
                $0.calls[id] = Call(id: id, update: CallUpdate(handle: handle, displayName: handle, hasVideo: video), outgoing: true, reported: true)
            }
        }
        guard await perform(action) else { throw CallSystemError.invalidAction }
    }

    /// Called by the media layer before it plays or records audio (see `CallSystem`).
    public func mediaWillStartAudio(_ id: UUID) {
        if audioActive { note("audio started \(id)") } else { violation("audio started for \(id) before the system activated the audio session") }
    }

    // MARK: The user

    /// The user taps Answer. Refused (as a device would not offer it) when another call is up
    /// and not on hold: use `userAnswersEndingActive` or `userAnswersHoldingActive`.
    @discardableResult
    public func userAnswers(_ id: UUID) async -> Bool {
        guard await offered(id) else { return false }
        let refused = state.withLock { state -> Bool in
            let up = state.calls.values.filter { $0.answered && $0.ended == nil }
            return up.contains { !$0.held } || up.count >= maximumCallGroups
        }
        if refused {
            note("answer \(id) refused: another call is up (maximumCallGroups \(maximumCallGroups))")
            return false
        }
        return await perform(.answer(id))
    }

    /// "End & Accept": CallKit ends the call that is up (not one on hold), then answers `id`.
    @discardableResult
    public func userAnswersEndingActive(_ id: UUID) async -> Bool {
        guard await offered(id) else { return false }
        for active in upCalls(except: id) where !active.held {
            state.withLock { $0.calls[active.id]?.endedByUser = true }
            guard await perform(.end(active.id)) else { return false }
        }
        return await perform(.answer(id))
    }

    /// "Hold & Accept": CallKit puts the call that is up on hold, then answers `id`.
    @discardableResult
    public func userAnswersHoldingActive(_ id: UUID) async -> Bool {
        guard await offered(id) else { return false }
        guard upCalls(except: id).count < maximumCallGroups else {
            note("hold & accept \(id) refused: maximumCallGroups \(maximumCallGroups)")
            return false
        }
        for active in upCalls(except: id) where !active.held {
            guard await perform(.setHeld(active.id, true)) else { return false }
        }
        return await perform(.answer(id))
    }

    /// Whether the call UI shows buttons for `id`: a call it shows (its report completed) and
    /// that has not ended. A tap on anything else is not possible on a device; a user tapping
    /// as a call comes in taps once it shows (waited for up to a second).
    private func offered(_ id: UUID) async -> Bool {
        for _ in 0..<50 {
            let call = state.withLock { $0.calls[id] }
            if let call, call.reported, call.ended == nil { return true }
            if call == nil || call?.ended != nil { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        note("no buttons for \(id): the call UI does not show it")
        return false
    }

    private func upCalls(except id: UUID) -> [Call] {
        state.withLock { $0.calls.values.filter { $0.answered && $0.ended == nil && $0.id != id } }
    }

    /// The user taps Decline or hangs up.
    @discardableResult
    public func userEnds(_ id: UUID) async -> Bool {
        guard await offered(id) else { return false }
        state.withLock { $0.calls[id]?.endedByUser = true }
        return await perform(.end(id))
    }

    /// The user taps Mute.
    @discardableResult
    public func userSetsMuted(_ id: UUID, _ muted: Bool) async -> Bool { await perform(.setMuted(id, muted)) }

    /// The user puts the call on hold or takes it off.
    @discardableResult
    public func userSetsHeld(_ id: UUID, _ held: Bool) async -> Bool { await perform(.setHeld(id, held)) }

    /// The user turns live translation on or off in the call UI (iOS 26).
    @discardableResult
    public func userSetsTranslating(_ id: UUID, _ on: Bool, localLanguage: String = "en", remoteLanguage: String = "ja") async -> Bool {
        guard await offered(id) else { return false }
        return await perform(.setTranslating(id, on, localLanguage: localLanguage, remoteLanguage: remoteLanguage))
    }

    /// The system resets (CallKit's `providerDidReset`): every call is gone.
    public func reset() {
        state.withLock { state in
            for id in state.calls.keys where state.calls[id]?.ended == nil { state.calls[id]?.ended = .failed }
            state.audioActive = false
            state.timeline.append("provider reset")
        }
        delegate?.callSystemDidReset()
    }

    // MARK: Actions and audio

    /// Hands an action to the app and waits up to `actionTimeout` for its answer; past it, the
    /// delegate hears `timedOutPerforming`.
    private func perform(_ action: CallAction) async -> Bool {
        note("action \(describe(action))")
        state.withLock { $0.pendingActions += 1 }
        let timeout = actionTimeout
        let deadline = Date().addingTimeInterval(Self.seconds(timeout))
        var timer: Task<Void, Never>?
        let answer: Bool? = await withCheckedContinuation { (continuation: CheckedContinuation<Bool?, Never>) in
            let once = ActionCompletion(deadline: deadline) { success in continuation.resume(returning: success) }
            inbox.perform(action, completion: once)
            // Held and cancelled once the action is answered: no timer outlives it.
            timer = Task {
                do { try await Task.sleep(for: timeout) } catch { return }
                once.timeOut { continuation.resume(returning: nil) }
            }
        }
        timer?.cancel()
        state.withLock { $0.pendingActions -= 1 }
        guard let success = answer else {
            violation("action \(describe(action)) was neither fulfilled nor failed within \(timeout)")
            if case .answer(let id) = action {
                // A device ends a call whose answer timed out.
                state.withLock { $0.calls[id]?.ended = .failed }
            }
            delegate?.callSystem(timedOutPerforming: action)
            updateAudio()
            return false
        }
        note("\(success ? "fulfilled" : "failed") \(describe(action))")
        guard success else { return false }
        state.withLock { state in
            switch action {
            case .answer(let id), .start(let id, _, _): state.calls[id]?.answered = true
            case .end(let id):
                if state.calls[id]?.ended == nil { state.calls[id]?.ended = .remoteEnded }
            case .setMuted(let id, let muted): state.calls[id]?.muted = muted
            case .setHeld(let id, let held): state.calls[id]?.held = held
            case .playDTMF: break
            case .setTranslating(let id, let on, _, _): state.calls[id]?.translating = on
            }
        }
        updateAudio()
        return true
    }

    /// Activates the audio session while some call is up and not on hold, deactivates it
    /// otherwise, telling the delegate of each change (CallKit's `didActivate`/`didDeactivate`).
    private func updateAudio() {
        let change = state.withLock { state -> Bool? in
            let wanted = state.calls.values.contains { $0.answered && $0.ended == nil && !$0.held }
            guard wanted != state.audioActive else { return nil }
            if wanted && state.withholdsActivation {
                state.timeline.append("audio activation withheld")
                return nil
            }
            state.audioActive = wanted
            state.timeline.append(wanted ? "audio activated" : "audio deactivated")
            return wanted
        }
        if let change { delegate?.callSystem(didChangeAudioActive: change) }
    }

    private func describe(_ action: CallAction) -> String {
        switch action {
        case .start(let id, let handle, _): "start \(id) to \(handle)"
        case .answer(let id): "answer \(id)"
        case .end(let id): "end \(id)"
        case .setMuted(let id, let muted): "mute \(id) \(muted)"
        case .setHeld(let id, let held): "hold \(id) \(held)"
        case .playDTMF(let id, let digits): "dtmf \(id) \(digits)"
        case .setTranslating(let id, let on, let local, let remote): "translate \(id) \(on) \(local)-\(remote)"
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
