import SwitchboardProtocol

extension ErrorCode {
    /// The HTTP status of a REST answer carrying this code: the one map, for every endpoint.
    /// (A WebSocket `error` reply carries the code alone.)
    package var httpStatus: Int {
        switch self {
        case .badRequest, .malformedJSON, .unknownType, .roomFull, .notInRoom: 400
        case .unauthorized, .tokenExpired: 401
        case .forbidden: 403
        case .notFound: 404
        case .methodNotAllowed: 405
        case .conflict: 409
        case .payloadTooLarge: 413
        case .rateLimited: 429
        case .headersTooLarge: 431
        case .internal: 500
        case .unavailable: 503
        }
    }
}
