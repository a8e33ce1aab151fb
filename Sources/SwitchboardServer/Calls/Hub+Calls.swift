import Foundation
import Synchronization
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

/// A call the hub is running.
final class ActiveCall {
    var state: CallState
    let request: CallCreateRequest
    let media: CallMedia
    let callerName: String
    let handle: String
    /// The app's bundle id: its pushes' topic unless a device names its own.
    let topic: String
    /// Each callee's devices when the call started: where its pushes go.
    let devices: [String: [Device]]
    var ringTimer: TimerID?
    /// Read by the call's push tasks (no retry once it stops ringing); set on the loop.
    let ringing = RingFlag()

    init(
        state: CallState, request: CallCreateRequest, media: CallMedia, callerName: String, handle: String, topic: String,
        devices: [String: [Device]]
    ) {
        self.state = state
        self.request = request
        self.media = media
        self.callerName = callerName
        self.handle = handle
        self.topic = topic
        self.devices = devices
    }

    var video: Bool { request.video ?? false }
}

/// Times the server's share of starting one call: from the invite arriving to every push
/// handed to the APNs connection and the call's record written, whichever comes last.
/// Each part `begin()`s before it starts and calls `end()` when done; the creator holds one
/// part while it sets the call up.
final class CallSetupClock: Sendable {
    private let started = ContinuousClock.now
    private let parts = Atomic<Int>(1)
    private let metrics: Metrics

    init(metrics: Metrics) { self.metrics = metrics }

    func begin() { parts.add(1, ordering: .relaxed) }

    func end() {
        guard parts.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        let elapsed = ContinuousClock.now - started
        metrics.observeRecent(
            "switchboard_call_setup_seconds",
            seconds: elapsed.seconds)
    }
}

