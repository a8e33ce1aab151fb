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
    /// app's own.
    public func register(
        voipToken: Data?, apnsToken: Data?, environment: String, bundleID: String?, appVersion: String?,
        policy: RegionPolicy
    ) async throws {
        guard let deviceID = client.deviceID else { throw SwitchboardError.invalidResponse("the client has no device id") }
        try await client.connect()
        guard let token = await client.token else { throw SwitchboardError.notConnected }
        let body = SwitchboardProtocol.DeviceRegistration(
            platform: "ios", voipToken: policy.registersVoIPPush ? voipToken.map(Self.hex) : nil, apnsToken: apnsToken.map(Self.hex),
            environment: environment, bundleID: bundleID, callKitEnabled: policy == .callKit, appVersion: appVersion)
        let (status, response) = try await http.send(
            "PUT", client.serverURL.appendingPathComponent("v1/devices/\(deviceID)"), bearer: token, json: try JSONEncoder().encode(body))
        guard status == 200 else {
            if let error = try? JSONDecoder().decode(ErrorEnvelope.self, from: response) { throw SwitchboardError.server(error.error) }
            throw SwitchboardError.invalidResponse("HTTP \(status)")
        }
    }

    /// Lower-case hex, two characters per byte.
    public static func hex(_ token: Data) -> String {
        token.map { String(format: "%02x", $0) }.joined()
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
