// Stub of LiveCommunicationKit (iOS 17.4+), declarations only, written by hand from
// developer.apple.com/documentation/livecommunicationkit (the page of each type below; the
// trailing comments give the path under that root). See ../README.md.
//
// Unlike CallKit, this is a Swift-only framework: `ConversationManagerDelegate` is a plain Swift
// protocol (`: AnyObject`) and every one of its requirements is required, so there is no
// default-implementation extension and nothing for STRICT_DELEGATES to switch off.
//
// Sendable: only the types whose pages list Sendable are Sendable here (Conversation and the
// value types). ConversationManager (Copyable, Observable), ConversationManager.Configuration (no
// conformances listed) and the action classes (none listed) are not.
//
// Raw values: the pages give the raw types (Int) and the case names, never the numbers. The
// numbers and option bits below are the stub's own; code must never depend on them.

import AVFoundation
@_exported import Foundation
import Observation

/// Not Apple's: what the SDK asked of these stubs, in order, for `Tests/AppleBridge`.
public enum LiveCommunicationKitStubLog {
    nonisolated(unsafe) private static var entries: [String] = []
    private static let lock = NSLock()
    public static func note(_ entry: String) { lock.lock(); entries.append(entry); lock.unlock() }
    public static var all: [String] { lock.lock(); defer { lock.unlock() }; return entries }
}

// MARK: Manager

/// The object through which the app reports conversations to the system and asks it to act on
/// them (the LiveCommunicationKit counterpart of CXProvider plus CXCallController).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class ConversationManager: Observable {  // conversationmanager
    init() {}

    /// Makes a manager with the given options.
    public convenience init(configuration: ConversationManager.Configuration) { self.init() }  // conversationmanager/init(configuration:)

    /// The options the manager was made with (Apple declares it `let`).
    public var configuration: ConversationManager.Configuration { fatalError("stub") }  // conversationmanager/configuration-swift.property

    /// Receives the manager's callbacks; held weakly.
    public weak var delegate: (any ConversationManagerDelegate)?  // conversationmanager/delegate

    /// The conversations the system currently knows for this app.
    public var conversations: [Conversation] { [] }  // conversationmanager/conversations

    /// Actions not yet fulfilled or failed.
    public var pendingActions: [ConversationAction] { [] }  // conversationmanager/pendingactions

    /// Asks the system to carry out app-started actions (start, end, mute...); throws if it refuses.
    public func perform(_ actions: [ConversationAction]) async throws {}  // conversationmanager/perform(_:)

    /// Tears the manager down: every conversation ends and every pending action fails.
    public func invalidate() {}  // conversationmanager/invalidate()

    /// The unfinished actions of one class for one conversation.
    public func pendingConversationActions(
        of conversationActionClass: ConversationAction.Type, for conversation: Conversation
    ) -> [ConversationAction] { [] }  // conversationmanager/pendingconversationactions(of:for:)

    /// Tells the system something happened to a conversation (connecting, connected, ended, updated).
    /// Takes the Conversation object, not its UUID: look it up in `conversations`.
    public func reportConversationEvent(_ event: Conversation.Event, for conversation: Conversation) {}  // conversationmanager/reportconversationevent(_:for:)

    /// Reports an incoming conversation so the device rings; throws when the system refuses it.
    public func reportNewIncomingConversation(uuid: UUID, update: Conversation.Update) async throws {}  // conversationmanager/reportnewincomingconversation(uuid:update:)

    /// Reports an incoming conversation from a VoIP payload a notification service extension
    /// decrypted; throws with the reason when the system refuses it. Not on watchOS.
    @available(watchOS, unavailable)
    public class func reportNewIncomingVoIPPushPayload(_ payload: [AnyHashable: Any]) async throws {}  // conversationmanager/reportnewincomingvoippushpayload(_:)
}

