// The Apple-only bridges: CallKit, PushKit, the audio session and Recents' call-back.
//
// Compiled for iOS (and Mac Catalyst) only: on macOS the CallKit and PushKit modules exist but
// their call types and `.voIP` are unavailable. On Linux, `make test` type-checks this file
// against hand-written stubs of those frameworks (Tests/AppleStubs) with
// `SWITCHBOARD_APPLE_STUBS` standing in for `os(iOS)`.

#if (os(iOS) || SWITCHBOARD_APPLE_STUBS) && canImport(CallKit) && canImport(AVFoundation)
import AVFoundation
import CallKit
import Foundation
import SwitchboardProtocol

/// `CallSystem` on CallKit: thin on purpose; the logic of calls lives in `CallManager`.
///
/// Create it once, at launch, before PushKit delivers anything, and only under
/// `RegionPolicy.callKit` (use `InAppCallSystem` otherwise: no `CXProvider` may exist where
/// CallKit is not allowed). It configures the audio session in the start and answer actions,
/// before fulfilling them, and never activates it: CallKit does, and media starts only on
/// `CallManagerEvent.audioActive(true)` (`didActivate`), with WebRTC's audio in manual mode.
public final class CallKitSystem: NSObject, CallSystem, CXProviderDelegate, @unchecked Sendable {
    // Safety: CXProvider and CXCallController are thread-safe; the delegate is in `inbox`;
    // `videoCalls` and `pending` are under their locks.

    /// How the system call UI presents the app's calls.
    public struct Configuration: Sendable {
        /// Whether calls may be video calls (CallKit's default: no).
        public var supportsVideo = false
        /// Two groups of one call: a second call offers "Hold & Accept" and "End & Accept".
        public var maximumCallGroups = 2
        /// One call per group, always: calls are not merged into conferences in the call UI
        /// (the server has no merge), so merging is never offered and a group action is failed.
        public var maximumCallsPerCallGroup: Int { 1 }
        /// Calls can be held (the server hears it, `call.hold`).
        public var supportsHolding = true
        /// The keypad sends DTMF (as data in the call's room).
        public var supportsDTMF = true
        /// The kind of handle calls carry: what Recents and Contacts call back.
        public var handleType: CXHandle.HandleType = .generic
        /// A sound file in the app's main bundle.
        public var ringtoneSound: String?
        /// A 40×40 template image (PNG data) for the call UI.
        public var iconTemplateImageData: Data?
        /// Whether calls appear in the Phone app's Recents.
        public var includesCallsInRecents = true
        /// iOS 26 (built with Xcode 26): the system may offer live translation of calls; the app
        /// hears `CallManagerEvent.translating`. Mute through the system (`CallManager.setMuted`),
        /// never by stopping the audio upstream, or translation stops with it.
        public var supportsAudioTranslation = false
        /// Sets the audio session up for a call, in the start and answer actions; the default is
        /// `CallAudioSession.voiceAndVideoChat`. Must not activate the session.
        public var configureAudioSession: @Sendable (_ session: AVAudioSession, _ video: Bool) throws -> Void = CallAudioSession.voiceAndVideoChat

        public init() {}
    }

    /// Receives the user's actions; `CallManager` sets itself. An action CallKit delivers
    /// before there is one waits for it (`ActionInbox`).
    public var delegate: (any CallSystemDelegate)? {
        get { inbox.delegate }
        set { inbox.delegate = newValue }
    }
    private let inbox = ActionInbox()
    private let provider: CXProvider
    private let controller: CXCallController
    private let configuration: Configuration
    private let videoCalls = Locked<Set<UUID>>([])
    /// The actions handed to the delegate and not answered yet, by the action's own UUID.
    private let pending = Locked<[UUID: ActionCompletion]>([:])

    /// Creates the provider with `configuration`; CallKit calls the delegate on `queue` (a
    /// private serial queue by default: a busy main thread at launch must not delay a report).
    public init(configuration: Configuration = Configuration(), queue: DispatchQueue = DispatchQueue(label: "switchboard.callkit")) {
        self.configuration = configuration
        provider = CXProvider(configuration: Self.providerConfiguration(configuration))
        controller = CXCallController(queue: queue)
        super.init()
        provider.setDelegate(self, queue: queue)
    }

