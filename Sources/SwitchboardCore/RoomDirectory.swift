import SwitchboardProtocol

/// A room's key: names are unique within an app.
package struct RoomKey: Hashable, Sendable, CustomStringConvertible {
    package var appID: String
    package var name: String
    package var description: String { "\(appID)/\(name)" }

    package init(appID: String, name: String) {
        self.appID = appID
        self.name = name
    }
}

/// Why a room operation was refused. Each maps to an error code.
package enum RoomError: Error, Equatable {
    case notFound(String)
    case full(String, limit: Int)
    case notInRoom(String)
    case peerNotInRoom(peer: String, room: String)
    case alreadyExists(String)
    case tooManyRooms(limit: Int)

    package var body: ErrorBody {
        switch self {
        case .notFound(let room): ErrorBody(.notFound, "no room named '\(room)'")
        case .full(let room, let limit): ErrorBody(.roomFull, "room '\(room)' is full (\(limit) participants)")
        case .notInRoom(let room): ErrorBody(.notInRoom, "you are not in room '\(room)'")
        case .peerNotInRoom(let peer, let room): ErrorBody(.notFound, "peer '\(peer)' is not in room '\(room)'")
        case .alreadyExists(let room): ErrorBody(.conflict, "room '\(room)' already exists")
        case .tooManyRooms(let limit): ErrorBody(.rateLimited, "the app already has \(limit) rooms")
        }
    }
}

