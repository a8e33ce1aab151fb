import CallKit
import Foundation
import PushKit
import SwitchboardKit
import UIKit

/// Owns the SDK objects for the app's lifetime.
@MainActor
final class CallController: ObservableObject {
    @Published var status = "starting"
    @Published var current: UUID?

    private let serverURL = URL(string: "https://calls.example.com")!
    private var client: SwitchboardClient!
    private var manager: CallManager!
    private var pushKit: PushKitBridge!
    private let system = CallKitSystem(configuration: {
        var configuration = CallKitSystem.Configuration()
        configuration.supportsVideo = true
        configuration.maximumCallGroups = 1  // no "Hold & Accept" unless the app can hold
        return configuration
    }())
    private let media = MediaBridge()
    private var voipToken: Data?
    private var regularToken: Data?

    /// The region policy: no CallKit and no VoIP registration in mainland China.
    private var policy: RegionPolicy { RegionPolicy.forRegion(Locale.current.region?.identifier) }

    /// Synchronous, at launch: PushKit and CallKit must be wired before anything else.
    func startAtLaunch() {
        let deviceID = UIDevice.current.identifierForVendor?.uuidString ?? UUID().uuidString
        client = try! SwitchboardClient(serverURL: serverURL, deviceID: deviceID) {
            try await Backend.switchboardToken()  // your backend signs it with the app secret
        }
        manager = CallManager(client: client, system: system)
        manager.start()
        pushKit = PushKitBridge(calls: manager, policy: policy) { [weak self] token in
            Task { @MainActor in self?.voipTokenChanged(token) }
        }
        UIApplication.shared.registerForRemoteNotifications()
        Task { await follow() }
        Task {
            try? await client.connect()
            status = "connected"
        }
    }

    private func follow() async {
        for await event in manager.events {
            switch event {
            case .incoming(let id, _), .outgoingStarted(let id):
                current = id
            case .audioActive(let active):
                // Only now may WebRTC touch the audio session (manual audio mode).
                active ? media.startAudio() : media.stopAudio()
            case .ended(let id, _), .endedLocally(let id):
                if current == id { current = nil }
                media.stopAudio()
            default:
                break
            }
        }
    }

    func voipTokenChanged(_ token: Data) {
        voipToken = token
        register()
    }

    func regularTokenChanged(_ token: Data) {
        regularToken = token
        register()
    }

    private func register() {
        let registrar = DeviceRegistrar(client: client)
        let (voip, regular, policy) = (voipToken, regularToken, policy)
        Task {
            try? await registrar.register(
                voipToken: voip, apnsToken: regular, environment: Self.apnsEnvironment,
                bundleID: Bundle.main.bundleIdentifier ?? "", appVersion: Bundle.main.infoDictionary?["CFBundleShortVersionString"] as? String,
                policy: policy)
        }
    }

    /// Debug builds get sandbox tokens, TestFlight and App Store builds production ones.
    static var apnsEnvironment: String {
        #if DEBUG
        "sandbox"
        #else
        "production"
        #endif
    }

    func call(_ user: String) {
        Task { current = try? await manager.startCall(to: [user], video: false) }
    }

    func hangUp() {
        guard let current else { return }
        Task { try? await system.request(.end(current)) }
    }
}

/// Where the app's WebRTC engine plugs in: join the call's room (`Room.join`), exchange
/// offers/answers/candidates with `room.signal(to:)`, and start audio only when CallKit
/// activated the session.
final class MediaBridge {
    func startAudio() {
        // RTCAudioSession.sharedInstance().audioSessionDidActivate(AVAudioSession.sharedInstance())
        // RTCAudioSession.sharedInstance().isAudioEnabled = true
    }

    func stopAudio() {
        // RTCAudioSession.sharedInstance().isAudioEnabled = false
    }
}

/// Stand-in for the app's own backend call that returns a Switchboard access token.
enum Backend {
    static func switchboardToken() async throws -> String {
        var request = URLRequest(url: URL(string: "https://api.example.com/switchboard-token")!)
        request.httpMethod = "POST"
        let (data, _) = try await URLSession.shared.data(for: request)
        struct Reply: Decodable { let token: String }
        return try JSONDecoder().decode(Reply.self, from: data).token
    }
}
