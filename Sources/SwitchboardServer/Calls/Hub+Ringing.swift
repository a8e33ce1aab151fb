import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Hub {
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

    /// `call.incoming`: the invite as an event.
    func incoming(_ call: ActiveCall) -> CallEvent {
        .incoming(callID: call.state.id, invite: .object(invitation(call)))
    }

    /// Delivers the invite to every connection of `callee`, wherever they are connected; each
    /// delivery comes back as a receipt (`invitationDelivered`).
    func ringConnections(_ callee: String, call: ActiveCall) {
        let state = call.state
        delivery.deliver(
            OutgoingEvent(incoming(call)), toUser: callee, appID: state.appID, except: nil,
            invitation: Invitation(callID: state.id, callee: callee))
    }

    /// Where a call's invite to `callee` went (this node's sessions at once, another node's
    /// when it says): each delivery is traced, the call knows which devices it rang, and a live
    /// one has reached the callee.
    func invitationDelivered(_ receipts: [DeliveryReceipt], _ invitation: Invitation) {
        guard let call = calls[invitation.callID], !receipts.isEmpty else { return }
        let callee = invitation.callee
        call.state.rang(callee, devices: Set(receipts.map(\.device)))
        let nowMillis = wallMillis
        for receipt in receipts {
            store.trace(
                callID: call.state.id, user: callee, device: receipt.device, channel: "websocket",
                event: receipt.attached ? "delivered" : "queued_for_resume", atMillis: nowMillis)
            if receipt.attached { perform(call, call.state.reached(callee: callee)) }
        }
    }

    /// A phone rung by an alert (no CallKit) rings only while the notification sounds (at most
    /// 30 s of the app's sound): while the call still rings for `callee` on that device, the
    /// alert is sent again every `alert_ring_repeat_seconds`, under the same collapse id (it
    /// replaces the one on the lock screen, and sounds again). The node running the call sends
    /// it; a node that takes the call over goes on (`adopt`).
    func repeatAlertInvite(_ call: ActiveCall, callee: String, device: Device) {
        let seconds = configuration.limits.alertRingRepeatSeconds
        guard seconds > 0 else { return }
        let id = call.state.id
        _ = scheduler?.schedule(after: .seconds(seconds)) { [weak self] in
            self?.whileHoldingCalls { [weak self] in
                guard let self, let call = calls[id] else { return }
                let state = call.state
                guard state.ringingCallees.contains(callee), !(state.filteredDevices[callee]?.contains(device.deviceID) ?? false),
                    let left = state.ringTimeLeft(at: now), left > .seconds(2)
                else { return }
                sendPush(.alertInvite, to: device, callee: callee, call: call)
                repeatAlertInvite(call, callee: callee, device: device)
            }
        }
    }

    /// What a push of a call carries: the invite with the keys PushKit apps read, or an alert
    /// (playing the device's `ringtone` when it registered one).
    func payload(_ push: CallState.Push, _ call: ActiveCall, ringtone: String? = nil) -> JSONValue {
        let state = call.state
        let caller: JSONValue = ["identity": .string(state.caller), "name": .string(call.callerName), "handle": .string(call.handle)]
        switch push {
        case .voipInvite:
            return voipPayload(call, invite: invitation(call))
        case .alertInvite:
            return [
                // Time-sensitive: it breaks through a Focus that allows the app, and sounds.
                "aps": [
                    "alert": ["title": "Incoming call", "body": .string(call.callerName)], "sound": .string(ringtone ?? "default"),
                    "interruption-level": "time-sensitive",
                ],
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

    /// Sends one push of a call to `device` the way the call says (`CallState.delivery`) and
    /// records its fate in the trace.
    func sendPush(_ push: CallState.Push, to device: Device, callee: String, call: ActiveCall, setup: CallSetupClock? = nil) {
        let type: PushType = push == .voipInvite ? .voip : .alert
        guard let token = type == .voip ? device.voipToken : device.apnsToken else { return }
        let state = call.state
        let plan = state.delivery(of: push, now: now)
        // The topic is the app's bundle id, or another the operator allowed that the device
        // registered with: never a client's string (a stored one from before is ignored).
        let topic = device.bundleID.flatMap { call.allowedTopics.contains($0) ? $0 : nil } ?? call.topic
        let notification = PushNotification(
            deviceToken: token, type: type, topic: topic, payload: JSONText.serialize(payload(push, call, ringtone: device.ringtone)),
            expiration: plan.expiresAtSeconds, collapseID: plan.collapseID)
        let callID = state.id
        let channel = type == .voip ? "voip_push" : "alert_push"
        store.trace(callID: callID, user: callee, device: device.deviceID, channel: channel, event: "push_sent", atMillis: wallMillis)
        let ringing = call.ringing
        let onlyWhileRinging = plan.onlyWhileRinging
        let stillWanted: @Sendable () -> Bool = { !onlyWhileRinging || ringing.isRinging }
        setup?.begin()
        var submitted: (@Sendable () -> Void)?
        if let setup { submitted = { setup.end() } }
        let deviceID = device.deviceID
        let scheduler = self.scheduler
        self.push.dispatch(
            notification, appID: state.appID, environment: device.environment, deadline: plan.deadline, stillWanted: stillWanted,
            onSubmitted: submitted
        ) { [weak self] result in
            scheduler?.execute { [weak self] in
                self?.metrics.recordPush(notification, result)
                self?.pushAnswered(result, push, callID: callID, callee: callee, device: deviceID, channel: channel)
            }
        }
    }

    /// What APNs said of a push: traced, then the call decides what it means for the ringing
    /// (`CallState.pushAnswered`).
    private func pushAnswered(_ result: PushResult, _ push: CallState.Push, callID: String, callee: String, device: String, channel: String) {
        store.trace(
            callID: callID, user: callee, device: device, channel: channel, event: result.accepted ? "apns_accepted" : "apns_refused",
            atMillis: wallMillis,
            detail: [
                "apns_status": .int(Int64(result.status)), "apns_id": .string(result.apnsID),
                "reason": result.failure.map { .string($0.apnsReason) } ?? .null, "attempts": .int(Int64(result.attempts)),
            ])
        guard let call = calls[callID] else { return }
        // An answer from APNs other than 200 is a refusal; no answer at all (status 0) is not.
        let outcome: CallState.PushOutcome = result.accepted ? .accepted : result.status >= 400 ? .refused : .unanswered
        perform(call, call.state.pushAnswered(push, callee: callee, device: device, outcome: outcome, nowMillis: wallMillis))
    }

    /// A device that comes online gets the calls ringing for its user (only that user's live
    /// calls are looked at, never every call).
    /// In a cluster, the calls ringing for the user on other nodes are asked for too: their
    /// nodes send the invite here.
    func offerRingingCalls(to session: Session) {
        let live = (liveCallsByUser[Self.userKey(session.app.id, session.identity)] ?? []).sorted().compactMap { calls[$0] }
        for call in live where call.state.ringingCallees.contains(session.identity) {
            offer(call, toPeer: session.peerID, identity: session.identity, device: session.deviceKey, node: nil)
        }
        guard let cluster else { return }
        let (peer, identity, device) = (session.peerID, session.identity, session.deviceKey)
        cluster.ringingCalls(appID: session.app.id, identity: identity, nowMillis: wallMillis) { [weak self] ids in
            guard let self else { return }
            for id in ids where calls[id] == nil { cluster.offerCall(id, peer: peer, identity: identity, device: device) }
        }
    }

    /// Rings a session that connected while `call` rings for its user: here, or (`node`) on the
    /// node it connected to.
    func offer(_ call: ActiveCall, toPeer peer: String, identity: String, device: String, node: String?) {
        guard call.state.ringingCallees.contains(identity) else { return }
        call.state.rang(identity, devices: [device])
        let event = OutgoingEvent(incoming(call))
        if let node, let cluster {
            guard case .value(let data) = event.data else { return }
            cluster.tell("peer", ["peer": .string(peer), "type": .string(event.type), "data": data], toNode: node)
        } else {
            delivery.deliver(event, toPeer: peer)
        }
        store.trace(callID: call.state.id, user: identity, device: device, channel: "websocket", event: "delivered_on_connect", atMillis: wallMillis)
    }
}