    /// CallKit's provider configuration for `configuration`.
    private static func providerConfiguration(_ configuration: Configuration) -> CXProviderConfiguration {
        let settings = CXProviderConfiguration()
        settings.supportsVideo = configuration.supportsVideo
        settings.maximumCallGroups = configuration.maximumCallGroups
        settings.maximumCallsPerCallGroup = configuration.maximumCallsPerCallGroup
        settings.supportedHandleTypes = [configuration.handleType]
        settings.ringtoneSound = configuration.ringtoneSound
        settings.iconTemplateImageData = configuration.iconTemplateImageData
        settings.includesCallsInRecents = configuration.includesCallsInRecents
        #if compiler(>=6.2) && !SWITCHBOARD_SDK_BEFORE_26
        settings.supportsAudioTranslation = configuration.supportsAudioTranslation
        #endif
        return settings
    }

    deinit { provider.invalidate() }

    /// Ends the provider's life: its calls end and it calls the delegate no more. The provider
    /// must be invalidated before it goes (also when CallKit is switched off for a region).
    public func invalidate() {
        provider.invalidate()
    }

    private func callUpdate(_ update: CallUpdate) -> CXCallUpdate {
        let callUpdate = CXCallUpdate()
        callUpdate.remoteHandle = CXHandle(type: configuration.handleType, value: update.handle)
        callUpdate.localizedCallerName = update.displayName
        callUpdate.hasVideo = update.hasVideo
        // Unset properties are ignored by CallKit: every one is said.
        callUpdate.supportsHolding = configuration.supportsHolding
        callUpdate.supportsGrouping = false
        callUpdate.supportsUngrouping = false
        callUpdate.supportsDTMF = configuration.supportsDTMF
        return callUpdate
    }

    // MARK: CallSystem