/// Every room of every app, as a value: operations take the time and return the events to send
/// and the timers to set. No sockets, no clock reads.
package struct RoomDirectory {
    package struct Settings {
        package var maxParticipants = 8
        package var emptyTimeout = Duration.seconds(300)
        package var maxRoomsPerApp = 10_000

        package init(maxParticipants: Int = 8, emptyTimeout: Duration = .seconds(300), maxRoomsPerApp: Int = 10_000) {
            self.maxParticipants = maxParticipants
            self.emptyTimeout = emptyTimeout
            self.maxRoomsPerApp = maxRoomsPerApp
        }
    }

    package struct Room {
        package var key: RoomKey
        package var createdAt: ContinuousClock.Instant
        package var createdAtWallMillis: Int64
        package var maxParticipants: Int
        package var emptyTimeout: Duration
        package var metadata: JSONValue?
        /// The call whose room this is (`call-<id>`): it lives as long as the call, with no
        /// empty timer, and admits only the call's participants (the hub checks).
        package var call: String?
        /// Members in join order.
        package var members: [PeerDescription] = []

        package func member(_ peerID: String) -> PeerDescription? { members.first { $0.peerID == peerID } }
    }

    /// What the caller must do after an operation.
    package enum Effect: Equatable {
        case send(RoomEvent, to: String)
        /// The room just became empty: close it after `after` unless someone joins.
        case armEmptyTimer(RoomKey, after: Duration)
        case disarmEmptyTimer(RoomKey)
    }

    package var settings: Settings
    package private(set) var rooms: [RoomKey: Room] = [:]
    private var roomsPerApp: [String: Int] = [:]

    package init(settings: Settings) {
        self.settings = settings
    }

    package func room(_ key: RoomKey) -> Room? { rooms[key] }

    package func rooms(ofApp appID: String) -> [Room] {
        rooms.values.filter { $0.key.appID == appID }.sorted { $0.createdAt < $1.createdAt }
    }

    /// Creates an empty room; its empty timer starts now (a call's room has none). A call's
    /// room never counts toward `maxRoomsPerApp`: ordinary rooms, however many, cannot keep
    /// a call from its media.
    package mutating func create(
        _ key: RoomKey, maxParticipants: Int? = nil, emptyTimeout: Duration? = nil, metadata: JSONValue? = nil,
        call: String? = nil, now: ContinuousClock.Instant, wallMillis: Int64
    ) throws(RoomError) -> [Effect] {
        guard rooms[key] == nil else { throw .alreadyExists(key.name) }
        guard call != nil || roomsPerApp[key.appID, default: 0] < settings.maxRoomsPerApp else {
            throw .tooManyRooms(limit: settings.maxRoomsPerApp)
        }
        let room = Room(
            key: key, createdAt: now, createdAtWallMillis: wallMillis,
            maxParticipants: maxParticipants ?? settings.maxParticipants,
            emptyTimeout: emptyTimeout ?? settings.emptyTimeout, metadata: metadata, call: call)
        rooms[key] = room
        if call == nil { roomsPerApp[key.appID, default: 0] += 1 }
        return call == nil ? [.armEmptyTimer(key, after: room.emptyTimeout)] : []
    }

    /// Adds `peer` to the room, creating it if needed. Returns the peers already there.
    package mutating func join(
        _ key: RoomKey, peer: PeerDescription, now: ContinuousClock.Instant, wallMillis: Int64
    ) throws(RoomError) -> (room: Room, others: [PeerDescription], effects: [Effect]) {
        var effects: [Effect] = []
        if rooms[key] == nil {
            _ = try create(key, now: now, wallMillis: wallMillis)
        }
        var room = rooms[key]!
        if let existing = room.member(peer.peerID) {
            // Joining twice is harmless: the same answer, no event.
            return (room, room.members.filter { $0.peerID != existing.peerID }, [])
        }
        guard room.members.count < room.maxParticipants else { throw .full(key.name, limit: room.maxParticipants) }
        let others = room.members
        if others.isEmpty && room.call == nil { effects.append(.disarmEmptyTimer(key)) }
        room.members.append(peer)
        rooms[key] = room
        for other in others {
            effects.append(.send(.peerJoined(room: key.name, peer: peer), to: other.peerID))
        }
        return (room, others, effects)
    }

    /// Removes a peer; the others hear why.
    package mutating func leave(_ key: RoomKey, peerID: String, reason: PeerLeftReason) throws(RoomError) -> [Effect] {
        guard var room = rooms[key] else { throw .notFound(key.name) }
        guard room.member(peerID) != nil else { throw .notInRoom(key.name) }
        room.members.removeAll { $0.peerID == peerID }
        rooms[key] = room
        var effects = room.members.map { Effect.send(.peerLeft(room: key.name, peerID: peerID, reason: reason), to: $0.peerID) }
        if reason == .kicked {
            effects.append(.send(.closed(room: key.name, reason: .kicked), to: peerID))
        }
        if room.members.isEmpty && room.call == nil { effects.append(.armEmptyTimer(key, after: room.emptyTimeout)) }
        return effects
    }

    /// Relays a signal from one member to another.
    package func signal(_ key: RoomKey, from: String, to: String, signal: JSONValue) throws(RoomError) -> [Effect] {
        [.send(.signal(room: key.name, from: from, signal: signal), to: try signalRecipient(key, from: from, to: to))]
    }

    /// Who a signal from `from` to `to` in the room goes to: `to`, when both are members. The
    /// relay's hot path asks this and sends the signal's bytes itself.
    package func signalRecipient(_ key: RoomKey, from: String, to: String) throws(RoomError) -> String {
        guard let room = rooms[key] else { throw .notInRoom(key.name) }
        guard room.member(from) != nil else { throw .notInRoom(key.name) }
        guard room.member(to) != nil, to != from else { throw .peerNotInRoom(peer: to, room: key.name) }
        return to
    }

    /// Sends data to one member or every other member. `from` nil is the server (REST).
    package func data(_ key: RoomKey, from: String?, to: String?, data: JSONValue) throws(RoomError) -> [Effect] {
        guard let room = rooms[key] else { throw from == nil ? .notFound(key.name) : .notInRoom(key.name) }
        if let from, room.member(from) == nil { throw .notInRoom(key.name) }
        let event = RoomEvent.data(room: key.name, from: from, data: data)
        if let to {
            guard room.member(to) != nil, to != from else { throw .peerNotInRoom(peer: to, room: key.name) }
            return [.send(event, to: to)]
        }
        return room.members.filter { $0.peerID != from }.map { .send(event, to: $0.peerID) }
    }

    /// Replaces the room's metadata; every member hears it.
    package mutating func setMetadata(_ key: RoomKey, _ metadata: JSONValue?) throws(RoomError) -> [Effect] {
        guard var room = rooms[key] else { throw .notFound(key.name) }
        room.metadata = metadata
        rooms[key] = room
        return room.members.map { .send(.metadata(room: key.name, metadata: metadata), to: $0.peerID) }
    }

    /// Deletes the room; every member gets `room.closed` with `reason`.
    package mutating func delete(_ key: RoomKey, reason: RoomClosedReason = .deleted) throws(RoomError) -> (members: [String], effects: [Effect]) {
        guard let room = rooms.removeValue(forKey: key) else { throw .notFound(key.name) }
        if room.call == nil { roomsPerApp[key.appID, default: 1] -= 1 }
        let members = room.members.map(\.peerID)
        let closed = members.map { Effect.send(.closed(room: key.name, reason: reason), to: $0) }
        return (members, closed + (room.call == nil ? [.disarmEmptyTimer(key)] : []))
    }

    /// The empty timer fired: removes the room if it is still empty. Returns whether it did.
    package mutating func closeIfEmpty(_ key: RoomKey) -> Bool {
        guard let room = rooms[key], room.members.isEmpty else { return false }
        rooms.removeValue(forKey: key)
        if room.call == nil { roomsPerApp[key.appID, default: 1] -= 1 }
        return true
    }
}
