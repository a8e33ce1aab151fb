// The system call UI through LiveCommunicationKit (iOS 17.4+), Apple's second framework for
// calls beside CallKit. Compiled for iOS only, like CallKitSystem; on Linux `make test`
// type-checks it against stubs written from Apple's documentation (Tests/AppleStubs).

#if (os(iOS) || SWITCHBOARD_APPLE_STUBS) && canImport(LiveCommunicationKit) && canImport(AVFoundation)
import AVFoundation
import Foundation
import LiveCommunicationKit
import SwitchboardProtocol
import SwitchboardSupport

/// `CallSystem` on LiveCommunicationKit, with the guarantees of `CallKitSystem`: a pushed call
/// is reported from inside the push handler, every action the system hands over is fulfilled or
/// failed before its deadline (by `CallManager`; an action that comes before the manager waits
/// for it), the audio session is configured in the start and join actions and never
/// activated here (media starts on `audioActive(true)`, the system's `didActivate`), and every
/// end reason has its LiveCommunicationKit counterpart.
///
/// Use it instead of `CallKitSystem` where the app ships on LiveCommunicationKit (chosen per
/// build or region: see docs/ios-integration.md, which says what Apple documents about each
/// choice). Create it once, at launch, before PushKit delivers anything.
public final class LiveCommunicationKitSystem: CallSystem, ConversationManagerDelegate, @unchecked Sendable {
    // Safety: `manager` is used from any thread as CallKit's provider is (Apple documents no
    // thread rule for ConversationManager; it is not marked Sendable: a device confirms it);
    // the delegate is in `inbox`; `pending` and `videoCalls` are under their locks.

    /// How the system call UI presents the app's calls.
    public struct Configuration: Sendable {
        /// Whether calls may be video calls.
        public var supportsVideo = false
        /// Two groups of one call: a second call can be taken with the first on hold.
        public var maximumCallGroups = 2
        /// One call per group, always (the server has no merge).
        public var maximumCallsPerCallGroup: Int { 1 }
        /// The kind of handle calls carry.
        public var handleKind: Handle.Kind = .generic
        /// A sound file in the app's main bundle.
        public var ringtoneName: String?
        /// A template image (PNG data) for the call UI.
        public var iconTemplateImageData: Data?
        /// Whether calls appear in the Phone app's Recents.
        public var includesCallsInRecents = true
        /// Sets the audio session up for a call, in the start and join actions; must not
        /// activate it (the system does).
        public var configureAudioSession: @Sendable (_ session: AVAudioSession, _ video: Bool) throws -> Void = CallAudioSession.voiceAndVideoChat

        public init() {}
    }

    /// Receives the user's actions; `CallManager` sets itself. An action the system delivers
    /// before there is one waits for it (`ActionInbox`).
    public var delegate: (any CallSystemDelegate)? {
        get { inbox.delegate }
        set { inbox.delegate = newValue }
    }
    private let inbox = ActionInbox()
    private let manager: ConversationManager
    private let configuration: Configuration
    private let videoCalls = Locked<Set<UUID>>([])
    /// The actions handed to the delegate and not answered yet, by the action's own UUID.
    private let pending = Locked<[UUID: ActionCompletion]>([:])

