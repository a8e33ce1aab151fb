import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardCore

extension Hub {
    // MARK: Rooms across nodes

    // A room runs on one node (its key in Redis, `sb:room:<app>:<name>`; a call's room runs
    // where its call does). Members whose sessions are on other nodes send their requests
    // there; their events come back to their node (`ClusterDelivery.deliver(_:toPeer:)`). One
    // node orders everything a room does, so every member sees its events in one order.

    /// A join for a room this node does not run: where does it run (made here when nowhere)?
    /// The session counts the join among its rooms until it is answered (`Session.joining`).
    func joinElsewhere(_ key: RoomKey, _ joiner: Joiner, session: Session, answer reply: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        guard let cluster else { return }
        let callID = Self.isCallRoomName(key.name) ? String(key.name.dropFirst(5)) : nil
        session.joining[key.name, default: 0] += 1
        let answer: (Result<JSONValue, ErrorBody>) -> Void = { [weak session] result in
            if let session, let count = session.joining[key.name] { session.joining[key.name] = count > 1 ? count - 1 : nil }
            reply(result)
        }
        cluster.locateRoom(appID: key.appID, name: key.name, callID: callID, nowMillis: wallMillis) { [weak self, weak session] home in
            guard let self else { return }
            guard let session, isLive(session) else {
                // Ended meanwhile: a room claimed for it is not made.
                if home == cluster.nodeID { releaseUnusedClaim(key) }
                return
            }
            switch home {
            case nil where callID != nil:
                answer(.failure(Self.callRoomRefusal(key.name)))
            case nil:
                answer(.failure(ErrorBody(.unavailable, "the cluster cannot say where room '\(key.name)' runs; retry in a second")))
            case Cluster.appFull?:
                answer(.failure(RoomError.tooManyRooms(limit: cluster.maxRoomsPerApp).body))
            case cluster.nodeID? where clusterDraining && rooms.room(key) == nil:
                // It would be made here, on a node about to go.
                cluster.releaseRoom(appID: key.appID, name: key.name)
                answer(.failure(Self.nodeDraining))
            case cluster.nodeID?:
                do throws(ErrorBody) {
                    let joined = try joinHere(key, joiner)
                    session.rooms.insert(key.name)
                    answer(.success(joinedReply(joined.reply, identity: session.identity)))
                    apply(joined.effects)
                } catch {
                    releaseUnusedClaim(key)
                    answer(.failure(error))
                }
            case let node?:
                let body: [String: JSONValue] = [
                    "app": .string(key.appID), "room": .string(key.name), "peer": jsonValue(joiner.peer), "device": .string(joiner.device),
                    "call_grant": .bool(joiner.callGrant),
                ]
                cluster.request("join", body, toNode: node) { [weak self, weak session] result in
                    guard let self else { return }
                    guard let session, isLive(session) else {
                        // It ended while its join was under way: the room's node would keep a
                        // member nobody takes out.
                        switch result {
                        case .success, .failure(Cluster.ownerGone): leaveElsewhere(key, home: node, peerID: joiner.peer.peerID, reason: .disconnected)
                        case .failure: break
                        }
                        return
                    }
                    switch result {
                    case .success(let value):
                        guard let joined = try? JSONValueDecoder().decode(RoomJoined.self, from: value) else {
                            return answer(.failure(ErrorBody(.internal, "the node running the room answered what is not a join")))
                        }
                        session.rooms.insert(key.name)
                        roomHomes[key] = node
                        answer(.success(joinedReply(joined, identity: session.identity)))
                    case .failure(let error):
                        // Unanswered in time, the join may still have been carried out there:
                        // it is taken back (after it, on the same connection).
                        if error == Cluster.ownerGone && !session.rooms.contains(key.name) && session.joining[key.name] == 1 {
                            leaveElsewhere(key, home: node, peerID: joiner.peer.peerID, reason: .disconnected)
                        }
                        answer(.failure(error == Cluster.ownerGone ? Self.roomNodeGone : error))
                    }
                }
            }
        }
    }

