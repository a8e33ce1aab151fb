import Foundation
import SwitchboardProtocol
import SwitchboardSupport
import Synchronization

/// Why the system ended a call it showed (CallKit's `CXCallEndedReason`).
public enum CallEndedReason: String, Sendable, Equatable {
    case failed, remoteEnded, unanswered, answeredElsewhere, declinedElsewhere
}

/// What the call screen shows of a call (CallKit's `CXCallUpdate`).
public struct CallUpdate: Sendable, Equatable {
    /// The caller's handle (phone number, email, user name): what Recents calls back.
    public var handle: String
    /// The name the call UI shows.
    public var displayName: String
    /// Whether it is a video call.
    public var hasVideo: Bool

    /// A call UI update.
    public init(handle: String, displayName: String, hasVideo: Bool) {
        self.handle = handle
        self.displayName = displayName
        self.hasVideo = hasVideo
    }
}

/// A request from the system's call UI (CallKit's `CXAction`s) that the app must fulfil or fail.
public enum CallAction: Sendable, Equatable {
    case start(UUID, handle: String, video: Bool)
    case answer(UUID)
    case end(UUID)
    case setMuted(UUID, Bool)
    case setHeld(UUID, Bool)
    case playDTMF(UUID, digits: String)
    /// iOS 26: live translation of the call turned on or off by the user (language codes).
    case setTranslating(UUID, Bool, localLanguage: String, remoteLanguage: String)

    /// The call the action is for.
    public var callID: UUID {
        switch self {
        case .start(let id, _, _), .answer(let id), .end(let id), .setMuted(let id, _), .setHeld(let id, _), .playDTMF(let id, _),
            .setTranslating(let id, _, _, _):
            id
        }
    }
}

/// Errors the system gives when it is asked to show a call (CallKit's
/// `CXErrorCodeIncomingCallError`) or to perform an action the app asked for
/// (`CXErrorCodeRequestTransactionError`).
public enum CallSystemError: Error, Sendable, Equatable {
    /// A call with this UUID is already shown: it still counts as a report.
    case callUUIDAlreadyExists
    /// The app may not show calls (no CallKit entitlement, or CallKit off for the region).
    case unentitled
    case filteredByDoNotDisturb
    case filteredByBlockList
    /// iOS 17+: filtered while the device is in a restricted sharing mode.
    case filteredDuringRestrictedSharingMode
    /// The call is protected and cannot be shown now.
    case callIsProtected
    case filteredBySensitiveParticipants
    /// Requests: the system knows no call with this UUID.
    case unknownCallUUID
    /// Requests: as many calls as the configuration allows are up (CallKit's code 7).
    case maximumCallGroupsReached
    /// Requests: the provider, transaction or action is not one the system accepts.
    case invalidAction
    /// Any other code, kept for the logs.
    case unknown(Int)

    /// A refused incoming report by CallKit's incoming-call code (which newer iOS versions
    /// extend: 5, 6 and 7 need no newer SDK); LiveCommunicationKit's errors carry the same.
    init(incomingCallCode code: Int) {
        switch code {
        case 1: self = .unentitled
        case 2: self = .callUUIDAlreadyExists
        case 3: self = .filteredByDoNotDisturb
        case 4: self = .filteredByBlockList
        case 5: self = .filteredDuringRestrictedSharingMode
        case 6: self = .callIsProtected
        case 7: self = .filteredBySensitiveParticipants
        default: self = .unknown(code)
        }
    }

    /// What the server hears when the system did not show a call (`call.decline` with reason
    /// `filtered`); nil for `callUUIDAlreadyExists`, which is not a refusal.
    public var filter: CallFilter? {
        switch self {
        case .callUUIDAlreadyExists: nil
        case .filteredByDoNotDisturb: .doNotDisturb
        case .filteredByBlockList: .blockList
        case .filteredDuringRestrictedSharingMode: .restricted
        case .callIsProtected: .protectedApp
        case .filteredBySensitiveParticipants: .sensitiveParticipants
        case .unentitled: .unentitled
        case .unknownCallUUID, .maximumCallGroupsReached, .invalidAction, .unknown: .unknown
        }
    }
}

/// Answers one action, once: `fulfill()` or `fail()`, before `deadline` when the system gives
/// one (CallKit's `CXAction.timeoutDate`).
public final class ActionCompletion: Sendable {
    private let done: @Sendable (Bool) -> Void
    private let answered = Atomic<Bool>(false)
    /// When the system gives up on the action (then it calls `timedOutPerforming`).
    public let deadline: Date?

