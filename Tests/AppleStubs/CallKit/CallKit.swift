// Stub of CallKit, declarations only, written by hand from developer.apple.com/documentation/callkit
// (the pages of each type below). See ../README.md for the sources and the iOS version.
//
// Objective-C `optional` requirements cannot exist on Linux (no Objective-C runtime): each is a
// requirement with a default implementation in an extension, compiled out under
// STRICT_DELEGATES so that a strict build lists every requirement a conforming type lacks.

import AVFoundation
@_exported import Foundation

/// Not CallKit's: what the SDK asked of these stubs, in order, so that
/// scripts/typecheck-apple.sh can run the bridge's own logic (`Tests/AppleBridge`) on Linux.
public enum CallKitStubLog {
    nonisolated(unsafe) private static var entries: [String] = []
    private static let lock = NSLock()
    public static func note(_ entry: String) { lock.lock(); entries.append(entry); lock.unlock() }
    public static var all: [String] { lock.lock(); defer { lock.unlock() }; return entries }
}

// MARK: Provider

@available(macOS, unavailable)
open class CXProviderConfiguration: NSObject {
    public override init() {}
    open var supportsVideo: Bool = false
    /// Apple's default is 2.
    open var maximumCallGroups: Int = 2
    /// Apple's default is 5.
    open var maximumCallsPerCallGroup: Int = 5
    open var supportedHandleTypes: Set<CXHandle.HandleType> = []
    open var ringtoneSound: String?
    open var iconTemplateImageData: Data?
    /// iOS 11+.
    open var includesCallsInRecents: Bool = true
    #if !SWITCHBOARD_SDK_BEFORE_26
    /// iOS 26+: the system may offer live translation of the call's audio
    /// (documentation/callkit/cxproviderconfiguration/supportsaudiotranslation).
    open var supportsAudioTranslation: Bool = false
    #endif
}

@available(macOS, unavailable)
open class CXProvider: NSObject {
    public init(configuration: CXProviderConfiguration) {}
    open var configuration: CXProviderConfiguration {
        get { fatalError("stub") }
        set { CallKitStubLog.note("configuration maxPerGroup=\(newValue.maximumCallsPerCallGroup)") }
    }
    open var pendingTransactions: [CXTransaction] { [] }

    open func setDelegate(_ delegate: (any CXProviderDelegate)?, queue: DispatchQueue?) {}

    /// The completion runs once the call is allowed or refused, on a queue of CallKit's.
    open func reportNewIncomingCall(with UUID: UUID, update: CXCallUpdate, completion: @escaping @Sendable ((any Error)?) -> Void) {
        CallKitStubLog.note("report \(UUID) name=\(update.localizedCallerName ?? "-") grouping=\(update.supportsGrouping)")
        completion(nil)
    }
    open func reportNewIncomingCall(with UUID: UUID, update: CXCallUpdate) async throws {}
    open func reportCall(with UUID: UUID, updated update: CXCallUpdate) {
        CallKitStubLog.note(
            "update \(UUID) name=\(update.localizedCallerName ?? "-") grouping=\(update.supportsGrouping) ungrouping=\(update.supportsUngrouping) holding=\(update.supportsHolding)")
    }
    open func reportCall(with UUID: UUID, endedAt dateEnded: Date?, reason endedReason: CXCallEndedReason) {
        CallKitStubLog.note("ended \(UUID) \(endedReason)")
    }
    open func reportOutgoingCall(with UUID: UUID, startedConnectingAt dateStartedConnecting: Date?) {
        CallKitStubLog.note("connecting \(UUID)")
    }
    open func reportOutgoingCall(with UUID: UUID, connectedAt dateConnected: Date?) {}
    /// Must be called before the provider is released.
    open func invalidate() {}
}

/// Every requirement but `providerDidReset(_:)` is optional in Objective-C.
@available(macOS, unavailable)
public protocol CXProviderDelegate: NSObjectProtocol {
    func providerDidReset(_ provider: CXProvider)
    func providerDidBegin(_ provider: CXProvider)
    func provider(_ provider: CXProvider, execute transaction: CXTransaction) -> Bool
    func provider(_ provider: CXProvider, perform action: CXStartCallAction)
    func provider(_ provider: CXProvider, perform action: CXAnswerCallAction)
    func provider(_ provider: CXProvider, perform action: CXEndCallAction)
    func provider(_ provider: CXProvider, perform action: CXSetHeldCallAction)
    func provider(_ provider: CXProvider, perform action: CXSetMutedCallAction)
    func provider(_ provider: CXProvider, perform action: CXSetGroupCallAction)
    func provider(_ provider: CXProvider, perform action: CXPlayDTMFCallAction)
    #if !SWITCHBOARD_SDK_BEFORE_26
    /// iOS 26+ (documentation/callkit/cxproviderdelegate/provider(_:perform:)-43atg).
    func provider(_ provider: CXProvider, perform action: CXSetTranslatingCallAction)
    #endif
    func provider(_ provider: CXProvider, timedOutPerforming action: CXAction)
    func provider(_ provider: CXProvider, didActivate audioSession: AVAudioSession)
    func provider(_ provider: CXProvider, didDeactivate audioSession: AVAudioSession)
}

