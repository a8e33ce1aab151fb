import Foundation
import PushKit
import SwitchboardKit
import UIKit
import UserNotifications

/// Owns the SDK objects for the app's lifetime.
@MainActor
final class CallController {
    /// The screen shows these; `onChange` tells it to redraw.
    var status = "starting" { didSet { onChange?() } }
    private(set) var current: UUID? { didSet { onChange?() } }
    /// An incoming call ringing in the app's own screen (CallKit off).
    private(set) var ringingInApp: (UUID, CallUpdate)? { didSet { onChange?() } }
    var onChange: (() -> Void)?
    /// Whether the user allowed the microphone (nil until asked): without it calls are silent.
    private(set) var microphoneAllowed: Bool? { didSet { onChange?() } }

    private let serverURL = URL(string: "https://calls.example.com")!
    /// No CallKit and no VoIP registration in mainland China: decided by the App Store
    /// storefront (not the region in Settings), kept across launches, checked at each launch.
    private(set) var policy: RegionPolicy = .callKit
    private let policyMemory = RegionPolicyMemory()
    /// The system call UI through LiveCommunicationKit instead of CallKit: a choice of the build
    /// (Info.plist `SBUsesLiveCommunicationKit`), the same calls and pushes either way.
    let usesLiveCommunicationKit = Bundle.main.object(forInfoDictionaryKey: "SBUsesLiveCommunicationKit") as? Bool ?? false
    private var client: SwitchboardClient!
    private var manager: CallManager!
    private var system: (any CallSystem)!
    private var pushKit: PushKitBridge?
    private let media = MediaBridge()
    /// Registers the push tokens: one registration at a time, always both tokens, retried,
    /// and again after every connect.
    private var tokens: PushTokenRegistry!

    /// At launch: PushKit and CallKit are wired synchronously with the policy the storefront
    /// decided last, before anything else. On a first launch nothing was ever registered for
    /// this install (no VoIP push can come), so the storefront is read first.
    func startAtLaunch() {
        guard let decided = policyMemory.decided else {
            Task {
                let policy = await RegionPolicy.fromStorefront() ?? .forRegion(Locale.current.region?.identifier)
                policyMemory.remember(policy)
                wire(policy)
            }
            return
        }
        wire(decided)
        Task { await followStorefront() }
    }

    /// The storefront changed since the policy was decided. Into mainland China: the server
    /// first drops this install's VoIP token (the registration lands), and only the next
    /// launch goes without PushKit and CallKit (a VoIP push reaching an app without a PushKit
    /// registry ends it). Out of it: CallKit and PushKit from the next launch.
    private func followStorefront() async {
        guard let now = await RegionPolicy.fromStorefront(), now != policy else { return }
        await tokens.switchPolicy(to: now)
        policyMemory.remember(now)
        status = "region changed: calls switch at the next launch"
    }

    private func wire(_ policy: RegionPolicy) {
        self.policy = policy
        let deviceID = UIDevice.current.identifierForVendor?.uuidString ?? UUID().uuidString
        client = try! SwitchboardClient(serverURL: serverURL, deviceID: deviceID) {
            try await Backend.switchboardToken()  // your backend signs it with the app secret
        }
        if policy == .callKit && usesLiveCommunicationKit {
            var configuration = LiveCommunicationKitSystem.Configuration()
            configuration.supportsVideo = true
            system = LiveCommunicationKitSystem(configuration: configuration)
        } else if policy == .callKit {
            var configuration = CallKitSystem.Configuration()
            configuration.supportsVideo = true
            system = CallKitSystem(configuration: configuration)
        } else {
            // No CXProvider may exist here: the app's own screen rings (from alert pushes).
            let inApp = InAppCallSystem()
            system = inApp
            Task { await followInApp(inApp) }
        }
        // Permissions at onboarding, never during a call: a call answered on the lock screen
        // cannot show the microphone prompt (it would record silence), and missed-call alerts
        // need notifications in CallKit mode too.
        UNUserNotificationCenter.current().requestAuthorization(options: [.alert, .sound]) { _, _ in }
        Task { microphoneAllowed = await CallAudioSession.requestMicrophoneAccess() }
        manager = CallManager(client: client, system: system)
        manager.start()
        tokens = PushTokenRegistry(
            client: client, policy: policy, environment: APNsEnvironmentOfBuild.current, bundleID: Bundle.main.bundleIdentifier,
            appVersion: Bundle.main.infoDictionary?["CFBundleShortVersionString"] as? String, ringtone: "ring.caf")
        let tokens = self.tokens!
        Task { await tokens.start() }
        if policy == .callKit {
            pushKit = PushKitBridge(
                calls: manager, policy: policy,
                onToken: { token in Task { await tokens.setVoIPToken(token) } },
                onTokenInvalidated: { Task { await tokens.setVoIPToken(nil) } })
        }
        UIApplication.shared.registerForRemoteNotifications()
        Task { await follow() }
        Task {
            do {
                try await client.connect()
                status = "connected"
            } catch {
                status = "not connected: \(error)"
            }
            await manager.reconcileWithSystem()  // calls an earlier run left in CallKit
        }
    }

