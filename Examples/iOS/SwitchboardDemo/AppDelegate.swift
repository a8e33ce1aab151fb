import Foundation
import Intents
import SwitchboardKit
import UIKit
import UserNotifications

/// Everything call-related is created at launch, synchronously: PushKit may deliver a VoIP push
/// before the first screen appears, and the push must be reported to CallKit at once.
@main
final class AppDelegate: UIResponder, UIApplicationDelegate, UNUserNotificationCenterDelegate {
    var window: UIWindow?
    let calls = CallController()

    func application(_ application: UIApplication, didFinishLaunchingWithOptions launchOptions: [UIApplication.LaunchOptionsKey: Any]? = nil) -> Bool {
        calls.startAtLaunch()
        UNUserNotificationCenter.current().delegate = self
        let window = UIWindow(frame: UIScreen.main.bounds)
        window.rootViewController = CallViewController(calls: calls)
        window.makeKeyAndVisible()
        self.window = window
        return true
    }

    func application(_ application: UIApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: Data) {
        calls.regularTokenChanged(deviceToken)
    }

    func application(_ application: UIApplication, didFailToRegisterForRemoteNotificationsWithError error: any Error) {
        calls.status = "no push token: \(error.localizedDescription)"
    }

    /// Where CallKit is off (mainland China), an incoming call arrives as an alert push: while
    /// the app runs it rings in the app's own screen.
    func application(
        _ application: UIApplication, didReceiveRemoteNotification userInfo: [AnyHashable: Any],
        fetchCompletionHandler completionHandler: @escaping (UIBackgroundFetchResult) -> Void
    ) {
        calls.alertPush(userInfo)
        completionHandler(.newData)
    }

    /// Calling back from Recents or Contacts (`INStartCallIntent`), also on a cold launch.
    func application(
        _ application: UIApplication, continue userActivity: NSUserActivity,
        restorationHandler: @escaping ([any UIUserActivityRestoring]?) -> Void
    ) -> Bool {
        guard let callee = RecentsCallBack.callee(of: userActivity) else { return false }
        // Recents gives the handle the call showed (a phone number, an email); calls go to users.
        calls.call(calls.identity(forHandle: callee.handle), video: callee.video)
        return true
    }

    /// As the default calling app (iOS 18.2+, entitlement `com.apple.developer.calling-app`): a
    /// phone number tapped anywhere arrives as a `tel:` URL. A number the app knows is one of
    /// its users is called; any other is not the app's to call, so it says it did not open it.
    func application(_ app: UIApplication, open url: URL, options: [UIApplication.OpenURLOptionsKey: Any]) -> Bool {
        guard let number = TelURL.number(in: url) else { return false }
        let user = calls.identity(forHandle: number)
        guard user != number else { return false }  // no user behind this number (ask your backend)
        calls.call(user, video: false)
        return true
    }

    // MARK: UNUserNotificationCenterDelegate (the alert-push path)

    /// A call's alert while the app is in front: ring in the app instead of showing a banner.
    nonisolated func userNotificationCenter(
        _ center: UNUserNotificationCenter, willPresent notification: UNNotification,
        withCompletionHandler completionHandler: @escaping @Sendable (UNNotificationPresentationOptions) -> Void
    ) {
        let info = CallController.sendable(notification.request.content.userInfo)
        Task { @MainActor in self.calls.alertPush(info.value) }
        completionHandler(info.value["call_id"] == nil ? [.banner, .sound] : [])
    }

    /// The user tapped a call's alert: the app opens on the call, if it still rings.
    nonisolated func userNotificationCenter(
        _ center: UNUserNotificationCenter, didReceive response: UNNotificationResponse,
        withCompletionHandler completionHandler: @escaping @Sendable () -> Void
    ) {
        let info = CallController.sendable(response.notification.request.content.userInfo)
        Task { @MainActor in self.calls.alertPush(info.value) }
        completionHandler()
    }
}
