/// Wire types of rooms and signaling (SkyWay-style mesh). See docs/protocol.md, "Rooms".

/// A peer as others see it.
public struct PeerDescription: Sendable, Codable, Equatable {
    public var peerID: String
    public var identity: String
    public var name: String?
    public var metadata: JSONValue?

    public init(peerID: String, identity: String, name: String? = nil, metadata: JSONValue? = nil) {
        self.peerID = peerID
        self.identity = identity
        self.name = name
        self.metadata = metadata
    }

    enum CodingKeys: String, CodingKey {
        case peerID = "peer_id"
        case identity, name, metadata
    }
}

/// An ICE server for `RTCPeerConnection`'s configuration.
public struct ICEServer: Sendable, Codable, Equatable {
    public var urls: [String]
    public var username: String?
    public var credential: String?

    public init(urls: [String], username: String? = nil, credential: String? = nil) {
        self.urls = urls
        self.username = username
        self.credential = credential
    }
}

/// `GET /v1/turn` reply.
public struct TurnCredentials: Sendable, Codable, Equatable {
    public var iceServers: [ICEServer]
    /// Lifetime of the credentials, seconds.
    public var ttl: Int
    /// Expiry, seconds since 1970.
    public var expiresAt: Int64

    public init(iceServers: [ICEServer], ttl: Int, expiresAt: Int64) {
        self.iceServers = iceServers
        self.ttl = ttl
        self.expiresAt = expiresAt
    }

    enum CodingKeys: String, CodingKey {
        case iceServers = "ice_servers"
        case ttl
        case expiresAt = "expires_at"
    }
}

/// `room.join` request data.
public struct RoomJoinRequest: Sendable, Codable, Equatable {
    public var room: String
    public var metadata: JSONValue?

    public init(room: String, metadata: JSONValue? = nil) {
        self.room = room
        self.metadata = metadata
    }
}

/// `room.join` reply data.
public struct RoomJoined: Sendable, Codable, Equatable {
    public var room: String
    public var peerID: String
    /// The peers already in the room.
    public var peers: [PeerDescription]
    public var metadata: JSONValue?
    public var iceServers: [ICEServer]

    public init(room: String, peerID: String, peers: [PeerDescription], metadata: JSONValue?, iceServers: [ICEServer]) {
        self.room = room
        self.peerID = peerID
        self.peers = peers
        self.metadata = metadata
        self.iceServers = iceServers
    }

    enum CodingKeys: String, CodingKey {
        case room
        case peerID = "peer_id"
        case peers, metadata
        case iceServers = "ice_servers"
    }
}

/// `room.leave` request data.
public struct RoomLeaveRequest: Sendable, Codable, Equatable {
    public var room: String
    public init(room: String) { self.room = room }
}

/// `room.set_metadata` request data (admin grant).
public struct RoomMetadataRequest: Sendable, Codable, Equatable {
    public var room: String
    public var metadata: JSONValue
    public init(room: String, metadata: JSONValue) {
        self.room = room
        self.metadata = metadata
    }
}

/// `signal` request data: relayed to one peer of a room the sender is in.
public struct SignalRequest: Sendable, Codable, Equatable {
    public var room: String
    public var to: String
    /// `{"type": "offer", "sdp": ...}`, `{"type": "candidate", ...}`, `{"type": "bye"}`, or any JSON.
    public var signal: JSONValue

    public init(room: String, to: String, signal: JSONValue) {
        self.room = room
        self.to = to
        self.signal = signal
    }
}

/// `data` request data: to one peer (`to`) or, without `to`, to every other peer of the room.
public struct DataRequest: Sendable, Codable, Equatable {
    public var room: String
    public var to: String?
    public var data: JSONValue

    public init(room: String, to: String? = nil, data: JSONValue) {
        self.room = room
        self.to = to
        self.data = data
    }
}

/// Why a peer left a room.
public enum PeerLeftReason: String, Sendable, Codable {
    /// It sent `room.leave` or closed its connection cleanly.
    case left
    /// Its connection dropped and it did not come back within the resume grace period.
    case disconnected
    /// An admin removed it.
    case kicked
}