    /// A join another node passed on: the room runs here, or is made here now. An ordinary
    /// room not running here is claimed first (Redis named this node for it, but a previous
    /// process under its id may have left that key): it counts against `max_rooms_per_app`.
    func forwardedJoin(_ message: [String: JSONValue], answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        guard let from = message["from"]?.stringValue, let appID = message["app"]?.stringValue, let name = message["room"]?.stringValue,
            let peerValue = message["peer"], let peer = try? JSONValueDecoder().decode(PeerDescription.self, from: peerValue),
            let device = message["device"]?.stringValue
        else { return answer(.failure(ErrorBody(.badRequest, "a malformed join from another node"))) }
        let key = RoomKey(appID: appID, name: name)
        if let cluster, rooms.room(key) == nil, !Self.isCallRoomName(name), !clusterDraining, message["claimed"] != .bool(true) {
            cluster.claimRoom(appID: appID, name: name, nowMillis: wallMillis) { [weak self] home in
                guard let self else { return }
                switch home {
                case cluster.nodeID?:
                    // Past the time its sender gives up, it would join a member nobody answers
                    // for (and overtake the leave that sender sends then).
                    if let until = message["until"]?.intValue, wallMillis > until {
                        releaseUnusedClaim(key)
                        return answer(.failure(Cluster.ownerGone))
                    }
                    var claimed = message
                    claimed["claimed"] = true
                    forwardedJoin(claimed, answer: answer)
                case Cluster.appFull?: answer(.failure(RoomError.tooManyRooms(limit: cluster.maxRoomsPerApp).body))
                case nil: answer(.failure(ErrorBody(.unavailable, "the cluster cannot say where room '\(name)' runs; retry in a second")))
                default: answer(.failure(ErrorBody(.unavailable, "room '\(name)' is moving between nodes; retry in a second")))
                }
            }
            return
        }
        do throws(ErrorBody) {
            if clusterDraining && rooms.room(key) == nil { throw Self.nodeDraining }
            let joined = try joinHere(key, Joiner(peer: peer, appID: appID, device: device, callGrant: message["call_grant"] == .bool(true)))
            remoteMembers[peer.peerID] = from
            answer(.success(jsonValue(joined.reply)))
            apply(joined.effects)
        } catch {
            releaseUnusedClaim(key)
            answer(.failure(error))
        }
    }

    /// A join or a creation this node claimed an ordinary room for failed: the claim is given
    /// back unless the room runs here or another claim of it waits for Redis (a room claimed
    /// and never made would count against `max_rooms_per_app` while this node runs).
    func releaseUnusedClaim(_ key: RoomKey) {
        guard let cluster, rooms.room(key) == nil, !Self.isCallRoomName(key.name), !cluster.isBeingClaimed(appID: key.appID, name: key.name) else { return }
        cluster.releaseRoom(appID: key.appID, name: key.name)
    }

    /// A member here leaves a room another node runs.
    func leaveElsewhere(_ key: RoomKey, home: String, peerID: String, reason: PeerLeftReason) {
        tellLeft(peerID, key, reason: reason, toNode: home)
        forgetHomeIfUnused(key)
    }

    func forwardedLeave(_ message: [String: JSONValue]) {
        guard let appID = message["app"]?.stringValue, let name = message["room"]?.stringValue, let peerID = message["peer"]?.stringValue else { return }
        let reason = message["reason"]?.stringValue.flatMap(PeerLeftReason.init(rawValue:)) ?? .left
        if let effects = try? rooms.leave(RoomKey(appID: appID, name: name), peerID: peerID, reason: reason) { apply(effects) }
        forgetRemoteMemberIfInNoRoom(peerID, appID: appID)
    }

    /// A member on another node left a room here: its events stop going to its node once it is
    /// in none of this node's rooms (it may be in others here still).
    func forgetRemoteMemberIfInNoRoom(_ peerID: String, appID: String) {
        guard remoteMembers[peerID] != nil, !rooms.rooms.values.contains(where: { $0.key.appID == appID && $0.member(peerID) != nil }) else { return }
        remoteMembers.removeValue(forKey: peerID)
    }

    /// Stops routing to a room's node once no session here is in the room.
    func forgetHomeIfUnused(_ key: RoomKey) {
        let used = sessions.all.contains { $0.app.id == key.appID && $0.rooms.contains(key.name) }
        if !used { roomHomes.removeValue(forKey: key) }
    }

    func passOnSignal(_ key: RoomKey, home: String, from: String, to: String, signal: ArraySlice<UInt8>) {
        cluster?.tellSignal(appID: key.appID, room: key.name, from: from, to: to, signal: signal, toNode: home)
    }

