import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardCore

extension Hub {
    // MARK: Sessions across nodes

    // A session's resume token names its node (`<random>.<node id>`). A client that comes back
    // through the load balancer to another node (its node drains, or its connection dropped and
    // the balancer chose another) resumes there: the new node asks the old one for the session,
    // which hands it over whole (peer id, rooms, the events the client missed, the ids of the
    // user events it had) and forgets it without a word to anyone; the rooms it is in route its
    // events to the new node. User events published meanwhile are held by the new node, which
    // listens for the user before it asks, and delivered once (by their ids).

    /// A user event from another node: delivered to the user's sessions here, and held for a
    /// session of that user on its way here. `openedBy`: an event caught up on after this node
    /// lost its subscription (`Cluster.catchUp`) goes only to the sessions open by then.
    func userEventArrived(
        _ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, eventID: String?, openedBy: Int64? = nil
    ) -> [DeliveryReceipt] {
        let key = Self.userKey(appID, identity)
        heldUserEvents[key]?.events.append((eventID, event, except))
        return localDelivery.deliverHere(event, toUser: identity, appID: appID, except: except, eventID: eventID, openedBy: openedBy)
    }

    /// Resumes here a session `node` holds. A node that is gone, or a session it no longer
    /// has, gives a fresh session (`resume_failed`), as on one node.
    func resumeFromNode(
        _ node: String, connection: ConnectionID, claims: AccessTokenClaims, app: App, resume: ResumeRequest, deviceID: String?, secretTag: String
    ) {
        guard let cluster else { return }
        let key = Self.userKey(app.id, claims.sub)
        pendingResumes.insert(connection)
        heldUserEvents[key, default: HeldEvents()].waiting += 1
        // Listen for the user before asking: what is published from now on is held.
        cluster.userPresenceChanged(appID: app.id, identity: claims.sub, present: true)
        let finish = { [weak self] (result: Result<JSONValue, ErrorBody>) in
            guard let self else { return }
            var held = heldUserEvents[key] ?? HeldEvents()
            held.waiting -= 1
            heldUserEvents[key] = held.waiting > 0 ? held : nil
            let open = pendingResumes.remove(connection) != nil
            switch result {
            case .success(let state):
                adoptSession(state, connection: open ? connection : nil, claims: claims, app: app, deviceID: deviceID, secretTag: secretTag,
                    from: resume.lastSequence + 1, held: held.events)
            case .failure(let error):
                metrics.increment("switchboard_resumes_total", ["outcome": "failed"])
                logger.info("resume from another node failed", ["node": node, "error": error.message])
                if open {
                    openSession(connection, claims: claims, app: app, deviceID: deviceID, secretTag: secretTag, resumeFailed: true)
                } else if sessions.sessions(ofUser: key).isEmpty {
                    cluster.userPresenceChanged(appID: app.id, identity: claims.sub, present: false)
                }
            }
        }
        cluster.alive([node]) { living in
            guard living?[node] != nil else { return finish(.failure(ErrorBody(.notFound, "the node holding the session is gone"))) }
            cluster.request(
                "take",
                ["token": .string(resume.token), "last_seq": .int(Int64(resume.lastSequence)), "app": .string(app.id), "identity": .string(claims.sub),
                 "to": .string(cluster.nodeID)], toNode: node, answer: finish)
        }
    }

    /// Another node asks for a session of this one: handed over whole, and forgotten here
    /// without a word (its rooms now route its events to that node; its old connection, if
    /// still open, is closed as replaced).
    func handOverSession(_ message: [String: JSONValue], answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        guard let cluster, let token = message["token"]?.stringValue, let to = message["to"]?.stringValue,
            let session = sessions.session(resumeToken: token), session.app.id == message["app"]?.stringValue,
            session.identity == message["identity"]?.stringValue
        else { return answer(.failure(ErrorBody(.notFound, "no such session on this node"))) }
        let lastSequence = UInt64(max(0, message["last_seq"]?.intValue ?? 0))
        guard let missed = session.log.numbered(after: lastSequence, newest: session.lastSequence),
            missed.reduce(0, { $0 + $1.frame.count }) <= replayBudget
        else {
            end(session, reason: .disconnected)
            return answer(.failure(ErrorBody(.notFound, "the events the session missed are no longer kept")))
        }
        var rooms: [JSONValue] = []
        for name in session.rooms.sorted() {
            let key = RoomKey(appID: session.app.id, name: name)
            let home = self.rooms.room(key) != nil ? cluster.nodeID : roomHomes[key] ?? cluster.nodeID
            rooms.append(["name": .string(name), "home": .string(home)])
            if home == cluster.nodeID {
                remoteMembers[session.peerID] = to
            } else {
                cluster.tell("move", ["peer": .string(session.peerID), "node": .string(to)], toNode: home)
            }
        }
        let state: JSONValue = [
            "peer_id": .string(session.peerID), "device_id": session.deviceID.map(JSONValue.string) ?? .null,
            "last_seq": .int(Int64(session.lastSequence)), "rooms": .array(rooms),
            "frames": .array(missed.map { ["seq": .int(Int64($0.seq)), "text": .string(String(decoding: $0.frame.bytes, as: UTF8.self))] }),
            "event_ids": .array(session.recentEventIDs.map(JSONValue.string)),
        ]
        for timer in [session.graceTimer, session.tokenTimer].compactMap({ $0 }) { scheduler?.cancel(timer) }
        let names = session.rooms
        session.rooms.removeAll()
        if let connection = sessions.remove(session) { output?.close(connection, code: CloseCode.replaced, reason: "the session moved to another node") }
        for name in names { forgetHomeIfUnused(RoomKey(appID: session.app.id, name: name)) }
        participantSessionsChanged(appID: session.app.id, identity: session.identity)
        logger.info("session handed over", ["peer": session.peerID, "to": to])
        answer(.success(state))
    }