    /// Shows an incoming call (see `CallSystem`); every error of CallKit's is passed on.
    public func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void) {
        if update.hasVideo { _ = videoCalls.withLock { $0.insert(id) } }
        // Set again right before each report, as Apple's engineers ask of every CallKit app:
        // it works around the system sometimes never activating the audio session for the
        // call (one-way or no audio). The audio session itself is not touched here.
        provider.configuration = Self.providerConfiguration(configuration)
        provider.reportNewIncomingCall(with: id, update: callUpdate(update)) { error in
            completion(error.map(Self.reportError))
        }
    }

    /// CallKit's report error as a `CallSystemError`, by its code (which newer iOS versions
    /// extend: 5, 6 and 7 need no newer SDK here).
    static func reportError(_ error: any Error) -> CallSystemError {
        guard let error = error as? CXErrorCodeIncomingCallError else { return .unknown(-1) }
        return CallSystemError(incomingCallCode: error.code.rawValue)
    }

    /// CallKit's request error as a `CallSystemError`, by its code.
    static func requestError(_ error: any Error) -> CallSystemError {
        guard let error = error as? CXErrorCodeRequestTransactionError else { return .unknown(-1) }
        switch error.code.rawValue {
        case 1: return .unentitled
        case 2, 3, 6: return .invalidAction
        case 4: return .unknownCallUUID
        case 5: return .callUUIDAlreadyExists
        case 7: return .maximumCallGroupsReached
        case 8: return .callIsProtected
        case let code: return .unknown(code)
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
        _ = videoCalls.withLock { $0.remove(id) }
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
            let start = CXStartCallAction(call: id, handle: CXHandle(type: configuration.handleType, value: handle))
            start.isVideo = video
            if video { _ = videoCalls.withLock { $0.insert(id) } }
            cxAction = start
        case .answer(let id): cxAction = CXAnswerCallAction(call: id)
        case .end(let id): cxAction = CXEndCallAction(call: id)
        case .setMuted(let id, let muted): cxAction = CXSetMutedCallAction(call: id, muted: muted)
        case .setHeld(let id, let held): cxAction = CXSetHeldCallAction(call: id, onHold: held)
        case .playDTMF(let id, let digits): cxAction = CXPlayDTMFCallAction(call: id, digits: digits, type: .singleTone)
        case .setTranslating:
            // Started by the user in the call UI, never by the app.
            throw CallSystemError.invalidAction
        }
        do {
            try await controller.request(CXTransaction(action: cxAction))
        } catch {
            throw Self.requestError(error)
        }
    }

    /// Media is about to start (see `CallSystem`): CallKit activated the session, which is when
    /// `CallManager` says so; nothing to check.
    public func mediaWillStartAudio(_ id: UUID) {}

    /// The calls CallKit shows now (see `CallSystem`).
    public var liveCallIDs: [UUID] {
        controller.callObserver.calls.filter { !$0.hasEnded }.map(\.uuid)
    }

    /// Routes a call's audio to the speaker, or back to the receiver or headset. The choice is
    /// cleared when the audio session deactivates, so it never carries into the next call.
    public func setSpeakerphone(_ on: Bool) throws {
        try AVAudioSession.sharedInstance().overrideOutputAudioPort(on ? .speaker : .none)
    }

    // MARK: CXProviderDelegate

    /// CallKit dropped every call: the delegate tears everything down.
    public func providerDidReset(_ provider: CXProvider) {
        delegate?.callSystemDidReset()
    }

    /// Hands `action` to the delegate with its deadline; `fulfilled` runs after a fulfilment,
    /// which `fulfil` performs when the action has its own way (translation names its engine).
    private func forward(
        _ action: CXAction, as callAction: CallAction, fulfil: (@Sendable () -> Void)? = nil, fulfilled: @escaping @Sendable () -> Void = {}
    ) {
        nonisolated(unsafe) let action = action
        let key = action.uuid
        let pending = self.pending
        let completion = ActionCompletion(deadline: action.timeoutDate) { success in
            pending.withLock { _ = $0.removeValue(forKey: key) }
            if success {
                if let fulfil { fulfil() } else { action.fulfill() }
                fulfilled()
            } else {
                action.fail()
            }
        }
        pending.withLock { $0[key] = completion }
        inbox.perform(callAction, completion: completion)
    }

    /// Configures the audio session for a call that is starting or being answered. A failure
    /// is not the call's end: CallKit still activates the session it has.
    private func configureAudio(video: Bool) {
        try? configuration.configureAudioSession(AVAudioSession.sharedInstance(), video)
    }

    /// The user (or the app) starts a call: audio configured, then the delegate; CallKit hears
    /// the call is connecting once the action is fulfilled.
    public func provider(_ provider: CXProvider, perform action: CXStartCallAction) {
        configureAudio(video: action.isVideo)
        let id = action.callUUID
        let shown = CallUpdate(handle: action.handle.value, displayName: action.handle.value, hasVideo: action.isVideo)
        // Labelled: a trailing closure would bind to `fulfil` and replace the fulfilment (the
        // bridge run in scripts/typecheck-apple.sh caught exactly that).
        forward(
            action, as: .start(id, handle: action.handle.value, video: action.isVideo),
            fulfilled: { [weak self] in
                guard let self else { return }
                // The outgoing call gets its name and what it supports, as an incoming one does.
                self.provider.reportCall(with: id, updated: callUpdate(shown))
                self.provider.reportOutgoingCall(with: id, startedConnectingAt: Date())
            })
    }

    /// The user answers: audio configured, then the delegate, which holds the action until the
    /// server confirms (within `timeoutDate`).
    public func provider(_ provider: CXProvider, perform action: CXAnswerCallAction) {
        configureAudio(video: videoCalls.withLock { $0.contains(action.callUUID) })
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

    /// Forwards CallKit's hold action to the delegate (also the first half of "Hold & Accept").
    public func provider(_ provider: CXProvider, perform action: CXSetHeldCallAction) {
        forward(action, as: .setHeld(action.callUUID, action.isOnHold))
    }

    /// Forwards CallKit's DTMF action to the delegate.
    public func provider(_ provider: CXProvider, perform action: CXPlayDTMFCallAction) {
        forward(action, as: .playDTMF(action.callUUID, digits: action.digits))
    }

    #if compiler(>=6.2) && !SWITCHBOARD_SDK_BEFORE_26
    /// iOS 26: the user turned live translation on or off; the delegate hears it (the app shows
    /// it) and the system's own engine translates.
    public func provider(_ provider: CXProvider, perform action: CXSetTranslatingCallAction) {
        nonisolated(unsafe) let translating = action
        forward(
            action, as: .setTranslating(action.callUUID, action.isTranslating, localLanguage: action.localLanguage, remoteLanguage: action.remoteLanguage),
            fulfil: { translating.fulfill(using: .default) })
    }

    private static func translatingAction(_ action: CXAction) -> CallAction? {
        guard let translating = action as? CXSetTranslatingCallAction else { return nil }
        return .setTranslating(
            translating.callUUID, translating.isTranslating, localLanguage: translating.localLanguage, remoteLanguage: translating.remoteLanguage)
    }
    #else
    private static func translatingAction(_ action: CXAction) -> CallAction? { nil }
    #endif

    /// Calls are never merged (one call per group): a group action is failed at once.
    public func provider(_ provider: CXProvider, perform action: CXSetGroupCallAction) {
        action.fail()
    }

    /// CallKit gave up on an action: it is neither fulfilled nor failed any more (its completion
    /// is silenced), and the delegate hears it.
    public func provider(_ provider: CXProvider, timedOutPerforming action: CXAction) {
        pending.withLock { $0.removeValue(forKey: action.uuid) }?.timeOut()
        let callAction: CallAction?
        switch action {
        case let start as CXStartCallAction: callAction = .start(start.callUUID, handle: start.handle.value, video: start.isVideo)
        case let answer as CXAnswerCallAction: callAction = .answer(answer.callUUID)
        case let end as CXEndCallAction: callAction = .end(end.callUUID)
        case let held as CXSetHeldCallAction: callAction = .setHeld(held.callUUID, held.isOnHold)
        case let muted as CXSetMutedCallAction: callAction = .setMuted(muted.callUUID, muted.isMuted)
        case let dtmf as CXPlayDTMFCallAction: callAction = .playDTMF(dtmf.callUUID, digits: dtmf.digits)
        default: callAction = Self.translatingAction(action)
        }
        if let callAction { delegate?.callSystem(timedOutPerforming: callAction) }
    }

    /// CallKit activated the audio session: media may start now.
    public func provider(_ provider: CXProvider, didActivate audioSession: AVAudioSession) {
        delegate?.callSystem(didChangeAudioActive: true)
    }

    /// CallKit deactivated the audio session (the last call ended, or the call went on hold):
    /// media must stop; a speaker override is cleared.
    public func provider(_ provider: CXProvider, didDeactivate audioSession: AVAudioSession) {
        try? audioSession.overrideOutputAudioPort(.none)
        delegate?.callSystem(didChangeAudioActive: false)
    }
}