@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
extension ConversationManager {
    /// The manager's options. The initializer has no default arguments.
    public struct Configuration {  // conversationmanager/configuration-swift.struct
        /// A sound file in the app bundle to ring with.
        public var ringtoneName: String?
        /// PNG data of the glyph shown in the system call UI.
        public var iconTemplateImageData: Data?
        /// How many separate groups of conversations may exist at once.
        public var maximumConversationGroups: Int
        /// How many conversations one group may hold.
        public var maximumConversationsPerConversationGroup: Int
        /// Whether ended conversations appear in the system's Recents.
        public var includesConversationInRecents: Bool
        /// Whether the app offers video as well as audio.
        public var supportsVideo: Bool
        /// The kinds of handle the app can reach.
        public var supportedHandleTypes: Set<Handle.Kind>

        /// All seven options, none defaulted.
        public init(
            ringtoneName: String?, iconTemplateImageData: Data?, maximumConversationGroups: Int,
            maximumConversationsPerConversationGroup: Int, includesConversationInRecents: Bool, supportsVideo: Bool,
            supportedHandleTypes: Set<Handle.Kind>
        ) {  // conversationmanager/configuration-swift.struct/init(ringtonename:...:supportedhandletypes:)
            self.ringtoneName = ringtoneName
            self.iconTemplateImageData = iconTemplateImageData
            self.maximumConversationGroups = maximumConversationGroups
            self.maximumConversationsPerConversationGroup = maximumConversationsPerConversationGroup
            self.includesConversationInRecents = includesConversationInRecents
            self.supportsVideo = supportsVideo
            self.supportedHandleTypes = supportedHandleTypes
        }
    }
}

/// The manager's callbacks. A Swift protocol: all seven methods are required.
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public protocol ConversationManagerDelegate: AnyObject {  // conversationmanagerdelegate
    /// The manager has started.
    func conversationManagerDidBegin(_ manager: ConversationManager)  // .../conversationmanagerdidbegin(_:)
    /// The manager was reset (the page says no more; CallKit's counterpart means every call is gone).
    func conversationManagerDidReset(_ manager: ConversationManager)  // .../conversationmanagerdidreset(_:)
    /// A conversation's state or details changed.
    func conversationManager(_ manager: ConversationManager, conversationChanged conversation: Conversation)  // .../conversationmanager(_:conversationchanged:)
    /// The system activated the conversation audio session (CallKit practice: start media only now).
    func conversationManager(_ manager: ConversationManager, didActivate audioSession: AVAudioSession)  // .../conversationmanager(_:didactivate:)
    /// The system deactivated the conversation audio session.
    func conversationManager(_ manager: ConversationManager, didDeactivate audioSession: AVAudioSession)  // .../conversationmanager(_:diddeactivate:)
    /// The system wants an action carried out; fulfill or fail it before its timeout date.
    func conversationManager(_ manager: ConversationManager, perform action: ConversationAction)  // .../conversationmanager(_:perform:)
    /// An action passed its timeout date unanswered.
    func conversationManager(_ manager: ConversationManager, timedOutPerforming action: ConversationAction)  // .../conversationmanager(_:timedoutperforming:)
}

// MARK: Conversations