    /// A session handed over by another node: the same peer id, rooms and sequence, a resume
    /// token naming this node; `session.resumed` with the events the client missed, then the
    /// user events held meanwhile that it did not have.
    private func adoptSession(
        _ state: JSONValue, connection: ConnectionID?, claims: AccessTokenClaims, app: App, deviceID: String?, secretTag: String, from: UInt64,
        held: [(eventID: String?, event: OutgoingEvent, except: String?)]
    ) {
        guard let peerID = state["peer_id"]?.stringValue, let cluster else { return }
        let session = makeSession(peerID: peerID, claims: claims, app: app, secretTag: secretTag)
        session.deviceID = deviceID ?? state["device_id"]?.stringValue
        session.lastSequence = UInt64(max(0, state["last_seq"]?.intValue ?? 0))
        if case .array(let ids)? = state["event_ids"] { for id in ids.compactMap(\.stringValue) { _ = session.note(eventID: id) } }
        var replay: [OutboundFrame] = []
        if case .array(let frames)? = state["frames"] {
            for item in frames {
                guard let seq = item["seq"]?.intValue, let text = item["text"]?.stringValue else { continue }
                let frame = OutboundFrame(Array(text.utf8))
                session.log.append(seq: UInt64(max(0, seq)), frame: frame)
                replay.append(frame)
            }
        }
        if case .array(let rooms)? = state["rooms"] {
            for room in rooms {
                guard let name = room["name"]?.stringValue, let home = room["home"]?.stringValue else { continue }
                session.rooms.insert(name)
                if home == cluster.nodeID { remoteMembers.removeValue(forKey: peerID) } else { roomHomes[RoomKey(appID: app.id, name: name)] = home }
            }
        }
        sessions.add(session, on: connection)
        armTokenTimer(session)
        metrics.increment("switchboard_resumes_total", ["outcome": "resumed"])
        logger.info("session moved here", ["peer": peerID, "replayed": String(replay.count)])
        if connection != nil {
            sendControl(
                MessageType.sessionResumed,
                SessionResumed(peerID: peerID, replayFrom: from, replayCount: replay.count, resumeToken: session.resumeToken), to: session)
            for frame in replay { transmit(frame, to: session) }
        }
        for (eventID, event, except) in held where session.deviceKey != except {
            if let eventID, !session.note(eventID: eventID) { continue }
            sendEvent(event, to: session)
        }
        if connection == nil { startGrace(session, reason: "moved while away") }
        participantSessionsChanged(appID: app.id, identity: claims.sub)
        handleFramesBeforeSession(connection)
    }

    /// A member of a room this node runs now has its session on another node.
    func memberMoved(_ message: [String: JSONValue]) {
        guard let peerID = message["peer"]?.stringValue, let node = message["node"]?.stringValue, let cluster else { return }
        if node == cluster.nodeID { remoteMembers.removeValue(forKey: peerID) } else { remoteMembers[peerID] = node }
    }

    // MARK: Drain

    /// A node leaving the cluster on purpose (SIGTERM): the rooms it runs close for their
    /// members (`node_lost`: they join again elsewhere), and its calls are handed over at once
    /// (their leases given up in the store and Redis, every node told to sweep) instead of
    /// after their lease. `then` runs once the store has it, or after `storeWait` (2 s at
    /// least) if the store does not take it by then (PostgreSQL down: the other nodes take the
    /// calls over once their lease has run out and the store is back); a hand-over the store
    /// takes later, while the node is still there, is announced all the same.
    func drainCluster(storeWait: Duration, then: @escaping () -> Void) {
        guard let cluster else { return then() }
        clusterDraining = true
        for room in Array(rooms.rooms.values) { try? closeRoom(room.key, reason: .nodeLost) }
        let handed = Array(calls.values)
        for call in handed { disown(call) }
        guard !handed.isEmpty, let scheduler else { return then() }
        let ids = handed.map(\.state.id)
        let wait = max(storeWait, .seconds(2))
        var waiting: TimerID?
        let release = LoopBound({ [weak self] (stored: Bool) in
            if stored {
                for id in ids { cluster.release(callID: id) }
                cluster.tellEveryone("sweep")
                self?.logger.info("calls handed over to the other nodes", ["count": String(ids.count)])
            }
            guard let timer = waiting else { return }  // `then` once: stored, or the wait is over
            waiting = nil
            scheduler.cancel(timer)
            if !stored {
                self?.logger.warning(
                    "the store did not take the calls' hand-over in time; other nodes take them over once their lease runs out",
                    ["count": String(ids.count), "waited_s": String(wait.components.seconds)])
            }
            then()
        })
        waiting = scheduler.schedule(after: wait) { release.value(false) }
        store.giveUpCallLeases(ids) { [weak scheduler] in scheduler?.execute { release.value(true) } }
    }
}
