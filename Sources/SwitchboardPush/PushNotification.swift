import Foundation

/// What kind of push, as `apns-push-type` names it.
public enum PushType: String, Sendable, Codable, CaseIterable {
    /// A PushKit VoIP push: rings the phone. Only for "a call is ringing for you now".
    case voip
    /// A visible notification (missed calls).
    case alert
    /// A silent content-available push.
    case background

    /// Apple's payload limit for this type, in bytes.
    public var maxPayloadBytes: Int { self == .voip ? 5120 : 4096 }

    /// The priority used when none is given: 10 (immediate) for VoIP and alerts, 5 for background
    /// (Apple refuses 10 for background pushes).
    public var defaultPriority: Int { self == .background ? 5 : 10 }
}

/// The APNs environment a device token belongs to.
public enum APNsEnvironment: String, Sendable, Codable {
    case sandbox, production

    /// Apple's provider API host for this environment.
    public var baseURL: String {
        switch self {
        case .sandbox: "https://api.sandbox.push.apple.com"
        case .production: "https://api.push.apple.com"
        }
    }
}

/// One push to one device.
public struct PushNotification: Sendable, Equatable {
    /// Whether `token` has a device token's form: 64 hexadecimal digits (ASCII only).
    /// Whether `topic` has the shape of a bundle id (`com.example.app`, optionally with a
    /// `.voip` or other suffix APNs defines): 1 to 255 bytes of letters, digits, `.` and `-`.
    public static func isTopic(_ topic: some StringProtocol) -> Bool {
        (1...255).contains(topic.utf8.count) && topic.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x2E || byte == 0x2D
        }
    }

    public static func isDeviceToken(_ token: some StringProtocol) -> Bool {
        token.utf8.count == 64 && token.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
        }
    }

    /// The device token, 64 hex characters (PushKit or APNs).
    public var deviceToken: String
    public var type: PushType
    /// The app's bundle id. For VoIP, `.voip` is appended (once) to make the topic.
    public var topic: String
    /// The JSON payload.
    public var payload: [UInt8]
    /// 10 (immediate) or 5 (power-considerate); 1 for background-only is also accepted by Apple.
    public var priority: Int?
    /// When APNs should stop trying: 0 means "now or never". Seconds since 1970.
    public var expiration: Int64?
    public var collapseID: String?
    /// The `apns-id` (a UUID); generated when nil.
    public var id: UUID?

    public init(
        deviceToken: String, type: PushType, topic: String, payload: [UInt8], priority: Int? = nil,
        expiration: Int64? = nil, collapseID: String? = nil, id: UUID? = nil
    ) {
        self.deviceToken = deviceToken
        self.type = type
        self.topic = topic
        self.payload = payload
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.id = id
    }

    /// The `apns-topic` header: VoIP pushes go to `<bundle id>.voip`.
    public var apnsTopic: String {
        guard type == .voip else { return topic }
        return topic.hasSuffix(".voip") ? topic : topic + ".voip"
    }
}
