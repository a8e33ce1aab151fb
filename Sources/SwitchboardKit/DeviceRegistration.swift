import Foundation
import SwitchboardProtocol

/// Where CallKit may be used. Apps in the China App Store must not use CallKit (MIIT rules,
/// App Review guideline 5.0), so there the device registers without it and rings from an alert
/// push inside the app; the server may also say so for a user.
public enum RegionPolicy: Sendable, Equatable {
    /// CallKit and VoIP pushes.
    case callKit
    /// No CallKit, no VoIP push registration (PushKit VoIP without CallKit crashes at launch):
    /// incoming calls arrive as alert pushes and ring in the app's own UI.
    case noCallKit

    /// The policy for a storefront or region code: no CallKit for mainland China ("CN", "CHN").
    public static func forRegion(_ code: String?) -> RegionPolicy {
        guard let code = code?.uppercased() else { return .callKit }
        return code == "CN" || code == "CHN" ? .noCallKit : .callKit
    }

    /// Whether to register for VoIP pushes at all.
    public var registersVoIPPush: Bool { self == .callKit }
}

/// The region policy across launches. Apple's rule for mainland China follows the App Store
/// storefront of the device's account, not the region in Settings, and the storefront can be
/// read only asynchronously (StoreKit's `Storefront.current`), while PushKit and the call
/// system must be wired synchronously at launch. So a launch starts from the policy the
/// storefront decided last (kept in `UserDefaults`), and the app reads the storefront again
/// and switches when it changed (`PushTokenRegistry.switchPolicy(to:)` first). On a first
/// launch nothing is decided yet: wire the call system after reading the storefront (no VoIP
/// token was ever registered for this install, so no VoIP push can come meanwhile).
public final class RegionPolicyMemory: Sendable {
    /// The `UserDefaults` suite it is kept in (nil: the app's standard defaults).
    public let suiteName: String?
    private let key = "switchboard.regionPolicy"

    /// A memory kept in `suiteName`'s defaults (the app's standard ones by default).
    public init(suiteName: String? = nil) {
        self.suiteName = suiteName
    }

    private var defaults: UserDefaults { suiteName.flatMap { UserDefaults(suiteName: $0) } ?? .standard }

    /// The policy the storefront decided last; nil before it ever did (a first launch).
    public var decided: RegionPolicy? {
        switch defaults.string(forKey: key) {
        case "callKit": .callKit
        case "noCallKit": .noCallKit
        default: nil
        }
    }

    /// Keeps the policy the storefront decided (after `switchPolicy(to:)` landed, when it
    /// changed).
    public func remember(_ policy: RegionPolicy) {
        defaults.set(policy == .callKit ? "callKit" : "noCallKit", forKey: key)
    }
}

/// Registers this install's push tokens with the server's device registry, and again whenever
/// a token rotates.
public struct DeviceRegistrar: Sendable {
    /// The connection to the server.
    public let client: SwitchboardClient
    /// The REST transport.
    public let http: any HTTPTransport

    /// `http` defaults to the platform's transport.
    public init(client: SwitchboardClient, http: (any HTTPTransport)? = nil) {
        self.client = client
        self.http = http ?? DefaultTransports.http()
    }

    /// `PUT /v1/devices/{device id}`. Tokens are the raw bytes PushKit and APNs hand over,
    /// hex-encoded byte by byte here (never through `description`). Under `.noCallKit` no VoIP
    /// token is sent and the server rings the device with alert pushes. `bundleID`: the app's
    /// (`Bundle.main.bundleIdentifier`), which must be one the server's app has; nil uses the
    /// app's own. `ringtone`: a sound file the app ships, played by the alert that rings the
    /// device without CallKit (mainland China); nil: the default sound.
    public func register(
        voipToken: Data?, apnsToken: Data?, environment: String, bundleID: String?, appVersion: String?,
        policy: RegionPolicy, ringtone: String? = nil
    ) async throws {
        guard let deviceID = client.deviceID else { throw SwitchboardError.invalidResponse("the client has no device id") }
        try await client.connect()
        guard let token = await client.token else { throw SwitchboardError.notConnected }
        let body = SwitchboardProtocol.DeviceRegistration(
            platform: "ios", voipToken: policy.registersVoIPPush ? voipToken.map(Self.hex) : nil, apnsToken: apnsToken.map(Self.hex),
            environment: environment, bundleID: bundleID, callKitEnabled: policy == .callKit, appVersion: appVersion,
            ringtone: ringtone)
        let (status, response) = try await http.send(
            "PUT", client.serverURL.appendingPathComponent("v1/devices/\(deviceID)"), bearer: token, json: try JSONEncoder().encode(body))
        guard status == 200 else {
            if let error = try? JSONDecoder().decode(ErrorEnvelope.self, from: response) { throw SwitchboardError.server(error.error) }
            throw SwitchboardError.invalidResponse("HTTP \(status)")
        }
    }