    /// A signal from a member on another node: checked against the room here, delivered to its
    /// recipient wherever it is. A refused one is dropped (its sender had its answer already).
    /// `signal`: the payload's bytes as they came (`Cluster.splitSignal`).
    func forwardedSignal(appID: String, room: String, from: String, to: String, signal: ArraySlice<UInt8>) {
        guard let recipient = try? rooms.signalRecipient(RoomKey(appID: appID, name: room), from: from, to: to) else { return }
        deliverSignal(room: room, from: from, to: recipient, signal: signal)
    }

    func passOnData(
        _ key: RoomKey, home: String, from: String, to: String?, data: JSONValue, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        var body: [String: JSONValue] = ["app": .string(key.appID), "room": .string(key.name), "peer": .string(from), "data": data]
        if let to { body["to"] = .string(to) }
        cluster?.request("data", body, toNode: home, answer: Self.aboutARoom(answer))
    }

    static let roomNodeGone = ErrorBody(.unavailable, "the node running the room did not answer; retry in a few seconds")

    /// `answer`, saying "the room" where the node that did not answer was asked about one.
    static func aboutARoom(_ answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) -> (Result<JSONValue, ErrorBody>) -> Void {
        { result in
            if case .failure(Cluster.ownerGone) = result { answer(.failure(roomNodeGone)) } else { answer(result) }
        }
    }

    /// Data from a member on another node (a request; a node before 2026-12-07 told it
    /// without waiting for an answer, `answer` nil).
    func forwardedData(_ message: [String: JSONValue], answer: ((Result<JSONValue, ErrorBody>) -> Void)? = nil) {
        guard let appID = message["app"]?.stringValue, let room = message["room"]?.stringValue, let from = message["peer"]?.stringValue,
            let data = message["data"]
        else { return answer?(.failure(ErrorBody(.badRequest, "a malformed request from another node"))) ?? () }
        do throws(RoomError) {
            let effects = try rooms.data(RoomKey(appID: appID, name: room), from: from, to: message["to"]?.stringValue, data: data)
            answer?(.success(.null))
            apply(effects)
        } catch { answer?(.failure(error.body)) }
    }

    func setMetadataElsewhere(_ key: RoomKey, home: String, metadata: JSONValue?, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        cluster?.request(
            "meta", ["app": .string(key.appID), "room": .string(key.name), "metadata": metadata ?? .null], toNode: home, answer: Self.aboutARoom(answer))
    }

    func forwardedMetadata(_ message: [String: JSONValue], answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        guard let appID = message["app"]?.stringValue, let room = message["room"]?.stringValue else {
            return answer(.failure(ErrorBody(.badRequest, "a malformed request from another node")))
        }
        setMetadataHere(RoomKey(appID: appID, name: room), message["metadata"].flatMap { $0 == .null ? nil : $0 }, answer: answer)
    }

    /// Sets the metadata of a room this node runs, answering before its members hear it.
    func setMetadataHere(_ key: RoomKey, _ metadata: JSONValue?, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        do throws(ErrorBody) {
            let effects = try Outcome(roomEffects: rooms.setMetadata(key, metadata)).effects
            answer(.success(.null))
            apply(effects)
        } catch { answer(.failure(error)) }
    }

    /// An event for a session here, from the node running one of its rooms. One about a room
    /// the session is not in (nor joining), or from a node other than the one that runs the
    /// room for it, is not delivered, and the node it came from is told the session left:
    /// that node kept it as a member of a room this node had dropped (the node stalled past
    /// its lease, and its rooms were closed here and made again elsewhere meanwhile).
    func eventForPeer(_ message: [String: JSONValue]) {
        guard let peerID = message["peer"]?.stringValue, let type = message["type"]?.stringValue else { return }
        if let name = message["data"]?["room"]?.stringValue, let session = session(peerID: peerID) {
            let key = RoomKey(appID: session.app.id, name: name)
            let from = message["from"]?.stringValue
            let home = rooms.room(key) != nil ? cluster?.nodeID : roomHomes[key]
            let stale = session.rooms.contains(name) ? (from != nil && home != nil && from != home) : session.joining[name] == nil
            if stale {
                if let from, type != "room.closed" { tellLeft(peerID, key, reason: .disconnected, toNode: from) }
                return
            }
            if type == "room.closed" {
                session.rooms.remove(name)
                forgetHomeIfUnused(key)
            }
        }
        localDelivery.deliver(OutgoingEvent(type: type, data: .value(message["data"] ?? .null)), toPeer: peerID)
    }

