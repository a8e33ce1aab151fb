import SwiftUI
import SwitchboardKit

/// Everything call-related is created at launch, synchronously: PushKit may deliver a VoIP push
/// before the first screen appears, and the push must be reported to CallKit at once.
final class AppDelegate: NSObject, UIApplicationDelegate {
    let calls = CallController()

    func application(_ application: UIApplication, didFinishLaunchingWithOptions options: [UIApplication.LaunchOptionsKey: Any]? = nil) -> Bool {
        calls.startAtLaunch()
        return true
    }

    func application(_ application: UIApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: Data) {
        calls.regularTokenChanged(deviceToken)
    }
}

@main
struct SwitchboardDemoApp: App {
    @UIApplicationDelegateAdaptor(AppDelegate.self) var delegate

    var body: some Scene {
        WindowGroup {
            ContentView(calls: delegate.calls)
        }
    }
}

struct ContentView: View {
    @ObservedObject var calls: CallController
    @State private var callee = ""

    var body: some View {
        NavigationStack {
            Form {
                Section("You") {
                    Text(calls.status)
                }
                Section("Call") {
                    TextField("User to call", text: $callee)
                        .textInputAutocapitalization(.never)
                    Button("Call") { calls.call(callee) }
                        .disabled(callee.isEmpty)
                }
                if let current = calls.current {
                    Section("In call") {
                        Text(current.uuidString)
                        Button("Hang up", role: .destructive) { calls.hangUp() }
                    }
                }
            }
            .navigationTitle("Switchboard")
        }
    }
}
