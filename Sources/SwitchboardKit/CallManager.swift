import Foundation
import SwitchboardProtocol
import SwitchboardSupport

/// Calls on a phone: turns VoIP pushes and server events into the system's call UI, and the
/// user's actions on that UI into requests to the server. The CallKit UUID of a call is the
/// server's call id, so a push and a WebSocket invite for one call are one call.
///
/// Each call is a `PhoneCall` value (events in, effects out); the manager feeds it and performs
/// what it says, outside its lock.
///
/// Wire it at launch, before anything else (PushKit requires it):
///
/// ```swift
/// let system = CallKitSystem(configuration: …)      // InAppCallSystem() where CallKit is off
/// let calls = CallManager(client: client, system: system)
/// calls.start()
/// // PKPushRegistryDelegate (PushKitBridge does this):
/// calls.handleIncomingVoIPPush(payload: payload.dictionaryPayload as! [String: Any], completion: completion)
/// ```
public final class CallManager: CallSystemDelegate, @unchecked Sendable {
    // Safety: mutable state is in `calls`, under its lock; the rest is immutable.

    /// How long to wait for the server before failing an answer or ending an unknown call.
    public let serverTimeout: Duration
    /// How long after a call is up here (answered, or placed) the system may take to activate
    /// the audio session before the app hears `audioNotActivated`.
    public let audioActivationTimeout: Duration
    /// Whether the system's audio session is active now (its last `didActivate`/`didDeactivate`).
    private let audioIsActive = Locked(false)
    /// The call that came up here last (answered or placed): the one audio is for.
    private let lastUp = Locked<UUID?>(nil)
    /// The connection to the server.
    public let client: SwitchboardClient
    /// The phone's call UI.
    public let system: any CallSystem
    /// What happens to calls, for the app's UI and media: one consumer only (an `AsyncStream`
    /// hands each event to one iterator). Where several parts of the app follow the calls (the
    /// UI and the media layer), each takes its own stream from `subscribe()`.
    public let events: AsyncStream<CallManagerEvent>
    private let sink: AsyncStream<CallManagerEvent>.Continuation
    private let subscribers = Subscribers<CallManagerEvent>()
    /// The users behind the caller handles the call UI showed (for call-backs from Recents).
    public let callers: CallerDirectory
    private let http: any HTTPTransport
    private let calls = Locked<[UUID: PhoneCall]>([:])
    private let listening = Locked<Task<Void, Never>?>(nil)
    /// Requests on their way to the server (each retried until `serverTimeout`), by ticket.
    private let outbox = Locked<(next: Int, tasks: [Int: Task<Void, Never>])>((0, [:]))
    /// Ended calls are kept this long, so a late push for one is recognized and ended at once.
    static let endedCallMemory: TimeInterval = 600

    /// Makes the manager the delegate of `system`. `http` defaults to the platform's transport.
    /// `callers`: where the handles of callers shown are remembered (a directory in the app's
    /// `UserDefaults` by default).
    public init(
        client: SwitchboardClient, system: any CallSystem, http: (any HTTPTransport)? = nil, serverTimeout: Duration = .seconds(10),
        callers: CallerDirectory = CallerDirectory(), audioActivationTimeout: Duration = .seconds(5)
    ) {
        self.audioActivationTimeout = audioActivationTimeout
        self.client = client
        self.callers = callers
        self.system = system
        self.http = http ?? DefaultTransports.http()
        self.serverTimeout = serverTimeout
        (events, sink) = AsyncStream.makeStream(of: CallManagerEvent.self)
        system.delegate = self
    }

    /// Follows the client's events (call them before or after `client.connect()`), across
    /// `client.disconnect()` and a later `connect()` too: once is enough.
    public func start() {
        let events = client.lastingEvents()
        listening.withLock { task in
            task?.cancel()
            task = Task { [weak self] in
                for await event in events {
                    guard let self else { return }
                    switch event {
                    case .event(let type, let data, _):
                        if let event = CallEvent(type: type, data: data) { self.serverEvent(event) }
                    case .sessionReplaced: await self.resynchronize()
                    default: break
                    }
                }
            }
        }
    }

