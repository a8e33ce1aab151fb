#if canImport(CallKit)
import AVFoundation
import CallKit
import Foundation

/// `CallSystem` on CallKit: thin on purpose; the logic of calls lives in `CallManager`.
///
/// Create it at launch, before PushKit delivers anything, and hand it to `CallManager`.
/// Media must start only in `CallSystemDelegate.callSystem(didChangeAudioActive: true)`
/// (CallKit's `didActivate`), with WebRTC's audio session in manual mode.
public final class CallKitSystem: NSObject, CallSystem, CXProviderDelegate, @unchecked Sendable {
    // Safety: CXProvider and CXCallController are thread-safe; `delegate` is set once at start.

    /// How the system call UI presents the app's calls.
    public struct Configuration: Sendable {
        /// Whether calls may be video calls.
        public var supportsVideo = true
        /// 1 keeps "Hold & Accept" off when the app cannot hold calls.
        public var maximumCallGroups = 1
        /// Calls per group (1: no conference calls in the call UI).
        public var maximumCallsPerCallGroup = 1
        /// The kinds of handle calls carry (generic, phone number, email).
        public var handleTypes: Set<CXHandle.HandleType> = [.generic]
        /// A sound file in the app bundle.
        public var ringtoneSound: String?
        /// A 40×40 template image (PNG data) for the call UI.
        public var iconTemplateImageData: Data?
        /// Whether calls appear in the Phone app's Recents.
        public var includesCallsInRecents = true

        public init() {}
    }

    /// Receives the user's actions; `CallManager` sets itself.
    public weak var delegate: (any CallSystemDelegate)?
    private let provider: CXProvider
    private let controller = CXCallController()

    /// Creates the provider with `configuration`.
    public init(configuration: Configuration = Configuration()) {
        let settings = CXProviderConfiguration()
        settings.supportsVideo = configuration.supportsVideo
        settings.maximumCallGroups = configuration.maximumCallGroups
        settings.maximumCallsPerCallGroup = configuration.maximumCallsPerCallGroup
        settings.supportedHandleTypes = configuration.handleTypes
        settings.ringtoneSound = configuration.ringtoneSound
        settings.iconTemplateImageData = configuration.iconTemplateImageData
        settings.includesCallsInRecents = configuration.includesCallsInRecents
        provider = CXProvider(configuration: settings)
        super.init()
        provider.setDelegate(self, queue: nil)
    }

    // MARK: CallSystem