    /// `GET /v1/devices`: the user's devices, tokens shortened.
    public func devices() async throws -> [JSONValue] {
        try await client.connect()
        guard let token = await client.token else { throw SwitchboardError.notConnected }
        let (status, response) = try await http.get(client.serverURL.appendingPathComponent("v1/devices"), bearer: token)
        guard status == 200 else {
            if let error = try? JSONDecoder().decode(ErrorEnvelope.self, from: response) { throw SwitchboardError.server(error.error) }
            throw SwitchboardError.invalidResponse("HTTP \(status)")
        }
        guard case .array(let devices)? = try JSONDecoder().decode(JSONValue.self, from: response)["devices"] else {
            throw SwitchboardError.invalidResponse("GET /v1/devices gave no devices")
        }
        return devices
    }

    /// Lower-case hex, two characters per byte.
    public static func hex(_ token: Data) -> String {
        token.map { String(format: "%02x", $0) }.joined()
    }
}

/// Keeps this install's push tokens registered with the server, whatever order and however
/// often PushKit and APNs hand them over.
///
/// A registration (`PUT /v1/devices/{id}`) replaces both tokens on the server, so two sent at
/// once can land in either order: one with only the APNs token landing last wipes the VoIP
/// token, and a phone with no VoIP token never rings while the app is killed. Here one
/// registration runs at a time, always with every token known when it is sent; a failed one is
/// retried (backing off up to a minute) until it lands; and the tokens are registered again
/// after every connect (a sign-in, a server that lost them) and whenever `registerNow()` is
/// called. `check()` compares the server's registry with the tokens held here.
///
/// ```swift
/// let tokens = PushTokenRegistry(client: client, policy: policy, environment: APNsEnvironmentOfBuild.current,
///                                bundleID: Bundle.main.bundleIdentifier, appVersion: version)
/// tokens.start()
/// // PushKitBridge(onToken: { token in Task { await tokens.setVoIPToken(token) } },
/// //               onTokenInvalidated: { Task { await tokens.setVoIPToken(nil) } })
/// // application(_:didRegisterForRemoteNotificationsWithDeviceToken:): await tokens.setAPNsToken(token)
/// ```
public actor PushTokenRegistry {
    /// The connection to the server (its device id names this install).
    public nonisolated let client: SwitchboardClient
    /// Whether VoIP pushes are used at all (`.noCallKit`: no VoIP token is ever sent).
    public private(set) var policy: RegionPolicy
    private let registrar: DeviceRegistrar
    private let environment: String
    private let bundleID: String?
    private let appVersion: String?
    private let ringtone: String?
    private let maxBackoff: Duration

    /// The VoIP token PushKit gave last (nil before, or after it was invalidated).
    public private(set) var voipToken: Data?
    /// The APNs token the app was given last.
    public private(set) var apnsToken: Data?
    /// The last registration's failure, nil once one landed.
    public private(set) var lastError: (any Error)?
    /// How many registrations landed.
    public private(set) var registrations = 0

    private var wanted = 0
    private var landed = 0
    private var worker: Task<Void, Never>?
    private var following: Task<Void, Never>?

    /// `environment`: `APNsEnvironmentOfBuild.current`; `bundleID`: the app's; `ringtone`: the
    /// app's sound for a ring by alert push (without CallKit), up to 30 s long.
    public init(
        client: SwitchboardClient, policy: RegionPolicy, environment: String, bundleID: String?, appVersion: String?,
        http: (any HTTPTransport)? = nil, maxBackoff: Duration = .seconds(60), ringtone: String? = nil
    ) {
        self.ringtone = ringtone
        self.client = client
        self.policy = policy
        self.environment = environment
        self.bundleID = bundleID
        self.appVersion = appVersion
        self.maxBackoff = maxBackoff
        registrar = DeviceRegistrar(client: client, http: http)
    }

    /// Registers again after every connect of the client (a sign-in, a reconnect), from now on.
    public func start() {
        guard following == nil else { return }
        let events = client.lastingEvents()
        following = Task { [weak self] in
            for await event in events {
                guard let self else { return }
                if case .connected(_, resumed: false) = event { await self.registerNow() }
                if case .sessionReplaced = event { await self.registerNow() }
            }
        }
    }

    /// Changes the region policy (the storefront changed). To `.noCallKit`: the server gets a
    /// registration without the VoIP token and with CallKit off, and this returns once it
    /// landed (retried until it does); only then may the app invalidate its `PushKitBridge`
    /// and CallKit system, since a VoIP push reaching an app with no PushKit registry ends the
    /// app. To `.callKit`: the VoIP token is registered once PushKit hands it over.
    public func switchPolicy(to newPolicy: RegionPolicy) async {
        guard newPolicy != policy else { return }
        policy = newPolicy
        if newPolicy == .noCallKit { voipToken = nil }
        registerNow()
        await settled()
    }

    /// Stops following the client (the registrations under way finish).
    public func stop() {
        following?.cancel()
        following = nil
    }

    /// PushKit's VoIP token, or nil when it was invalidated; registered with the APNs token.
    public func setVoIPToken(_ token: Data?) {
        guard token != voipToken else { return }
        voipToken = token
        registerNow()
    }

    /// The APNs token (`didRegisterForRemoteNotificationsWithDeviceToken`); registered with the
    /// VoIP token.
    public func setAPNsToken(_ token: Data?) {
        guard token != apnsToken else { return }
        apnsToken = token
        registerNow()
    }

    /// Registers the tokens known now (after a sign-in: PushKit does not hand its token over
    /// again). Returns at once; the registration runs after any under way, and is retried.
    public func registerNow() {
        guard voipToken != nil || apnsToken != nil else { return }
        wanted += 1
        guard worker == nil else { return }
        worker = Task { await self.work() }
    }

    /// Waits until every registration asked for so far has landed.
    public func settled() async {
        while let worker { await worker.value }
    }

    private func work() async {
        var backoff = Duration.milliseconds(500)
        while landed < wanted {
            let target = wanted
            do {
                try await registrar.register(
                    voipToken: voipToken, apnsToken: apnsToken, environment: environment, bundleID: bundleID, appVersion: appVersion,
                    policy: policy, ringtone: ringtone)
                landed = target
                registrations += 1
                lastError = nil
                backoff = .milliseconds(500)
            } catch {
                lastError = error
                if Task.isCancelled { break }
                try? await Task.sleep(for: backoff)
                backoff = min(backoff * 2, maxBackoff)
            }
        }
        worker = nil
    }

    /// What the server's registry (`GET /v1/devices`, tokens shortened to their first 8
    /// characters) says of this install, against the tokens held here.
    public struct Check: Sendable, Equatable {
        /// The server has this device at all.
        public var registered: Bool
        /// Its VoIP token is the one held here (both absent counts as matching).
        public var voipTokenMatches: Bool
        /// Its APNs token is the one held here.
        public var apnsTokenMatches: Bool
        /// Everything matches.
        public var ok: Bool { registered && voipTokenMatches && apnsTokenMatches }

        /// A check's result (tests compare with one).
        public init(registered: Bool, voipTokenMatches: Bool, apnsTokenMatches: Bool) {
            self.registered = registered
            self.voipTokenMatches = voipTokenMatches
            self.apnsTokenMatches = apnsTokenMatches
        }
    }

    /// Asks the server which tokens it holds for this install (a self-check for a settings
    /// screen or a support log).
    public func check() async throws -> Check {
        guard let deviceID = client.deviceID else { throw SwitchboardError.invalidResponse("the client has no device id") }
        let devices = try await registrar.devices()
        guard let mine = devices.first(where: { $0["device_id"]?.stringValue == deviceID }) else {
            return Check(registered: false, voipTokenMatches: false, apnsTokenMatches: false)
        }
        func matches(_ held: Data?, _ shown: JSONValue?) -> Bool {
            guard let held else { return shown?.stringValue == nil }
            guard let shown = shown?.stringValue else { return false }
            return shown.hasPrefix(String(DeviceRegistrar.hex(held).prefix(8)))
        }
        let voip = policy.registersVoIPPush ? voipToken : nil
        return Check(registered: true, voipTokenMatches: matches(voip, mine["voip_token"]), apnsTokenMatches: matches(apnsToken, mine["apns_token"]))
    }
}