#endif

#if (os(iOS) || SWITCHBOARD_APPLE_STUBS) && canImport(PushKit)
import PushKit

/// PushKit wiring: registers for VoIP pushes (unless the region policy forbids CallKit), hands
/// the token to the app (to register with `DeviceRegistrar`), says when the token is no longer
/// valid (unregister it), and hands every push to the call manager, which reports it before
/// the delegate returns.
public final class PushKitBridge: NSObject, PKPushRegistryDelegate, @unchecked Sendable {
    // Safety: PushKit calls the delegate on the queue given at init; the fields are immutable.
    private let registry: PKPushRegistry
    private let calls: CallManager
    private let onToken: @Sendable (Data) -> Void
    private let onTokenInvalidated: @Sendable () -> Void

    /// Create it in `application(_:didFinishLaunchingWithOptions:)`, synchronously, and only
    /// under `RegionPolicy.callKit`. `onToken` receives the raw VoIP token (register it with
    /// `DeviceRegistrar`); `onTokenInvalidated` means the server must stop using it
    /// (`DeviceRegistrar.register` without it). PushKit calls on `queue` (a private serial
    /// queue by default).
    public init(
        calls: CallManager, policy: RegionPolicy, queue: DispatchQueue = DispatchQueue(label: "switchboard.pushkit"),
        onToken: @escaping @Sendable (Data) -> Void, onTokenInvalidated: @escaping @Sendable () -> Void = {}
    ) {
        registry = PKPushRegistry(queue: queue)
        self.calls = calls
        self.onToken = onToken
        self.onTokenInvalidated = onTokenInvalidated
        super.init()
        registry.delegate = self
        registry.desiredPushTypes = policy.registersVoIPPush ? [.voIP] : []
    }