/// Why a room closed for the peers in it.
public enum RoomClosedReason: String, Sendable, Codable {
    /// An admin deleted the room.
    case deleted
    /// This peer was removed from the room by an admin.
    case kicked
    /// The room was a call's room and the call ended.
    case callEnded = "call_ended"
    /// The node that ran the room stopped (several nodes): join again, and the room is made
    /// again on a node that runs.
    case nodeLost = "node_lost"
}

/// A room event sent to a peer. Each case is one `type` on the wire.
public enum RoomEvent: Sendable, Equatable {
    case peerJoined(room: String, peer: PeerDescription)
    case peerLeft(room: String, peerID: String, reason: PeerLeftReason)
    case closed(room: String, reason: RoomClosedReason)
    case metadata(room: String, metadata: JSONValue?)
    case signal(room: String, from: String, signal: JSONValue)
    /// `from` is nil for a message from the server (REST).
    case data(room: String, from: String?, data: JSONValue)

    /// The message `type`.
    public var type: String {
        switch self {
        case .peerJoined: "room.peer_joined"
        case .peerLeft: "room.peer_left"
        case .closed: "room.closed"
        case .metadata: "room.metadata"
        case .signal: "signal"
        case .data: "room.data"
        }
    }

    /// The message `data`.
    public var data: JSONValue {
        switch self {
        case .peerJoined(let room, let peer):
            var peerObject: [String: JSONValue] = ["peer_id": .string(peer.peerID), "identity": .string(peer.identity)]
            if let name = peer.name { peerObject["name"] = .string(name) }
            if let metadata = peer.metadata { peerObject["metadata"] = metadata }
            return ["room": .string(room), "peer": .object(peerObject)]
        case .peerLeft(let room, let peerID, let reason):
            return ["room": .string(room), "peer_id": .string(peerID), "reason": .string(reason.rawValue)]
        case .closed(let room, let reason):
            return ["room": .string(room), "reason": .string(reason.rawValue)]
        case .metadata(let room, let metadata):
            return ["room": .string(room), "metadata": metadata ?? .null]
        case .signal(let room, let from, let signal):
            return ["room": .string(room), "from": .string(from), "signal": signal]
        case .data(let room, let from, let data):
            return ["room": .string(room), "from": from.map(JSONValue.string) ?? .null, "data": data]
        }
    }
}

/// `POST /v1/rooms` body (all optional).
public struct CreateRoomRequest: Sendable, Codable, Equatable {
    /// A prefix for the generated name (admin credentials only; a token's room grant sets it otherwise).
    public var prefix: String?
    public var maxParticipants: Int?
    public var emptyTimeoutSeconds: Int?
    public var metadata: JSONValue?

    public init(prefix: String? = nil, maxParticipants: Int? = nil, emptyTimeoutSeconds: Int? = nil, metadata: JSONValue? = nil) {
        self.prefix = prefix
        self.maxParticipants = maxParticipants
        self.emptyTimeoutSeconds = emptyTimeoutSeconds
        self.metadata = metadata
    }

    enum CodingKeys: String, CodingKey {
        case prefix
        case maxParticipants = "max_participants"
        case emptyTimeoutSeconds = "empty_timeout_seconds"
        case metadata
    }
}

/// A room as the REST API shows it.
public struct RoomInfo: Sendable, Codable, Equatable {
    public var name: String
    /// Milliseconds since 1970.
    public var createdAt: Int64
    public var maxParticipants: Int
    public var emptyTimeoutSeconds: Int
    public var metadata: JSONValue?
    public var peers: [PeerDescription]

    public init(
        name: String, createdAt: Int64, maxParticipants: Int, emptyTimeoutSeconds: Int, metadata: JSONValue?,
        peers: [PeerDescription]
    ) {
        self.name = name
        self.createdAt = createdAt
        self.maxParticipants = maxParticipants
        self.emptyTimeoutSeconds = emptyTimeoutSeconds
        self.metadata = metadata
        self.peers = peers
    }

    enum CodingKeys: String, CodingKey {
        case name
        case createdAt = "created_at"
        case maxParticipants = "max_participants"
        case emptyTimeoutSeconds = "empty_timeout_seconds"
        case metadata, peers
    }
}

/// `POST /v1/rooms/{name}/data` body.
public struct RoomDataRequest: Sendable, Codable, Equatable {
    /// A peer id; without it, every peer of the room.
    public var to: String?
    public var data: JSONValue

    public init(to: String? = nil, data: JSONValue) {
        self.to = to
        self.data = data
    }
}
