import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore

extension Hub {
    // MARK: From other nodes

    /// A request another node made of this one (`Cluster.request`), answered once.
    func clusterRequest(_ op: String, _ message: [String: JSONValue], answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        switch op {
        case "act": forwardedAction(message, answer: answer)
        case "join": forwardedJoin(message, answer: answer)
        case "meta": forwardedMetadata(message, answer: answer)
        case "data": forwardedData(message, answer: answer)
        case "take": handOverSession(message, answer: answer)
        case "radmin": forwardedRoomAdministration(message, answer: answer)
        case "rlist": answer(.success(jsonValue(listRooms(appID: message["app"]?.stringValue ?? ""))))
        default: answer(.failure(ErrorBody(.badRequest, "unknown request '\(op.prefix(32))' from another node")))
        }
    }

    /// Something another node told this one (`Cluster.tell`).
    func clusterMessage(_ op: String, _ message: [String: JSONValue], from node: String) {
        switch op {
        case "peer": eventForPeer(message)
        case "data": forwardedData(message)
        case "leave": forwardedLeave(message)
        case "move": memberMoved(message)
        case "offer":
            guard let id = message["call"]?.stringValue, let call = calls[id], let peer = message["peer"]?.stringValue,
                let identity = message["identity"]?.stringValue, let device = message["device"]?.stringValue
            else { return }
            offer(call, toPeer: peer, identity: identity, device: device, node: node)
        case "sweep": if node != cluster?.nodeID { takeOverAbandonedCalls() }
        default: return
        }
    }

    /// An action another node passed on to this one, which runs the call: carried out here,
    /// never passed on again.
    func forwardedAction(_ message: [String: JSONValue], answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        guard let type = message["action"]?.stringValue, let callID = message["call_id"]?.stringValue,
            let appID = message["app"]?.stringValue, let identity = message["identity"]?.stringValue
        else { return answer(.failure(ErrorBody(.badRequest, "a malformed action from another node"))) }
        let device = message["device"]?.stringValue
        if type == MessageType.callHold {
            holdOnCall(
                CallHoldRequest(callID: callID, onHold: message["on_hold"] == .bool(true)), appID: appID, identity: identity, device: device,
                forwarded: true, answer: answer)
        } else {
            let request = CallActionRequest(
                callID: callID, reason: message["reason"]?.stringValue, filter: message["filter"]?.stringValue.flatMap(CallFilter.init(rawValue:)))
            actOnCall(type, request, appID: appID, identity: identity, device: device, seat: message["seat"]?.stringValue, forwarded: true, answer: answer)
        }
    }

    // MARK: Taking over

    /// What a node knows of a call no node answered for: taken over here (its owner died),
    /// still held by its owner (which did not answer: it may be dying), or not live at all.
    enum Whereabouts {
        case here(ActiveCall)
        case heldElsewhere
        case notLive
    }

    /// Continues here a call whose owner died (its lease expired in the store and no node
    /// holds it in Redis), from what the store keeps of it.
    func takeOverIfAbandoned(_ callID: String, then: @escaping (Whereabouts) -> Void) {
        if let call = calls[callID] { return then(.here(call)) }
        // Draining (another node takes it), or not sure of its own calls: the caller retries.
        if clusterDraining || !holdsCalls { return then(.heldElsewhere) }
        let nowMillis = wallMillis
        withStore(for: Self.clusterLane, { try $0.liveCall(id: callID, nowMillis: nowMillis) }, afterQueuedWrites: false) {
            [weak self] result in
            guard let self, case .success(let live?) = result else { return then(.notLive) }
            guard let abandoned = live.abandoned else { return then(.heldElsewhere) }
            takeOver(abandoned) { call in then(call.map(Whereabouts.here) ?? .heldElsewhere) }
        }
    }

    /// The store's lane of the cluster's own reads.
    static let clusterLane = "\u{0}cluster"