    /// Shows an incoming call (see `CallSystem`).
    public func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void) {
        let callUpdate = CXCallUpdate()
        callUpdate.remoteHandle = CXHandle(type: .generic, value: update.handle)
        callUpdate.localizedCallerName = update.displayName
        callUpdate.hasVideo = update.hasVideo
        provider.reportNewIncomingCall(with: id, update: callUpdate) { error in
            guard let error = error as? CXErrorCodeIncomingCallError else {
                completion(error == nil ? nil : .unknown)
                return
            }
            switch error.code {
            case .callUUIDAlreadyExists: completion(.callUUIDAlreadyExists)
            case .filteredByDoNotDisturb: completion(.filteredByDoNotDisturb)
            default: completion(.unknown)
            }
        }
    }

    /// Ends a call on the call UI (see `CallSystem`).
    public func reportCall(_ id: UUID, endedAt: Date, reason: CallEndedReason) {
        let cxReason: CXCallEndedReason
        switch reason {
        case .failed: cxReason = .failed
        case .remoteEnded: cxReason = .remoteEnded
        case .unanswered: cxReason = .unanswered
        case .answeredElsewhere: cxReason = .answeredElsewhere
        case .declinedElsewhere: cxReason = .declinedElsewhere
        }
        provider.reportCall(with: id, endedAt: endedAt, reason: cxReason)
    }

    /// Marks an outgoing call connected (see `CallSystem`).
    public func reportOutgoingCallConnected(_ id: UUID) {
        provider.reportOutgoingCall(with: id, connectedAt: Date())
    }

    /// Asks the system to perform an action the app started (see `CallSystem`).
    public func request(_ action: CallAction) async throws {
        let cxAction: CXCallAction
        switch action {
        case .start(let id, let handle, let video):
            let start = CXStartCallAction(call: id, handle: CXHandle(type: .generic, value: handle))
            start.isVideo = video
            cxAction = start
        case .answer(let id): cxAction = CXAnswerCallAction(call: id)
        case .end(let id): cxAction = CXEndCallAction(call: id)
        case .setMuted(let id, let muted): cxAction = CXSetMutedCallAction(call: id, muted: muted)
        case .setHeld(let id, let held): cxAction = CXSetHeldCallAction(call: id, onHold: held)
        case .playDTMF(let id, let digits): cxAction = CXPlayDTMFCallAction(call: id, digits: digits, type: .singleTone)
        }
        try await controller.request(CXTransaction(action: cxAction))
    }

    /// Called by the media layer before it plays or records audio (see `CallSystem`).
    public func mediaWillStartAudio(_ id: UUID) {}

    // MARK: CXProviderDelegate

    /// CallKit dropped every call: the delegate tears everything down.
    public func providerDidReset(_ provider: CXProvider) {
        delegate?.callSystemDidReset()
    }

    private func forward(_ action: CXAction, as callAction: CallAction) {
        nonisolated(unsafe) let action = action
        guard let delegate else {
            action.fail()
            return
        }
        delegate.callSystem(perform: callAction, completion: ActionCompletion { success in
            if success { action.fulfill() } else { action.fail() }
        })
    }

    /// Forwards CallKit's start action to the delegate.
    public func provider(_ provider: CXProvider, perform action: CXStartCallAction) {
        provider.reportOutgoingCall(with: action.callUUID, startedConnectingAt: Date())
        forward(action, as: .start(action.callUUID, handle: action.handle.value, video: action.isVideo))
    }

    /// Forwards CallKit's answer action to the delegate.
    public func provider(_ provider: CXProvider, perform action: CXAnswerCallAction) {
        forward(action, as: .answer(action.callUUID))
    }

    /// Forwards CallKit's end action to the delegate.
    public func provider(_ provider: CXProvider, perform action: CXEndCallAction) {
        forward(action, as: .end(action.callUUID))
    }

    /// Forwards CallKit's mute action to the delegate.
    public func provider(_ provider: CXProvider, perform action: CXSetMutedCallAction) {
        forward(action, as: .setMuted(action.callUUID, action.isMuted))
    }

    /// Forwards CallKit's hold action to the delegate.
    public func provider(_ provider: CXProvider, perform action: CXSetHeldCallAction) {
        forward(action, as: .setHeld(action.callUUID, action.isOnHold))
    }

    /// Forwards CallKit's DTMF action to the delegate.
    public func provider(_ provider: CXProvider, perform action: CXPlayDTMFCallAction) {
        forward(action, as: .playDTMF(action.callUUID, digits: action.digits))
    }

    /// CallKit activated the audio session: media may start now.
    public func provider(_ provider: CXProvider, didActivate audioSession: AVAudioSession) {
        delegate?.callSystem(didChangeAudioActive: true)
    }

    /// CallKit deactivated the audio session: media must stop.
    public func provider(_ provider: CXProvider, didDeactivate audioSession: AVAudioSession) {
        delegate?.callSystem(didChangeAudioActive: false)
    }
}
#endif

#if canImport(PushKit)
import PushKit

/// PushKit wiring: registers for VoIP pushes (unless the region policy forbids CallKit), sends
/// the token to the device registry, and hands every push to the call manager, which reports it
/// before the delegate returns.
public final class PushKitBridge: NSObject, PKPushRegistryDelegate, @unchecked Sendable {
    // Safety: PushKit calls the delegate on the queue given at init; the fields are immutable.
    private let registry: PKPushRegistry
    private let calls: CallManager
    private let onToken: @Sendable (Data) -> Void

    /// Create it in `application(_:didFinishLaunchingWithOptions:)`, synchronously.
    /// `onToken` receives the raw VoIP token (register it with `DeviceRegistrar`).
    public init(calls: CallManager, policy: RegionPolicy, queue: DispatchQueue = .main, onToken: @escaping @Sendable (Data) -> Void) {
        registry = PKPushRegistry(queue: queue)
        self.calls = calls
        self.onToken = onToken
        super.init()
        registry.delegate = self
        registry.desiredPushTypes = policy.registersVoIPPush ? [.voIP] : []
    }

    /// A new VoIP token: hand it to the device registry.
    public func pushRegistry(_ registry: PKPushRegistry, didUpdate credentials: PKPushCredentials, for type: PKPushType) {
        onToken(credentials.token)
    }

    /// A VoIP push: reported to the call UI before this returns.
    public func pushRegistry(
        _ registry: PKPushRegistry, didReceiveIncomingPushWith payload: PKPushPayload, for type: PKPushType,
        completion: @escaping () -> Void
    ) {
        nonisolated(unsafe) let done = completion
        calls.handleIncomingVoIPPush(payload: payload.dictionaryPayload as? [String: Any] ?? [:]) { done() }
    }
}
#endif