/// Which APNs environment this build's push tokens belong to. It follows the `aps-environment`
/// entitlement of the provisioning profile the app was signed with, not the build
/// configuration: a development-signed release build still gets sandbox tokens, and sending
/// those to production fails with `BadDeviceToken`.
public enum APNsEnvironmentOfBuild {
    /// `sandbox` or `production` for the running app: its embedded profile's entitlement, or
    /// `production` without one (App Store builds carry none).
    public static var current: String {
        let profile = Bundle.main.url(forResource: "embedded", withExtension: "mobileprovision").flatMap { try? Data(contentsOf: $0) }
        return environment(profile: profile)
    }

    /// The environment a provisioning profile (`embedded.mobileprovision`: a signed envelope
    /// around a property list) grants: `sandbox` for `aps-environment` = `development`,
    /// `production` for anything else or no profile.
    public static func environment(profile: Data?) -> String {
        guard let profile, let start = profile.range(of: Data("<?xml".utf8)),
            let end = profile.range(of: Data("</plist>".utf8), in: start.lowerBound..<profile.endIndex),
            let plist = try? PropertyListSerialization.propertyList(from: profile[start.lowerBound..<end.upperBound], format: nil),
            let entitlements = (plist as? [String: Any])?["Entitlements"] as? [String: Any]
        else { return "production" }
        return entitlements["aps-environment"] as? String == "development" ? "sandbox" : "production"
    }
}