    /// `done` receives true for fulfil, false for fail, once.
    public init(deadline: Date? = nil, _ done: @escaping @Sendable (Bool) -> Void) {
        self.deadline = deadline
        self.done = done
    }

    /// The action succeeded.
    public func fulfill() { finish(true) }
    /// The action failed.
    public func fail() { finish(false) }

    /// Whether the action was answered, or timed out.
    public var isComplete: Bool { answered.load(ordering: .acquiring) }

    private func finish(_ success: Bool) {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        done(success)
    }

    /// Ends the wait without an answer (the system's timeout); later answers are ignored.
    /// Returns whether it was still waiting.
    @discardableResult
    public func timeOut(_ onTimeout: () -> Void = {}) -> Bool {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return false }
        onTimeout()
        return true
    }
}

/// A call system's delegate and the actions that came before it. CallKit may deliver an action
/// as soon as the provider exists: the end or answer of a call left from an earlier run, when
/// the app was relaunched for it, before `CallManager` made itself the delegate. Such an action
/// waits here, in order, and goes to the delegate when one is set (unless the system gave up on
/// it meanwhile), the ones waiting in the order they came; failing it would lose a decline
/// made from the lock screen.
final class ActionInbox: Sendable {
    private struct State {
        weak var delegate: (any CallSystemDelegate)?
        var waiting: [(action: CallAction, completion: ActionCompletion)] = []
    }

    private let state = Locked(State())

    /// The delegate; setting one hands it every action waiting.
    var delegate: (any CallSystemDelegate)? {
        get { state.withLock { $0.delegate } }
        set {
            let waiting = state.withLock { state in
                state.delegate = newValue
                defer { state.waiting = [] }
                return newValue == nil ? [] : state.waiting
            }
            for item in waiting where !item.completion.isComplete { newValue?.callSystem(perform: item.action, completion: item.completion) }
        }
    }

    /// Hands `action` to the delegate, or keeps it until there is one.
    func perform(_ action: CallAction, completion: ActionCompletion) {
        let delegate = state.withLock { state -> (any CallSystemDelegate)? in
            if state.delegate == nil { state.waiting.append((action, completion)) }
            return state.delegate
        }
        delegate?.callSystem(perform: action, completion: completion)
    }
}

/// Receives what the user does on the system's call UI.
public protocol CallSystemDelegate: AnyObject, Sendable {
    /// Perform `action`, then fulfil or fail it, in time.
    func callSystem(perform action: CallAction, completion: ActionCompletion)
    /// The system gave up on `action` (CallKit's `provider(_:timedOutPerforming:)`): it must not
    /// be fulfilled any more, and an answer that timed out leaves no call to start media for.
    func callSystem(timedOutPerforming action: CallAction)
    /// The system activated (true) or deactivated the audio session: start or stop media now.
    func callSystem(didChangeAudioActive active: Bool)
    /// The system dropped every call (CallKit's `providerDidReset`): tear everything down.
    func callSystemDidReset()
}

/// The seam to the phone's call UI: CallKit on an iPhone (`CallKitSystem`), the app's own UI
/// where CallKit may not be used (`InAppCallSystem`), or `SimulatedCallSystem` in tests. The
/// logic of calls lives in `CallManager`, not here.
public protocol CallSystem: AnyObject, Sendable {
    var delegate: (any CallSystemDelegate)? { get set }
    /// Shows an incoming call. Must be called before a VoIP push handler returns. `completion`
    /// runs later (on any queue) once the system showed it (nil) or refused it: the call exists
    /// only from then on.
    func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void)
    /// Tells the system a call ended without the user's doing.
    func reportCall(_ id: UUID, endedAt: Date, reason: CallEndedReason)
    /// An outgoing call connected.
    func reportOutgoingCallConnected(_ id: UUID)
    /// Asks the system to perform an action the app's own UI started (a call button); throws a
    /// `CallSystemError` when the system refuses it.
    func request(_ action: CallAction) async throws
    /// Media is about to send or play audio for call `id` (allowed only after activation):
    /// `CallManager` says so right before it tells the app `audioActive(true)`.
    func mediaWillStartAudio(_ id: UUID)
    /// The calls the system shows now (at launch: calls a previous run of the app left behind).
    var liveCallIDs: [UUID] { get }
}
