import Foundation
import SwitchboardProtocol
import SwitchboardSupport

/// The call UI where CallKit may not be used (mainland China, `RegionPolicy.noCallKit`): the
/// app draws the ringing and in-call screens itself from `events` and passes the user's taps to
/// `answer(_:)`, `end(_:)`, `setMuted(_:_:)` and `setHeld(_:_:)`. Incoming calls arrive as
/// alert pushes (`CallManager.handleIncomingAlertPush`) or over the connection; no `CXProvider`
/// exists and no VoIP push type is registered.
///
/// Without CallKit nobody else activates the audio session: `audioSession` does, once a call is
/// answered or placed, and deactivates it when the last call ends or goes on hold (on iOS the
/// default sets play-and-record in voice or video chat mode with Bluetooth and the speaker;
/// elsewhere it does nothing). Media starts on `CallManagerEvent.audioActive(true)`, as with
/// CallKit.
///
/// ```swift
/// let system: any CallSystem = policy == .callKit ? CallKitSystem() : InAppCallSystem()
/// ```
public final class InAppCallSystem: CallSystem, @unchecked Sendable {
    // Safety: the calls are under `state`'s lock; `delegate` is set once at start.

    /// What the app's call screens should show.
    public enum Event: Sendable, Equatable {
        case incoming(UUID, CallUpdate)
        case outgoing(UUID, CallUpdate)
        case connected(UUID)
        case held(UUID, Bool)
        /// The call ended elsewhere: the other side, another device, the server.
        case ended(UUID, CallEndedReason)
        /// The user ended or declined the call here (`end(_:)`).
        case endedByUser(UUID)
    }

    private struct Call {
        var update: CallUpdate
        var answered = false
        var held = false
    }

    private struct State {
        var calls: [UUID: Call] = [:]
        var audioActive = false
    }

    /// Receives the user's actions; `CallManager` sets itself.
    public weak var delegate: (any CallSystemDelegate)?
    /// For the app's call screens.
    public let events: AsyncStream<Event>
    private let sink: AsyncStream<Event>.Continuation
    /// Activates (true) or deactivates the audio session for a call (`video`: a video call).
    public let audioSession: @Sendable (_ active: Bool, _ video: Bool) throws -> Void
    /// Time the delegate has to answer one of the user's taps before it counts as failed.
    public let actionTimeout: Duration
    private let state = Locked(State())
    private let queue = DispatchQueue(label: "switchboard.in-app-call-ui")

    /// `audioSession` defaults to the platform's (`InAppCallSystem.defaultAudioSession`).
    public init(
        audioSession: @escaping @Sendable (_ active: Bool, _ video: Bool) throws -> Void = InAppCallSystem.defaultAudioSession,
        actionTimeout: Duration = .seconds(15)
    ) {
        self.audioSession = audioSession
        self.actionTimeout = actionTimeout
        (events, sink) = AsyncStream.makeStream(of: Event.self)
    }

    // MARK: CallSystem