    /// Takes over the calls whose owner stopped renewing them (the sweep, every third of
    /// `call_lease_seconds`).
    func takeOverAbandonedCalls() {
        guard !clusterDraining, holdsCalls else { return }
        let nowMillis = wallMillis
        let previous = cluster?.previousInstance
        withStore(for: Self.clusterLane, { try $0.abandonedCalls(nowMillis: nowMillis, previous: previous) }, afterQueuedWrites: false) {
            [weak self] result in
            guard let self else { return }
            switch result {
            case .success(let rows): for row in rows where calls[row.id] == nil { takeOver(row) { _ in } }
            case .failure(let error): logger.warning("reading the calls of dead nodes failed", ["error": "\(error)"])
            }
        }
    }

    private func takeOver(_ row: Store.AbandonedCall, then: @escaping (ActiveCall?) -> Void) {
        guard let cluster else { return then(nil) }
        guard let text = row.continuation, let call = ActiveCall(continuing: text, now: now, nowMillis: wallMillis), !call.state.isEnded else {
            // Stored without what a node needs to go on (a node of an older build): it ends.
            let logger = self.logger
            store.endAbandonedCallsLater(.leaseExpiredCall(row.id), nowMillis: wallMillis) { ended in
                if ended > 0 { logger.warning("a call of a dead node that cannot be continued ended as failed", ["call": row.id]) }
            }
            return then(nil)
        }
        cluster.takeOver(callID: row.id, untilMillis: clusterKeyEnd(call.state)) { [weak self] taken in
            guard let self, taken, calls[row.id] == nil else { return then(self?.calls[row.id]) }
            adopt(call)
            then(call)
        }
    }

    /// Runs a call taken over from a dead node as if it had started here: indexed, its timers
    /// armed from its wall-clock times (the ring timer fires when it would have), stored as
    /// this node's. Nothing is sent again: its invites and pushes went out from its first node;
    /// a phone rung by an alert gets its repeats from here on (`repeatAlertInvite`), the first
    /// `alert_ring_repeat_seconds` after the takeover.
    private func adopt(_ call: ActiveCall) {
        let state = call.state
        calls[state.id] = call
        if let key = call.request.idempotencyKey { callIdempotency[Self.userKey(state.appID, state.caller) + "\u{0}" + key] = state.id }
        if case .room(let name) = call.media { callRooms[RoomKey(appID: state.appID, name: name)] = state.id }
        for identity in [state.caller] + state.callees { liveCallsByUser[Self.userKey(state.appID, identity), default: []].insert(state.id) }
        if !state.isRinging { call.ringing.stop() }
        armDurationTimer(call)
        logger.info("call taken over from a node that stopped", ["call": state.id])
        var effects: [CallState.Effect] = []
        if let left = state.ringTimeLeft(at: now) { effects.append(.armRingTimer(after: left)) }
        perform(call, effects + [.save])
        for callee in call.state.ringingCallees {
            for phone in call.state.phones[callee] ?? [] where !phone.voip {
                guard let device = call.devices[callee]?.first(where: { $0.deviceID == phone.id }) else { continue }
                repeatAlertInvite(call, callee: callee, device: device)
            }
        }
    }

    /// Another node holds a call this one ran (it took it over while this one could not renew
    /// its lease): this node lets it go without a word, so nothing is said twice. Its room, if
    /// it ran here, closes for its members (`node_lost`): they join again, where the call runs.
    func disown(_ call: ActiveCall) {
        let state = call.state
        guard calls[state.id] === call else { return }
        call.ringing.stop()
        for timer in [call.durationTimer, call.unattendedTimer, call.ringTimer].compactMap({ $0 }) { scheduler?.cancel(timer) }
        calls.removeValue(forKey: state.id)
        for identity in [state.caller] + state.callees {
            let key = Self.userKey(state.appID, identity)
            if liveCallsByUser[key]?.remove(state.id) != nil, liveCallsByUser[key]?.isEmpty == true { liveCallsByUser.removeValue(forKey: key) }
            if answeredCallsByUser[key]?.remove(state.id) != nil, answeredCallsByUser[key]?.isEmpty == true {
                answeredCallsByUser.removeValue(forKey: key)
            }
        }
        if case .room(let name) = call.media {
            let key = RoomKey(appID: state.appID, name: name)
            callRooms.removeValue(forKey: key)
            if rooms.room(key) != nil { try? closeRoom(key, reason: .nodeLost) }
        }
        logger.info("this node no longer runs the call", ["call": state.id])
    }

