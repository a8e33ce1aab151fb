import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore

extension Hub {
    // MARK: Requests

    /// Who asks to join a room, as the node running the room needs it (the session may be on
    /// another node).
    struct Joiner {
        var peer: PeerDescription
        var appID: String
        var device: String
        var callGrant: Bool
    }

    /// `room.join`: an ordinary room the token grants, or a call's room on the device that
    /// took the call (`admitToCallRoom`). What the session's token allows is checked here;
    /// the room's own rules where the room runs: here, or in a cluster on the node that runs
    /// it (`joinElsewhere`).
    func join(_ request: RoomJoinRequest, session: Session, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) throws(ErrorBody) -> Outcome {
        try Self.validateRoomName(request.room)
        let key = RoomKey(appID: session.app.id, name: request.room)
        if !Self.isCallRoomName(request.room) && !session.claims.grants.allowsJoining(room: request.room) {
            throw ErrorBody(.forbidden, "your token does not grant joining room '\(request.room)'")
        }
        if let metadata = request.metadata { try checkSize(metadata, what: "metadata") }
        let joining = session.joining.keys.filter { !session.rooms.contains($0) }
        if !session.rooms.contains(request.room) && session.joining[request.room] == nil
            && session.rooms.count + joining.count >= configuration.limits.maxRoomsPerPeer
        {
            throw ErrorBody(.rateLimited, "a peer may be in at most \(configuration.limits.maxRoomsPerPeer) rooms")
        }
        var peer = session.description
        peer.metadata = request.metadata
        let joiner = Joiner(peer: peer, appID: session.app.id, device: session.deviceKey, callGrant: session.claims.grants.call == true)
        guard cluster == nil || rooms.room(key) != nil || (Self.isCallRoomName(request.room) && callRooms[key] != nil) else {
            joinElsewhere(key, joiner, session: session, answer: answer)
            return .later
        }
        let joined = try joinHere(key, joiner)
        session.rooms.insert(request.room)
        return Outcome(reply: joinedReply(joined.reply, identity: session.identity), effects: joined.effects)
    }

    /// The room's part of a join, where the room runs: a call's room admits whom its call
    /// does; an ordinary one made now counts against its creator's allowance.
    func joinHere(_ key: RoomKey, _ joiner: Joiner) throws(ErrorBody) -> (reply: RoomJoined, effects: [RoomDirectory.Effect]) {
        if Self.isCallRoomName(key.name) {
            try admitToCallRoom(key, joiner)
        } else if rooms.room(key) == nil {
            try admitRoomCreation(appID: key.appID, identity: joiner.peer.identity)
        }
        let joined: (room: RoomDirectory.Room, others: [PeerDescription], effects: [RoomDirectory.Effect])
        do { joined = try rooms.join(key, peer: joiner.peer, now: now, wallMillis: wallMillis) } catch { throw error.body }
        metrics.increment("switchboard_room_joins_total")
        logger.info("joined room", ["peer": joiner.peer.peerID, "room": key.name, "peers": String(joined.room.members.count)])
        let reply = RoomJoined(room: key.name, peerID: joiner.peer.peerID, peers: joined.others, metadata: joined.room.metadata, iceServers: [])
        return (reply, joined.effects)
    }

    /// The join's reply as the joining session gets it: with its TURN credentials.
    func joinedReply(_ joined: RoomJoined, identity: String) -> JSONValue {
        var reply = joined
        reply.iceServers = turn.credentials(for: identity).iceServers
        return jsonValue(reply)
    }

    /// `room.leave`.
    func leave(_ request: RoomLeaveRequest, session: Session) throws(ErrorBody) -> Outcome {
        let key = RoomKey(appID: session.app.id, name: request.room)
        if rooms.room(key) == nil, let home = roomHomes[key] {
            guard session.rooms.remove(request.room) != nil else { throw RoomError.notInRoom(request.room).body }
            leaveElsewhere(key, home: home, peerID: session.peerID, reason: .left)
            return Outcome()
        }
        let effects: [RoomDirectory.Effect]
        do {
            effects = try rooms.leave(RoomKey(appID: session.app.id, name: request.room), peerID: session.peerID, reason: .left)
        } catch { throw error == .notFound(request.room) ? RoomError.notInRoom(request.room).body : error.body }
        session.rooms.remove(request.room)
        return Outcome(reply: nil, effects: effects)
    }

