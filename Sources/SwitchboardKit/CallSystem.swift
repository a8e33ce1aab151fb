import Foundation
import Synchronization

/// Why the system ended a call it showed (CallKit's `CXCallEndedReason`).
public enum CallEndedReason: String, Sendable, Equatable {
    case failed, remoteEnded, unanswered, answeredElsewhere, declinedElsewhere
}

/// What the call screen shows of a call (CallKit's `CXCallUpdate`).
public struct CallUpdate: Sendable, Equatable {
    /// The caller's handle (phone number, email, user name).
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

    /// The call the action is for.
    public var callID: UUID {
        switch self {
        case .start(let id, _, _), .answer(let id), .end(let id), .setMuted(let id, _), .setHeld(let id, _), .playDTMF(let id, _): id
        }
    }
}

/// Errors the system gives when reporting a call (CallKit's `CXErrorCodeIncomingCallError`).
public enum CallSystemError: Error, Sendable, Equatable {
    /// A call with this UUID was already reported: it still counts as a report.
    case callUUIDAlreadyExists
    case filteredByDoNotDisturb
    case unknown
}

/// Answers one action, once: `fulfill()` or `fail()`.
public final class ActionCompletion: Sendable {
    private let done: @Sendable (Bool) -> Void
    private let answered = Atomic<Bool>(false)

    /// `done` receives true for fulfil, false for fail, once.
    public init(_ done: @escaping @Sendable (Bool) -> Void) {
        self.done = done
    }

    /// The action succeeded.
    public func fulfill() { finish(true) }
    /// The action failed.
    public func fail() { finish(false) }

    private func finish(_ success: Bool) {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        done(success)
    }

    /// Ends the wait without an answer (the system's timeout); later answers are ignored.
    func timeOut(_ onTimeout: () -> Void) {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        onTimeout()
    }
}

/// Receives what the user does on the system's call UI.
public protocol CallSystemDelegate: AnyObject, Sendable {
    /// Perform `action`, then fulfil or fail it, in time.
    func callSystem(perform action: CallAction, completion: ActionCompletion)
    /// The system activated (true) or deactivated the audio session: start or stop media now.
    func callSystem(didChangeAudioActive active: Bool)
    /// The system dropped every call (CallKit's `providerDidReset`): tear everything down.
    func callSystemDidReset()
}

/// The seam to the phone's call UI: CallKit on an iPhone (`CallKitSystem`), or
/// `SimulatedCallSystem` anywhere. The logic of calls lives in `CallManager`, not here.
public protocol CallSystem: AnyObject, Sendable {
    var delegate: (any CallSystemDelegate)? { get set }
    /// Shows an incoming call. Must be called before a VoIP push handler returns.
    func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void)
    /// Tells the system a call ended without the user's doing.
    func reportCall(_ id: UUID, endedAt: Date, reason: CallEndedReason)
    /// An outgoing call connected.
    func reportOutgoingCallConnected(_ id: UUID)
    /// Asks the system to perform an action the app's own UI started (a call button).
    func request(_ action: CallAction) async throws
    /// The media layer is about to send or play audio (allowed only after activation).
    func mediaWillStartAudio(_ id: UUID)
}
