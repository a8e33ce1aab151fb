/// The frame every WebSocket message travels in.
///
/// - A request from a client: `{"type": "ping", "id": 1, "data": {...}}`. Every request carries
///   an `id` and gets exactly one reply.
/// - A reply from the server: `{"type": "ok", "id": 1, "data": {...}}` or
///   `{"type": "error", "id": 1, "error": {"code": "...", "message": "..."}}`.
/// - An event from the server: `{"type": "session.welcome", "seq": 1, "data": {...}}`, where
///   `seq` counts the events of one session from 1 with no gaps.
public struct Envelope: Sendable, Codable, Equatable {
    public var type: String
    public var id: JSONValue?
    public var seq: UInt64?
    public var data: JSONValue?
    public var error: ErrorBody?

    public init(type: String, id: JSONValue? = nil, seq: UInt64? = nil, data: JSONValue? = nil, error: ErrorBody? = nil) {
        self.type = type
        self.id = id
        self.seq = seq
        self.data = data
        self.error = error
    }

    /// The reply that confirms request `id`.
    public static func ok(id: JSONValue?, data: JSONValue? = nil) -> Envelope {
        Envelope(type: MessageType.ok, id: id ?? .null, data: data)
    }

    /// The reply that refuses request `id` (or a message with no usable id: `id` is null).
    public static func error(id: JSONValue?, _ error: ErrorBody) -> Envelope {
        Envelope(type: MessageType.error, id: id ?? .null, error: error)
    }
}

/// The `type` strings of the protocol.
public enum MessageType {
    public static let ok = "ok"
    public static let error = "error"
    /// Client request: answered with `ok` carrying the server's clock.
    public static let ping = "ping"
    /// Client request: answered with the session's identity, grants and limits.
    public static let sessionInfo = "session.info"
    /// Server message, first on a new session: peer id, resume token, limits. Carries no `seq`.
    public static let sessionWelcome = "session.welcome"
    /// Server message, first on a resumed session: which events follow again. Carries no `seq`.
    public static let sessionResumed = "session.resumed"
    /// Server message before the session's access token expires (`token_expiry_warning_seconds`
    /// ahead): answer with `session.refresh`, or the connection closes with 4003 at expiry.
    /// Carries no `seq`.
    public static let sessionExpiring = "session.expiring"
    /// Client request `{"access_token": "…"}`: a fresh token of the same identity and app
    /// for the open session.
    public static let sessionRefresh = "session.refresh"
    public static let roomJoin = "room.join"
    public static let roomLeave = "room.leave"
    public static let roomSetMetadata = "room.set_metadata"
    public static let signal = "signal"
    public static let data = "data"
    public static let callCreate = "call.create"
    public static let callAnswer = "call.answer"
    public static let callDecline = "call.decline"
    public static let callCancel = "call.cancel"
    public static let callEnd = "call.end"
    /// The device shows the ringing call (CallKit reported it): goes in the trace.
    public static let callAck = "call.ack"
    /// A participant puts the call on hold or takes it off (`on_hold`).
    public static let callHold = "call.hold"
}