    private func follow() async {
        for await event in manager.events {
            switch event {
            case .incoming(let id, _), .outgoingStarted(let id):
                current = id
            case .audioActive(let active, let call):
                // Only now may WebRTC touch the audio session (manual audio mode); `call` is
                // the call whose peer connection plays (after "Hold & Accept", the new one).
                active ? media.startAudio(for: call) : media.stopAudio()
            case .audioNotActivated:
                // The system never activated audio: holding and resuming asks it again.
                status = "no audio yet: put the call on hold and resume it"
            case .held(_, let held):
                held ? media.pause() : media.resume()
            case .ended(let id, _), .endedLocally(let id):
                if current == id { current = nil }
                if ringingInApp?.0 == id { ringingInApp = nil }
                // Audio stops with CallKit's deactivation; without CallKit, when no call is left.
                if manager.liveCallIDs.isEmpty && policy == .noCallKit { media.stopAudio() }
            case .reportRefused(_, let error):
                status = "a call was not shown (\(error))"
            default:
                break
            }
        }
    }

    private func followInApp(_ inApp: InAppCallSystem) async {
        for await event in inApp.events {
            switch event {
            case .incoming(let id, let update): ringingInApp = (id, update)
            case .connected, .ended, .endedByUser: ringingInApp = nil
            default: break
            }
        }
    }

    /// An alert push (CallKit off): the call rings in the app.
    func alertPush(_ userInfo: [AnyHashable: Any]) {
        guard policy == .noCallKit else { return }
        var payload: [String: Any] = [:]
        for (key, value) in userInfo { if let key = key as? String { payload[key] = value } }
        manager.handleIncomingAlertPush(userInfo: payload)
    }

    func regularTokenChanged(_ token: Data) {
        let tokens = self.tokens!
        Task { await tokens.setAPNsToken(token) }
    }

    /// The user behind a handle the call UI showed (a call-back from Recents).
    func identity(forHandle handle: String) -> String { manager.callers.identity(forHandle: handle) }

    func call(_ user: String, video: Bool = false) {
        Task {
            do {
                current = try await manager.startCall(to: [user], video: video)
            } catch {
                status = "call failed: \(error)"
            }
        }
    }

    func hangUp() {
        guard let current else { return }
        if let inApp = system as? InAppCallSystem {
            Task { await inApp.end(current) }
        } else {
            Task { try? await system.request(.end(current)) }
        }
    }

    /// The in-app ringing screen's buttons (CallKit off).
    func answerInApp() {
        guard let (id, _) = ringingInApp, let inApp = system as? InAppCallSystem else { return }
        Task { await inApp.answer(id) }
    }

    func declineInApp() {
        guard let (id, _) = ringingInApp, let inApp = system as? InAppCallSystem else { return }
        Task { await inApp.end(id) }
    }

    /// A notification's `userInfo` carried across to the main actor (its values are plist types).
    nonisolated static func sendable(_ userInfo: [AnyHashable: Any]) -> UncheckedUserInfo {
        UncheckedUserInfo(value: userInfo)
    }
}

/// Safety: a notification's userInfo holds property-list values only, read on one actor.
struct UncheckedUserInfo: @unchecked Sendable {
    let value: [AnyHashable: Any]
}

/// Where the app's WebRTC engine plugs in: join the call's room (`Room.join`), exchange
/// offers/answers/candidates with `room.signal(to:)`, and start audio only when CallKit
/// activated the session.
final class MediaBridge {
    init() {
        // At launch, before any call: WebRTC must leave the audio session to CallKit.
        // RTCAudioSession.sharedInstance().useManualAudio = true
    }

    func startAudio(for call: UUID?) {
        // RTCAudioSession.sharedInstance().audioSessionDidActivate(AVAudioSession.sharedInstance())
        // RTCAudioSession.sharedInstance().isAudioEnabled = true
    }

    func stopAudio() {
        // RTCAudioSession.sharedInstance().isAudioEnabled = false
    }

    func pause() {
        // The call is on hold: stop sending and playing.
    }

    func resume() {
        // Off hold: media resumes once the session is active again (audioActive(true)).
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
