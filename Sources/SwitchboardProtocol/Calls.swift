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

    /// The media as the JSON `encode(to:)` writes, without an encoder.
    public var json: JSONValue {
        switch self {
        case .room(let name): .object(["type": .string("room"), "room": .string(name)])
        case .external(let descriptor): .object(["type": .string("external"), "descriptor": descriptor])
        }
    }

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

    /// The request as `encode(to:)` writes it (a nil member left out), without an encoder.
    public var json: JSONValue {
        var members: [String: JSONValue] = ["callees": .array(callees.map(JSONValue.string))]
        if let video { members["video"] = .bool(video) }
        if let callerName { members["caller_name"] = .string(callerName) }
        if let handle { members["handle"] = .string(handle) }
        if let media { members["media"] = media.json }
        if let metadata { members["metadata"] = metadata }
        if let ringTimeoutSeconds { members["ring_timeout_seconds"] = .int(Int64(ringTimeoutSeconds)) }
        if let busyPolicy { members["busy_policy"] = .string(busyPolicy.rawValue) }
        if let idempotencyKey { members["idempotency_key"] = .string(idempotencyKey) }
        return .object(members)
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
    /// For `call.end`: why (free text, e.g. "hangup"). For `call.decline`: `filtered` when the
    /// phone did not show the call (with `filter` saying why), else a user's decline.
    public var reason: String?
    /// With `reason: "filtered"`: what filtered it.
    public var filter: CallFilter?

    public init(callID: String, reason: String? = nil, filter: CallFilter? = nil) {
        self.callID = callID
        self.reason = reason
        self.filter = filter
    }

    enum CodingKeys: String, CodingKey {
        case callID = "call_id"
        case reason, filter
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
    /// A sound file of the app (in its bundle or Library/Sounds) that the alert push ringing
    /// this device without CallKit plays; nil: the default sound.
    public var ringtone: String?

    public init(
        platform: String, voipToken: String? = nil, apnsToken: String? = nil, environment: String? = nil,
        bundleID: String? = nil, callKitEnabled: Bool? = nil, appVersion: String? = nil, ringtone: String? = nil
    ) {
        self.ringtone = ringtone
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
        case ringtone
    }
}

/// A call event from the server (`call.*`), typed: the server builds them, the SDK reads them.
/// See docs/calls.md, "Requests and events".
public enum CallEvent: Sendable, Equatable {
    /// A call rings for this user: the invite (the VoIP payload without `UUID`/`handle`/`hasVideo`).
    case incoming(callID: String, invite: JSONValue)
    /// A callee device was reached (once per call, to the caller).
    case ringing(callID: String, callee: String)
    case accepted(callID: String, by: String)
    /// Another device of this user answered (`device`: which, nil over REST without one).
    case answeredElsewhere(callID: String, device: String?)
    case declined(callID: String, by: String)
    case declinedElsewhere(callID: String, device: String?)
    case busy(callID: String, callee: String)
    /// Every device of `callee` that rang filtered the call (Do Not Disturb, Focus, block list).
    case unavailable(callID: String, callee: String)
    case cancelled(callID: String)
    /// This user did not answer: `timeout`, or `ended` (a group call ended while it rang).
    case missed(callID: String, reason: String)
    case ended(callID: String, outcome: CallOutcome, by: String?, reason: String)
    /// A participant put the call on hold, or took it off.
    case held(callID: String, by: String, onHold: Bool)

    /// The event types, as on the wire.
    public enum Kind: String, Sendable, CaseIterable {
        case incoming = "call.incoming", ringing = "call.ringing", accepted = "call.accepted"
        case answeredElsewhere = "call.answered_elsewhere", declined = "call.declined"
        case declinedElsewhere = "call.declined_elsewhere", busy = "call.busy", unavailable = "call.unavailable"
        case cancelled = "call.cancelled", missed = "call.missed", ended = "call.ended", held = "call.held"
    }

    public var kind: Kind {
        switch self {
        case .incoming: .incoming
        case .ringing: .ringing
        case .accepted: .accepted
        case .answeredElsewhere: .answeredElsewhere
        case .declined: .declined
        case .declinedElsewhere: .declinedElsewhere
        case .busy: .busy
        case .unavailable: .unavailable
        case .cancelled: .cancelled
        case .missed: .missed
        case .ended: .ended
        case .held: .held
        }
    }

    /// The message `type`.
    public var type: String { kind.rawValue }

    public var callID: String {
        switch self {
        case .incoming(let id, _), .ringing(let id, _), .accepted(let id, _), .answeredElsewhere(let id, _), .declined(let id, _),
            .declinedElsewhere(let id, _), .busy(let id, _), .unavailable(let id, _), .cancelled(let id), .missed(let id, _),
            .ended(let id, _, _, _), .held(let id, _, _):
            id
        }
    }

    /// The message `data`.
    public var data: JSONValue {
        var fields: [String: JSONValue] = ["call_id": .string(callID)]
        switch self {
        case .incoming(_, let invite):
            if case .object(let invite) = invite { fields.merge(invite) { _, new in new } }
        case .ringing(_, let callee), .busy(_, let callee), .unavailable(_, let callee): fields["callee"] = .string(callee)
        case .accepted(_, let by), .declined(_, let by): fields["by"] = .string(by)
        case .answeredElsewhere(_, let device), .declinedElsewhere(_, let device): fields["device"] = device.map(JSONValue.string) ?? .null
        case .cancelled: fields["reason"] = "cancelled"
        case .missed(_, let reason): fields["reason"] = .string(reason)
        case .ended(_, let outcome, let by, let reason):
            fields["outcome"] = .string(outcome.rawValue)
            fields["by"] = by.map(JSONValue.string) ?? .null
            fields["reason"] = .string(reason)
        case .held(_, let by, let onHold):
            fields["by"] = .string(by)
            fields["on_hold"] = .bool(onHold)
        }
        return .object(fields)
    }

    /// Reads a server event; nil for a type that is not a call event or data that does not fit.
    public init?(type: String, data: JSONValue) {
        guard let kind = Kind(rawValue: type), let callID = data["call_id"]?.stringValue else { return nil }
        let by = data["by"]?.stringValue
        let callee = data["callee"]?.stringValue
        switch kind {
        case .incoming: self = .incoming(callID: callID, invite: data)
        case .ringing: guard let callee else { return nil }; self = .ringing(callID: callID, callee: callee)
        case .accepted: guard let by else { return nil }; self = .accepted(callID: callID, by: by)
        case .answeredElsewhere: self = .answeredElsewhere(callID: callID, device: data["device"]?.stringValue)
        case .declined: guard let by else { return nil }; self = .declined(callID: callID, by: by)
        case .declinedElsewhere: self = .declinedElsewhere(callID: callID, device: data["device"]?.stringValue)
        case .busy: guard let callee else { return nil }; self = .busy(callID: callID, callee: callee)
        case .unavailable: guard let callee else { return nil }; self = .unavailable(callID: callID, callee: callee)
        case .cancelled: self = .cancelled(callID: callID)
        case .missed: self = .missed(callID: callID, reason: data["reason"]?.stringValue ?? "timeout")
        case .ended:
            guard let outcome = data["outcome"]?.stringValue.flatMap(CallOutcome.init(rawValue:)) else { return nil }
            self = .ended(callID: callID, outcome: outcome, by: by, reason: data["reason"]?.stringValue ?? "")
        case .held:
            guard let by, case .bool(let onHold)? = data["on_hold"] else { return nil }
            self = .held(callID: callID, by: by, onHold: onHold)
        }
    }
}

/// `call.hold` request data.
public struct CallHoldRequest: Sendable, Codable, Equatable {
    public var callID: String
    public var onHold: Bool

    public init(callID: String, onHold: Bool) {
        self.callID = callID
        self.onHold = onHold
    }

    enum CodingKeys: String, CodingKey {
        case callID = "call_id"
        case onHold = "on_hold"
    }
}

/// Why a device did not ring for a call it was sent (`call.decline` with reason `filtered`).
public enum CallFilter: String, Sendable, Codable, CaseIterable {
    case doNotDisturb = "do_not_disturb"
    case blockList = "block_list"
    /// The phone is in a restricted sharing mode (CallKit's refusal code 5).
    case restricted
    /// The app is a protected app (locked or hidden behind Face ID) and may not ring now (code 6).
    case protectedApp = "protected_app"
    /// The call's participants are ones the phone's Communication Safety settings keep out
    /// (code 7).
    case sensitiveParticipants = "sensitive_participants"
    /// The app may not show calls (no CallKit entitlement).
    case unentitled
    /// The phone showed the call but could not reach the server while it rang (a locked phone
    /// whose credentials it could not read, no network) and gave the ring up.
    case unreachable
    case unknown
}
