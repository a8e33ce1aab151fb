import Foundation
import Synchronization
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Hub {
    // MARK: Creating a call

    /// What starting a call needs from the store, read in one request off the loop.
    struct CallPrerequisites: Sendable {
        /// The call an earlier request with the same idempotency key made, as stored.
        var earlier: JSONValue?
        /// The first callee whose block list names the caller.
        var blockedBy: String?
        var devices: [String: [Device]]
    }

    /// Starts a call from `caller` and rings every device of every callee; `answer` hears the
    /// call (or why not) on the loop, once the store has said who blocks whom and which
    /// devices each callee has.
    /// `seat`: the session placing the call over the WebSocket (the caller's side of the call's
    /// room is that connection's); nil over REST.
    func createCall(
        _ request: CallCreateRequest, caller: AccessTokenClaims, app: App, device: String?, seat: String? = nil,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        let setup = CallSetupClock { [scheduler, metrics] elapsed in
            scheduler?.execute { metrics.observeRecent("switchboard_call_setup_seconds", seconds: elapsed.seconds) }
        }
        let callees: [String], timeout: Int
        do throws(ErrorBody) {
            guard caller.grants.call == true else { throw Self.callGrantNeeded }
            (callees, timeout) = try Self.checkCallRequest(request, caller: caller.sub, limits: configuration.limits)
            // What the callee's phone shows as the caller comes from the token the app's backend
            // signed (its name and identity); a client may not choose it, only a backend's token.
            if request.callerName != nil || request.handle != nil, caller.grants.admin != true {
                throw ErrorBody(
                    .forbidden, "caller_name and handle need the admin grant: the callee sees your token's name and handle claims")
            }
            if clusterDraining { throw Self.nodeDraining }
            try refuseWithoutStorage()
        } catch { return answer(.failure(error)) }

        // A retried request with the same idempotency key gets the same call.
        let idempotency = request.idempotencyKey.map { Self.userKey(app.id, caller.sub) + "\u{0}" + $0 }
        let earlierID = idempotency.flatMap { callIdempotency[$0] }
        if let earlierID, let call = calls[earlierID] { return answer(.success(describe(call))) }
        // More calls than the store can take are refused now, not queued without bound.
        guard pendingCallSetups < configuration.limits.maxPendingCallSetups else {
            metrics.increment("switchboard_calls_refused_total", ["reason": "overload"])
            return answer(.failure(ErrorBody(.unavailable, "too many calls are being set up; retry in a second")))
        }
        pendingCallSetups += 1
        let (appID, callerID) = (app.id, caller.sub)
        let id = RandomID.uuid().uuidString.lowercased()
        // What the store says (block lists, devices) and, in a cluster, what Redis says (who is
        // connected or in a call on other nodes, the cluster's invite limits and idempotency
        // keys) are asked for at once; the call starts once both answered. Without an answer
        // from Redis, this node's own knowledge counts.
        var read: Result<CallPrerequisites, any Error>?
        var asked: Cluster.Presence?? = cluster == nil ? .some(nil) : nil
        let proceed = { [weak self] in
            guard let self, let read, let presence = asked else { return }
            // An invite Redis counted for a call that does not start (a block list refuses it,
            // the store could not say) counts no longer: a refused invite is no invite.
            let uncount = { [weak self] in
                guard presence?.admitted == true, presence?.earlierCall == nil else { return }
                self?.cluster?.uncountInvite(appID: appID, caller: callerID, callees: callees, idempotencyKey: request.idempotencyKey, callID: id)
            }
            let needs: CallPrerequisites
            do { needs = try read.get() } catch {
                logger.error("call setup read failed", ["app": appID, "error": "\(error)"])
                uncount()
                return answer(.failure(.storeRead(error, reading: "the callees' devices")))
            }
            if needs.blockedBy != nil { uncount() }
            if needs.blockedBy == nil, let earlier = presence?.earlierCall, earlier != id {
                return answerWithEarlierCall(earlier, appID: appID, caller: callerID, answer: answer)
            }
            do throws(ErrorBody) {
                let (result, call) = try startCall(request, id: id, caller: caller, app: app, device: device, seat: seat,
                    callees: callees, timeout: timeout, idempotency: idempotency, needs: needs,
                    presence: needs.blockedBy == nil ? presence : nil, setup: setup)
                // Answered once the call is stored (a node taking it over, or this one
                // restarted, knows it), even when it ended at once (every callee busy).
                guard let call = call ?? result["call_id"]?.stringValue.flatMap({ calls[$0] }) else { return answer(.success(result)) }
                whenStored(call) { answer(.success(result)) }
            } catch {
                if let key = request.idempotencyKey, presence != nil {
                    cluster?.forgetIdempotencyKey(appID: appID, caller: callerID, key: key, callID: id)
                }
                answer(.failure(error))
            }
        }
        cluster?.callSetup(
            callees: callees, appID: appID, caller: callerID, idempotencyKey: request.idempotencyKey, callID: id, limits: configuration.limits,
            nowMillis: wallMillis
        ) { presence in
            asked = .some(presence)
            proceed()
        }
        // Block lists and devices are never queued writes: only an earlier call's record is.
        withStore(for: appID, { store in
            var needs = CallPrerequisites(devices: [:])
            if let earlierID { needs.earlier = try store.callSummary(id: earlierID, appID: appID)?.summary }
            (needs.blockedBy, needs.devices) = try store.ringList(callerID, callees: callees, appID: appID)
            return needs
        }, afterQueuedWrites: earlierID != nil) { [weak self] result in
            self?.pendingCallSetups -= 1
            read = result
            proceed()
        }
    }

    /// A create with an idempotency key another node already made a call for: that call as it
    /// stands (here, or as stored), or `conflict` while it is still being set up.
    private func answerWithEarlierCall(
        _ id: String, appID: String, caller: String, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        if let call = calls[id], call.state.caller == caller { return answer(.success(describe(call))) }
        withStore(for: appID, { try $0.callSummary(id: id, appID: appID) }) { result in
            if case .success(let stored?) = result, stored.caller == caller { return answer(.success(stored.summary)) }
            answer(.failure(ErrorBody(.conflict, "a call with this idempotency key is being set up; retry in a second")))
        }
    }

    /// What a draining node of a cluster answers a request that would start something here.
    static let nodeDraining = ErrorBody(.unavailable, "this node is shutting down; retry: the load balancer sends you to another node")

    /// A call that could not be recorded would be lost from everyone's history: none starts
    /// while the storage refuses writes.

    private func refuseWithoutStorage() throws(ErrorBody) {
        guard let problem = store.storageProblem else { return }
        metrics.increment("switchboard_calls_refused_total", ["reason": "storage"])
        throw ErrorBody(.unavailable, "storage unavailable (\(problem)): calls cannot be recorded; retry later")
    }

    /// `createCall` on the loop once the store answered: the checks that need it, then the call.
    private func startCall(
        _ request: CallCreateRequest, id: String, caller: AccessTokenClaims, app: App, device: String?, seat: String?, callees: [String],
        timeout: Int, idempotency: String?, needs: CallPrerequisites, presence: Cluster.Presence?, setup: CallSetupClock
    ) throws(ErrorBody) -> (JSONValue, made: ActiveCall?) {
        // The same key again (a request that raced this one may have made the call meanwhile).
        if let idempotency, let existing = callIdempotency[idempotency], let call = calls[existing] { return (describe(call), nil) }
        if let earlier = needs.earlier { return (earlier, nil) }

        // Who may ring whom: block lists, then rate limits. A refused invite sends nothing.
        if let callee = needs.blockedBy {
            metrics.increment("switchboard_calls_refused_total", ["reason": "blocked"])
            throw ErrorBody(.forbidden, "\(callee) does not accept calls from you")
        }
        let now = self.now
        pruneCallBookkeeping(now: now)
        // The cluster's count when it answered (across the nodes), else this node's.
        guard presence?.admitted ?? invites.admit(caller: Self.userKey(app.id, caller.sub), callees: callees, now: now) else {
            metrics.increment("switchboard_calls_refused_total", ["reason": "rate_limited"])
            throw ErrorBody(.rateLimited, "too many calls; try again in a minute")
        }

        // Who is in another call, and who has a connection: the call decides who is busy,
        // who rings and how.
        let inCall = Set(callees.filter { isInCall($0, appID: app.id) }).union(presence?.inCall ?? [])
        let connected = Set(callees.filter { !sessions.sessions(ofUser: Self.userKey(app.id, $0)).isEmpty }).union(presence?.connected ?? [])

        let media: CallMedia
        if case .external(let descriptor) = request.media {
            media = .external(descriptor)
        } else {
            media = .room("call-" + id)
        }
        let state = CallState(
            id: id, appID: app.id, caller: caller.sub, callerDevice: device, callerSeat: seat, callees: callees, inCall: inCall,
            busyPolicy: request.busyPolicy ?? .reject, connected: connected,
            phones: needs.devices.mapValues { $0.compactMap(Self.phone) }, now: now, nowMillis: wallMillis, ringTimeout: .seconds(timeout))
        let call = ActiveCall(
            state: state, request: request, media: media,
            callerName: request.callerName ?? caller.name ?? caller.sub, handle: request.handle ?? caller.handle ?? caller.sub, topic: app.bundleID,
            allowedTopics: Set(app.bundleIDs), devices: needs.devices)
        calls[id] = call
        cluster?.hold(callID: id, untilMillis: clusterKeyEnd(state))
        if let idempotency { callIdempotency[idempotency] = id }
        // The call's room is made at its first join (admitToCallRoom) and closed when it ends.
        if case .room(let name) = media { callRooms[RoomKey(appID: app.id, name: name)] = id }
        for identity in [caller.sub] + callees { liveCallsByUser[Self.userKey(app.id, identity), default: []].insert(id) }
        metrics.increment("switchboard_calls_total")
        logger.info("call created", ["call": id, "app": app.id, "caller": caller.sub, "callees": callees.joined(separator: ",")])

        armDurationTimer(call)
        perform(call, call.state.start(nowMillis: wallMillis), setup: setup)
        setup.end()
        return (describe(call), call)
    }

    /// Ends `call` `max_call_duration_seconds` after it started (on the wall clock: a call
    /// taken over from another node keeps its start).
    func armDurationTimer(_ call: ActiveCall) {
        let endsAt = call.state.createdAtMillis + Int64(configuration.limits.maxCallDurationSeconds) * 1000
        call.durationTimer = scheduler?.schedule(after: .milliseconds(max(0, endsAt - wallMillis))) { [weak self, weak call] in
            self?.whileHoldingCalls { [weak self, weak call] in
                guard let self, let call, calls[call.state.id] === call else { return }
                call.durationTimer = nil
                logger.info("call ended at its maximum duration", ["call": call.state.id])
                perform(call, call.state.endByServer(reason: "max_duration", nowMillis: wallMillis))
            }
        }
    }

    /// What a call request must be whoever sends it: 1 to `maxCallees` distinct other users,
    /// a ring timeout of 5 to 180 s, metadata and media descriptor within `maxDataBytes`, and
    /// no room name of its own (a call's room is always `call-<id>`: naming another room would
    /// open it to the callees). Returns the callees without repeats and the ring timeout.
    static func checkCallRequest(
        _ request: CallCreateRequest, caller: String, limits: ServerConfiguration.Limits
    ) throws(ErrorBody) -> (callees: [String], timeout: Int) {
        let callees = request.callees.reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
        guard !callees.isEmpty, callees.count <= limits.maxCallees else {
            throw ErrorBody(.badRequest, "callees must name 1 to \(limits.maxCallees) users")
        }
        guard callees.allSatisfy({ !$0.isEmpty && $0.utf8.count <= FieldLimits.identity }), !callees.contains(caller) else {
            throw ErrorBody(.badRequest, "callees are other users' identities (1-\(FieldLimits.identity) bytes)")
        }
        try FieldLimits.check(request.callerName, field: "caller_name", limit: FieldLimits.displayName)
        try FieldLimits.check(request.handle, field: "handle", limit: FieldLimits.handle)
        try FieldLimits.check(request.idempotencyKey, field: "idempotency_key", limit: FieldLimits.idempotencyKey)
        let timeout = request.ringTimeoutSeconds ?? limits.ringTimeoutSeconds
        guard (5...180).contains(timeout) else { throw ErrorBody(.badRequest, "ring_timeout_seconds must be 5 to 180") }
        if let metadata = request.metadata { try checkSize(metadata, what: "metadata", limit: limits.maxDataBytes) }
        if case .external(let descriptor) = request.media { try checkSize(descriptor, what: "media descriptor", limit: limits.maxDataBytes) }
        if case .room(let name) = request.media, !name.isEmpty {
            throw ErrorBody(.badRequest, "media.room cannot be chosen: a call's room is always call-<call id>")
        }
        return (callees, timeout)
    }

    /// Forgets idempotency keys of calls that ended long ago, so the map stays bounded (at
    /// most every ten seconds).
    func pruneCallBookkeeping(now: ContinuousClock.Instant) {
        guard now - lastPrune > .seconds(10) else { return }
        lastPrune = now
        if callIdempotency.count > 10_000 {
            callIdempotency = callIdempotency.filter { calls[$0.value] != nil }
        }
    }

    /// A device as a call sees it: an iPhone and the pushes it can take (nil: it takes none,
    /// so only its connections can ring it).
    static func phone(_ device: Device) -> CallState.PhoneDevice? {
        guard device.platform == "ios" else { return nil }
        let phone = CallState.PhoneDevice(id: device.deviceID, voip: device.callKitEnabled && device.voipToken != nil, alert: device.apnsToken != nil)
        return phone.voip || phone.alert ? phone : nil
    }

    /// In a call that was answered, as caller or as an answering callee.
    func isInCall(_ identity: String, appID: String) -> Bool {
        !(answeredCallsByUser[Self.userKey(appID, identity)]?.isEmpty ?? true)
    }

    /// Keeps `answeredCallsByUser` true for `call` after a change: a user is in it while it is
    /// answered and not over, as its caller or a callee who accepted.
    func indexAnswered(_ call: ActiveCall) {
        let state = call.state
        let live = state.answeredAtMillis != nil && !state.isEnded
        for identity in [state.caller] + state.callees {
            let key = Self.userKey(state.appID, identity)
            if live && (identity == state.caller || state.status[identity] == .accepted) {
                if answeredCallsByUser[key, default: []].insert(state.id).inserted {
                    cluster?.markBusy(appID: state.appID, identity: identity, callID: state.id, untilMillis: clusterKeyEnd(state))
                }
            } else if answeredCallsByUser[key]?.remove(state.id) != nil {
                if answeredCallsByUser[key]?.isEmpty == true { answeredCallsByUser.removeValue(forKey: key) }
                cluster?.markBusy(appID: state.appID, identity: identity, callID: state.id, untilMillis: nil)
            }
        }
    }

    // MARK: Actions

    /// Admits `session` to the room of a live call it takes part in, on the device that carries
    /// its side, making the room at the first join. Room grants play no part: whatever they
    /// say, anyone else is refused (admin grant included).
    func admitToCallRoom(_ key: RoomKey, _ joiner: Joiner) throws(ErrorBody) {
        guard joiner.callGrant, let callID = callRooms[key], let call = calls[callID],
            call.state.admitToRoom(identity: joiner.peer.identity, device: joiner.device, seat: joiner.peer.peerID)
        else { throw Self.callRoomRefusal(key.name) }
        guard rooms.room(key) == nil else { return }
        do {
            apply(try rooms.create(key, maxParticipants: call.state.callees.count + 1, call: callID, now: now, wallMillis: wallMillis))
        } catch { throw error.body }
    }

    /// `call.answer`, `call.decline`, `call.cancel`, `call.end`, `call.ack` by the holder of
    /// `claims` from `device` (nil: over REST without naming a device). Each needs the `call`
    /// grant, as placing a call does.
    func callAction(
        _ type: String, _ request: CallActionRequest, claims: AccessTokenClaims, app: App, device: String?, seat: String? = nil,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        guard claims.grants.call == true else { return answer(.failure(Self.callGrantNeeded)) }
        do throws(ErrorBody) {
            try FieldLimits.check(request.callID, field: "call_id", limit: FieldLimits.callID)
            try FieldLimits.check(request.reason, field: "reason", limit: FieldLimits.reason)
        } catch { return answer(.failure(error)) }
        actOnCall(type, request, appID: app.id, identity: claims.sub, device: device, seat: seat, answer: answer)
    }

    /// An action on a call by `identity`, its grant and fields checked: carried out here when
    /// this node runs the call; in a cluster, passed on to the node that does (`forwarded`: it
    /// was passed on to this one), or taken over when its owner died; refused from the store's
    /// record otherwise.
    func actOnCall(
        _ type: String, _ request: CallActionRequest, appID: String, identity: String, device: String?, seat: String?,
        forwarded: Bool = false, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        guard waitingForCallLease.isEmpty && holdsCalls else {
            return whileHoldingCalls { [weak self] in
                self?.actOnCall(type, request, appID: appID, identity: identity, device: device, seat: seat, forwarded: forwarded, answer: answer)
            }
        }
        guard let call = calls[request.callID], call.state.appID == appID else {
            var action: [String: JSONValue] = [
                "action": .string(type), "call_id": .string(request.callID), "app": .string(appID), "identity": .string(identity),
            ]
            if let reason = request.reason { action["reason"] = .string(reason) }
            if let filter = request.filter { action["filter"] = .string(filter.rawValue) }
            if let device { action["device"] = .string(device) }
            if let seat { action["seat"] = .string(seat) }
            return notLiveHere(request.callID, appID: appID, identity: identity, action: action, forwarded: forwarded, answer: answer) {
                [weak self] call in
                self?.actHere(type, request, on: call, identity: identity, device: device, seat: seat, answer: answer)
            }
        }
        actHere(type, request, on: call, identity: identity, device: device, seat: seat, answer: answer)
    }

    /// `act`, answered once what it did is stored (`whenStored`).
    private func actHere(
        _ type: String, _ request: CallActionRequest, on call: ActiveCall, identity: String, device: String?, seat: String?,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        do throws(ErrorBody) {
            let result = try act(type, request, on: call, identity: identity, device: device, seat: seat)
            whenStored(call) { answer(.success(result)) }
        } catch { answer(.failure(error)) }
    }

    /// A request about a call this node does not run: in a cluster, passed on to the node
    /// that runs it, or continued here (`continueHere`) once this node took over a call whose
    /// owner died; refused from the store's record when no node runs it.
    private func notLiveHere(
        _ callID: String, appID: String, identity: String, action: [String: JSONValue], forwarded: Bool,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void, continueHere: @escaping (ActiveCall) -> Void
    ) {
        guard let cluster, !forwarded else { return refuseForCallNotLive(callID, identity: identity, appID: appID, answer: answer) }
        cluster.forward(action, callID: callID, answer: answer) { [weak self] in
            guard let self else { return }
            takeOverIfAbandoned(callID) { [weak self] whereabouts in
                guard let self else { return }
                switch whereabouts {
                case .here(let call) where call.state.appID == appID: continueHere(call)
                case .heldElsewhere: answer(.failure(Cluster.ownerGone))
                default: refuseForCallNotLive(callID, identity: identity, appID: appID, answer: answer)
                }
            }
        }
    }

    /// The refusal of a call request from a token without the `call` grant.
    static let callGrantNeeded = ErrorBody(.forbidden, "your token has no call grant")

    /// The refusal of a request about a call not live here: `call_ended` to a participant once
    /// the store shows the call (it ended), else `call_not_found`.
    private func refuseForCallNotLive(_ id: String, identity: String, appID: String, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        let clustered = cluster != nil
        withStore(for: appID, { try $0.callSummary(id: id, appID: appID) }) { result in
            if case .success(let stored?) = result, stored.caller == identity || stored.callees.contains(identity) {
                // In a cluster a call live in the store is on its way to another node (its
                // owner drains or died): asked again in a moment, it is answered.
                answer(.failure(clustered && stored.summary["state"] != "ended" ? Cluster.ownerGone : CallError.ended.body))
            } else if case .failure(let error) = result, Store.storageProblem(of: error) != nil {
                answer(.failure(.storeRead(error, reading: "the call")))
            } else {
                answer(.failure(CallError.notFound.body))
            }
        }
    }

    /// One action on a live call: the call decides; what it accepted is traced (nothing a
    /// refused request says is recorded), then its effects are carried out.
    private func act(
        _ type: String, _ request: CallActionRequest, on call: ActiveCall, identity: String, device: String?, seat: String?
    ) throws(ErrorBody) -> JSONValue {
        let nowMillis = wallMillis
        let effects: [CallState.Effect]
        /// The trace entry the accepted action leaves, if any.
        var traced: (event: String, detail: [String: JSONValue]?)?
        let wasRinging = call.state.status[identity] == .ringing
        do {
            switch type {
            case MessageType.callAnswer:
                effects = try call.state.answer(by: identity, device: device, seat: seat, nowMillis: nowMillis)
                traced = ("answered", nil)
            case MessageType.callDecline where request.reason == "filtered":
                // The phone did not show the call (Do Not Disturb, Focus, block list): not a
                // decline by the user; the user is unavailable once every device that rang is out.
                effects = try call.state.deviceOut(identity, device: device ?? "rest", nowMillis: nowMillis)
                if wasRinging { traced = ("filtered", ["filter": .string((request.filter ?? .unknown).rawValue)]) }
            case MessageType.callDecline:
                effects = try call.state.decline(by: identity, device: device, nowMillis: nowMillis)
                traced = ("declined", nil)
            case MessageType.callCancel: effects = try call.state.cancel(by: identity, nowMillis: nowMillis)
            case MessageType.callEnd:
                effects = try call.state.end(by: identity, device: device, reason: request.reason, nowMillis: nowMillis)
                traced = ("ended", nil)
            default:
                guard call.state.callees.contains(identity) else { throw CallError.notParticipant }
                effects = call.state.reached(callee: identity)
                if wasRinging { traced = ("ringing_shown", nil) }
            }
        } catch let error as CallError {
            throw error.body
        } catch {
            throw ErrorBody(.internal, "call action failed")
        }
        if let traced {
            store.trace(
                callID: call.state.id, user: identity, device: device ?? "rest", channel: "device", event: traced.event, atMillis: nowMillis,
                detail: traced.detail.map(JSONValue.object))
        }
        perform(call, effects)
        return describe(call)
    }

    /// `call.hold` (`POST /v1/calls/{id}/hold`): a participant of an answered call puts it on
    /// hold or takes it off; the other participants hear `call.held`. Needs the `call` grant.
    func holdCall(
        _ request: CallHoldRequest, claims: AccessTokenClaims, app: App, device: String?, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        guard claims.grants.call == true else { return answer(.failure(Self.callGrantNeeded)) }
        holdOnCall(request, appID: app.id, identity: claims.sub, device: device, answer: answer)
    }

    /// `holdCall` once its grant is checked, wherever the call runs (`actOnCall`).
    func holdOnCall(
        _ request: CallHoldRequest, appID: String, identity: String, device: String?, forwarded: Bool = false,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        guard waitingForCallLease.isEmpty && holdsCalls else {
            return whileHoldingCalls { [weak self] in
                self?.holdOnCall(request, appID: appID, identity: identity, device: device, forwarded: forwarded, answer: answer)
            }
        }
        let hold = { [weak self] (call: ActiveCall) in
            guard let self else { return }
            let effects: [CallState.Effect]
            do throws(CallError) { effects = try call.state.hold(by: identity, onHold: request.onHold) } catch { return answer(.failure(error.body)) }
            if !effects.isEmpty {
                store.trace(
                    callID: call.state.id, user: identity, device: device ?? "rest", channel: "device", event: request.onHold ? "held" : "resumed",
                    atMillis: wallMillis)
            }
            perform(call, effects)
            let result = describe(call)
            whenStored(call) { answer(.success(result)) }
        }
        guard let call = calls[request.callID], call.state.appID == appID else {
            var action: [String: JSONValue] = [
                "action": .string(MessageType.callHold), "call_id": .string(request.callID), "app": .string(appID), "identity": .string(identity),
                "on_hold": .bool(request.onHold),
            ]
            if let device { action["device"] = .string(device) }
            return notLiveHere(request.callID, appID: appID, identity: identity, action: action, forwarded: forwarded, answer: answer, continueHere: hold)
        }
        hold(call)
    }

    /// Carries out a call's effects, in order. `setup` times a new call's first save and pushes.
    ///
    /// In a cluster another node continues the call from what is stored if this one dies, so
    /// nobody hears of a state before it is stored: a batch that saves the call waits for the
    /// write, and every later batch and reply of the call waits behind it, in order
    /// (`ActiveCall.outbox`). A caller never hears "accepted" of an answer a node taking the
    /// call over would not know.
    ///
    /// On one node nobody continues the call, so its events go out at once; a reply still waits
    /// for the write (`whenStored`): a client told its call exists, or was answered, finds it so
    /// in the history after a `kill -9`. While the store refuses writes (they wait in memory,
    /// `store_backlog_writes`) replies do not wait for them.
    ///
    /// In a cluster, what a node does with a call waits while the node is not sure it still
    /// holds it (`whileHoldingCalls`), and is dropped if another node took the call meanwhile.
    func perform(_ call: ActiveCall, _ effects: [CallState.Effect], setup: CallSetupClock? = nil) {
        guard waitingForCallLease.isEmpty && holdsCalls else {
            return whileHoldingCalls { [weak self] in
                guard let self, calls[call.state.id] === call else { return }
                perform(call, effects, setup: setup)
            }
        }
        indexAnswered(call)
        guard let cluster else {
            guard effects.contains(.save), store.storageProblem == nil else { return carryOut(call, effects, setup: setup) }
            let entry = call.enqueue(ready: false) {}
            return carryOut(call, effects, setup: setup) { [weak self] in
                call.markReady(entry)
                self?.drain(call)
            }
        }
        if effects.contains(.save) {
            cluster.markRinging(
                appID: call.state.appID, callees: call.state.callees, ringing: Set(call.state.ringingCallees), callID: call.state.id,
                untilMillis: call.state.ringExpiresAtMillis)
        }
        let saves = effects.contains(.save)
        // An ended call's history goes in the same wait: a client told the call ended can read
        // its history through any node.
        let records = saves && effects.contains(.recordHistory)
        if records { store.recordHistory(call.state, video: call.video) }
        let entry = call.enqueue(ready: !saves) { [weak self, weak call] in
            guard let self, let call else { return }
            carryOut(call, effects.filter { $0 != .save && !(records && $0 == .recordHistory) }, setup: setup)
        }
        if saves {
            // The call is kept until its events are out, even if this node lets it go meanwhile.
            save(call, setup: setup) { [weak self] in
                call.markReady(entry)
                self?.drain(call)
            }
        }
        drain(call)
    }

    /// Runs `body` once everything the call did before is stored and carried out: a reply to a
    /// call action goes after the events it caused and once the state it reports is stored.
    func whenStored(_ call: ActiveCall, _ body: @escaping () -> Void) {
        guard waitingForCallLease.isEmpty && holdsCalls else { return whileHoldingCalls { [weak self] in self?.whenStored(call, body) } }
        _ = call.enqueue(ready: true, body)
        drain(call)
    }

    private func drain(_ call: ActiveCall) {
        while let next = call.takeReady() { next() }
    }

    /// Writes the call as it stands; `stored` runs on the loop once it is written (on one node,
    /// or once the storage refused it and it waits in memory: the call goes on meanwhile).
    private func save(_ call: ActiveCall, setup: CallSetupClock?, stored: (() -> Void)? = nil) {
        setup?.begin()
        let stored = stored.map(LoopBound.init)
        let scheduler = self.scheduler
        var written: (@Sendable () -> Void)?
        if setup != nil || stored != nil {
            written = { @Sendable in
                setup?.end()
                if let stored { scheduler?.execute { stored.value() } }
            }
        }
        store.saveCall(
            call.state, idempotencyKey: call.request.idempotencyKey, leaseUntilMillis: leaseUntilMillis,
            continuation: cluster == nil ? nil : call.continuation, written: written, settledWhenKept: cluster == nil)
    }

    /// `stored`: runs on the loop once the batch's save is written.
    private func carryOut(_ call: ActiveCall, _ effects: [CallState.Effect], setup: CallSetupClock?, stored: (() -> Void)? = nil) {
        for effect in effects {
            switch effect {
            case .notify(let identity, let event, let except):
                delivery.deliver(OutgoingEvent(event), toUser: identity, appID: call.state.appID, except: except, invitation: nil)
            case .ringConnections(let callee):
                ringConnections(callee, call: call)
            case .push(let push, let callee, let deviceID):
                guard let device = call.devices[callee]?.first(where: { $0.deviceID == deviceID }) else { continue }
                sendPush(push, to: device, callee: callee, call: call, setup: setup)
                if push == .alertInvite { repeatAlertInvite(call, callee: callee, device: device) }
            case .armRingTimer(let after):
                let id = call.state.id
                call.ringTimer = scheduler?.schedule(after: after) { [weak self] in
                    self?.whileHoldingCalls { [weak self] in
                        guard let self, let call = self.calls[id] else { return }
                        self.perform(call, call.state.ringTimedOut(nowMillis: self.wallMillis))
                    }
                }
            case .cancelRingTimer:
                if let timer = call.ringTimer { scheduler?.cancel(timer) }
                call.ringTimer = nil
            case .save:
                save(call, setup: setup, stored: stored)
            case .recordHistory:
                store.recordHistory(call.state, video: call.video)
            case .finished:
                forget(call)
            }
        }
        if !call.state.isRinging { call.ringing.stop() }
        if !call.state.isEnded { checkAttendance(call) }
    }

    /// An answered call none of whose participants (the caller, the callees who answered) has
    /// a session, connected or within its resume grace, ends `call_unattended_seconds` later
    /// unless one comes back: phones that vanished mid-call do not leave it (and its users
    /// busy) for ever. Called whenever the call or its participants' sessions change.
    func checkAttendance(_ call: ActiveCall) {
        let state = call.state
        let attended = state.answeredAtMillis == nil || state.isEnded
            || state.present.contains { !sessions.sessions(ofUser: Self.userKey(state.appID, $0)).isEmpty }
        if attended {
            if let timer = call.unattendedTimer { scheduler?.cancel(timer) }
            call.unattendedTimer = nil
            return
        }
        guard call.unattendedTimer == nil else { return }
        call.unattendedTimer = scheduler?.schedule(after: .seconds(configuration.limits.callUnattendedSeconds)) { [weak self, weak call] in
            self?.whileHoldingCalls { [weak self, weak call] in
                guard let self, let call, calls[call.state.id] === call else { return }
                unattendedTimerFired(call)
            }
        }
    }

    /// `checkAttendance`'s timer: the call ends if none of its participants came back.
    private func unattendedTimerFired(_ call: ActiveCall) {
        call.unattendedTimer = nil
        let state = call.state
        guard !state.present.contains(where: { !sessions.sessions(ofUser: Self.userKey(state.appID, $0)).isEmpty }) else { return }
        let end = { [weak self, weak call] in
            guard let self, let call, calls[call.state.id] === call else { return }
            logger.info("call ended: nobody in it is connected", ["call": call.state.id])
            perform(call, call.state.endByServer(reason: "unattended", nowMillis: wallMillis))
        }
        guard let cluster else { return end() }
        // Its participants may be on other nodes: ended only when none is anywhere (and
        // looked at again a period later when one is, or when Redis cannot say).
        cluster.presence(of: state.present, appID: state.appID, nowMillis: wallMillis) { [weak self, weak call] presence in
            guard let self, let call else { return }
            if let presence, presence.connected.isEmpty { return end() }
            checkAttendance(call)
        }
    }

    /// The sessions of `identity` changed (one opened, or one ended for good): its answered
    /// calls check who is still in them.
    func participantSessionsChanged(appID: String, identity: String) {
        for id in answeredCallsByUser[Self.userKey(appID, identity)] ?? [] {
            if let call = calls[id] { checkAttendance(call) }
        }
    }

    /// An ended call leaves the registry, and its room closes: every member hears why, and
    /// nobody can join again.
    private func forget(_ call: ActiveCall) {
        let state = call.state
        call.ringing.stop()
        for timer in [call.durationTimer, call.unattendedTimer, call.ringTimer].compactMap({ $0 }) { scheduler?.cancel(timer) }
        (call.durationTimer, call.unattendedTimer, call.ringTimer) = (nil, nil, nil)
        calls.removeValue(forKey: state.id)
        cluster?.release(callID: state.id)
        for identity in [state.caller] + state.callees {
            let key = Self.userKey(state.appID, identity)
            if liveCallsByUser[key]?.remove(state.id) != nil, liveCallsByUser[key]?.isEmpty == true {
                liveCallsByUser.removeValue(forKey: key)
            }
        }
        if case .room(let name) = call.media {
            let key = RoomKey(appID: state.appID, name: name)
            callRooms.removeValue(forKey: key)
            if rooms.room(key) != nil { try? closeRoom(key, reason: .callEnded) }
        }
        metrics.increment("switchboard_calls_ended_total", ["outcome": state.outcome?.rawValue ?? "unknown"])
        logger.info("call ended", ["call": state.id, "outcome": state.outcome?.rawValue ?? "", "reason": state.endReason ?? ""])
    }
}
