/// Wire types of calls and ringing. See docs/calls.md.

/// How a call ended, as history and events report it.
public enum CallOutcome: String, Sendable, Codable, CaseIterable {
    /// Answered, then ended by a participant.
    case completed
    /// Nobody answered before the ring timeout.
    case missed
    /// The callee (every callee, in a group) declined.
    case declined
    /// The caller hung up while it rang.
    case cancelled
    /// The callee was already in a call and the policy rejected a second one.
    case busy
    /// The call could not go on (nobody reachable, server restart...).
    case failed
}

/// What a participant's history says of a call, from that user's side.
public enum HistoryOutcome: String, Sendable, Codable, CaseIterable {
    case completed, missed, declined, cancelled, busy, failed
    /// The caller's side of a call nobody answered.
    case noAnswer = "no_answer"
    /// Another device of this user answered (a device-level record).
    case answeredElsewhere = "answered_elsewhere"
}

/// When the callee is already in a call.
public enum BusyPolicy: String, Sendable, Codable {
    /// The new call ends at once as `busy` for that callee.
    case reject
    /// Ring anyway (call waiting).
    case ring
}

/// Where the call's media happens: a room on this server, or an outside service the server
/// does not interpret (Zoom, Agora, LiveKit...), so ringing does not depend on the media vendor.
public enum CallMedia: Sendable, Equatable, Codable {
    case room(String)
    case external(JSONValue)

    enum CodingKeys: String, CodingKey { case type, room, descriptor }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(String.self, forKey: .type) {
        case "room": self = .room(try container.decodeIfPresent(String.self, forKey: .room) ?? "")
        case "external": self = .external(try container.decode(JSONValue.self, forKey: .descriptor))
        default:
            throw DecodingError.dataCorruptedError(forKey: .type, in: container, debugDescription: "media type is room or external")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .room(let name):
            try container.encode("room", forKey: .type)
            try container.encode(name, forKey: .room)
        case .external(let descriptor):
            try container.encode("external", forKey: .type)
            try container.encode(descriptor, forKey: .descriptor)
        }
    }
}

/// `call.create` request data and `POST /v1/calls` body.
public struct CallCreateRequest: Sendable, Codable, Equatable {
    /// The identities to ring (one for a 1:1 call).
    public var callees: [String]
    public var video: Bool?
    /// The caller's display name on the callee's screen (defaults to the token's name).
    public var callerName: String?
    /// The caller's handle (phone number, email, user name) for CallKit.
    public var handle: String?
    /// `{"type": "room"}` (a room made for the call, the default) or
    /// `{"type": "external", "descriptor": {...}}`.
    public var media: CallMedia?
    public var metadata: JSONValue?
    /// 5 to 180; default 45.
    public var ringTimeoutSeconds: Int?
    public var busyPolicy: BusyPolicy?
    /// A retried request with the same key makes one call.
    public var idempotencyKey: String?

    public init(
        callees: [String], video: Bool? = nil, callerName: String? = nil, handle: String? = nil, media: CallMedia? = nil,
        metadata: JSONValue? = nil, ringTimeoutSeconds: Int? = nil, busyPolicy: BusyPolicy? = nil, idempotencyKey: String? = nil
    ) {
        self.callees = callees
        self.video = video
        self.callerName = callerName
        self.handle = handle
        self.media = media
        self.metadata = metadata
        self.ringTimeoutSeconds = ringTimeoutSeconds
        self.busyPolicy = busyPolicy
        self.idempotencyKey = idempotencyKey
    }

    enum CodingKeys: String, CodingKey {
        case callees, video
        case callerName = "caller_name"
        case handle, media, metadata
        case ringTimeoutSeconds = "ring_timeout_seconds"
        case busyPolicy = "busy_policy"
        case idempotencyKey = "idempotency_key"
    }
}

/// `call.answer`, `call.decline`, `call.cancel`, `call.end`, `call.ack` request data.
public struct CallActionRequest: Sendable, Codable, Equatable {
    public var callID: String
    /// For `call.end`: why (free text, e.g. "hangup").
    public var reason: String?

    public init(callID: String, reason: String? = nil) {
        self.callID = callID
        self.reason = reason
    }

    enum CodingKeys: String, CodingKey {
        case callID = "call_id"
        case reason
    }
}

/// `PUT /v1/devices/{device_id}` body.
public struct DeviceRegistration: Sendable, Codable, Equatable {
    /// `ios`, `android` or `web`.
    public var platform: String
    /// The PushKit token (hex), for VoIP pushes.
    public var voipToken: String?
    /// The regular APNs token (hex), for alert pushes (missed calls, CallKit-less ringing).
    public var apnsToken: String?
    /// `sandbox` (development builds) or `production`.
    public var environment: String?
    public var bundleID: String?
    /// False where CallKit may not be used (mainland China) or the user turned it off.
    public var callKitEnabled: Bool?
    public var appVersion: String?

    public init(
        platform: String, voipToken: String? = nil, apnsToken: String? = nil, environment: String? = nil,
        bundleID: String? = nil, callKitEnabled: Bool? = nil, appVersion: String? = nil
    ) {
        self.platform = platform
        self.voipToken = voipToken
        self.apnsToken = apnsToken
        self.environment = environment
        self.bundleID = bundleID
        self.callKitEnabled = callKitEnabled
        self.appVersion = appVersion
    }

    enum CodingKeys: String, CodingKey {
        case platform
        case voipToken = "voip_token"
        case apnsToken = "apns_token"
        case environment
        case bundleID = "bundle_id"
        case callKitEnabled = "callkit_enabled"
        case appVersion = "app_version"
    }
}