    /// Tells the node running room `key` that member `peerID` of this node is no longer in it.
    func tellLeft(_ peerID: String, _ key: RoomKey, reason: PeerLeftReason, toNode node: String) {
        cluster?.tell("leave", ["app": .string(key.appID), "room": .string(key.name), "peer": .string(peerID), "reason": .string(reason.rawValue)], toNode: node)
    }

    /// Writes again what Redis knows of the ordinary rooms this node runs: the names it counts
    /// for their apps, and their keys (those another node took meanwhile stay its).
    /// `closingThoseTakenElsewhere`: after this node could not reach Redis, or its lease ran out
    /// (another node may have made a room of the same name meanwhile), a room whose key
    /// another node holds closes here (`node_lost`): its members join the one that runs.
    func writeClusterRooms(closingThoseTakenElsewhere: Bool = false) {
        guard let cluster else { return }
        roomKeysWritten = now
        let running = rooms.rooms.values.filter { $0.call == nil }.map { ($0.key.appID, $0.key.name) }
        cluster.writeRooms(running)
        guard closingThoseTakenElsewhere, !running.isEmpty else { return }
        cluster.roomsHeldElsewhere(running) { [weak self] taken in
            guard let self else { return }
            for (appID, name) in taken {
                let key = RoomKey(appID: appID, name: name)
                guard rooms.room(key) != nil else { continue }
                logger.warning("another node runs a room this one ran while it was cut off: closed here", ["room": name])
                try? closeRoom(key, reason: .nodeLost)
            }
        }
    }

    /// A room this node ran closed: its members elsewhere are no longer routed to, its key goes.
    func roomClosedHere(_ key: RoomKey, members: [String]) {
        for peerID in members { forgetRemoteMemberIfInNoRoom(peerID, appID: key.appID) }
        cluster?.releaseRoom(appID: key.appID, name: key.name)
    }

    /// Every third of `call_lease_seconds`: the members of this node's rooms whose node died
    /// leave them (`disconnected`); the rooms its sessions are in that ran on a node that died
    /// are closed for them (`room.closed`, reason `node_lost`: they join again, and the room is
    /// made again on a live node). Nothing is renewed per room: this node's lease says its
    /// rooms run, and what Redis knows of them is written again every `Cluster.roomKeyRewrite`.
    func keepClusterRooms() {
        guard let cluster else { return }
        if roomKeysWritten.map({ now - $0 >= Cluster.roomKeyRewrite }) ?? true { writeClusterRooms() }
        let nodes = Set(remoteMembers.values).union(roomHomes.values).union(nodeProcesses.keys)
        guard !nodes.isEmpty else { return }
        let known = nodeProcesses
        cluster.alive(nodes) { [weak self] living in
            guard let self, let living else { return }
            // A node is gone when its key is, or names another process than the one this node
            // heard from (it was started again: its sessions and rooms are not there); not when
            // a message from another process came meanwhile (`nodeProcessSeen` dealt with it).
            let current = nodes.filter { nodeProcesses[$0] == known[$0] }
            let stopped = current.filter { living[$0] == nil }
            let restarted = current.filter { node in living[node].map { process in known[node].map { $0 != process } ?? false } ?? false }
            // A node whose key went may only have stalled: it hears which of its rooms' members
            // here were dropped, once it runs again.
            roomsLost(on: stopped, tellingIt: true)
            roomsLost(on: restarted)
            for (node, process) in living where nodeProcesses[node] == nil { nodeProcesses[node] = process }
        }
    }

    /// A message from `node` came from process `process`: one other than before means the node
    /// was started again, and its members and rooms are gone.
    func nodeProcessSeen(_ node: String, _ process: String) {
        if let known = nodeProcesses[node], known != process {
            logger.info("a node was started again", ["node": node])
            roomsLost(on: [node])
        }
        nodeProcesses[node] = process
    }

