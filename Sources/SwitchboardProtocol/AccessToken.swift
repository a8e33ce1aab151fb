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
    public var grants: Grants

    public init(iss: String, sub: String, iat: Int64? = nil, nbf: Int64? = nil, exp: Int64, name: String? = nil, grants: Grants = Grants()) {
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
    public var grants: Grants?
    /// Lifetime in seconds.
    public var ttl: Int?

    public init(identity: String, name: String? = nil, grants: Grants? = nil, ttl: Int? = nil) {
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

/// `session.welcome` data: the first message on a new session.
public struct SessionWelcome: Sendable, Codable, Equatable {
    /// The session id, which is also the peer id others see in rooms.
    public var peerID: String
    public var identity: String
    /// Present with `last_seq` when reconnecting (`/v1/ws?resume_token=...&last_seq=N`) to keep
    /// this session. A secret of this session: never log it.
    public var resumeToken: String
    /// Milliseconds since 1970.
    public var serverTime: Int64
    public var limits: SessionLimits
    /// Whether this connection asked to resume and could not (the session was gone): the client
    /// must rejoin its rooms.
    public var resumeFailed: Bool

    public init(peerID: String, identity: String, resumeToken: String, serverTime: Int64, limits: SessionLimits, resumeFailed: Bool = false) {
        self.peerID = peerID
        self.identity = identity
        self.resumeToken = resumeToken
        self.serverTime = serverTime
        self.limits = limits
        self.resumeFailed = resumeFailed
    }

    enum CodingKeys: String, CodingKey {
        case peerID = "peer_id"
        case identity
        case resumeToken = "resume_token"
        case serverTime = "server_time"
        case limits
        case resumeFailed = "resume_failed"
    }
}

/// `session.resumed` data: the first message on a resumed session. The events after the
/// client's `last_seq` follow, with their original `seq`, then new ones.
public struct SessionResumed: Sendable, Codable, Equatable {
    public var peerID: String
    /// The `seq` of the first replayed event (if any were missed).
    public var replayFrom: UInt64
    /// How many events are replayed.
    public var replayCount: Int

    public init(peerID: String, replayFrom: UInt64, replayCount: Int) {
        self.peerID = peerID
        self.replayFrom = replayFrom
        self.replayCount = replayCount
    }

    enum CodingKeys: String, CodingKey {
        case peerID = "peer_id"
        case replayFrom = "replay_from"
        case replayCount = "replay_count"
    }
}

/// The limits a client must respect, sent in `session.welcome`.
public struct SessionLimits: Sendable, Codable, Equatable {
    public var maxMessageBytes: Int
    public var maxDataBytes: Int
    public var messagesPerSecond: Int
    public var pingIntervalSeconds: Int
    public var idleTimeoutSeconds: Int
    public var resumeGraceSeconds: Int

    public init(
        maxMessageBytes: Int, maxDataBytes: Int, messagesPerSecond: Int, pingIntervalSeconds: Int,
        idleTimeoutSeconds: Int, resumeGraceSeconds: Int
    ) {
        self.maxMessageBytes = maxMessageBytes
        self.maxDataBytes = maxDataBytes
        self.messagesPerSecond = messagesPerSecond
        self.pingIntervalSeconds = pingIntervalSeconds
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.resumeGraceSeconds = resumeGraceSeconds
    }

    enum CodingKeys: String, CodingKey {
        case maxMessageBytes = "max_message_bytes"
        case maxDataBytes = "max_data_bytes"
        case messagesPerSecond = "messages_per_second"
        case pingIntervalSeconds = "ping_interval_seconds"
        case idleTimeoutSeconds = "idle_timeout_seconds"
        case resumeGraceSeconds = "resume_grace_seconds"
    }
}
