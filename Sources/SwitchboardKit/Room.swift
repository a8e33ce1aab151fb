import Foundation
import SwitchboardProtocol
import SwitchboardSupport

extension Room {
    /// What happens in a room (the wire's `room.*` events, as the SDK hands them to the app).
    public enum Event: Sendable, Equatable {
        case peerJoined(PeerDescription)
        case peerLeft(peerID: String, reason: PeerLeftReason)
        /// A WebRTC offer, answer, candidate or any JSON from one peer, for the app's WebRTC engine.
        case signal(from: String, payload: JSONValue)
        /// A data message; `from` is nil when the server sent it.
        case data(from: String?, payload: JSONValue)
        case metadata(JSONValue?)
        case closed(reason: RoomClosedReason)
    }
}

/// The media side the app brings (its WebRTC engine): the SDK hands it signals and peers; it
/// hands back offers, answers and candidates through `Room.signal(to:_:)`.
public protocol MediaEngine: AnyObject, Sendable {
    func room(_ room: Room, peerJoined peer: PeerDescription)
    func room(_ room: Room, peerLeft peerID: String)
    func room(_ room: Room, didReceiveSignal payload: JSONValue, from peerID: String)
}

/// A joined room (SkyWay-style mesh): peers, events, signals and data.
///
/// ```swift
/// let room = try await Room.join("lobby", client: client)
/// for peer in room.peers { try await room.signal(to: peer.peerID, ["type": "offer", "sdp": .string(sdp)]) }
/// for await event in room.events { … }
/// ```
public final class Room: Sendable {
    /// The room's name.
    public let name: String
    /// The connection to the server.
    public let client: SwitchboardClient
    /// ICE servers for this user (STUN, and TURN with time-limited credentials).
    public let iceServers: [ICEServer]
    /// The room's events, in order.
    public let events: AsyncStream<Event>
    private let state: Locked<[String: PeerDescription]>
    private let follower = Locked<Task<Void, Never>?>(nil)

    /// `updates`: the client's events, subscribed to before the join was sent, so that what
    /// arrives right behind the join's reply (a signal from a peer that saw this one join) is
    /// not missed; the media engine is attached before the first of them is read.
    private init(name: String, client: SwitchboardClient, joined: RoomJoined, updates: AsyncStream<ClientEvent>, media: (any MediaEngine)?) {
        self.name = name
        self.client = client
        iceServers = joined.iceServers
        state = Locked(Dictionary(uniqueKeysWithValues: joined.peers.map { ($0.peerID, $0) }))
        let (stream, sink) = AsyncStream.makeStream(of: Event.self)
        events = stream
        let peers = Peers(room: self, media: media)
        let task = Task {
            for await event in updates {
                guard case .event(let type, let data, _) = event, data["room"]?.stringValue == name else { continue }
                switch type {
                case "room.peer_joined":
                    if let peer = try? JSONDecoder().decode(PeerDescription.self, from: JSONEncoder().encode(data["peer"])) {
                        peers.joined(peer)
                        sink.yield(.peerJoined(peer))
                    }
                case "room.peer_left":
                    let peerID = data["peer_id"]?.stringValue ?? ""
                    peers.left(peerID)
                    sink.yield(.peerLeft(peerID: peerID, reason: PeerLeftReason(rawValue: data["reason"]?.stringValue ?? "") ?? .left))
                case "signal":
                    let from = data["from"]?.stringValue ?? ""
                    peers.signal(data["signal"] ?? .null, from: from)
                    sink.yield(.signal(from: from, payload: data["signal"] ?? .null))
                case "room.data":
                    sink.yield(.data(from: data["from"]?.stringValue, payload: data["data"] ?? .null))
                case "room.metadata":
                    sink.yield(.metadata(data["metadata"]))
                case "room.closed":
                    sink.yield(.closed(reason: RoomClosedReason(rawValue: data["reason"]?.stringValue ?? "") ?? .deleted))
                    sink.finish()
                    return
                default:
                    continue
                }
            }
        }
        follower.withLock { $0 = task }
    }

    /// Joins `name` (creating it if needed) and returns the room with the peers already there.
    /// By convention the newcomer sends offers to each of them.
    public static func join(_ name: String, metadata: JSONValue? = nil, client: SwitchboardClient, media: (any MediaEngine)? = nil) async throws -> Room {
        let updates = client.events()
        let reply = try await client.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: name, metadata: metadata))
        let joined = try JSONDecoder().decode(RoomJoined.self, from: JSONEncoder().encode(reply))
        return Room(name: name, client: client, joined: joined, updates: updates, media: media)
    }

    /// The peers in the room now (besides this one).
    public var peers: [PeerDescription] { state.withLock { Array($0.values) } }

    /// Sends a WebRTC signal (or any JSON) to one peer.
    public func signal(to peerID: String, _ payload: JSONValue) async throws {
        try await client.request(MessageType.signal, encoding: SignalRequest(room: name, to: peerID, signal: payload))
    }

    /// Sends data to one peer, or to every other peer when `to` is nil.
    public func send(_ payload: JSONValue, to peerID: String? = nil) async throws {
        try await client.request(MessageType.data, encoding: DataRequest(room: name, to: peerID, data: payload))
    }

    /// Leaves the room.
    public func leave() async throws {
        follower.withLock { $0?.cancel() }
        try await client.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: name))
    }

    /// Keeps the peer list and tells the media engine.
    private final class Peers: @unchecked Sendable {
        // Safety: set once, in init, before the follower reads them (`weak let` needs Swift 6.2).
        private(set) weak var room: Room?
        private(set) weak var media: (any MediaEngine)?

        init(room: Room, media: (any MediaEngine)?) {
            self.room = room
            self.media = media
        }

        func joined(_ peer: PeerDescription) {
            guard let room else { return }
            room.state.withLock { $0[peer.peerID] = peer }
            media?.room(room, peerJoined: peer)
        }

        func signal(_ payload: JSONValue, from peerID: String) {
            guard let room else { return }
            media?.room(room, didReceiveSignal: payload, from: peerID)
        }

        func left(_ peerID: String) {
            guard let room else { return }
            _ = room.state.withLock { $0.removeValue(forKey: peerID) }
            media?.room(room, peerLeft: peerID)
        }
    }
}