/// One audio or video conversation as the system sees it; the app never creates one.
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class Conversation: Observable, Sendable {  // conversation
    init() {}

    /// The conversation's identifier (the UUID the app reported or started it with).
    public var uuid: UUID { fatalError("stub") }  // conversation/uuid
    /// How the local participant is identified to the others; only the owning manager sees it.
    public var localMember: Handle? { nil }  // conversation/localmember
    /// Where the conversation is in its life.
    public var state: Conversation.State { .idle }  // conversation/state-swift.property

    /// A conversation's life stage. Raw type Int (numbers are the stub's).
    public enum State: Int, Hashable, Codable, Sendable {  // conversation/state-swift.enum
        /// Known to the system, not started.
        case idle
        /// Being set up (media being established).
        case joining
        /// Media flowing; the local participant is in.
        case joined
        /// Media stopped for now (on hold).
        case paused
        /// Being torn down.
        case leaving
        /// Over; all media ended.
        case left
    }

    /// What the app tells the system happened (`reportConversationEvent(_:for:)`).
    public enum Event: Hashable, Codable, Sendable {  // conversation/event
        /// Connecting started at that time (outgoing).
        case conversationStartedConnecting(Date)
        /// Connected at that time.
        case conversationConnected(Date)
        /// Ended at that time, for that reason (the CXProvider reportCall(with:endedAt:reason:) counterpart).
        case conversationEnded(Date, Conversation.EndedReason)
        /// New details or capabilities.
        case conversationUpdated(Conversation.Update)
    }

    /// Why a conversation ended. Raw type Int (numbers are the stub's). There is no
    /// `answeredElsewhere`: the name here is `joinedElsewhere`.
    public enum EndedReason: Int, Hashable, Codable, Sendable {  // conversation/endedreason
        /// Something went wrong.
        case failed
        /// The other side hung up.
        case remoteEnded
        /// Never connected (not answered, or timed out).
        case unanswered
        /// Answered on another of the user's devices.
        case joinedElsewhere
        /// Declined on another of the user's devices.
        case declinedElsewhere
    }

    /// Changes to a conversation; a nil field means "leave as is".
    public struct Update: Hashable, Codable, Sendable {  // conversation/update
        /// The local participant.
        public var localMember: Handle?
        /// Everyone, including invited participants not yet present.
        public var members: Set<Handle>?
        /// The remote participants actually present.
        public var activeRemoteMembers: Set<Handle>?
        /// What the conversation can do once updated.
        public var capabilities: Conversation.Capabilities?

        /// Every field optional and defaulted to nil.
        public init(
            localMember: Handle? = nil, members: Set<Handle>? = nil, activeRemoteMembers: Set<Handle>? = nil,
            capabilities: Conversation.Capabilities? = nil
        ) {  // conversation/update/init(localmember:members:activeremotemembers:capabilities:)
            self.localMember = localMember
            self.members = members
            self.activeRemoteMembers = activeRemoteMembers
            self.capabilities = capabilities
        }
    }

    /// What a conversation supports (the CXCallUpdate supports... flags). Raw type Int; the bits are the stub's.
    public struct Capabilities: OptionSet, Hashable, Codable, Sendable {  // conversation/capabilities
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// Can be merged with another conversation.
        public static let merging = Capabilities(rawValue: 1 << 0)
        /// Can be split back after a merge.
        public static let unmerging = Capabilities(rawValue: 1 << 1)
        /// Can be put on hold.
        public static let pausing = Capabilities(rawValue: 1 << 2)
        /// Accepts keypad tones (DTMF).
        public static let playingTones = Capabilities(rawValue: 1 << 3)
        /// Carries video.
        public static let video = Capabilities(rawValue: 1 << 4)
    }
}

/// How a participant is reached (the CXHandle counterpart, a value type here).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public struct Handle: Hashable, Codable, Sendable {  // handle
    /// What kind of address `value` is.
    public var type: Handle.Kind
    /// The address itself.
    public var value: String
    /// The name the call UI shows.
    public var displayName: String

    /// A nil display name means the UI shows `value`.
    public init(type: Handle.Kind, value: String, displayName: String? = nil) {  // handle/init(type:value:displayname:)
        self.type = type
        self.value = value
        self.displayName = displayName ?? value
    }

    /// The kinds of address. Raw type Int (numbers are the stub's).
    public enum Kind: Int, Hashable, Codable, Sendable {  // handle/kind
        case generic
        case phoneNumber
        case emailAddress
    }
}

// MARK: Actions

/// An action on a conversation, started by the app (`perform(_:)`) or handed to it
/// (`conversationManager(_:perform:)`). Public but not open: only the framework subclasses it.
/// There is no `isComplete`; look at `state`.
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public class ConversationAction {  // conversationaction
    init(_ conversationUUID: UUID = UUID()) { storedConversationUUID = conversationUUID }

    /// An action on that conversation, expiring at `timeoutDate` (30 s from now by default).
    public convenience init(conversationUUID: UUID, timeoutDate: Date = Date(timeIntervalSinceNow: 30)) { self.init(conversationUUID) }  // conversationaction/init(conversationuuid:timeoutdate:)

    private let storedConversationUUID: UUID
    private let storedUUID = UUID()
    /// The conversation acted on.
    public final var conversationUUID: UUID { storedConversationUUID }  // conversationaction/conversationuuid
    /// The action's own identifier.
    public final var uuid: UUID { storedUUID }  // conversationaction/uuid
    /// After this the action can no longer be completed (and times out).
    public final var timeoutDate: Date { Date().addingTimeInterval(30) }  // conversationaction/timeoutdate
    /// Where the action stands.
    public final var state: ConversationAction.State { .idle }  // conversationaction/state-swift.property

    /// Reports success.
    public final func fulfill() { LiveCommunicationKitStubLog.note("fulfill \(type(of: self))") }  // conversationaction/fulfill()
    /// Reports failure.
    public final func fail() { LiveCommunicationKitStubLog.note("fail \(type(of: self))") }  // conversationaction/fail()

    /// An action's progress.
    public enum State: Hashable, Codable, Sendable {  // conversationaction/state-swift.enum
        /// Made, not started.
        case idle
        /// Being carried out.
        case running
        /// Done.
        case complete
        /// Failed, with a reason.
        case failed(reason: String)
    }
}