    /// Creates the conversation manager with `configuration` and becomes its delegate.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        manager = ConversationManager(
            configuration: ConversationManager.Configuration(
                ringtoneName: configuration.ringtoneName, iconTemplateImageData: configuration.iconTemplateImageData,
                maximumConversationGroups: configuration.maximumCallGroups,
                maximumConversationsPerConversationGroup: configuration.maximumCallsPerCallGroup,
                includesConversationInRecents: configuration.includesCallsInRecents, supportsVideo: configuration.supportsVideo,
                supportedHandleTypes: [configuration.handleKind]))
        manager.delegate = self
    }

    deinit { manager.invalidate() }

    /// Ends the manager's life: its calls end and it calls the delegate no more.
    public func invalidate() {
        manager.invalidate()
    }

    private func conversationUpdate(_ update: CallUpdate) -> Conversation.Update {
        // Every capability is said; merging never (one call per group).
        var capabilities: Conversation.Capabilities = [.pausing, .playingTones]
        if update.hasVideo { capabilities.insert(.video) }
        return Conversation.Update(
            members: [Handle(type: configuration.handleKind, value: update.handle, displayName: update.displayName)], capabilities: capabilities)
    }

    private func conversation(_ id: UUID) -> Conversation? {
        manager.conversations.first { $0.uuid == id }
    }

    // MARK: CallSystem

    /// Shows an incoming call (see `CallSystem`). The report is asynchronous in
    /// LiveCommunicationKit: it is started here, inside the push handler, and `completion`
    /// hears how it ended; any error counts as a refusal (Apple documents no codes for it).
    public func reportNewIncomingCall(_ id: UUID, update: CallUpdate, completion: @escaping @Sendable (CallSystemError?) -> Void) {
        if update.hasVideo { _ = videoCalls.withLock { $0.insert(id) } }
        nonisolated(unsafe) let manager = self.manager
        let conversationUpdate = self.conversationUpdate(update)
        Task {
            do {
                try await manager.reportNewIncomingConversation(uuid: id, update: conversationUpdate)
                completion(nil)
            } catch {
                completion(Self.reportError(error))
            }
        }
    }

    /// A refused report as a `CallSystemError`: a CallKit code when the error carries one in
    /// CallKit's incoming-call domain, else `unknown`.
    static func reportError(_ error: any Error) -> CallSystemError {
        let error = error as NSError
        guard error.domain == "com.apple.CallKit.error.incomingcall" else { return .unknown(error.code) }
        return CallSystemError(incomingCallCode: error.code)
    }

    /// LiveCommunicationKit's reason for an end.
    static func endedReason(_ reason: CallEndedReason) -> Conversation.EndedReason {
        switch reason {
        case .failed: .failed
        case .remoteEnded: .remoteEnded
        case .unanswered: .unanswered
        case .answeredElsewhere: .joinedElsewhere
        case .declinedElsewhere: .declinedElsewhere
        }
    }

    /// Ends a call on the call UI (see `CallSystem`).
    public func reportCall(_ id: UUID, endedAt: Date, reason: CallEndedReason) {
        _ = videoCalls.withLock { $0.remove(id) }
        guard let conversation = conversation(id) else { return }
        manager.reportConversationEvent(.conversationEnded(endedAt, Self.endedReason(reason)), for: conversation)
    }

    /// Marks an outgoing call connected (see `CallSystem`).
    public func reportOutgoingCallConnected(_ id: UUID) {
        guard let conversation = conversation(id) else { return }
        manager.reportConversationEvent(.conversationConnected(Date()), for: conversation)
    }

    /// Asks the system to perform an action the app started (see `CallSystem`).
    public func request(_ action: CallAction) async throws {
        let made: ConversationAction
        switch action {
        case .start(let id, let handle, let video):
            if video { _ = videoCalls.withLock { $0.insert(id) } }
            made = StartConversationAction(
                conversationUUID: id, handles: [Handle(type: configuration.handleKind, value: handle)], isVideo: video)
        case .answer(let id): made = JoinConversationAction(conversationUUID: id)
        case .end(let id): made = EndConversationAction(conversationUUID: id)
        case .setMuted(let id, let muted): made = MuteConversationAction(conversationUUID: id, isMuted: muted)
        case .setHeld(let id, let held): made = PauseConversationAction(conversationUUID: id, isPaused: held)
        case .playDTMF(let id, let digits): made = PlayToneAction(conversationUUID: id, digits: digits, tone: .single)
        case .setTranslating:
            // Started by the user in the system's UI, never by the app.
            throw CallSystemError.invalidAction
        }
        if case .start = action {} else if conversation(action.callID) == nil { throw CallSystemError.unknownCallUUID }
        nonisolated(unsafe) let manager = self.manager
        nonisolated(unsafe) let conversationAction = made
        do {
            try await manager.perform([conversationAction])
        } catch {
            throw CallSystemError.invalidAction
        }
    }

    /// Media is about to start (see `CallSystem`): the system activated the session.
    public func mediaWillStartAudio(_ id: UUID) {}

    /// The calls the system shows now (see `CallSystem`).
    public var liveCallIDs: [UUID] {
        manager.conversations.filter { $0.state != .left && $0.state != .leaving }.map(\.uuid)
    }

    /// Routes the call's audio to the speaker (true) or back to the receiver.
    public func setSpeakerphone(_ on: Bool) throws {
        try AVAudioSession.sharedInstance().overrideOutputAudioPort(on ? .speaker : .none)
    }

    // MARK: ConversationManagerDelegate

    /// The manager started: nothing to do.
    public func conversationManagerDidBegin(_ manager: ConversationManager) {}

    /// The system dropped every call: the delegate tears everything down.
    public func conversationManagerDidReset(_ manager: ConversationManager) {
        delegate?.callSystemDidReset()
    }

    /// A conversation changed: the calls' state is `CallManager`'s, from the server.
    public func conversationManager(_ manager: ConversationManager, conversationChanged conversation: Conversation) {}

    /// The system activated the audio session: media may start now.
    public func conversationManager(_ manager: ConversationManager, didActivate audioSession: AVAudioSession) {
        delegate?.callSystem(didChangeAudioActive: true)
    }

    /// The system deactivated the audio session: media must stop; a speaker override is cleared.
    public func conversationManager(_ manager: ConversationManager, didDeactivate audioSession: AVAudioSession) {
        try? audioSession.overrideOutputAudioPort(.none)
        delegate?.callSystem(didChangeAudioActive: false)
    }

    /// An action of the user's (or the app's): the audio session configured for a start or a
    /// join, then handed to the delegate with its deadline; fulfilled as its kind says.
    public func conversationManager(_ manager: ConversationManager, perform action: ConversationAction) {
        guard let callAction = Self.callAction(action) else {
            action.fail()  // merging and anything else this SDK does not offer
            return
        }
        switch callAction {
        case .start(_, _, let video): configureAudio(video: video)
        case .answer(let id): configureAudio(video: videoCalls.withLock { $0.contains(id) })
        default: break
        }
        nonisolated(unsafe) let action = action
        let key = action.uuid
        let pending = self.pending
        let completion = ActionCompletion(deadline: action.timeoutDate) { success in
            pending.withLock { _ = $0.removeValue(forKey: key) }
            guard success else { return action.fail() }
            switch action {
            case let join as JoinConversationAction: join.fulfill(dateConnected: Date())
            case let end as EndConversationAction: end.fulfill(dateEnded: Date())
            case let start as StartConversationAction: start.fulfill(dateStarted: Date())
            default: action.fulfill()
            }
        }
        pending.withLock { $0[key] = completion }
        inbox.perform(callAction, completion: completion)
    }

    /// The system gave up on an action: its completion is silenced and the delegate hears it.
    public func conversationManager(_ manager: ConversationManager, timedOutPerforming action: ConversationAction) {
        pending.withLock { $0.removeValue(forKey: action.uuid) }?.timeOut()
        if let callAction = Self.callAction(action) { delegate?.callSystem(timedOutPerforming: callAction) }
    }

    /// The SDK's action for LiveCommunicationKit's; nil for one it does not offer (merging).
    static func callAction(_ action: ConversationAction) -> CallAction? {
        let id = action.conversationUUID
        switch action {
        case let start as StartConversationAction: return .start(id, handle: start.handles.first?.value ?? "", video: start.isVideo)
        case is JoinConversationAction: return .answer(id)
        case is EndConversationAction: return .end(id)
        case let mute as MuteConversationAction: return .setMuted(id, mute.isMuted)
        case let pause as PauseConversationAction: return .setHeld(id, pause.isPaused)
        case let tone as PlayToneAction: return .playDTMF(id, digits: tone.digits)
        default: return nil
        }
    }

    /// Configures the audio session for a call that is starting or being answered; a failure
    /// is not the call's end.
    private func configureAudio(video: Bool) {
        try? configuration.configureAudioSession(AVAudioSession.sharedInstance(), video)
    }
}
#endif
