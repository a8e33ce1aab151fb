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
    /// The token to resume with from now on, when it changed (the session moved to another
    /// node of a cluster); absent: the same as before.
    public var resumeToken: String?

    public init(peerID: String, replayFrom: UInt64, replayCount: Int, resumeToken: String? = nil) {
        self.peerID = peerID
        self.replayFrom = replayFrom
        self.replayCount = replayCount
        self.resumeToken = resumeToken
    }

    enum CodingKeys: String, CodingKey {
        case peerID = "peer_id"
        case replayFrom = "replay_from"
        case replayCount = "replay_count"
        case resumeToken = "resume_token"
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

/// `session.expiring` data: the session's access token expires at `expires_at` (seconds since
/// 1970); the connection closes with 4003 at `closes_at` (milliseconds, the token leeway later)
/// unless a `session.refresh` with a fresh token of the same identity comes first.
public struct SessionExpiring: Sendable, Codable, Equatable {
    public var expiresAt: Int64
    public var closesAt: Int64

    public init(expiresAt: Int64, closesAt: Int64) {
        self.expiresAt = expiresAt
        self.closesAt = closesAt
    }

    enum CodingKeys: String, CodingKey {
        case expiresAt = "expires_at"
        case closesAt = "closes_at"
    }
}

/// `session.refresh` data: a fresh access token for the open session.
public struct SessionRefresh: Sendable, Codable, Equatable {
    public var accessToken: String

    public init(accessToken: String) { self.accessToken = accessToken }

    enum CodingKeys: String, CodingKey { case accessToken = "access_token" }
}

/// WebSocket close codes the server sends besides RFC 6455's.
public enum CloseCode {
    /// The connection broke a limit it cannot be answered for with an error reply: connects
    /// past the cluster's `connects_per_identity_per_minute`, more than `message_burst`
    /// messages before its session opened (the send queue's 1008 comes from the transport).
    public static let policyViolation: UInt16 = 1008
    /// The client's own close code for a connection it found dead (the SDK).
    public static let clientDropped: UInt16 = 4000
    /// A resumed connection took the session over: this older connection is closed.
    public static let replaced: UInt16 = 4001
    /// The server is going away for a while (a node of a cluster draining): reconnect at once
    /// and resume; the load balancer sends the connection to another node.
    public static let serviceRestart: UInt16 = 1012
    /// The session's access token expired (or the app secret that signed it is no longer
    /// accepted): reconnect with a fresh token; the session may be resumed within its grace.
    public static let tokenExpired: UInt16 = 4003
}