/// Answer: join an incoming (ringing) conversation (the CXAnswerCallAction counterpart).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class JoinConversationAction: ConversationAction {  // joinconversationaction
    public init(conversationUUID: UUID) { super.init(conversationUUID) }
    /// Success, with when the local participant got connected.
    public func fulfill(dateConnected: Date) { LiveCommunicationKitStubLog.note("fulfill JoinConversationAction dateConnected") }  // joinconversationaction/fulfill(dateconnected:)
}

/// Hang up locally; the conversation may go on for the others (the CXEndCallAction counterpart).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class EndConversationAction: ConversationAction {  // endconversationaction
    public init(conversationUUID: UUID) { super.init(conversationUUID) }
    /// Success, with when it ended.
    public func fulfill(dateEnded: Date) { LiveCommunicationKitStubLog.note("fulfill EndConversationAction dateEnded") }  // endconversationaction/fulfill(dateended:)
}

/// Start an outgoing conversation that rings the remote handles (the CXStartCallAction counterpart).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class StartConversationAction: ConversationAction {  // startconversationaction
    public init(conversationUUID: UUID, handles: [Handle], isVideo: Bool) { super.init(conversationUUID) }
    /// Who is invited.
    public var handles: [Handle] { [] }  // startconversationaction/handles (a `let`)
    /// Whether it carries video.
    public var isVideo: Bool { false }  // startconversationaction/isvideo (a `let`)
    /// Success, with when it started.
    public func fulfill(dateStarted: Date) { LiveCommunicationKitStubLog.note("fulfill StartConversationAction dateStarted") }  // startconversationaction/fulfill(datestarted:)
}

/// Mute or unmute the local participant (the CXSetMutedCallAction counterpart).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class MuteConversationAction: ConversationAction {  // muteconversationaction
    public init(conversationUUID: UUID, isMuted: Bool) { super.init(conversationUUID) }
    /// True to mute, false to unmute.
    public var isMuted: Bool { false }  // muteconversationaction/ismuted (a `let`)
}

/// Hold or resume: stop or restart all media (the CXSetHeldCallAction counterpart).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class PauseConversationAction: ConversationAction {  // pauseconversationaction
    public init(conversationUUID: UUID, isPaused: Bool) { super.init(conversationUUID) }
    /// True to hold, false to resume.
    public var isPaused: Bool { false }  // pauseconversationaction/ispaused (a `let`)
}

/// Play keypad tones (the CXPlayDTMFCallAction counterpart).
@available(iOS 17.4, macCatalyst 17.4, watchOS 10.4, *)
@available(macOS, unavailable)
public final class PlayToneAction: ConversationAction {  // playtoneaction
    public init(conversationUUID: UUID, digits: String, tone: PlayToneAction.Tone) { super.init(conversationUUID) }
    /// The digits typed or dialled.
    public var digits: String { "" }  // playtoneaction/digits (a `let`)
    /// How they are to be played.
    public var tone: PlayToneAction.Tone { .single }  // playtoneaction/tone-swift.property (a `let`)

    /// Raw type Int (numbers are the stub's). `single` is CallKit's `singleTone`.
    public enum Tone: Int, Hashable, Sendable {  // playtoneaction/tone-swift.enum
        /// A digit tapped on the keypad.
        case single
        /// Digits after a `,` in a dial string: sent after a short wait.
        case softPause
        /// Digits after a `;` in a dial string: sent when the user says so.
        case hardPause
    }
}
