import Foundation
import SwitchboardSystem

/// An app: one iOS (and web) product that uses Switchboard, with its own credentials.
public struct App: Sendable, Equatable, Codable {
    public var id: String
    public var name: String
    /// Public identifier; the `iss` of the app's access tokens.
    public var apiKey: String
    /// Signs the app's access tokens. Never logged; shown once at creation.
    public var apiSecret: String
    /// The iOS bundle id; VoIP pushes go to `<bundle id>.voip`.
    public var bundleID: String
    public var createdAt: Date

    public init(id: String, name: String, apiKey: String, apiSecret: String, bundleID: String, createdAt: Date) {
        self.id = id
        self.name = name
        self.apiKey = apiKey
        self.apiSecret = apiSecret
        self.bundleID = bundleID
        self.createdAt = createdAt
    }

    /// A new app with fresh random credentials.
    public static func make(name: String, bundleID: String, now: Date = Date()) -> App {
        App(
            id: "app_" + RandomID.alphanumeric(12), name: name, apiKey: "sbk_" + RandomID.alphanumeric(16),
            apiSecret: RandomID.alphanumeric(43), bundleID: bundleID, createdAt: now)
    }

    enum CodingKeys: String, CodingKey {
        case id, name
        case apiKey = "api_key"
        case apiSecret = "api_secret"
        case bundleID = "bundle_id"
        case createdAt = "created_at"
    }
}