    /// `signal` that the relay's reader did not take (`relay` is the usual path): the fields
    /// from the message already parsed.
    func signal(_ object: [String: JSONValue], from session: Session) throws(ErrorBody) -> Outcome {
        guard case .object(let data)? = object["data"], let room = data["room"]?.stringValue, let to = data["to"]?.stringValue,
            let signal = data["signal"]
        else { throw ErrorBody(.badRequest, "invalid data: signal needs room, to and signal") }
        metrics.signals.increment()
        let key = RoomKey(appID: session.app.id, name: room)
        if rooms.room(key) == nil, let home = roomHomes[key], session.rooms.contains(room) {
            passOnSignal(key, home: home, from: session.peerID, to: to, signal: JSONText.serialize(signal)[...])
            return Outcome()
        }
        return try Outcome(roomEffects: rooms.signal(key, from: session.peerID, to: to, signal: signal))
    }

    /// `data`: to one member of the room, or to all. In a room another node runs, answered
    /// once that node took it (a recipient not in the room is refused there, as here).
    func data(_ object: [String: JSONValue], from session: Session, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) throws(ErrorBody) -> Outcome {
        guard case .object(let fields)? = object["data"], let room = fields["room"]?.stringValue, let payload = fields["data"] else {
            throw ErrorBody(.badRequest, "invalid data: data needs room and data")
        }
        if let to = fields["to"], to != .null, to.stringValue == nil { throw ErrorBody(.badRequest, "invalid data: to is a peer id") }
        try checkSize(payload, what: "data")
        let key = RoomKey(appID: session.app.id, name: room)
        if rooms.room(key) == nil, let home = roomHomes[key], session.rooms.contains(room) {
            passOnData(key, home: home, from: session.peerID, to: fields["to"]?.stringValue, data: payload, answer: answer)
            return .later
        }
        return try Outcome(roomEffects: rooms.data(key, from: session.peerID, to: fields["to"]?.stringValue, data: payload))
    }

    /// `room.set_metadata`, with the admin grant; never on a call's room.
    func setMetadata(
        _ request: RoomMetadataRequest, session: Session, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) throws(ErrorBody) -> Outcome {
        guard session.claims.grants.admin == true else {
            throw ErrorBody(.forbidden, "setting room metadata needs the admin grant")
        }
        guard !Self.isCallRoomName(request.room) else { throw Self.callRoomRefusal(request.room) }
        try checkSize(request.metadata, what: "metadata")
        let key = RoomKey(appID: session.app.id, name: request.room)
        if let cluster, rooms.room(key) == nil {
            // Where the room runs: known when a session here is in it, else asked of Redis
            // (an admin need not be a member).
            if let home = roomHomes[key] {
                setMetadataElsewhere(key, home: home, metadata: request.metadata, answer: answer)
                return .later
            }
            cluster.locateRoom(appID: key.appID, name: key.name, callID: nil, claim: false, nowMillis: wallMillis) { [weak self] home in
                guard let self else { return }
                if let home, home != cluster.nodeID {
                    setMetadataElsewhere(key, home: home, metadata: request.metadata, answer: answer)
                } else if home == nil && !cluster.isConnected {
                    answer(.failure(ErrorBody(.unavailable, "the cluster cannot say where room '\(key.name)' runs; retry in a second")))
                } else {
                    setMetadataHere(key, request.metadata, answer: answer)
                }
            }
            return .later
        }
        return try Outcome(roomEffects: rooms.setMetadata(key, request.metadata))
    }

    /// The relay's hot path: a signal from one room member to another, its payload spliced
    /// from the bytes it arrived in. The same checks, replies and errors as any request.
    func relay(_ request: SignalRequestBytes, from session: Session) {
        guard MessageCodec.isUsableID(request.id) else {
            reply(.error(id: nil, MessageCodec.missingID), to: session)
            return
        }
        guard session.rate.take(now: now) else {
            reply(.error(id: request.id, rateLimited), to: session)
            return
        }
        metrics.signals.increment()
        let key = RoomKey(appID: session.app.id, name: request.room)
        if rooms.room(key) == nil, let home = roomHomes[key], session.rooms.contains(request.room) {
            // The room runs on another node, which checks the recipient and delivers.
            reply(.ok(id: request.id, data: nil), to: session)
            passOnSignal(key, home: home, from: session.peerID, to: request.to, signal: request.signal)
            return
        }
        let recipient: String
        do {
            recipient = try rooms.signalRecipient(key, from: session.peerID, to: request.to)
        } catch {
            reply(.error(id: request.id, error.body), to: session)
            return
        }
        // The signal first: frames leave in the order they were queued, and the recipient
        // waits for it, the sender for nothing but its `ok`.
        deliverSignal(room: request.room, from: session.peerID, to: recipient, signal: request.signal)
        reply(.ok(id: request.id, data: nil), to: session)
    }