#if !STRICT_DELEGATES
@available(macOS, unavailable)
extension CXProviderDelegate {
    public func providerDidBegin(_ provider: CXProvider) {}
    public func provider(_ provider: CXProvider, execute transaction: CXTransaction) -> Bool { false }
    public func provider(_ provider: CXProvider, perform action: CXStartCallAction) {}
    public func provider(_ provider: CXProvider, perform action: CXAnswerCallAction) {}
    public func provider(_ provider: CXProvider, perform action: CXEndCallAction) {}
    public func provider(_ provider: CXProvider, perform action: CXSetHeldCallAction) {}
    public func provider(_ provider: CXProvider, perform action: CXSetMutedCallAction) {}
    public func provider(_ provider: CXProvider, perform action: CXSetGroupCallAction) {}
    public func provider(_ provider: CXProvider, perform action: CXPlayDTMFCallAction) {}
    #if !SWITCHBOARD_SDK_BEFORE_26
    public func provider(_ provider: CXProvider, perform action: CXSetTranslatingCallAction) {}
    #endif
    public func provider(_ provider: CXProvider, timedOutPerforming action: CXAction) {}
    public func provider(_ provider: CXProvider, didActivate audioSession: AVAudioSession) {}
    public func provider(_ provider: CXProvider, didDeactivate audioSession: AVAudioSession) {}
}
#endif

// MARK: Actions

@available(macOS, unavailable)
open class CXAction: NSObject {
    open var uuid: UUID { storedUUID }
    private let storedUUID = UUID()
    open var isComplete: Bool { false }
    /// After this the action times out (`provider(_:timedOutPerforming:)`).
    open var timeoutDate: Date { Date().addingTimeInterval(30) }
    open func fulfill() { CallKitStubLog.note("fulfill \(type(of: self))") }
    open func fail() { CallKitStubLog.note("fail \(type(of: self))") }
}

@available(macOS, unavailable)
open class CXCallAction: CXAction {
    public init(call callUUID: UUID) { storedCallUUID = callUUID }
    open var callUUID: UUID { storedCallUUID }
    private let storedCallUUID: UUID
}

@available(macOS, unavailable)
open class CXStartCallAction: CXCallAction {
    public init(call callUUID: UUID, handle: CXHandle) {
        storedHandle = handle
        super.init(call: callUUID)
    }
    open var handle: CXHandle {
        get { storedHandle }
        set { storedHandle = newValue }
    }
    private var storedHandle: CXHandle
    open var contactIdentifier: String?
    open var isVideo: Bool = false
    open func fulfill(withDateStarted dateStarted: Date) {}
}

@available(macOS, unavailable)
open class CXAnswerCallAction: CXCallAction {
    open func fulfill(withDateConnected dateConnected: Date) {}
}

@available(macOS, unavailable)
open class CXEndCallAction: CXCallAction {
    open func fulfill(withDateEnded dateEnded: Date) {}
}

@available(macOS, unavailable)
open class CXSetHeldCallAction: CXCallAction {
    public init(call callUUID: UUID, onHold: Bool) { super.init(call: callUUID) }
    open var isOnHold: Bool = false
}

@available(macOS, unavailable)
open class CXSetMutedCallAction: CXCallAction {
    public convenience init(call callUUID: UUID, muted: Bool) { self.init(call: callUUID) }
    open var isMuted: Bool = false
}

@available(macOS, unavailable)
open class CXSetGroupCallAction: CXCallAction {
    public init(call callUUID: UUID, callUUIDToGroupWith: UUID?) { super.init(call: callUUID) }
    open var callUUIDToGroupWith: UUID?
}