    /// A stream of its own of what happens to calls from now on, beside `events` and every
    /// other subscriber's: a UI and a media layer each get every event (`audioActive` above
    /// all). It ends when its reader stops.
    public func subscribe() -> AsyncStream<CallManagerEvent> {
        subscribers.add(lasting: true)
    }

    /// Hands an event to `events` and to every subscriber.
    private func emit(_ event: CallManagerEvent) {
        sink.yield(event)
        subscribers.yield(event)
    }

    /// The calls the manager is following.
    public var liveCallIDs: [UUID] { calls.withLock { $0.values.filter { !$0.isEnded }.map(\.id) } }

    // MARK: Running the calls

    /// Feeds one call and performs its effects. `create` makes it when it is not known.
    private func update(_ id: UUID, create: (() -> (PhoneCall, [PhoneCall.Effect]))? = nil, _ step: (inout PhoneCall) -> [PhoneCall.Effect]) {
        let effects = calls.withLock { calls -> [PhoneCall.Effect] in
            if calls[id] == nil, let create {
                forgetOldCalls(&calls)
                let (call, effects) = create()
                calls[id] = call
                return effects
            }
            guard var call = calls[id] else { return [] }
            let effects = step(&call)
            calls[id] = call
            return effects
        }
        perform(effects, for: id)
    }

    private func forgetOldCalls(_ calls: inout [UUID: PhoneCall]) {
        let cutoff = Date().addingTimeInterval(-Self.endedCallMemory)
        calls = calls.filter { $0.value.endedAt.map { $0 > cutoff } ?? true }
    }

    private func perform(_ effects: [PhoneCall.Effect], for id: UUID) {
        for effect in effects {
            switch effect {
            case .report(let update):
                system.reportNewIncomingCall(id, update: update) { [weak self] error in
                    self?.update(id) { $0.reportCompleted(error) }
                }
            case .endOnSystem(let reason): system.reportCall(id, endedAt: Date(), reason: reason)
            case .connectedOnSystem: system.reportOutgoingCallConnected(id)
            case .tellServer(let type, let request): send(type, request)
            case .tellServerHold(let held): send(MessageType.callHold, CallHoldRequest(callID: id.uuidString.lowercased(), onHold: held))
            case .event(let event): emit(event)
            }
        }
    }

    /// A request the call needs the server to hear; retried while the connection comes back.
    /// Waits until every request sent so far reached the server or was given up (after
    /// `serverTimeout`): an app, or a softphone, calls it before it disconnects, so that a
    /// hang-up tapped just before is not lost with the connection.
    public func settle() async {
        let pending = outbox.withLock { Array($0.tasks.values) }
        for task in pending { await task.value }
    }

    private func send(_ type: String, _ request: some Encodable & Sendable) {
        let client = self.client
        let deadline = ContinuousClock.now + serverTimeout
        track { await Self.deliver(type, request, through: client, until: deadline) }
    }

    /// Runs `work` (a talk with the server, bounded by `serverTimeout`) as a task the manager
    /// keeps until it ends, so that `settle()` waits for it and none is a task nobody holds.
    private func track(_ work: @escaping @Sendable () async -> Void) {
        let outbox = self.outbox
        outbox.withLock { box in
            let ticket = box.next
            box.next += 1
            box.tasks[ticket] = Task {
                defer { _ = outbox.withLock { $0.tasks.removeValue(forKey: ticket) } }
                await work()
            }
        }
    }

