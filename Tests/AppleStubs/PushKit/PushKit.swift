// Stub of PushKit, declarations only, written by hand from
// developer.apple.com/documentation/pushkit (see ../README.md for each page and the iOS version).
//
// Optional requirements: defaults in an extension, compiled out under STRICT_DELEGATES.

@_exported import Foundation

open class PKPushRegistry: NSObject {
    public init(queue: DispatchQueue?) {}
    open weak var delegate: (any PKPushRegistryDelegate)?
    /// Setting it registers for those types (and unregisters the others).
    open var desiredPushTypes: Set<PKPushType>?
    open func pushToken(for type: PKPushType) -> Data? { nil }
}

public struct PKPushType: RawRepresentable, Hashable, Sendable {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// iOS 9+; not on macOS.
    @available(macOS, unavailable)
    public static let voIP = PKPushType(rawValue: "PKPushTypeVoIP")
    public static let fileProvider = PKPushType(rawValue: "PKPushTypeFileProvider")
}

open class PKPushCredentials: NSObject {
    open var token: Data { Data() }
    open var type: PKPushType { fatalError("stub") }
}

open class PKPushPayload: NSObject {
    open var dictionaryPayload: [AnyHashable: Any] { [:] }
    open var type: PKPushType { fatalError("stub") }
}

/// How the SDK declares PushKit's completion handlers: `@Sendable` in the newer SDKs, plain in
/// older ones (PUSHKIT_PLAIN_COMPLETIONS). A delegate method must match both.
#if PUSHKIT_PLAIN_COMPLETIONS
public typealias StubPushCompletion = () -> Void
#else
public typealias StubPushCompletion = @Sendable () -> Void
#endif

#if !SWITCHBOARD_SDK_BEFORE_26_4
/// iOS 26.4+: what the system says of one VoIP push (not in SDKs before iOS 26.4:
/// SWITCHBOARD_SDK_BEFORE_26_4 leaves it out, as an older Xcode has it).
@available(iOS 26.4, *)
public final class PKVoIPPushMetadata: NSObject, Sendable {
    /// Whether this push must be reported to CallKit (false when the app is in the foreground
    /// or already in a call, for example).
    public var mustReport: Bool { true }
}
#endif

/// `pushRegistry(_:didUpdate:for:)` is required; the rest are optional in Objective-C.
public protocol PKPushRegistryDelegate: NSObjectProtocol {
    func pushRegistry(_ registry: PKPushRegistry, didUpdate pushCredentials: PKPushCredentials, for type: PKPushType)
    /// iOS 11+.
    func pushRegistry(
        _ registry: PKPushRegistry, didReceiveIncomingPushWith payload: PKPushPayload, for type: PKPushType,
        completion: @escaping StubPushCompletion)
    func pushRegistry(_ registry: PKPushRegistry, didInvalidatePushTokenFor type: PKPushType)
    #if !SWITCHBOARD_SDK_BEFORE_26_4
    /// iOS 26.4+.
    @available(iOS 26.4, *)
    func pushRegistry(
        _ registry: PKPushRegistry, didReceiveIncomingVoIPPushWith payload: PKPushPayload, metadata: PKVoIPPushMetadata,
        withCompletionHandler completion: @escaping StubPushCompletion)
    #endif
}

#if !STRICT_DELEGATES
extension PKPushRegistryDelegate {
    public func pushRegistry(
        _ registry: PKPushRegistry, didReceiveIncomingPushWith payload: PKPushPayload, for type: PKPushType,
        completion: @escaping StubPushCompletion
    ) {}
    public func pushRegistry(_ registry: PKPushRegistry, didInvalidatePushTokenFor type: PKPushType) {}
    #if !SWITCHBOARD_SDK_BEFORE_26_4
    @available(iOS 26.4, *)
    public func pushRegistry(
        _ registry: PKPushRegistry, didReceiveIncomingVoIPPushWith payload: PKPushPayload, metadata: PKVoIPPushMetadata,
        withCompletionHandler completion: @escaping StubPushCompletion
    ) {}
    #endif
}
#endif