    /// Shows an incoming call on the app's screen (see `CallSystem`).
    public func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void) {
        let known = state.withLock { state -> Bool in
            if state.calls[id] != nil { return true }
            state.calls[id] = Call(update: update)
            return false
        }
        if !known { sink.yield(.incoming(id, update)) }
        queue.async { completion(known ? .callUUIDAlreadyExists : nil) }
    }

    /// Takes a call off the app's screen (see `CallSystem`).
    public func reportCall(_ id: UUID, endedAt: Date, reason: CallEndedReason) {
        guard state.withLock({ $0.calls.removeValue(forKey: id) }) != nil else { return }
        sink.yield(.ended(id, reason))
        updateAudio()
    }

    /// An outgoing call connected (see `CallSystem`).
    public func reportOutgoingCallConnected(_ id: UUID) {
        sink.yield(.connected(id))
    }

    /// Performs an action the app started (see `CallSystem`).
    public func request(_ action: CallAction) async throws {
        if case .start(let id, let handle, let video) = action {
            let update = CallUpdate(handle: handle, displayName: handle, hasVideo: video)
            state.withLock { $0.calls[id] = Call(update: update) }
            sink.yield(.outgoing(id, update))
        } else if state.withLock({ $0.calls[action.callID] }) == nil {
            throw CallSystemError.unknownCallUUID
        }
        guard await perform(action) else { throw CallSystemError.invalidAction }
    }

    /// Nothing to check: the app owns the audio session here.
    public func mediaWillStartAudio(_ id: UUID) {}

    /// The calls on the app's screen.
    public var liveCallIDs: [UUID] { state.withLock { Array($0.calls.keys) } }

    // MARK: The user's taps

    /// The user answers on the app's ringing screen.
    @discardableResult
    public func answer(_ id: UUID) async -> Bool { await perform(.answer(id)) }

    /// The user declines or hangs up.
    @discardableResult
    public func end(_ id: UUID) async -> Bool { await perform(.end(id)) }

    /// The user mutes or unmutes.
    @discardableResult
    public func setMuted(_ id: UUID, _ muted: Bool) async -> Bool { await perform(.setMuted(id, muted)) }

    /// The user puts the call on hold or takes it off.
    @discardableResult
    public func setHeld(_ id: UUID, _ held: Bool) async -> Bool { await perform(.setHeld(id, held)) }

    private func perform(_ action: CallAction) async -> Bool {
        guard let delegate else { return false }
        let timeout = actionTimeout
        var timer: Task<Void, Never>?
        let answer: Bool? = await withCheckedContinuation { (continuation: CheckedContinuation<Bool?, Never>) in
            let once = ActionCompletion(deadline: Date().addingTimeInterval(SimulatedCallSystem.seconds(timeout))) {
                continuation.resume(returning: $0)
            }
            delegate.callSystem(perform: action, completion: once)
            // Held and cancelled once the action is answered: no timer outlives it.
            timer = Task {
                do { try await Task.sleep(for: timeout) } catch { return }
                once.timeOut { continuation.resume(returning: nil) }
            }
        }
        timer?.cancel()
        guard let success = answer else {
            delegate.callSystem(timedOutPerforming: action)
            return false
        }
        guard success else { return false }
        let id = action.callID
        switch action {
        case .answer, .start:
            state.withLock { $0.calls[id]?.answered = true }
            if case .answer = action { sink.yield(.connected(id)) }
        case .end:
            if state.withLock({ $0.calls.removeValue(forKey: id) }) != nil { sink.yield(.endedByUser(id)) }
        case .setHeld(_, let held):
            state.withLock { $0.calls[id]?.held = held }
            sink.yield(.held(id, held))
        case .setMuted, .playDTMF, .setTranslating:
            break
        }
        updateAudio()
        return true
    }

    /// The session is active while a call is up and not on hold.
    private func updateAudio() {
        let change = state.withLock { state -> (Bool, Bool)? in
            let up = state.calls.values.filter { $0.answered && !$0.held }
            let wanted = !up.isEmpty
            guard wanted != state.audioActive else { return nil }
            state.audioActive = wanted
            return (wanted, up.contains { $0.update.hasVideo })
        }
        guard let (active, video) = change else { return }
        // A session that fails to activate (another app's call holds the audio) leaves the call
        // up: the app still hears the change, and its media engine reports what it cannot open.
        try? audioSession(active, video)
        delegate?.callSystem(didChangeAudioActive: active)
    }
}

#if (os(iOS) || SWITCHBOARD_APPLE_STUBS) && canImport(AVFoundation)
import AVFoundation
import SwitchboardSupport

/// Audio session setups for calls.
public enum CallAudioSession {
    /// Play and record in voice chat mode (video chat for a video call, on the speaker), with
    /// Bluetooth headsets (hands-free and A2DP) allowed. Configures only: it never activates.
    public static let voiceAndVideoChat: @Sendable (AVAudioSession, Bool) throws -> Void = { session, video in
        #if compiler(>=6.2) && !SWITCHBOARD_SDK_BEFORE_26
        // The iOS 26 SDK's name for the same option (Xcode 26 comes with Swift 6.2).
        var options: AVAudioSession.CategoryOptions = [.allowBluetoothHFP, .allowBluetoothA2DP]
        #else
        var options: AVAudioSession.CategoryOptions = [.allowBluetooth, .allowBluetoothA2DP]
        #endif
        if video { options.insert(.defaultToSpeaker) }
        try session.setCategory(.playAndRecord, mode: video ? .videoChat : .voiceChat, options: options)
    }

    /// Asks the user for the microphone once (the system prompts the first time; later calls
    /// answer at once): call it at onboarding, in the app's own UI. Without it a first call
    /// answered on the lock screen cannot show the prompt and records silence.
    public static func requestMicrophoneAccess() async -> Bool {
        await withCheckedContinuation { done in
            AVAudioApplication.requestRecordPermission { granted in done.resume(returning: granted) }
        }
    }
}

extension InAppCallSystem {
    /// Without CallKit the app activates its own session: set up with
    /// `CallAudioSession.voiceAndVideoChat` and activated, deactivated after the last call.
    public static let defaultAudioSession: @Sendable (_ active: Bool, _ video: Bool) throws -> Void = { active, video in
        let session = AVAudioSession.sharedInstance()
        if active {
            try CallAudioSession.voiceAndVideoChat(session, video)
            try session.setActive(true)
        } else {
            try session.setActive(false, options: .notifyOthersOnDeactivation)
        }
    }
}
#else
extension InAppCallSystem {
    /// No audio session to manage on this platform.
    public static let defaultAudioSession: @Sendable (_ active: Bool, _ video: Bool) throws -> Void = { _, _ in }
}
#endif