    private static func deliver(
        _ type: String, _ request: some Encodable & Sendable, through client: SwitchboardClient, until deadline: ContinuousClock.Instant
    ) async {
        while ContinuousClock.now < deadline {
            do {
                try await client.connect()
                try await client.request(type, encoding: request, timeout: deadline - ContinuousClock.now)
                return
            } catch SwitchboardError.server {
                return  // the server heard it and said no (the call is over): nothing to retry
            } catch {
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    // MARK: PushKit

    /// Handles a VoIP push. Reports a call to the system **before returning**, whatever the
    /// payload holds (a malformed, stale or unknown call is reported, then ended once the system
    /// has shown it), then connects and asks the server for the call's state to end it at once
    /// if it is over. `mustReport` is PushKit's (iOS 26.4): false says the system needs no
    /// report for this push, and then nothing is shown for a push with nothing to ring for: a
    /// call this phone knows (ringing, or over), a malformed payload, a ring that expired.
    public func handleIncomingVoIPPush(payload: [String: Any], mustReport: Bool = true, completion: @escaping @Sendable () -> Void) {
        let push = IncomingPush(payload)
        let id = push.callID ?? UUID()
        let now = Date()
        let expired = isExpired(push, at: now)
        if !mustReport, push.callID == nil || expired || calls.withLock({ $0[id] != nil }) {
            completion()
            return
        }
        update(id, create: { PhoneCall.incoming(id, update: push.update) }) { $0.reportAgain(mustReport: mustReport) }
        completion()
        if let identity = push.callerIdentity { callers.remember(handle: push.update.handle, identity: identity) }

        guard push.callID != nil else {
            // Nothing to ring for: reported (as iOS demands), ended once shown.
            update(id) { $0.end(.failed, at: now) }
            return
        }
        if expired {
            update(id) { $0.end(.unanswered, at: now) }
            return
        }
        let ringLeft = ringLeft(push, at: now)
        track { [self] in await reconcile(id, ringLeft: ringLeft) }
    }

    /// How long a pushed call has left to ring, on this device's clock: until the push's
    /// `ring_expires_at` (with the server clock's offset when known, else the ring's whole
    /// length from now), at most five minutes; nil when the push does not say.
    private func ringLeft(_ push: IncomingPush, at now: Date) -> Duration? {
        guard let expires = push.ringExpiresAtMillis else { return nil }
        let seconds: TimeInterval
        if let offset = client.serverClockOffset {
            seconds = expires / 1000 - (now.timeIntervalSince1970 + offset)
        } else if let created = push.createdAtMillis {
            seconds = (expires - created) / 1000
        } else {
            return nil
        }
        return .milliseconds(Int64(min(300, max(0, seconds)) * 1000))
    }

    /// Whether a push's ring is over, on the server's clock: the device's clock may be off by
    /// any amount (set by hand, ahead by minutes), so the offset the last session measured is
    /// taken into account, and without one nothing is taken as expired (the server is asked).
    private func isExpired(_ push: IncomingPush, at now: Date) -> Bool {
        guard let expires = push.ringExpiresAtMillis, let offset = client.serverClockOffset else { return false }
        return expires / 1000 < now.timeIntervalSince1970 + offset - Self.clockTolerance
    }

    /// Slack for the server clock offset measured at connect (half a round trip, drift since).
    static let clockTolerance: TimeInterval = 5

    /// Handles an alert push for a call on a device without CallKit (region policy
    /// `.noCallKit`): the app rings in its own UI (`InAppCallSystem`). Unlike a VoIP push,
    /// nothing must be shown for it: a missed-call alert, one without a call, or one for a call
    /// this phone already knows (it rang over the connection, or is over) is ignored.
    public func handleIncomingAlertPush(userInfo: [String: Any]) {
        guard userInfo["missed"] as? Bool != true, let id = IncomingPush(userInfo).callID,
            calls.withLock({ $0[id] }) == nil
        else { return }
        handleIncomingVoIPPush(payload: userInfo) {}
    }

    /// A JSON number from a push payload, whatever type the platform's decoder gave it.
    static func number(_ value: Any?) -> Double? {
        switch value {
        case let number as Int: Double(number)
        case let number as Int64: Double(number)
        case let number as Double: number
        case let number as NSNumber: number.doubleValue
        default: nil
        }
    }

    // MARK: Reconciling with the server

    /// After a session the server could not resume (it restarted, or the gap outlasted its grace
    /// period), events may be lost: asks about every live call and ends those that are over,
    /// including calls in progress here.
    private func resynchronize() async {
        for id in liveCallIDs { await reconcile(id, sessionLost: true) }
    }

    /// At launch: calls the system still shows that this run did not report (the app was killed
    /// during a call, or relaunched for an action) are matched with the server: one still ringing
    /// for this user rings on; any other is ended with the server's reason. A live call this
    /// phone placed, or answered (`CallerDirectory` keeps the last ids answered here), lost its
    /// media with the earlier run: it ends here and the server hears it (`call.end`), so the
    /// other side is not left in a call nobody has.
    public func reconcileWithSystem() async {
        let unknown = system.liveCallIDs.filter { id in calls.withLock { $0[id] == nil } }
        for id in unknown {
            let summary = try? await serverState(id)
            if let summary, summary["state"] == "ringing", await endReason(from: summary) == nil {
                calls.withLock { $0[id] = PhoneCall.adopted(id, update: Self.update(for: summary)) }
                continue
            }
            var reason = CallEndedReason.failed
            if let summary {
                let me = await client.identity
                let mine = me != nil && summary["caller"]?.stringValue == me
                let answeredHere = callers.wasAnswered(id)
                if summary["state"] != "ended" && (mine || answeredHere) {
                    send(MessageType.callEnd, CallActionRequest(callID: id.uuidString.lowercased(), reason: "app_relaunched"))
                } else if answeredHere || mine {
                    reason = summary["outcome"] == "failed" ? .failed : .remoteEnded
                } else if let known = await endReason(from: summary) {
                    reason = known
                }
            }
            system.reportCall(id, endedAt: Date(), reason: reason)
        }
    }

    private func serverState(_ id: UUID) async throws -> JSONValue {
        try await client.connect()
        return try await client.callState(id.uuidString.lowercased(), http: http)
    }

    /// Connects if needed and ends the call if the server says it is over. A call answered here
    /// ends only after a lost session (otherwise its own events end it).
    ///
    /// A pushed call (`ringLeft`) rings on while the server cannot be reached (a locked phone
    /// whose token provider cannot read its credentials yet, a slow network), until its ring
    /// is over, not only `serverTimeout`; then it ends as unanswered, and the server hears
    /// this device gave up (`call.decline`, filtered `unreachable`) once it can.
    private func reconcile(_ id: UUID, sessionLost: Bool = false, ringLeft: Duration? = nil) async {
        let ringing = ringLeft.map { $0 > serverTimeout } ?? false
        let deadline = ContinuousClock.now + (ringing ? ringLeft! : serverTimeout)
        while ContinuousClock.now < deadline {
            do {
                let summary = try await serverState(id)
                let answeredHere = calls.withLock { $0[id].map { $0.phase == .answering || $0.phase == .active } ?? false }
                if answeredHere {
                    if sessionLost, summary["state"] == "ended" {
                        update(id) { $0.end(summary["outcome"] == "failed" ? .failed : .remoteEnded, at: Date()) }
                    }
                } else if let reason = await endReason(from: summary) {
                    update(id) { $0.end(reason, at: Date()) }
                }
                return
            } catch SwitchboardError.server(let error) where error.code == .notFound || error.code == .forbidden {
                update(id) { $0.end(.failed, at: Date()) }
                return
            } catch {
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        // A call answered here and up stays up: its media may well flow, and its own events
        // (or the user) end it; nothing is known about it that says otherwise.
        let phase = calls.withLock { $0[id]?.phase }
        if phase == .answering || phase == .active { return }
        let stillRinging = phase == .ringing
        update(id) { $0.end(ringing ? .unanswered : .failed, at: Date()) }
        if stillRinging && !sessionLost {
            send(MessageType.callDecline, CallActionRequest(callID: id.uuidString.lowercased(), reason: "filtered", filter: .unreachable))
        }
    }

    /// The reason to show for a call the server reports, or nil while it still rings for us.
    private func endReason(from summary: JSONValue) async -> CallEndedReason? {
        let me = await client.identity
        let mine = summary["callees"].flatMap { value -> JSONValue? in
            guard case .array(let callees) = value else { return nil }
            return callees.first { $0["identity"]?.stringValue == me }
        }
        let status = mine?["status"]?.stringValue
        switch summary["state"]?.stringValue {
        case "ringing":
            return status == "declined" ? .declinedElsewhere : status == "ringing" ? nil : .unanswered
        case "accepted":
            if status == "accepted" { return .answeredElsewhere }
            if status == "declined" { return .declinedElsewhere }
            return status == "ringing" ? nil : .unanswered
        default:
            if status == "accepted" { return .answeredElsewhere }
            if status == "declined" { return .declinedElsewhere }
            switch summary["outcome"]?.stringValue {
            case "missed": return .unanswered
            case "failed": return .failed
            default: return .remoteEnded
            }
        }
    }

    // MARK: Outgoing

    /// Rings `callees`: creates the call on the server, then asks the system to show it with the
    /// server's call id as its UUID (and the first callee as its handle, for Recents). When the
    /// system refuses (too many calls, no entitlement), the server's call is cancelled and the
    /// error thrown.
    public func startCall(to callees: [String], video: Bool = false, handle: String? = nil) async throws -> UUID {
        try await client.connect()
        let reply = try await client.request(
            MessageType.callCreate, encoding: CallCreateRequest(callees: callees, video: video, handle: handle))
        guard let callID = reply?["call_id"]?.stringValue, let id = UUID(uuidString: callID) else {
            throw SwitchboardError.invalidResponse("call.create returned no call id")
        }
        let shown = callees.first ?? ""
        let call = PhoneCall.outgoing(id, update: CallUpdate(handle: shown, displayName: shown, hasVideo: video), room: reply?["media"]?["room"]?.stringValue)
        calls.withLock { $0[id] = call }
        do {
            try await system.request(.start(id, handle: shown, video: video))
        } catch {
            update(id) { $0.startFailed(at: Date()) }
            throw error
        }
        emit(.outgoingStarted(id))
        return id
    }

    // MARK: Server events

    /// What the call UI shows for a call the server describes: an invite (`caller` an object
    /// with identity, name and handle) or a call's state (`caller` the identity).
    static func update(for call: JSONValue) -> CallUpdate {
        let caller = call["caller"]
        let identity = caller?["identity"]?.stringValue ?? caller?.stringValue
        let name = caller?["name"]?.stringValue ?? identity ?? "Unknown caller"
        return CallUpdate(handle: caller?["handle"]?.stringValue ?? identity ?? name, displayName: name, hasVideo: call["video"] == true)
    }

    private func serverEvent(_ event: CallEvent) {
        guard let id = UUID(uuidString: event.callID) else { return }
        let now = Date()
        switch event {
        case .incoming(_, let invite):
            let update = Self.update(for: invite)
            let room = invite["media"]?["room"]?.stringValue
            if let identity = invite["caller"]?["identity"]?.stringValue { callers.remember(handle: update.handle, identity: identity) }
            self.update(id, create: { PhoneCall.incoming(id, update: update, room: room) }) { call in
                if call.room == nil { call.room = room }
                return []
            }
        case .accepted: update(id) { $0.accepted() }
        case .answeredElsewhere: update(id) { $0.end(.answeredElsewhere, at: now) }
        case .declinedElsewhere: update(id) { $0.end(.declinedElsewhere, at: now) }
        case .cancelled: update(id) { $0.end(.remoteEnded, at: now) }
        case .missed: update(id) { $0.end(.unanswered, at: now) }
        case .ended(_, let outcome, _, _):
            update(id) { $0.end(outcome == .failed ? .failed : outcome == .missed ? .unanswered : .remoteEnded, at: now) }
        case .held(_, let by, let onHold): emit(.remoteHeld(id, by: by, onHold: onHold))
        case .ringing, .declined, .busy, .unavailable:
            break  // the caller's side learns the end from call.ended
        }
    }

    // MARK: CallSystemDelegate

    /// Performs a user's action against the server and fulfils or fails it in time.
    public func callSystem(perform action: CallAction, completion: ActionCompletion) {
        let id = action.callID
        switch action {
        case .start:
            completion.fulfill()  // created on the server before the system was asked
            lastUp.withLock { $0 = id }
            watchAudioActivation(id)
        case .answer:
            let answering = calls.withLock { calls -> Bool in
                // A call this run does not know (the app relaunched for the answer, or the
                // action came before the push was handled): the UUID is the server's call id,
                // so the answer goes to the server, which refuses it if the call is over.
                if calls[id] == nil { calls[id] = PhoneCall.adopted(id, update: CallUpdate(handle: "", displayName: "", hasVideo: false)) }
                guard var call = calls[id], call.userAnswers() else { return false }
                calls[id] = call
                return true
            }
            guard answering else {
                completion.fail()
                return
            }
            lastUp.withLock { $0 = id }
            answer(id, completion: completion)
        case .end:
            // Fulfilled at once: hanging up never waits for the network. A call this run does
            // not know (the app relaunched for this action) is still ended on the server: the
            // UUID is the server's call id.
            completion.fulfill()
            let known = calls.withLock { $0[id] != nil }
            if known {
                update(id) { $0.userEnds(at: Date()) }
            } else {
                send(MessageType.callEnd, CallActionRequest(callID: id.uuidString.lowercased(), reason: "hangup"))
                emit(.endedLocally(id))
            }
        case .setMuted(_, let muted):
            completion.fulfill()
            emit(.muted(id, muted))
        case .setHeld(_, let held):
            completion.fulfill()
            update(id) { $0.userHolds(held) }
        case .playDTMF(_, let digits):
            // DTMF travels as signaling: a data message in the call's room.
            let room = calls.withLock { $0[id]?.room }
            completion.fulfill()
            if let room { send(MessageType.data, DataRequest(room: room, data: ["dtmf": .string(digits)])) }
        case .setTranslating(_, let on, let local, let remote):
            // The system translates (its own engine); the app shows it and keeps the
            // microphone's audio flowing while muted (docs/ios-integration.md, Audio).
            let known = calls.withLock { $0[id].map { !$0.isEnded } ?? false }
            guard known else { return completion.fail() }
            completion.fulfill()
            emit(.translating(id, on, localLanguage: local, remoteLanguage: remote))
        }
    }

    /// Mutes or unmutes the call through the system's mute action, as the call UI's button and
    /// AirPods do, so that the app's own button, theirs and live translation never disagree:
    /// the app hears `muted` once the system performed it (never set the microphone directly).
    public func setMuted(_ id: UUID, _ muted: Bool) async throws {
        try await system.request(.setMuted(id, muted))
    }

    /// Holds an answer until the server confirms it, within the system's deadline for the action
    /// (a little before it) and `serverTimeout`; fails it if the call is over.
    private func answer(_ id: UUID, completion: ActionCompletion) {
        var limit = serverTimeout
        if let deadline = completion.deadline {
            let left = deadline.timeIntervalSinceNow - 0.5
            limit = min(limit, .milliseconds(Int64(max(0, left) * 1000)))
        }
        let callID = id.uuidString.lowercased()
        let client = self.client
        track { [self, limit] in
            let deadline = ContinuousClock.now + limit
            while ContinuousClock.now < deadline, !completion.isComplete {
                do {
                    try await client.connect()
                    try await client.request(
                        MessageType.callAnswer, encoding: CallActionRequest(callID: callID), timeout: deadline - ContinuousClock.now)
                    // The user may have ended the call while the confirmation was on its way:
                    // the action is then failed, never left for the system to time out.
                    let confirmed = calls.withLock { $0[id]?.phase == .answering }
                    if confirmed {
                        callers.rememberAnswered(id)
                        completion.fulfill()
                        watchAudioActivation(id)
                    } else {
                        completion.fail()
                    }
                    update(id) { $0.answerConfirmed() }
                    return
                } catch SwitchboardError.server(let error) {
                    completion.fail()
                    update(id) { $0.answerRefused(error.reason.flatMap(CallRefusal.init(rawValue:)), at: Date()) }
                    return
                } catch {
                    try? await Task.sleep(for: .milliseconds(200))
                }
            }
            completion.fail()
            update(id) { $0.end(.failed, at: Date()) }
            send(MessageType.callEnd, CallActionRequest(callID: callID, reason: "answer_timed_out"))
        }
    }

    /// The system gave up on an action: an answer that timed out ends the call.
    public func callSystem(timedOutPerforming action: CallAction) {
        update(action.callID) { $0.actionTimedOut(action, at: Date()) }
    }

    /// Passes audio activation on to the app (`CallManagerEvent.audioActive`), with the call
    /// whose media it is for: the one up here and not on hold (the latest, after "Hold &
    /// Accept" or "End & Accept").
    public func callSystem(didChangeAudioActive active: Bool) {
        audioIsActive.withLock { $0 = active }
        let latest = lastUp.withLock { $0 }
        let call = calls.withLock { calls -> UUID? in
            let up = calls.values.filter { !$0.isEnded && !$0.onHold && [.active, .answering, .calling].contains($0.phase) }.map(\.id)
            return latest.flatMap { up.contains($0) ? $0 : nil } ?? up.first
        }
        // The SDK says when media may start, so the call system can hold it to its rule.
        if active, let call { system.mediaWillStartAudio(call) }
        emit(.audioActive(active, call: call))
    }

    /// After a call is up here: if the system has not activated the audio session within
    /// `audioActivationTimeout` and the call is still up and not on hold, the app hears
    /// `audioNotActivated` (it may never come: a known iOS fault, and the reason Apple asks
    /// apps to set the provider's configuration again before each report).
    private func watchAudioActivation(_ id: UUID) {
        let timeout = audioActivationTimeout
        track { [self] in
            try? await Task.sleep(for: timeout)
            let waiting = calls.withLock { $0[id].map { !$0.isEnded && !$0.onHold } ?? false }
            if waiting && !audioIsActive.withLock({ $0 }) { emit(.audioNotActivated(id)) }
        }
    }

    /// Ends every call on the server after the call UI dropped them.
    public func callSystemDidReset() {
        for id in liveCallIDs { update(id) { $0.reset(at: Date()) } }
    }
}

/// What a VoIP push says, read leniently: any payload gives a call to report (iOS demands
/// one for every VoIP push), with defaults for what is missing or of the wrong type.
public struct IncomingPush: Sendable {
    /// The server's call id (`call_id`, else `UUID`), nil when absent or not a UUID.
    public var callID: UUID?
    /// What the call screen shows.
    public var update: CallUpdate
    /// When ringing stops, in milliseconds since 1970 on the server's clock, when the payload
    /// says.
    public var ringExpiresAtMillis: Double?
    /// When the call was created, on the server's clock, when the payload says.
    public var createdAtMillis: Double?
    /// The caller's identity (what `startCall(to:)` takes), when the payload says.
    public var callerIdentity: String?

    /// Reads a push payload as PushKit delivers it.
    public init(_ payload: [String: Any]) {
        callID = (payload["call_id"] as? String).flatMap(UUID.init(uuidString:))
            ?? (payload["UUID"] as? String).flatMap(UUID.init(uuidString:))
        let caller = payload["caller"] as? [String: Any]
        let name = (caller?["name"] as? String) ?? (caller?["identity"] as? String) ?? "Unknown caller"
        let handle = [caller?["handle"] as? String, payload["handle"] as? String, caller?["identity"] as? String]
            .compactMap { $0 }.first { !$0.isEmpty } ?? name
        let video = (payload["video"] as? Bool) ?? (payload["hasVideo"] as? Bool) ?? false
        update = CallUpdate(handle: handle, displayName: name, hasVideo: video)
        ringExpiresAtMillis = CallManager.number(payload["ring_expires_at"])
        createdAtMillis = CallManager.number(payload["created_at"])
        callerIdentity = (caller?["identity"] as? String).flatMap { $0.isEmpty ? nil : $0 }
    }
}

/// The default calling app's `tel:` URLs (iOS 18.2+: a person may choose the app to place the
/// calls of phone numbers tapped anywhere; the app needs the `com.apple.developer.calling-app`
/// entitlement). The app resolves the number to one of its users (`CallerDirectory` knows the
/// numbers of callers it showed; otherwise its own directory), or hands the call back.
public enum TelURL {
    /// The number a `tel:` URL dials, RFC 3966's visual separators ("-", ".", "(", ")", spaces)
    /// removed and a leading "+" kept, without its parameters (";ext=", ";phone-context="); nil
    /// for any other URL, or one holding no digit.
    public static func number(in url: URL) -> String? {
        guard url.scheme?.lowercased() == "tel" else { return nil }
        let text = url.absoluteString.dropFirst("tel:".count).removingPercentEncoding ?? ""
        let subscriber = text.prefix { $0 != ";" }
        let kept = subscriber.filter { $0.isNumber || $0 == "+" || $0 == "*" || $0 == "#" }
        let number = (kept.first == "+" ? "+" : "") + kept.filter { $0 != "+" }
        return number.contains(where: \.isNumber) ? number : nil
    }
}

/// Which user each caller handle shown in the call UI belongs to, kept across launches. The
/// call UI (and so Recents and Contacts) shows a caller's handle (a phone number, an email:
/// the `handle` claim of the caller's token), while `CallManager.startCall(to:)` takes
/// identities: a call-back from Recents gives the handle, and `identity(forHandle:)` turns it
/// back into the user. Outgoing calls show the callee's identity, which maps to itself. It
/// also keeps the ids of the last calls answered on this device, so that a relaunch knows
/// which live call was this phone's (`CallManager.reconcileWithSystem()`).
public final class CallerDirectory: Sendable {
    /// The `UserDefaults` suite it is kept in (nil: the app's standard defaults).
    public let suiteName: String?
    /// How many handles it keeps (the oldest go first).
    public let capacity: Int
    private let key = "switchboard.callers"
    private let lock = Locked(())

    /// A directory kept in `suiteName`'s defaults (the app's standard ones by default).
    public init(suiteName: String? = nil, capacity: Int = 500) {
        self.suiteName = suiteName
        self.capacity = capacity
    }

    private var defaults: UserDefaults { suiteName.flatMap { UserDefaults(suiteName: $0) } ?? .standard }

    /// Notes that `handle` is `identity` (the SDK does it for every incoming call).
    public func remember(handle: String, identity: String) {
        guard !handle.isEmpty, handle != identity else { return }
        lock.withLock { _ in
            var entries = (defaults.array(forKey: key) as? [[String]]) ?? []
            entries.removeAll { $0.first == handle }
            entries.append([handle, identity])
            if entries.count > capacity { entries.removeFirst(entries.count - capacity) }
            defaults.set(entries, forKey: key)
        }
    }

    /// Notes that the call was answered on this device (the SDK does it for every answer the
    /// server confirms), so that a later run knows it was this phone's call.
    func rememberAnswered(_ id: UUID) {
        lock.withLock { _ in
            var ids = defaults.stringArray(forKey: answeredKey) ?? []
            ids.removeAll { $0 == id.uuidString }
            ids.append(id.uuidString)
            if ids.count > Self.answeredMemory { ids.removeFirst(ids.count - Self.answeredMemory) }
            defaults.set(ids, forKey: answeredKey)
        }
    }

    /// Whether the call was answered on this device (by this run or an earlier one).
    func wasAnswered(_ id: UUID) -> Bool {
        lock.withLock { _ in (defaults.stringArray(forKey: answeredKey) ?? []).contains(id.uuidString) }
    }

    private let answeredKey = "switchboard.answered"
    /// How many answered call ids are kept.
    static let answeredMemory = 50

    /// The user a handle the call UI showed belongs to; the handle itself when it is not known
    /// (an outgoing call's handle is the callee's identity).
    public func identity(forHandle handle: String) -> String {
        lock.withLock { _ in
            ((defaults.array(forKey: key) as? [[String]]) ?? []).last { $0.first == handle }?.last ?? handle
        }
    }
}