    /// Delivers a signal's bytes, spliced into the event as they came.
    func deliverSignal(room: String, from: String, to recipient: String, signal: ArraySlice<UInt8>) {
        var data: [UInt8] = []
        data.reserveCapacity(signal.count + room.utf8.count + from.utf8.count + 32)
        data.append(contentsOf: #"{"room":"#.utf8)
        JSONText.appendQuoted(room, to: &data)
        data.append(contentsOf: #","from":"#.utf8)
        JSONText.appendQuoted(from, to: &data)
        data.append(contentsOf: #","signal":"#.utf8)
        data.append(contentsOf: signal)
        data.append(0x7D)
        delivery.deliver(OutgoingEvent(type: MessageType.signal, data: .encoded(data)), toPeer: recipient)
    }

    /// Counts an ordinary room `identity` creates against `rooms_per_identity_per_minute`; past
    /// it the creation is refused with `rate_limited`.
    func admitRoomCreation(appID: String, identity: String) throws(ErrorBody) {
        if let wait = roomCreations.admit(Self.userKey(appID, identity), now: now) {
            throw ErrorBody(.rateLimited, "too many new rooms (rooms_per_identity_per_minute); retry in \(wait) s")
        }
    }

    // MARK: Admin (REST)

    /// Makes a room here; in a cluster, once Redis has counted it for the app across the nodes
    /// (`max_rooms_per_app`) and made it this node's.
    func createRoom(app: App, name: String, request: CreateRoomRequest, answer: @escaping (Result<RoomInfo, ErrorBody>) -> Void) {
        func createHere() -> Result<RoomInfo, ErrorBody> {
            do throws(ErrorBody) { return .success(try createRoomHere(app: app, name: name, request: request)) } catch { return .failure(error) }
        }
        guard let cluster else { return answer(createHere()) }
        if clusterDraining { return answer(.failure(Self.nodeDraining)) }
        cluster.claimRoom(appID: app.id, name: name, nowMillis: wallMillis) { home in
            switch home {
            case nil: answer(.failure(ErrorBody(.unavailable, "the cluster cannot count the app's rooms; retry in a second")))
            case Cluster.appFull?: answer(.failure(RoomError.tooManyRooms(limit: cluster.maxRoomsPerApp).body))
            case cluster.nodeID?:
                let created = createHere()
                if case .failure = created { self.releaseUnusedClaim(RoomKey(appID: app.id, name: name)) }
                answer(created)
            case _?: answer(.failure(ErrorBody(.conflict, "room '\(name)' exists")))
            }
        }
    }

    /// Makes a room on this node (what `createRoom` does once the cluster, if any, agreed).
    func createRoomHere(app: App, name: String, request: CreateRoomRequest) throws(ErrorBody) -> RoomInfo {
        let key = RoomKey(appID: app.id, name: name)
        let timeout = request.emptyTimeoutSeconds.map { Duration.seconds($0) }
        do {
            let effects = try rooms.create(
                key, maxParticipants: request.maxParticipants, emptyTimeout: timeout, metadata: request.metadata, now: now,
                wallMillis: wallMillis)
            apply(effects)
        } catch { throw error.body }
        logger.info("room created", ["app": app.id, "room": name])
        // In a cluster the room runs here: joins through other nodes come to it.
        cluster?.holdRoom(appID: app.id, name: name)
        return info(rooms.room(key)!)
    }

    func listRooms(appID: String) -> [RoomInfo] {
        rooms.rooms(ofApp: appID).map(info)
    }

    func room(appID: String, name: String) throws(ErrorBody) -> RoomInfo {
        guard let room = rooms.room(RoomKey(appID: appID, name: name)) else { throw RoomError.notFound(name).body }
        return info(room)
    }

    func deleteRoom(appID: String, name: String) throws(ErrorBody) {
        do { try closeRoom(RoomKey(appID: appID, name: name), reason: .deleted) } catch { throw error.body }
        logger.info("room deleted", ["app": appID, "room": name])
    }

    /// Closes a room: every member gets `room.closed` with `reason` and is no longer in it.
    func closeRoom(_ key: RoomKey, reason: RoomClosedReason) throws(RoomError) {
        let result = try rooms.delete(key, reason: reason)
        for peerID in result.members {
            sessions.session(peerID: peerID)?.rooms.remove(key.name)
        }
        apply(result.effects)
        if cluster != nil { roomClosedHere(key, members: result.members) }
    }

    func kick(appID: String, room name: String, peerID: String) throws(ErrorBody) {
        let key = RoomKey(appID: appID, name: name)
        guard rooms.room(key) != nil else { throw RoomError.notFound(name).body }
        let effects: [RoomDirectory.Effect]
        do { effects = try rooms.leave(key, peerID: peerID, reason: .kicked) } catch {
            throw RoomError.peerNotInRoom(peer: peerID, room: name).body
        }
        sessions.session(peerID: peerID)?.rooms.remove(name)
        apply(effects)
        forgetRemoteMemberIfInNoRoom(peerID, appID: appID)
    }

    func sendData(appID: String, room name: String, request: RoomDataRequest) throws(ErrorBody) {
        try FieldLimits.check(request.to, field: "to", limit: FieldLimits.peerID)
        try checkSize(request.data, what: "data")
        do { apply(try rooms.data(RoomKey(appID: appID, name: name), from: nil, to: request.to, data: request.data)) } catch {
            throw error.body
        }
    }

    private func info(_ room: RoomDirectory.Room) -> RoomInfo {
        RoomInfo(
            name: room.key.name, createdAt: room.createdAtWallMillis, maxParticipants: room.maxParticipants,
            emptyTimeoutSeconds: Int(room.emptyTimeout.components.seconds), metadata: room.metadata, peers: room.members)
    }

    // MARK: Effects

    func apply(_ effects: [RoomDirectory.Effect]) {
        for effect in effects {
            switch effect {
            case .send(let event, let peerID):
                delivery.deliver(OutgoingEvent(event), toPeer: peerID)
            case .armEmptyTimer(let key, let after):
                if let old = emptyTimers[key] { scheduler?.cancel(old) }
                emptyTimers[key] = scheduler?.schedule(after: after) { [weak self] in
                    guard let self else { return }
                    self.emptyTimers.removeValue(forKey: key)
                    if self.rooms.closeIfEmpty(key) {
                        self.metrics.increment("switchboard_rooms_closed_total", ["reason": "empty"])
                        self.logger.info("empty room closed", ["app": key.appID, "room": key.name])
                        // In a cluster it stops counting against the app's rooms, and its key goes.
                        if self.cluster != nil && !Self.isCallRoomName(key.name) { self.roomClosedHere(key, members: []) }
                    }
                }
            case .disarmEmptyTimer(let key):
                if let timer = emptyTimers.removeValue(forKey: key) { scheduler?.cancel(timer) }
            }
        }
        metrics.set("switchboard_rooms", to: Double(rooms.rooms.count))
    }

    // MARK: Rules

    func checkSize(_ value: JSONValue, what: String) throws(ErrorBody) {
        try Self.checkSize(value, what: what, limit: configuration.limits.maxDataBytes)
    }

    static func checkSize(_ value: JSONValue, what: String, limit: Int) throws(ErrorBody) {
        let size = JSONText.serialize(value).count
        guard size <= limit else {
            throw ErrorBody(.payloadTooLarge, "\(what) is \(size) bytes; the limit is \(limit)")
        }
    }

    /// Whether `name` is under the prefix reserved for calls' rooms (`call-`, in any case):
    /// such a room is never an ordinary room, whatever a token's room grant says.
    static func isCallRoomName(_ name: String) -> Bool {
        name.utf8.count >= 5 && name.prefix(5).lowercased() == "call-"
    }

    /// The refusal for anyone a call's room does not admit. The same words whether or not the
    /// call exists, so that a refusal tells a stranger nothing about it.
    static func callRoomRefusal(_ name: String) -> ErrorBody {
        ErrorBody(.forbidden, "room '\(name)' belongs to a call: only the call's participants, on the device that took the call, may use it")
    }

    /// Room names: 1 to 128 characters of letters, digits and `-_.:@`.
    static func validateRoomName(_ name: String) throws(ErrorBody) {
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2D || byte == 0x5F || byte == 0x2E || byte == 0x3A || byte == 0x40
        }
        guard !name.isEmpty, name.utf8.count <= 128, allowed else {
            throw ErrorBody(.badRequest, "a room name is 1 to 128 letters, digits or -_.:@")
        }
    }
}

extension Hub.Outcome {
    /// The effects of a room operation, its refusal as the error the client gets.
    init(roomEffects effects: @autoclosure () throws(RoomError) -> [RoomDirectory.Effect]) throws(ErrorBody) {
        do { self.init(effects: try effects()) } catch { throw error.body }
    }
}