    /// The members of this node's rooms whose sessions were on `nodes` leave them
    /// (`disconnected`); the rooms that ran there are closed for the sessions here in them
    /// (`room.closed`, reason `node_lost`), and with `tellingIt` their nodes are told so.
    func roomsLost(on nodes: Set<String>, tellingIt: Bool = false) {
        guard !nodes.isEmpty else { return }
        for (peerID, node) in remoteMembers where nodes.contains(node) {
            remoteMembers.removeValue(forKey: peerID)
            for room in rooms.rooms.values where room.member(peerID) != nil {
                if let effects = try? rooms.leave(room.key, peerID: peerID, reason: .disconnected) { apply(effects) }
            }
        }
        for (key, node) in roomHomes where nodes.contains(node) {
            roomHomes.removeValue(forKey: key)
            for session in sessions.all where session.app.id == key.appID && session.rooms.contains(key.name) {
                session.rooms.remove(key.name)
                localDelivery.deliver(OutgoingEvent(.closed(room: key.name, reason: .nodeLost)), toPeer: session.peerID)
                if tellingIt { tellLeft(session.peerID, key, reason: .disconnected, toNode: node) }
            }
        }
        for node in nodes { nodeProcesses.removeValue(forKey: node) }
    }

    // MARK: Rooms by REST

    /// A REST request about one room.
    enum RoomAdministration {
        case show
        case delete
        case data(RoomDataRequest)
        case kick(peerID: String)
    }

    /// Carries out `operation` on room `name` where it runs: here, or in a cluster on the node
    /// that runs it; answers the room (`show`) or null.
    func administerRoom(
        _ operation: RoomAdministration, appID: String, name: String, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        let key = RoomKey(appID: appID, name: name)
        guard let cluster, rooms.room(key) == nil else { return answer(administerHere(operation, key)) }
        let callID = Self.isCallRoomName(name) ? String(name.dropFirst(5)) : nil
        cluster.locateRoom(appID: appID, name: name, callID: callID, claim: false, nowMillis: wallMillis) { [weak self] home in
            guard let self else { return }
            guard let home, home != cluster.nodeID else { return answer(administerHere(operation, key)) }
            var body: [String: JSONValue] = ["app": .string(appID), "room": .string(name)]
            switch operation {
            case .show: body["what"] = "show"
            case .delete: body["what"] = "delete"
            case .data(let request): (body["what"], body["request"]) = ("data", jsonValue(request))
            case .kick(let peerID): (body["what"], body["peer"]) = ("kick", .string(peerID))
            }
            cluster.request("radmin", body, toNode: home, answer: Self.aboutARoom(answer))
        }
    }

    private func administerHere(_ operation: RoomAdministration, _ key: RoomKey) -> Result<JSONValue, ErrorBody> {
        do throws(ErrorBody) {
            switch operation {
            case .show: return .success(jsonValue(try room(appID: key.appID, name: key.name)))
            case .delete: try deleteRoom(appID: key.appID, name: key.name)
            case .data(let request): try sendData(appID: key.appID, room: key.name, request: request)
            case .kick(let peerID): try kick(appID: key.appID, room: key.name, peerID: peerID)
            }
            return .success(.null)
        } catch { return .failure(error) }
    }

    /// A REST request about a room of this node, from the node that took it.
    func forwardedRoomAdministration(_ message: [String: JSONValue], answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        guard let appID = message["app"]?.stringValue, let name = message["room"]?.stringValue else {
            return answer(.failure(ErrorBody(.badRequest, "a malformed request from another node")))
        }
        let operation: RoomAdministration
        switch message["what"]?.stringValue {
        case "show": operation = .show
        case "delete": operation = .delete
        case "kick": operation = .kick(peerID: message["peer"]?.stringValue ?? "")
        case "data":
            guard let value = message["request"], let request = try? JSONValueDecoder().decode(RoomDataRequest.self, from: value) else {
                return answer(.failure(ErrorBody(.badRequest, "a malformed request from another node")))
            }
            operation = .data(request)
        default: return answer(.failure(ErrorBody(.badRequest, "a malformed request from another node")))
        }
        answer(administerHere(operation, RoomKey(appID: appID, name: name)))
    }

    /// `GET /v1/rooms` in a cluster: this node's rooms and every other live node's.
    func listAllRooms(appID: String, answer: @escaping ([RoomInfo]) -> Void) {
        let here = listRooms(appID: appID)
        guard let cluster else { return answer(here) }
        cluster.otherNodes { [weak self] nodes in
            guard self != nil else { return }
            var found = here
            var left = nodes.count
            guard left > 0 else { return answer(found) }
            for node in nodes {
                cluster.request("rlist", ["app": .string(appID)], toNode: node) { result in
                    if case .success(.array(let items)) = result {
                        found += items.compactMap { try? JSONValueDecoder().decode(RoomInfo.self, from: $0) }
                    }
                    left -= 1
                    if left == 0 { answer(found.sorted { $0.name < $1.name }) }
                }
            }
        }
    }
}
