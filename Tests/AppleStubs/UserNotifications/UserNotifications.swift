// Stub of UserNotifications, declarations only, written by hand from
// developer.apple.com/documentation/usernotifications (UNUserNotificationCenter and its
// delegate, UNNotification, UNNotificationResponse, the option sets). See ../README.md.
//
// Optional requirements: defaults in an extension, compiled out under STRICT_DELEGATES.

@_exported import Foundation

open class UNUserNotificationCenter: NSObject {
    open class func current() -> UNUserNotificationCenter { fatalError("stub") }
    open weak var delegate: (any UNUserNotificationCenterDelegate)?
    open func requestAuthorization(
        options: UNAuthorizationOptions = [], completionHandler: @escaping @Sendable (Bool, (any Error)?) -> Void
    ) {}
    open func requestAuthorization(options: UNAuthorizationOptions = []) async throws -> Bool { false }
}

public protocol UNUserNotificationCenterDelegate: NSObjectProtocol {
    func userNotificationCenter(
        _ center: UNUserNotificationCenter, willPresent notification: UNNotification,
        withCompletionHandler completionHandler: @escaping @Sendable (UNNotificationPresentationOptions) -> Void)
    func userNotificationCenter(
        _ center: UNUserNotificationCenter, didReceive response: UNNotificationResponse,
        withCompletionHandler completionHandler: @escaping @Sendable () -> Void)
}

#if !STRICT_DELEGATES
extension UNUserNotificationCenterDelegate {
    public func userNotificationCenter(
        _ center: UNUserNotificationCenter, willPresent notification: UNNotification,
        withCompletionHandler completionHandler: @escaping @Sendable (UNNotificationPresentationOptions) -> Void
    ) {}
    public func userNotificationCenter(
        _ center: UNUserNotificationCenter, didReceive response: UNNotificationResponse,
        withCompletionHandler completionHandler: @escaping @Sendable () -> Void
    ) {}
}
#endif

open class UNNotification: NSObject {
    open var request: UNNotificationRequest { fatalError("stub") }
}

open class UNNotificationRequest: NSObject {
    open var content: UNNotificationContent { fatalError("stub") }
}

open class UNNotificationContent: NSObject {
    open var userInfo: [AnyHashable: Any] { [:] }
}

open class UNNotificationResponse: NSObject {
    open var notification: UNNotification { fatalError("stub") }
}

public struct UNAuthorizationOptions: OptionSet, Sendable {
    public var rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static var badge: UNAuthorizationOptions { UNAuthorizationOptions(rawValue: 1) }
    public static var sound: UNAuthorizationOptions { UNAuthorizationOptions(rawValue: 2) }
    public static var alert: UNAuthorizationOptions { UNAuthorizationOptions(rawValue: 4) }
}

public struct UNNotificationPresentationOptions: OptionSet, Sendable {
    public var rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static var badge: UNNotificationPresentationOptions { UNNotificationPresentationOptions(rawValue: 1) }
    public static var sound: UNNotificationPresentationOptions { UNNotificationPresentationOptions(rawValue: 2) }
    /// iOS 14+.
    public static var list: UNNotificationPresentationOptions { UNNotificationPresentationOptions(rawValue: 8) }
    /// iOS 14+.
    public static var banner: UNNotificationPresentationOptions { UNNotificationPresentationOptions(rawValue: 16) }
}