    /// A new VoIP token: hand it to the device registry.
    public func pushRegistry(_ registry: PKPushRegistry, didUpdate pushCredentials: PKPushCredentials, for type: PKPushType) {
        onToken(pushCredentials.token)
    }

    /// The VoIP token is no longer valid: the server must not push to it.
    public func pushRegistry(_ registry: PKPushRegistry, didInvalidatePushTokenFor type: PKPushType) {
        onTokenInvalidated()
    }

    /// A VoIP push: reported to the call UI before this returns.
    ///
    /// The completion is taken without `@Sendable`: a witness with a plain closure matches an
    /// SDK that marks PushKit's handler `@Sendable` and one that does not, while a `@Sendable`
    /// one nearly misses the latter, and PushKit never calls an optional method that does not
    /// match (every VoIP push would then kill the app).
    public func pushRegistry(
        _ registry: PKPushRegistry, didReceiveIncomingPushWith payload: PKPushPayload, for type: PKPushType,
        completion: @escaping () -> Void
    ) {
        let done = PushCompletion(call: completion)
        calls.handleIncomingVoIPPush(payload: Self.dictionary(payload)) { done.call() }
    }

    #if compiler(>=6.3) && !SWITCHBOARD_SDK_BEFORE_26_4
    /// A VoIP push on iOS 26.4 and later, with PushKit's `mustReport` (see
    /// `CallManager.handleIncomingVoIPPush`). Compiled only by a compiler that comes with the
    /// iOS 26.4 SDK (Xcode 26.4, Swift 6.3), which declares `PKVoIPPushMetadata`: an older Xcode
    /// builds the package without it, and PushKit then calls the method above.
    @available(iOS 26.4, *)
    public func pushRegistry(
        _ registry: PKPushRegistry, didReceiveIncomingVoIPPushWith payload: PKPushPayload, metadata: PKVoIPPushMetadata,
        withCompletionHandler completion: @escaping () -> Void
    ) {
        let done = PushCompletion(call: completion)
        calls.handleIncomingVoIPPush(payload: Self.dictionary(payload), mustReport: metadata.mustReport) { done.call() }
    }
    #endif

    /// PushKit's completion handler, which may be called from any thread (PushKit's own
    /// contract), carried to the call manager's `@Sendable` parameter.
    private struct PushCompletion: @unchecked Sendable {
        let call: () -> Void
    }

    private static func dictionary(_ payload: PKPushPayload) -> [String: Any] {
        var dictionary: [String: Any] = [:]
        for (key, value) in payload.dictionaryPayload {
            if let key = key as? String { dictionary[key] = value }
        }
        return dictionary
    }
}
#endif

#if (os(iOS) || SWITCHBOARD_APPLE_STUBS) && canImport(Intents)
import Intents
import SwitchboardSupport

/// Calling back from the Phone app's Recents or from Contacts: iOS opens the app with an
/// `INStartCallIntent` in `application(_:continue:restorationHandler:)`.
public enum RecentsCallBack {
    /// Who to call, and whether with video, for a call-back activity; nil for any other one.
    /// The handle is what the call UI showed (the caller's `handle`, a phone number or an
    /// email): turn it into the user with `CallManager.callers.identity(forHandle:)`, then
    /// start the call with `CallManager.startCall(to:video:)` once the app is ready.
    public static func callee(of userActivity: NSUserActivity) -> (handle: String, video: Bool)? {
        guard let intent = userActivity.interaction?.intent as? INStartCallIntent,
            let handle = intent.contacts?.first?.personHandle?.value, !handle.isEmpty
        else { return nil }
        return (handle, intent.callCapability == .videoCall)
    }
}
#endif

#if (os(iOS) || SWITCHBOARD_APPLE_STUBS) && canImport(StoreKit)
import StoreKit

extension RegionPolicy {
    /// The policy for the device's App Store storefront (StoreKit's `Storefront.current`, an
    /// ISO 3166-1 alpha-3 code: "CHN" is mainland China); nil when it cannot be read (no
    /// account, no network): keep the policy decided before.
    public static func fromStorefront() async -> RegionPolicy? {
        guard let storefront = await Storefront.current else { return nil }
        return forRegion(storefront.countryCode)
    }
}
#endif
