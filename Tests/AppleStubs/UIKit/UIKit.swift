// Stub of the part of UIKit that Examples/iOS uses, declarations only, written by hand from
// developer.apple.com/documentation/uikit (UIApplication, UIApplicationDelegate, UIWindow,
// UIScreen, UIViewController, UIView, UILabel, UITextField, UIButton, UIControl, UIAction,
// UIStackView, UIColor, UIDevice). See ../README.md.
//
// Optional requirements: defaults in an extension, compiled out under STRICT_DELEGATES.

@_exported import AppleFoundation
@_exported import Foundation

@MainActor
open class UIResponder: NSObject {
    public override init() {}
}

@MainActor
open class UIApplication: UIResponder {
    open class var shared: UIApplication { fatalError("stub") }
    open var delegate: (any UIApplicationDelegate)?
    open func registerForRemoteNotifications() {}

    public struct LaunchOptionsKey: RawRepresentable, Hashable, Sendable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
    }

    /// The keys of the options a URL is opened with.
    public struct OpenURLOptionsKey: RawRepresentable, Hashable, Sendable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
    }
}

public enum UIBackgroundFetchResult: UInt, Sendable {
    case newData = 0, noData = 1, failed = 2
}

@MainActor
public protocol UIUserActivityRestoring: NSObjectProtocol {
    func restoreUserActivityState(_ userActivity: NSUserActivity)
}

/// Every requirement is optional in Objective-C.
@MainActor
public protocol UIApplicationDelegate: NSObjectProtocol {
    var window: UIWindow? { get set }
    func application(_ application: UIApplication, didFinishLaunchingWithOptions launchOptions: [UIApplication.LaunchOptionsKey: Any]?) -> Bool
    func application(_ application: UIApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: Data)
    func application(_ application: UIApplication, didFailToRegisterForRemoteNotificationsWithError error: any Error)
    func application(
        _ application: UIApplication, didReceiveRemoteNotification userInfo: [AnyHashable: Any],
        fetchCompletionHandler completionHandler: @escaping (UIBackgroundFetchResult) -> Void)
    /// Deprecated in iOS 26 (scenes take it); still called for apps without scenes.
    func application(
        _ application: UIApplication, continue userActivity: NSUserActivity,
        restorationHandler: @escaping ([any UIUserActivityRestoring]?) -> Void) -> Bool
    /// A URL handed to the app, such as a `tel:` URL for the default calling app
    /// (documentation/uikit/uiapplicationdelegate/application(_:open:options:)).
    func application(_ app: UIApplication, open url: URL, options: [UIApplication.OpenURLOptionsKey: Any]) -> Bool
}

#if !STRICT_DELEGATES
extension UIApplicationDelegate {
    public var window: UIWindow? {
        get { nil }
        set {}
    }
    public func application(_ application: UIApplication, didFinishLaunchingWithOptions launchOptions: [UIApplication.LaunchOptionsKey: Any]?) -> Bool {
        true
    }
    public func application(_ application: UIApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: Data) {}
    public func application(_ application: UIApplication, didFailToRegisterForRemoteNotificationsWithError error: any Error) {}
    public func application(
        _ application: UIApplication, didReceiveRemoteNotification userInfo: [AnyHashable: Any],
        fetchCompletionHandler completionHandler: @escaping (UIBackgroundFetchResult) -> Void
    ) {}
    public func application(
        _ application: UIApplication, continue userActivity: NSUserActivity,
        restorationHandler: @escaping ([any UIUserActivityRestoring]?) -> Void
    ) -> Bool { false }
    public func application(_ app: UIApplication, open url: URL, options: [UIApplication.OpenURLOptionsKey: Any]) -> Bool { false }
}
#endif

extension UIApplicationDelegate {
    /// The entry point of an app whose delegate is marked `@main`.
    public static func main() {}
}

@MainActor
open class UIDevice: NSObject {
    open class var current: UIDevice { fatalError("stub") }
    open var identifierForVendor: UUID? { nil }
}

@MainActor
open class UIScreen: NSObject {
    /// Deprecated in iOS 26.
    open class var main: UIScreen { fatalError("stub") }
    open var bounds: CGRect { .zero }
}

@MainActor
open class UIColor: NSObject {
    open class var systemBackground: UIColor { fatalError("stub") }
}

@MainActor
open class UIView: UIResponder {
    public struct AutoresizingMask: OptionSet, Sendable {
        public var rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static var flexibleWidth: AutoresizingMask { AutoresizingMask(rawValue: 2) }
        public static var flexibleHeight: AutoresizingMask { AutoresizingMask(rawValue: 16) }
    }

    public init(frame: CGRect) {}
    public required init?(coder: NSCoder) {}
    open var frame: CGRect = .zero
    open var bounds: CGRect = .zero
    open var backgroundColor: UIColor?
    open var isHidden: Bool = false
    open var autoresizingMask: UIView.AutoresizingMask = []
    open func addSubview(_ view: UIView) {}
}

@MainActor
open class UIWindow: UIView {
    open var rootViewController: UIViewController?
    open func makeKeyAndVisible() {}
}

@MainActor
open class UILabel: UIView {
    public convenience init() { self.init(frame: .zero) }
    open var text: String?
}

@MainActor
open class UIControl: UIView {
    public struct State: OptionSet, Sendable {
        public var rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static var normal: State { State(rawValue: 0) }
    }

    public struct Event: OptionSet, Sendable {
        public var rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static var touchUpInside: Event { Event(rawValue: 1 << 6) }
    }

    /// iOS 14+.
    open func addAction(_ action: UIAction, for controlEvents: UIControl.Event) {}
}

@MainActor
open class UITextField: UIControl {
    public convenience init() { self.init(frame: .zero) }
    open var text: String?
    open var placeholder: String?
}

@MainActor
open class UIButton: UIControl {
    public enum ButtonType: Int, Sendable {
        case custom = 0, system = 1
    }

    public convenience init(type buttonType: UIButton.ButtonType) { self.init(frame: .zero) }
    open func setTitle(_ title: String?, for state: UIControl.State) {}
}

public typealias UIActionHandler = @MainActor (UIAction) -> Void

/// iOS 13+.
@MainActor
open class UIAction: NSObject {
    public convenience init(title: String = "", handler: @escaping UIActionHandler) { self.init() }
}

@MainActor
open class NSLayoutConstraint: NSObject {
    public enum Axis: Int, Sendable {
        case horizontal = 0, vertical = 1
    }
}

@MainActor
open class UIStackView: UIView {
    public convenience init(arrangedSubviews views: [UIView]) { self.init(frame: .zero) }
    open var axis: NSLayoutConstraint.Axis = .horizontal
    open var spacing: CGFloat = 0
}

@MainActor
open class UIViewController: UIResponder {
    public init(nibName nibNameOrNil: String?, bundle nibBundleOrNil: Bundle?) {}
    public required init?(coder: NSCoder) {}
    open var view: UIView! { get { fatalError("stub") } set {} }
    open var title: String?
    open func viewDidLoad() {}
}