#if !SWITCHBOARD_SDK_BEFORE_26
/// iOS 26+: the user turned live translation of the call on or off
/// (documentation/callkit/cxsettranslatingcallaction); languages are language codes.
@available(macOS, unavailable)
open class CXSetTranslatingCallAction: CXCallAction {
    public init(call uuid: UUID, isTranslating: Bool, localLanguage: String, remoteLanguage: String) { super.init(call: uuid) }
    open var isTranslating: Bool { false }
    open var localLanguage: String { "" }
    open var remoteLanguage: String { "" }
    /// Fulfils the action naming the engine that translates (…/fulfill(using:)).
    open func fulfill(using translationEngine: CXTranslationEngine) {}
}

/// Which engine translates (documentation/callkit/cxtranslationengine).
public enum CXTranslationEngine: Int, Sendable {
    case `default`, custom
}
#endif

@available(macOS, unavailable)
open class CXPlayDTMFCallAction: CXCallAction {
    public enum ActionType: Int, Sendable {
        case singleTone = 1, softPause = 2, hardPause = 3
    }

    public init(call callUUID: UUID, digits: String, type: CXPlayDTMFCallAction.ActionType) { super.init(call: callUUID) }
    open var digits: String = ""
    open var type: CXPlayDTMFCallAction.ActionType = .singleTone
}

// MARK: Transactions and the call controller

@available(macOS, unavailable)
open class CXTransaction: NSObject {
    public init(actions: [CXAction]) {}
    public convenience init(action: CXAction) { self.init(actions: [action]) }
    open var uuid: UUID { fatalError("stub") }
    open var actions: [CXAction] { [] }
    open var isComplete: Bool { false }
}

@available(macOS, unavailable)
open class CXCallController: NSObject {
    public override convenience init() { self.init(queue: .main) }
    public init(queue: DispatchQueue) {}
    open var callObserver: CXCallObserver { fatalError("stub") }
    open func request(_ transaction: CXTransaction, completion: @escaping @Sendable ((any Error)?) -> Void) {}
    open func request(_ transaction: CXTransaction) async throws {}
    /// iOS 11+.
    open func requestTransaction(with action: CXAction) async throws {}
    open func requestTransaction(with actions: [CXAction]) async throws {}
}

@available(macOS, unavailable)
open class CXCallObserver: NSObject {
    open var calls: [CXCall] { [] }
}

@available(macOS, unavailable)
open class CXCall: NSObject {
    open var uuid: UUID { fatalError("stub") }
    open var isOutgoing: Bool { false }
    open var isOnHold: Bool { false }
    open var hasConnected: Bool { false }
    open var hasEnded: Bool { false }
}

// MARK: Calls

@available(macOS, unavailable)
open class CXHandle: NSObject {
    public enum HandleType: Int, Sendable {
        case generic = 1, phoneNumber = 2, emailAddress = 3
    }

    public init(type: CXHandle.HandleType, value: String) {
        storedType = type
        storedValue = value
    }
    open var type: CXHandle.HandleType { storedType }
    open var value: String { storedValue }
    private let storedType: CXHandle.HandleType
    private let storedValue: String
}

@available(macOS, unavailable)
open class CXCallUpdate: NSObject {
    public override init() {}
    open var remoteHandle: CXHandle?
    open var localizedCallerName: String?
    open var supportsHolding: Bool = false
    open var supportsGrouping: Bool = false
    open var supportsUngrouping: Bool = false
    open var supportsDTMF: Bool = false
    open var hasVideo: Bool = false
}

@available(macOS, unavailable)
public enum CXCallEndedReason: Int, Sendable {
    case failed = 1, remoteEnded = 2, unanswered = 3, answeredElsewhere = 4, declinedElsewhere = 5
}

// MARK: Errors (NS_ERROR_ENUMs: a struct with a nested Code, as Swift imports them)

public struct CXErrorCodeIncomingCallError: Error, Sendable {
    public enum Code: Int, Sendable {
        case unknown = 0, unentitled = 1, callUUIDAlreadyExists = 2, filteredByDoNotDisturb = 3, filteredByBlockList = 4
        /// Added in the iOS 17 SDK.
        case filteredDuringRestrictedSharingMode = 5
        case callIsProtected = 6
        case filteredBySensitiveParticipants = 7
    }

    public var code: Code
    public init(_ code: Code) { self.code = code }
    public static var errorDomain: String { "com.apple.CallKit.error.incomingcall" }
}

public struct CXErrorCodeRequestTransactionError: Error, Sendable {
    public enum Code: Int, Sendable {
        case unknown = 0, unentitled = 1, unknownCallProvider = 2, emptyTransaction = 3, unknownCallUUID = 4
        case callUUIDAlreadyExists = 5, invalidAction = 6, maximumCallGroupsReached = 7, callIsProtected = 8
    }

    public var code: Code
    public static var errorDomain: String { "com.apple.CallKit.error.requesttransaction" }
}
