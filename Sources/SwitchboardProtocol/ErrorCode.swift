/// Stable error codes, the same over REST and WebSocket. Clients switch on these;
/// the message beside them is for people and may change.
public enum ErrorCode: String, Sendable, Codable, CaseIterable {
    /// The request is not valid: a missing or wrongly typed field.
    case badRequest = "bad_request"
    /// The body or message is not well-formed JSON.
    case malformedJSON = "malformed_json"
    /// The message `type` is not one the server knows.
    case unknownType = "unknown_type"
    /// No credentials, or credentials that are not valid.
    case unauthorized
    /// The access token has expired.
    case tokenExpired = "token_expired"
    /// The credentials are valid but do not grant this.
    case forbidden
    /// The resource does not exist.
    case notFound = "not_found"
    /// The path exists but not with this HTTP method.
    case methodNotAllowed = "method_not_allowed"
    /// The body is larger than the configured limit.
    case payloadTooLarge = "payload_too_large"
    /// The request headers are larger than the configured limit.
    case headersTooLarge = "headers_too_large"
    /// Too many requests; retry later.
    case rateLimited = "rate_limited"
    /// The resource already exists.
    case conflict
    /// The room has its maximum number of participants.
    case roomFull = "room_full"
    /// The request names a room the sender is not in.
    case notInRoom = "not_in_room"
    /// The server is shutting down, or cannot save now (the storage refuses writes); retry later.
    case unavailable
    /// An unexpected failure inside the server; it is logged with a request id.
    case `internal`
}

/// The error object in a REST body `{"error": {...}}` and in a WebSocket `error` reply.
public struct ErrorBody: Sendable, Codable, Equatable, Error {
    public var code: ErrorCode
    public var message: String
    /// A stable sub-code where a code alone does not say enough (a refused call action says why:
    /// `CallRefusal`). Clients switch on `code`, then on `reason`; never on `message`.
    public var reason: String?

    public init(_ code: ErrorCode, _ message: String, reason: String? = nil) {
        self.code = code
        self.message = message
        self.reason = reason
    }
}

/// Why a call action was refused (`error.reason` beside `conflict`, `forbidden` or `not_found`).
public enum CallRefusal: String, Sendable, Codable, CaseIterable {
    /// Another device of this user answered first.
    case answeredElsewhere = "answered_elsewhere"
    /// The call is over.
    case callEnded = "call_ended"
    /// The call no longer rings for this user (declined, missed, or answered by them already).
    case notRinging = "not_ringing"
    /// Only a ringing call can be cancelled; an answered one is ended.
    case notCancellable = "not_cancellable"
    /// The user takes no part in the call.
    case notParticipant = "not_participant"
    /// No such call.
    case unknownCall = "unknown_call"
}

/// The REST error envelope: `{"error": {"code": "...", "message": "..."}}`.
public struct ErrorEnvelope: Sendable, Codable, Equatable {
    public var error: ErrorBody
    public init(error: ErrorBody) { self.error = error }
}