/// Whether one call still rings, for its push tasks on other threads: an atomic flag each
/// call owns (no lock shared between the loop and the pushes). Set once, on the loop.
final class RingFlag: Sendable {
    private let stopped = Atomic<Bool>(false)
    var isRinging: Bool { !stopped.load(ordering: .acquiring) }
    func stop() { stopped.store(true, ordering: .releasing) }
}

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
    func createCall(
        _ request: CallCreateRequest, caller: AccessTokenClaims, app: App, device: String?, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        let setup = CallSetupClock(metrics: metrics)
        let callees: [String], timeout: Int
        do throws(ErrorBody) {
            guard caller.grants.call == true else { throw ErrorBody(.forbidden, "your token has no call grant") }
            (callees, timeout) = try Self.checkCallRequest(request, caller: caller.sub, limits: configuration.limits)
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
        // Block lists and devices are never queued writes: only an earlier call's record is.
        withStore({ store in
            var needs = CallPrerequisites(devices: [:])
            if let earlierID { needs.earlier = try store.callSummary(id: earlierID, appID: appID)?.summary }
            (needs.blockedBy, needs.devices) = try store.ringList(callerID, callees: callees, appID: appID)
            return needs
        }, afterQueuedWrites: earlierID != nil) { [weak self] result in
            guard let self else { return }
            pendingCallSetups -= 1
            do throws(ErrorBody) {
                let needs: CallPrerequisites
                do { needs = try result.get() } catch {
                    logger.error("call setup read failed", ["app": appID, "error": "\(error)"])
                    throw .storeRead(error, reading: "the callees' devices")
                }
                answer(.success(try startCall(request, caller: caller, app: app, device: device, callees: callees, timeout: timeout,
                    idempotency: idempotency, needs: needs, setup: setup)))
            } catch { answer(.failure(error)) }
        }
    }

    /// A call that could not be recorded would be lost from everyone's history: none starts
    /// while the storage refuses writes.
    private func refuseWithoutStorage() throws(ErrorBody) {
        guard let problem = store.storageProblem else { return }
        metrics.increment("switchboard_calls_refused_total", ["reason": "storage"])
        throw ErrorBody(.unavailable, "storage unavailable (\(problem)): calls cannot be recorded; retry later")
    }

    /// `createCall` on the loop once the store answered: the checks that need it, then the call.
    private func startCall(
        _ request: CallCreateRequest, caller: AccessTokenClaims, app: App, device: String?, callees: [String], timeout: Int,
        idempotency: String?, needs: CallPrerequisites, setup: CallSetupClock
    ) throws(ErrorBody) -> JSONValue {
        let limits = configuration.limits
        // The same key again (a request that raced this one may have made the call meanwhile).
        if let idempotency, let existing = callIdempotency[idempotency], let call = calls[existing] { return describe(call) }
        if let earlier = needs.earlier { return earlier }

        // Who may ring whom: block lists, then rate limits. A refused invite sends nothing.
        if let callee = needs.blockedBy {
            metrics.increment("switchboard_calls_refused_total", ["reason": "blocked"])
            throw ErrorBody(.forbidden, "\(callee) does not accept calls from you")
        }
        let now = self.now
        func allowed(_ key: String, _ limit: Int) -> Bool {
            let recent = (inviteLog[key] ?? []).filter { now - $0 < .seconds(60) }
            inviteLog[key] = recent.isEmpty ? nil : recent
            return recent.count < limit
        }
        pruneCallBookkeeping(now: now)
        let callerKey = "caller\u{0}" + Self.userKey(app.id, caller.sub)
        guard allowed(callerKey, limits.invitesPerMinute),
            callees.allSatisfy({ allowed(callerKey + "\u{0}" + $0, limits.invitesPerPairPerMinute) })
        else {
            metrics.increment("switchboard_calls_refused_total", ["reason": "rate_limited"])
            throw ErrorBody(.rateLimited, "too many calls; try again in a minute")
        }
        inviteLog[callerKey, default: []].append(now)
        for callee in callees { inviteLog[callerKey + "\u{0}" + callee, default: []].append(now) }

        // Busy: already in an answered call. Who else rings, and how, the call decides.
        let busy = Set(callees.filter { (request.busyPolicy ?? .reject) == .reject && isInCall($0, appID: app.id) })
        let connected = Set(callees.filter { !sessions.sessions(ofUser: Self.userKey(app.id, $0)).isEmpty })

        let id = RandomID.uuid().uuidString.lowercased()
        let media: CallMedia
        if case .external(let descriptor) = request.media {
            media = .external(descriptor)
        } else {
            media = .room("call-" + id)
        }
        let state = CallState(
            id: id, appID: app.id, caller: caller.sub, callerDevice: device, callees: callees, busy: busy, connected: connected,
            phones: needs.devices.mapValues { $0.compactMap(Self.phone) }, now: now, nowMillis: wallMillis, ringTimeout: .seconds(timeout))
        let call = ActiveCall(
            state: state, request: request, media: media,
            callerName: String((request.callerName ?? caller.name ?? caller.sub).prefix(256)),
            handle: String((request.handle ?? caller.sub).prefix(256)), topic: app.bundleID, devices: needs.devices)
        calls[id] = call
        if let idempotency { callIdempotency[idempotency] = id }
        // The call's room is made at its first join (admitToCallRoom) and closed when it ends.
        if case .room(let name) = media { callRooms[RoomKey(appID: app.id, name: name)] = id }
        for identity in [caller.sub] + callees { liveCallsByUser[Self.userKey(app.id, identity), default: []].insert(id) }
        metrics.increment("switchboard_calls_total")
        logger.info("call created", ["call": id, "app": app.id, "caller": caller.sub, "callees": callees.joined(separator: ",")])

        perform(call, call.state.start(nowMillis: wallMillis), setup: setup)
        setup.end()
        return describe(call)
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
        guard callees.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 256 }), !callees.contains(caller) else {
            throw ErrorBody(.badRequest, "callees are other users' identities (1-256 bytes)")
        }
        let timeout = request.ringTimeoutSeconds ?? limits.ringTimeoutSeconds
        guard (5...180).contains(timeout) else { throw ErrorBody(.badRequest, "ring_timeout_seconds must be 5 to 180") }
        if let metadata = request.metadata { try checkSize(metadata, what: "metadata", limit: limits.maxDataBytes) }
        if case .external(let descriptor) = request.media { try checkSize(descriptor, what: "media descriptor", limit: limits.maxDataBytes) }
        if case .room(let name) = request.media, !name.isEmpty {
            throw ErrorBody(.badRequest, "media.room cannot be chosen: a call's room is always call-<call id>")
        }
        return (callees, timeout)
    }

    /// Forgets invite counts older than a minute and idempotency keys of calls that ended long
    /// ago, so the maps stay bounded (at most every ten seconds).
    func pruneCallBookkeeping(now: ContinuousClock.Instant) {
        guard now - lastPrune > .seconds(10) else { return }
        lastPrune = now
        inviteLog = inviteLog.compactMapValues { times in
            let recent = times.filter { now - $0 < .seconds(60) }
            return recent.isEmpty ? nil : recent
        }
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
                answeredCallsByUser[key, default: []].insert(state.id)
            } else if answeredCallsByUser[key]?.remove(state.id) != nil, answeredCallsByUser[key]?.isEmpty == true {
                answeredCallsByUser.removeValue(forKey: key)
            }
        }
    }

    // MARK: Ringing

    /// The invite, as the callee's devices get it (event and VoIP payload alike).
    func invitation(_ call: ActiveCall) -> [String: JSONValue] {
        let state = call.state
        var invite: [String: JSONValue] = [
            "call_id": .string(state.id),
            "caller": ["identity": .string(state.caller), "name": .string(call.callerName), "handle": .string(call.handle)],
            "callees": .array(state.callees.map(JSONValue.string)), "video": .bool(call.video),
            "created_at": .int(state.createdAtMillis), "ring_expires_at": .int(state.ringExpiresAtMillis),
            "media": call.media.json,
        ]
        if let metadata = call.request.metadata { invite["metadata"] = metadata }
        return invite
    }

    /// Delivers the invite to every connection of `callee`: each is traced, and a live one has
    /// reached the callee.
    func ringConnections(_ callee: String, call: ActiveCall) {
        let state = call.state
        let incoming = OutgoingEvent(type: CallEvent.Kind.incoming.rawValue, data: .value(.object(invitation(call))))
        let receipts = delivery.deliver(incoming, toUser: callee, appID: state.appID, except: nil)
        call.state.rang(callee, devices: Set(receipts.map(\.device)))
        let nowMillis = wallMillis
        for receipt in receipts {
            store.trace(
                callID: state.id, user: callee, device: receipt.device, channel: "websocket",
                event: receipt.attached ? "delivered" : "queued_for_resume", atMillis: nowMillis)
            if receipt.attached { perform(call, call.state.reached(callee: callee)) }
        }
    }

    /// What a push of a call carries: the invite with the keys PushKit apps read, or an alert.
    func payload(_ push: CallState.Push, _ call: ActiveCall) -> JSONValue {
        let state = call.state
        let caller: JSONValue = ["identity": .string(state.caller), "name": .string(call.callerName), "handle": .string(call.handle)]
        switch push {
        case .voipInvite:
            return voipPayload(call, invite: invitation(call))
        case .alertInvite:
            return [
                "aps": ["alert": ["title": "Incoming call", "body": .string(call.callerName)], "sound": "default"],
                "call_id": .string(state.id), "caller": caller, "video": .bool(call.video),
                "ring_expires_at": .int(state.ringExpiresAtMillis),
            ]
        case .missedCall:
            return [
                "aps": ["alert": ["title": "Missed call", "body": .string(call.callerName)], "sound": "default"],
                "call_id": .string(state.id), "missed": true,
            ]
        }
    }

    /// The VoIP payload: the invite plus the keys apps written like the seeds read (`UUID`,
    /// `handle`, `hasVideo`), kept under APNs' 5120 bytes by shortening display fields.
    func voipPayload(_ call: ActiveCall, invite: [String: JSONValue]) -> JSONValue {
        var payload = invite
        payload["UUID"] = .string(call.state.id.uppercased())
        payload["handle"] = .string(call.handle)
        payload["hasVideo"] = .bool(call.video)
        func size(_ value: [String: JSONValue]) -> Int { JSONText.serialize(.object(value)).count }
        if size(payload) > 5000 { payload.removeValue(forKey: "metadata") }
        if size(payload) > 5000 { payload["media"] = ["type": .string({ if case .room = call.media { "room" } else { "external" } }())] }
        if size(payload) > 5000 {
            payload["caller"] = [
                "identity": .string(String(call.state.caller.prefix(64))), "name": .string(String(call.callerName.prefix(64))),
                "handle": .string(String(call.handle.prefix(64))),
            ]
            payload["handle"] = .string(String(call.handle.prefix(64)))
            payload["callees"] = .array(call.state.callees.prefix(8).map { .string(String($0.prefix(64))) })
        }
        return .object(payload)
    }

    /// Sends one push of a call to `device` and records its fate in the trace.
    func sendPush(_ push: CallState.Push, to device: Device, callee: String, call: ActiveCall, setup: CallSetupClock? = nil) {
        let type: PushType = push == .voipInvite ? .voip : .alert
        guard let token = type == .voip ? device.voipToken : device.apnsToken else { return }
        let state = call.state
        let bytes = JSONText.serialize(payload(push, call))
        let notification = PushNotification(
            deviceToken: token, type: type, topic: device.bundleID ?? call.topic, payload: bytes,
            expiration: type == .voip ? state.ringExpiresAtMillis / 1000 : nil, collapseID: type == .alert ? state.id : nil)
        let callID = state.id
        let channel = type == .voip ? "voip_push" : "alert_push"
        store.trace(callID: callID, user: callee, device: device.deviceID, channel: channel, event: "push_sent", atMillis: wallMillis)
        let ringing = call.ringing
        let deadline = type == .voip ? state.ringExpiresAt : now + .seconds(30)
        let scheduler = self.scheduler
        var stillWanted: @Sendable () -> Bool = { true }
        if type == .voip { stillWanted = { ringing.isRinging } }
        setup?.begin()
        var submitted: (@Sendable () -> Void)?
        if let setup { submitted = { setup.end() } }
        let deviceID = device.deviceID
        let invite = push != .missedCall
        self.push.dispatch(
            notification, appID: state.appID, environment: device.environment, deadline: deadline, stillWanted: stillWanted,
            onSubmitted: submitted
        ) { [weak self] result in
            scheduler?.execute { [weak self] in
                self?.pushAnswered(result, callID: callID, callee: callee, device: deviceID, channel: channel, invite: invite)
            }
        }
    }

    /// What APNs said of a push: traced; an accepted invite has reached a device; one APNs
    /// refused (a dead token, a wrong topic) cannot ring that device.
    private func pushAnswered(_ result: PushResult, callID: String, callee: String, device: String, channel: String, invite: Bool) {
        store.trace(
            callID: callID, user: callee, device: device, channel: channel, event: result.accepted ? "apns_accepted" : "apns_refused",
            atMillis: wallMillis,
            detail: [
                "apns_status": .int(Int64(result.status)), "apns_id": .string(result.apnsID),
                "reason": result.failure.map { .string($0.apnsReason) } ?? .null, "attempts": .int(Int64(result.attempts)),
            ])
        guard invite, let call = calls[callID] else { return }
        if result.accepted {
            perform(call, call.state.reached(callee: callee))
        } else if result.status >= 400, let effects = try? call.state.deviceOut(callee, device: device, nowMillis: wallMillis) {
            perform(call, effects)
        }
    }

    /// A device that comes online gets the calls ringing for its user.
    func offerRingingCalls(to session: Session) {
        for call in calls.values where call.state.appID == session.app.id && call.state.ringingCallees.contains(session.identity) {
            call.state.rang(session.identity, devices: [session.deviceKey])
            sendEvent(CallEvent.Kind.incoming.rawValue, .object(invitation(call)), to: session)
            store.trace(
                callID: call.state.id, user: session.identity, device: session.deviceKey, channel: "websocket",
                event: "delivered_on_connect", atMillis: wallMillis)
        }
    }

    // MARK: Actions

    /// Admits `session` to the room of a live call it takes part in, on the device that carries
    /// its side, making the room at the first join. Room grants play no part: whatever they
    /// say, anyone else is refused (admin grant included).
    func admitToCallRoom(_ key: RoomKey, session: Session) throws(ErrorBody) {
        guard session.claims.grants.call == true, let callID = callRooms[key], let call = calls[callID],
            call.state.admitToRoom(identity: session.identity, device: session.deviceKey)
        else { throw Self.callRoomRefusal(key.name) }
        guard rooms.room(key) == nil else { return }
        do {
            apply(try rooms.create(key, maxParticipants: call.state.callees.count + 1, call: callID, now: now, wallMillis: wallMillis))
        } catch { throw error.body }
    }

    /// `call.answer`, `call.decline`, `call.cancel`, `call.end`, `call.ack` by `identity` from
    /// `device` (nil: over REST without naming a device).
    func callAction(
        _ type: String, _ request: CallActionRequest, identity: String, app: App, device: String?,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) {
        guard let call = calls[request.callID], call.state.appID == app.id else {
            return refuseForCallNotLive(request.callID, identity: identity, app: app, answer: answer)
        }
        do throws(ErrorBody) { answer(.success(try act(type, request, on: call, identity: identity, device: device))) } catch {
            answer(.failure(error))
        }
    }

    /// The refusal of a request about a call not live here: `call_ended` to a participant once
    /// the store shows the call (it ended), else `call_not_found`.
    private func refuseForCallNotLive(_ id: String, identity: String, app: App, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        let appID = app.id
        withStore({ try $0.callSummary(id: id, appID: appID) }) { result in
            if case .success(let stored?) = result, stored.caller == identity || stored.callees.contains(identity) {
                answer(.failure(CallError.ended.body))
            } else if case .failure(let error) = result, Store.storageProblem(of: error) != nil {
                answer(.failure(.storeRead(error, reading: "the call")))
            } else {
                answer(.failure(CallError.notFound.body))
            }
        }
    }

    private func act(_ type: String, _ request: CallActionRequest, on call: ActiveCall, identity: String, device: String?) throws(ErrorBody) -> JSONValue {
        let nowMillis = wallMillis
        let effects: [CallState.Effect]
        do {
            switch type {
            case MessageType.callAnswer: effects = try call.state.answer(by: identity, device: device, nowMillis: nowMillis)
            case MessageType.callDecline where request.reason == "filtered":
                // The phone did not show the call (Do Not Disturb, Focus, block list): not a
                // decline by the user; the user is unavailable once every device that rang is out.
                store.trace(
                    callID: call.state.id, user: identity, device: device ?? "rest", channel: "device", event: "filtered", atMillis: nowMillis,
                    detail: ["filter": .string((request.filter ?? .unknown).rawValue)])
                effects = try call.state.deviceOut(identity, device: device ?? "rest", nowMillis: nowMillis)
            case MessageType.callDecline: effects = try call.state.decline(by: identity, device: device, nowMillis: nowMillis)
            case MessageType.callCancel: effects = try call.state.cancel(by: identity, nowMillis: nowMillis)
            case MessageType.callEnd:
                effects = try call.state.end(by: identity, device: device, reason: request.reason, nowMillis: nowMillis)
            default:
                guard call.state.callees.contains(identity) else { throw CallError.notParticipant }
                store.trace(
                    callID: call.state.id, user: identity, device: device ?? "rest", channel: "device", event: "ringing_shown",
                    atMillis: nowMillis)
                effects = call.state.reached(callee: identity)
            }
        } catch let error as CallError {
            throw error.body
        } catch {
            throw ErrorBody(.internal, "call action failed")
        }
        if type == MessageType.callAnswer || (type == MessageType.callDecline && request.reason != "filtered") || type == MessageType.callEnd {
            store.trace(
                callID: call.state.id, user: identity, device: device ?? "rest", channel: "device",
                event: type == MessageType.callAnswer ? "answered" : type == MessageType.callDecline ? "declined" : "ended", atMillis: nowMillis)
        }
        perform(call, effects)
        return describe(call)
    }

    /// `call.hold` (`POST /v1/calls/{id}/hold`): a participant of an answered call puts it on
    /// hold or takes it off; the other participants hear `call.held`.
    func holdCall(_ request: CallHoldRequest, identity: String, app: App, device: String?, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        guard let call = calls[request.callID], call.state.appID == app.id else {
            return refuseForCallNotLive(request.callID, identity: identity, app: app, answer: answer)
        }
        let effects: [CallState.Effect]
        do { effects = try call.state.hold(by: identity, onHold: request.onHold) } catch { return answer(.failure(error.body)) }
        if !effects.isEmpty {
            store.trace(
                callID: call.state.id, user: identity, device: device ?? "rest", channel: "device", event: request.onHold ? "held" : "resumed",
                atMillis: wallMillis)
        }
        perform(call, effects)
        answer(.success(describe(call)))
    }

    /// Carries out a call's effects, in order. `setup` times a new call's first save and pushes.
    func perform(_ call: ActiveCall, _ effects: [CallState.Effect], setup: CallSetupClock? = nil) {
        indexAnswered(call)
        for effect in effects {
            switch effect {
            case .notify(let identity, let event, let except):
                delivery.deliver(OutgoingEvent(event), toUser: identity, appID: call.state.appID, except: except)
            case .ringConnections(let callee):
                ringConnections(callee, call: call)
            case .push(let push, let callee, let deviceID):
                guard let device = call.devices[callee]?.first(where: { $0.deviceID == deviceID }) else { continue }
                sendPush(push, to: device, callee: callee, call: call, setup: setup)
            case .armRingTimer(let after):
                let id = call.state.id
                call.ringTimer = scheduler?.schedule(after: after) { [weak self] in
                    guard let self, let call = self.calls[id] else { return }
                    self.perform(call, call.state.ringTimedOut(nowMillis: self.wallMillis))
                }
            case .cancelRingTimer:
                if let timer = call.ringTimer { scheduler?.cancel(timer) }
                call.ringTimer = nil
            case .save:
                var written: (@Sendable () -> Void)?
                if let setup {
                    setup.begin()
                    written = { setup.end() }
                }
                store.saveCall(call.state, idempotencyKey: call.request.idempotencyKey, written: written)
            case .recordHistory:
                store.recordHistory(call.state, video: call.video)
            case .finished:
                forget(call)
            }
        }
        if !call.state.isRinging { call.ringing.stop() }
    }

    /// An ended call leaves the registry, and its room closes: every member hears why, and
    /// nobody can join again.
    private func forget(_ call: ActiveCall) {
        let state = call.state
        call.ringing.stop()
        calls.removeValue(forKey: state.id)
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

    /// The call as its participants see it.
    func describe(_ call: ActiveCall) -> JSONValue {
        var summary = call.state.summary.objectValue ?? [:]
        summary["media"] = call.media.json
        summary["video"] = .bool(call.video)
        return .object(summary)
    }

    /// `GET /v1/calls`: a page of `identity`'s calls, newest first, created before `before`:
    /// its live calls (ringing or answered; `state` says which, `outcome` is null) among its
    /// history of ended ones. `more`: an older page may follow.
    func callHistory(
        app: App, identity: String, limit: Int, before: Int64?, answer: @escaping (Result<(entries: [JSONValue], more: Bool), any Error>) -> Void
    ) {
        let cutoff = before ?? .max
        let nowMillis = wallMillis
        // The live calls as they are now; the store read below is queued after every write
        // made so far, so a call that ended before this request is in it.
        let live = (liveCallsByUser[Self.userKey(app.id, identity)] ?? []).compactMap { calls[$0] }
            .filter { $0.state.createdAtMillis < cutoff }
            .map { call -> (Int64, JSONValue) in (call.state.createdAtMillis, liveHistoryEntry(call, for: identity, nowMillis: nowMillis)) }
        let appID = app.id
        withStore({ try $0.history(appID: appID, userID: identity, limit: limit, before: before) }) { result in
            answer(
                result.map { stored in
                    // A call that ended while the read waited is in both: its ended entry wins.
                    let ended = Set(stored.compactMap { $0["call_id"]?.stringValue })
                    let merged = (live.filter { !ended.contains($0.1["call_id"]?.stringValue ?? "") }
                        + stored.map { ($0["created_at"]?.intValue ?? 0, $0) }).sorted { $0.0 > $1.0 }
                    return (merged.prefix(limit).map(\.1), stored.count == limit || merged.count > limit)
                })
        }
    }

    /// A live call as `identity`'s history shows it.
    private func liveHistoryEntry(_ call: ActiveCall, for identity: String, nowMillis: Int64) -> JSONValue {
        let state = call.state
        return [
            "call_id": .string(state.id), "state": .string(state.isRinging ? "ringing" : "accepted"),
            "direction": .string(identity == state.caller ? "outgoing" : "incoming"),
            "peers": .array(state.peers(of: identity).map(JSONValue.string)), "video": .bool(call.video),
            "created_at": .int(state.createdAtMillis), "answered_at": state.answeredAtMillis.map(JSONValue.int) ?? .null,
            "ended_at": .null, "duration_ms": .int(state.answeredAtMillis.map { max(0, nowMillis - $0) } ?? 0),
            "outcome": .null, "end_reason": .null, "ended_by": .null,
        ]
    }

    /// `GET /v1/calls/{id}` for a participant: a live call as it is now, an ended one as the
    /// store has it once every write queued before this request is done.
    func callSummary(id: String, identity: String, app: App, admin: Bool, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        if let call = calls[id], call.state.appID == app.id {
            guard admin || call.state.caller == identity || call.state.callees.contains(identity) else {
                return answer(.failure(CallError.notParticipant.body))
            }
            return answer(.success(describe(call)))
        }
        let appID = app.id
        withStore({ try $0.callSummary(id: id, appID: appID) }) { [logger] result in
            switch result {
            case .success(let stored?):
                guard admin || stored.caller == identity || stored.callees.contains(identity) else {
                    return answer(.failure(CallError.notParticipant.body))
                }
                answer(.success(stored.summary))
            case .success(nil):
                answer(.failure(CallError.notFound.body))
            case .failure(let error):
                logger.error("call read failed", ["call": id, "error": "\(error)"])
                answer(.failure(.storeRead(error, reading: "the call")))
            }
        }
    }
}
