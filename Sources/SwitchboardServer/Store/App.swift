import Foundation
import SwitchboardSystem

/// An app: one iOS (and web) product that uses Switchboard, with its own credentials.
public struct App: Sendable, Equatable, Codable {
    public var id: String
    public var name: String
    /// Public identifier; the `iss` of the app's access tokens.
    public var apiKey: String
    /// Signs the app's access tokens. Never logged; shown once at creation (and at a rotation).
    public var apiSecret: String
    /// The iOS bundle id; VoIP pushes go to `<bundle id>.voip`.
    public var bundleID: String
    /// Other bundle ids of the same product the operator allows (a Lite app, an enterprise
    /// build): a device may register with one of these, and its pushes then go to it.
    /// Nothing a client says adds to them.
    public var extraBundleIDs: [String] = []
    public var createdAt: Date
    /// The secret a rotation replaced, still accepted until `previousSecretExpiresAt`
    /// (`switchboard app rotate-secret`). Never logged, never printed.
    public var previousSecret: String?
    public var previousSecretExpiresAt: Date?

    public init(
        id: String, name: String, apiKey: String, apiSecret: String, bundleID: String, createdAt: Date,
        previousSecret: String? = nil, previousSecretExpiresAt: Date? = nil, extraBundleIDs: [String] = []
    ) {
        self.extraBundleIDs = extraBundleIDs
        self.id = id
        self.name = name
        self.apiKey = apiKey
        self.apiSecret = apiSecret
        self.bundleID = bundleID
        self.createdAt = createdAt
        self.previousSecret = previousSecret
        self.previousSecretExpiresAt = previousSecretExpiresAt
    }

    /// A new app with fresh random credentials.
    public static func make(name: String, bundleID: String, now: Date = Date()) -> App {
        App(
            id: "app_" + RandomID.alphanumeric(12), name: name, apiKey: "sbk_" + RandomID.alphanumeric(16),
            apiSecret: RandomID.alphanumeric(43), bundleID: bundleID, createdAt: now)
    }

    /// Whether `key` has the shape of an API key (`sbk_` and 16 to 64 letters and digits):
    /// anything else is refused without asking the store.
    public static func isWellFormedAPIKey(_ key: some StringProtocol) -> Bool {
        guard key.hasPrefix("sbk_") else { return false }
        let rest = key.utf8.dropFirst(4)
        return (16...64).contains(rest.count) && rest.allSatisfy { (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }
    }

    /// The bundle ids the app's devices may register with, the app's own first: the only APNs
    /// topics its pushes ever use.
    public var bundleIDs: [String] { [bundleID] + extraBundleIDs }

    /// Whether `bundleID` looks like one (`com.example.app`): letters, digits, `-`, at least
    /// two parts, at most 155 bytes (Apple's limit).
    public static func isWellFormedBundleID(_ bundleID: String) -> Bool {
        bundleID.utf8.count <= 155 && bundleID.range(of: #"^[A-Za-z0-9\-]+(\.[A-Za-z0-9\-]+)+$"#, options: .regularExpression) != nil
    }

    /// The secrets that verify the app's tokens at `now`: the current one, then the previous
    /// one while its grace period lasts.
    public func acceptedSecrets(at now: Date = Date()) -> [String] {
        guard let previousSecret, let until = previousSecretExpiresAt, until > now else { return [apiSecret] }
        return [apiSecret, previousSecret]
    }

    enum CodingKeys: String, CodingKey {
        case id, name
        case apiKey = "api_key"
        case apiSecret = "api_secret"
        case bundleID = "bundle_id"
        case createdAt = "created_at"
        case previousSecretExpiresAt = "previous_secret_expires_at"
        case extraBundleIDs = "extra_bundle_ids"
    }
}
