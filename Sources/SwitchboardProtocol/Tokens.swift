/// What an access token allows. Tokens are issued by the app's backend (or `switchboard token`)
/// and carried by every client.
public struct Grants: Sendable, Codable, Equatable {
    /// The room the token is for: an exact name, or a prefix pattern ending in `*` (`team-*`).
    public var room: String?
    /// May join the room named by `room`.
    public var roomJoin: Bool?
    /// May place and answer calls.
    public var call: Bool?
    /// May use the admin API of its app (list and close rooms, read any history).
    public var admin: Bool?

    public init(room: String? = nil, roomJoin: Bool? = nil, call: Bool? = nil, admin: Bool? = nil) {
        self.room = room
        self.roomJoin = roomJoin
        self.call = call
        self.admin = admin
    }

    /// Whether these grants allow joining `name`.
    public func allowsJoining(room name: String) -> Bool {
        guard roomJoin == true || admin == true, let pattern = room else { return admin == true }
        if pattern.hasSuffix("*") {
            return name.hasPrefix(pattern.dropLast())
        }
        return pattern == name
    }
}

/// The claims of a Switchboard access token (an HS256 JWT). `iss`, `sub` and `exp` are
/// required; the rest may be left out, as JWT libraries often do (no grants: none).
public struct AccessTokenClaims: Sendable, Codable, Equatable {
    /// The app's API key.
    public var iss: String
    /// The user's identity within the app.
    public var sub: String
    /// Issued at, seconds since 1970.
    public var iat: Int64?
    /// Not before, seconds since 1970.
    public var nbf: Int64?
    /// Expires at, seconds since 1970.
    public var exp: Int64
    /// The user's display name.
    public var name: String?
    /// The user's handle (a phone number, an email, a user name) as the callee's phone shows
    /// it and calls back; the identity when absent.
    public var handle: String?
    public var grants: Grants

    public init(
        iss: String, sub: String, iat: Int64? = nil, nbf: Int64? = nil, exp: Int64, name: String? = nil, handle: String? = nil,
        grants: Grants = Grants()
    ) {
        self.handle = handle
        self.iss = iss
        self.sub = sub
        self.iat = iat
        self.nbf = nbf
        self.exp = exp
        self.name = name
        self.grants = grants
    }
}

/// `POST /v1/tokens` body.
public struct TokenRequest: Sendable, Codable, Equatable {
    public var identity: String
    public var name: String?
    /// The user's handle (phone number, email) the callee's phone shows; the identity when absent.
    public var handle: String?
    public var grants: Grants?
    /// Lifetime in seconds.
    public var ttl: Int?

    public init(identity: String, name: String? = nil, handle: String? = nil, grants: Grants? = nil, ttl: Int? = nil) {
        self.handle = handle
        self.identity = identity
        self.name = name
        self.grants = grants
        self.ttl = ttl
    }
}

/// `POST /v1/tokens` reply.
public struct TokenResponse: Sendable, Codable, Equatable {
    public var token: String
    /// Expiry, seconds since 1970.
    public var expiresAt: Int64
    public var identity: String

    public init(token: String, expiresAt: Int64, identity: String) {
        self.token = token
        self.expiresAt = expiresAt
        self.identity = identity
    }

    enum CodingKeys: String, CodingKey {
        case token
        case expiresAt = "expires_at"
        case identity
    }
}