    /// Renews this node's lease in Redis on all its calls (one field, whatever their number).
    /// When it had run out (Redis restarted empty, or this node was cut off or stalled longer
    /// than the lease), its calls' keys and busy marks are written again, and the calls another
    /// node took over meanwhile leave this one.
    func renewClusterLeases() {
        guard let cluster else { return }
        let sentAt = now
        cluster.renewLease(for: callLease) { [weak self] lapsed in
            guard let self else { return }
            if lapsed {
                reclaimPending = true
                writeClusterRooms(closingThoseTakenElsewhere: true)
            }
            guard reclaimPending else { return callLeaseRenewed(redis: sentAt) }
            // The store first: a call another node took over and ended has no key in Redis,
            // which the reclaim would write again (and its busy marks) as this node's.
            letGoOfCallsHeldElsewhere { [weak self] in
                self?.reclaimClusterCalls {
                    self?.reclaimPending = false
                    self?.callLeaseRenewed(redis: sentAt)
                }
            }
        }
    }

    /// After the lease ran out: the calls the store says ended or another node holds (one that
    /// took a call over and ended it has let its key in Redis go) leave this node. `done` runs
    /// once the store answered (after this node's writes queued before: a call it took over
    /// meanwhile is stored as its own by then).
    private func letGoOfCallsHeldElsewhere(done: @escaping () -> Void) {
        let ids = Array(calls.keys)
        guard !ids.isEmpty else { return done() }
        withStore(for: Self.clusterLane, { try $0.callsNoLongerHeld(ids) }) { [weak self] result in
            guard let self, case .success(let gone) = result else { return }
            for id in gone { if let call = calls[id] { disown(call) } }
            done()
        }
    }

    /// Writes again the keys of this node's calls and their busy marks, `Cluster.keysPerScript`
    /// calls to a command; the calls another node took meanwhile leave this one. `done` runs
    /// once every command answered (not when one failed: the next renewal tries again).
    private func reclaimClusterCalls(done: @escaping () -> Void) {
        guard let cluster, !calls.isEmpty else { return done() }
        logger.warning("this node's lease in Redis had run out: its calls' keys are written again", ["calls": String(calls.count)])
        let batches = Array(calls.values).batches(of: Cluster.keysPerScript)
        var left = batches.count, failed = false
        for live in batches {
            let batch = live.map { call in
                let state = call.state
                let busy = ([state.caller] + state.callees).filter { answeredCallsByUser[Self.userKey(state.appID, $0)]?.contains(state.id) == true }
                return (id: state.id, appID: state.appID, busy: busy, until: clusterKeyEnd(state))
            }
            cluster.reclaim(batch) { [weak self] id in
                if let self, let call = calls[id] { disown(call) }
            } done: { answered in
                failed = failed || !answered
                left -= 1
                if left == 0 && !failed { done() }
            }
        }
    }

    /// Until when a call's keys in Redis last: past its longest life (`max_call_duration_seconds`
    /// from its start) and a lease, so that nothing renews them.
    func clusterKeyEnd(_ state: CallState) -> Int64 {
        state.createdAtMillis + Int64(configuration.limits.maxCallDurationSeconds + configuration.limits.callLeaseSeconds) * 1000
    }

    /// Redis answers again (a restart loses everything in it): this node's lease is renewed
    /// at once (and, when Redis lost it, its calls' keys and busy marks written again), and whom
    /// its calls ring is written again, since nothing renews it.
    func clusterRedisConnected() {
        guard let cluster else { return }
        // What was sent just before the connection went may not have reached Redis (a new
        // call's key, a busy mark): every call's are written again.
        reclaimPending = true
        renewClusterLeases()
        writeClusterRooms(closingThoseTakenElsewhere: true)
        for call in calls.values where !call.state.ringingCallees.isEmpty {
            let state = call.state
            cluster.markRinging(
                appID: state.appID, callees: state.callees, ringing: Set(state.ringingCallees), callID: state.id, untilMillis: state.ringExpiresAtMillis)
        }
    }
}
