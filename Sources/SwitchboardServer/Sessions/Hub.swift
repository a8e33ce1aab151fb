import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore

/// Owns sessions, rooms and calls. Runs on the event loop thread only: the gateway calls it
/// from transport callbacks, timers call it from the loop.
///
/// Safety of `@unchecked Sendable`: confined to the loop thread; work from other threads (push
/// results) reaches it only through `transport.loop.execute`.
final class Hub: @unchecked Sendable {
    /// What a new connection asks for when it wants its old session back.
    struct ResumeRequest {
        var token: String
        var lastSequence: UInt64
    }

    let store: Store
    let push: any PushDispatching
    /// Every session of this process, however it is looked up.
    let sessions = SessionTable()
    var calls: [String: ActiveCall] = [:]
    var callIdempotency: [String: String] = [:]
    /// Live answered calls by user key (`isInCall` without a walk over every call).
    var answeredCallsByUser: [String: Set<String>] = [:]
    /// The call of each call's room (`call-<id>`), while the call is live.
    var callRooms: [RoomKey: String] = [:]
    /// Live calls (ringing or answered) by user key, for the history page.
    var liveCallsByUser: [String: Set<String>] = [:]
    var inviteLog: [String: [ContinuousClock.Instant]] = [:]
    /// Calls whose setup waits for the store (`max_pending_call_setups`).
    var pendingCallSetups = 0
    var lastPrune = ContinuousClock.now

    let configuration: ServerConfiguration
    let metrics: Metrics
    let logger: Logger
    let turn: TurnService
    /// Where frames go and timers run: injected (`attach`), the WebSocket server and its event
    /// loop in production, memory and a manual clock in tests.
    private(set) weak var output: (any SessionOutput)?
    private(set) weak var scheduler: (any LoopScheduler)?
    var rooms: RoomDirectory
    private var emptyTimers: [RoomKey: TimerID] = [:]
    /// Every message in and out goes through it.
    let codec = MessageCodec()

    /// `push`: APNs through the apps' credentials (`PushRouter`) in the server; a recording
    /// double in `HubTests`.
    init(configuration: ServerConfiguration, store: Store, metrics: Metrics, logger: Logger, push: any PushDispatching) {
        self.configuration = configuration
        self.store = store
        self.metrics = metrics
        self.logger = logger
        self.push = push
        let limits = configuration.limits
        rooms = RoomDirectory(
            settings: .init(
                maxParticipants: limits.maxRoomParticipants, emptyTimeout: .seconds(limits.emptyRoomTimeoutSeconds),
                maxRoomsPerApp: limits.maxRoomsPerApp))
        turn = configuration.turnService
    }

    /// Every event to a session goes through here (the seam a cluster plugs into).
    private(set) lazy var delivery: any EventDelivery = LocalDelivery(hub: self)

    /// Delivers through `delivery` instead of within this process only (several nodes).
    func deliver(through delivery: any EventDelivery) { self.delivery = delivery }

    /// The session with this peer id, attached or in its grace period.
    func session(peerID: String) -> Session? { sessions.session(peerID: peerID) }

    /// Hands the hub its output and its scheduler (its thread's time and timers).
    func attach(output: any SessionOutput, scheduler: any LoopScheduler) {
        self.output = output
        self.scheduler = scheduler
    }

    var now: ContinuousClock.Instant { scheduler?.now ?? .now }

    /// Wall-clock milliseconds, from the scheduler.
    var wallMillis: Int64 { scheduler?.wallMillis ?? Int64(Date().timeIntervalSince1970 * 1000) }

    /// Runs `body` against the store off the hub's thread, after every write the hub queued
    /// before unless told it reads none of them (`Store.perform`), and continues with its result
    /// on the hub's thread: the hub never reads or writes the store itself.
    func withStore<T: Sendable>(
        _ body: @escaping @Sendable (Store) throws -> T, afterQueuedWrites: Bool = true, then: @escaping (Result<T, any Error>) -> Void
    ) {
        let then = LoopBound(then)
        let scheduler = self.scheduler
        store.perform(body, afterQueuedWrites: afterQueuedWrites) { result in scheduler?.execute { then.value(result) } }
    }

    /// Sessions attached to a connection or waiting in their grace period.
    var sessionCount: Int { sessions.count }

    // MARK: Connections

    /// A connection authenticated as `claims` opened; starts or resumes its session.
    func connected(_ connection: ConnectionID, claims: AccessTokenClaims, app: App, resume: ResumeRequest?, deviceID: String?) {
        metrics.increment("switchboard_connections_total")
        metrics.add("switchboard_connections", 1)
        var resumeFailed = false
        if let resume {
            if let session = sessions.session(resumeToken: resume.token), session.app.id == app.id, session.identity == claims.sub {
                if let missed = session.log.events(after: resume.lastSequence, newest: session.lastSequence) {
                    reattach(session, to: connection, claims: claims, replay: missed, from: resume.lastSequence + 1)
                    return
                }
                logger.info("resume impossible, events lost", ["peer": session.peerID])
                end(session, reason: .disconnected)
            }
            resumeFailed = true
            metrics.increment("switchboard_resumes_total", ["outcome": "failed"])
        }
        let limits = configuration.limits
        let session = Session(
            peerID: "p_" + RandomID.alphanumeric(16), app: app, claims: claims, resumeToken: RandomID.alphanumeric(32),
            logCapacity: limits.resumeBufferEvents,
            rate: TokenBucket(rate: limits.messagesPerSecond, burst: limits.messageBurst, now: now))
        session.deviceID = deviceID
        sessions.add(session, on: connection)
        logger.debug("session opened", ["peer": session.peerID, "app": app.id, "identity": claims.sub, "conn": connection.description])
        let welcome = SessionWelcome(
            peerID: session.peerID, identity: claims.sub, resumeToken: session.resumeToken,
            serverTime: wallMillis, limits: sessionLimits, resumeFailed: resumeFailed)
        sendControl(MessageType.sessionWelcome, welcome, to: session)
        offerRingingCalls(to: session)
    }

    static func userKey(_ appID: String, _ identity: String) -> String { appID + "\u{0}" + identity }

    private var sessionLimits: SessionLimits {
        let limits = configuration.limits
        return SessionLimits(
            maxMessageBytes: limits.maxMessageBytes, maxDataBytes: limits.maxDataBytes,
            messagesPerSecond: limits.messagesPerSecond, pingIntervalSeconds: limits.pingIntervalSeconds,
            idleTimeoutSeconds: limits.idleTimeoutSeconds, resumeGraceSeconds: limits.resumeGraceSeconds)
    }

    private func reattach(_ session: Session, to connection: ConnectionID, claims: AccessTokenClaims, replay: [OutboundFrame], from: UInt64) {
        if let old = sessions.attach(session, to: connection) {
            // The old connection is still open (a half-dead socket): this one replaces it.
            output?.close(old, code: 4001, reason: "replaced by a resumed connection")
        }
        if let timer = session.graceTimer {
            scheduler?.cancel(timer)
            session.graceTimer = nil
        }
        session.claims = claims
        metrics.increment("switchboard_resumes_total", ["outcome": "resumed"])
        logger.info("session resumed", ["peer": session.peerID, "conn": connection.description, "replayed": String(replay.count)])
        sendControl(MessageType.sessionResumed, SessionResumed(peerID: session.peerID, replayFrom: from, replayCount: replay.count), to: session)
        for frame in replay { transmit(frame, to: session) }
    }

    /// A connection closed. A clean close by the client ends the session; anything else starts
    /// the grace period in which the client may resume.
    func disconnected(_ connection: ConnectionID, reason: CloseReason) {
        metrics.add("switchboard_connections", -1)
        metrics.increment("switchboard_disconnects_total", ["reason": reason.label])
        guard let session = sessions.detach(connection) else { return }
        if case .peer(let code) = reason, code == 1000 || code == 1001 {
            end(session, reason: .left)
            return
        }
        let grace = configuration.limits.resumeGraceSeconds
        logger.debug("session detached", ["peer": session.peerID, "reason": reason.label, "grace_seconds": String(grace)])
        session.graceTimer = scheduler?.schedule(after: .seconds(grace)) { [weak self, weak session] in
            guard let self, let session, session.connection == nil else { return }
            session.graceTimer = nil
            self.logger.info("resume grace expired", ["peer": session.peerID])
            self.end(session, reason: .disconnected)
        }
    }

    /// Ends a session: it leaves its rooms (others hear `reason`) and can no longer be resumed.
    private func end(_ session: Session, reason: PeerLeftReason) {
        if let timer = session.graceTimer { scheduler?.cancel(timer) }
        for name in session.rooms.sorted() {
            let key = RoomKey(appID: session.app.id, name: name)
            if let effects = try? rooms.leave(key, peerID: session.peerID, reason: reason) { apply(effects) }
        }
        session.rooms.removeAll()
        if let connection = sessions.remove(session) {
            output?.close(connection, code: 1000, reason: "session ended")
        }
        logger.debug("session ended", ["peer": session.peerID, "reason": reason.rawValue])
    }

    // MARK: Messages

    func received(_ bytes: [UInt8], binary: Bool, on connection: ConnectionID) {
        guard let session = sessions.session(on: connection) else { return }
        metrics.messagesIn.increment()
        if binary {
            reply(.error(id: nil, ErrorBody(.badRequest, "binary messages are not part of the protocol")), to: session)
            return
        }
        let id: JSONValue, type: String, object: [String: JSONValue]
        switch codec.read(bytes) {
        case .success(.signal(let signal)):
            relay(signal, from: session)
            return
        case .success(.request(let requestID, let requestType, let fields)): (id, type, object) = (requestID, requestType, fields)
        case .failure(let refusal):
            reply(.error(id: refusal.id, refusal.error), to: session)
            return
        }
        guard session.rate.take(now: now) else {
            reply(.error(id: id, rateLimited), to: session)
            return
        }
        do throws(ErrorBody) {
            let result = try handle(type: type, object: object, from: session) { [weak self, weak session] result in
                guard let self, let session else { return }
                switch result {
                case .success(let value): reply(.ok(id: id, data: value), to: session)
                case .failure(let error): reply(.error(id: id, error), to: session)
                }
            }
            guard !result.answeredLater else { return }
            reply(.ok(id: id, data: result.reply), to: session)
            apply(result.effects)
        } catch {
            reply(.error(id: id, error), to: session)
        }
    }

    /// The refusal of a message past the session's rate.
    private var rateLimited: ErrorBody {
        ErrorBody(.rateLimited, "more than \(configuration.limits.messagesPerSecond) messages per second")
    }

    private struct Outcome {
        var reply: JSONValue?
        var effects: [RoomDirectory.Effect] = []
        /// The handler answers through `answer`, now or once the store has answered.
        var answeredLater = false

        init(reply: JSONValue? = nil, effects: [RoomDirectory.Effect] = []) {
            self.reply = reply
            self.effects = effects
        }

        static var later: Outcome {
            var outcome = Outcome()
            outcome.answeredLater = true
            return outcome
        }
    }

    /// `answer`: how a handler that waits for the store replies (exactly once, on the loop).
    private func handle(
        type: String, object: [String: JSONValue], from session: Session,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) throws(ErrorBody) -> Outcome {
        switch type {
        case MessageType.ping:
            return Outcome(reply: ["server_time": .int(wallMillis)])

        case MessageType.sessionInfo:
            return Outcome(reply: [
                "peer_id": .string(session.peerID), "identity": .string(session.identity),
                "name": session.claims.name.map(JSONValue.string) ?? .null, "app_id": .string(session.app.id),
                "grants": jsonValue(session.claims.grants), "token_expires_at": .int(session.claims.exp),
                "rooms": .array(session.rooms.sorted().map(JSONValue.string)),
            ])

        case MessageType.roomJoin:
            let request: RoomJoinRequest = try decodeData(object)
            try Self.validateRoomName(request.room)
            let key = RoomKey(appID: session.app.id, name: request.room)
            if Self.isCallRoomName(request.room) {
                try admitToCallRoom(key, session: session)
            } else if !session.claims.grants.allowsJoining(room: request.room) {
                throw ErrorBody(.forbidden, "your token does not grant joining room '\(request.room)'")
            }
            if let metadata = request.metadata { try checkSize(metadata, what: "metadata") }
            if !session.rooms.contains(request.room) && session.rooms.count >= configuration.limits.maxRoomsPerPeer {
                throw ErrorBody(.rateLimited, "a peer may be in at most \(configuration.limits.maxRoomsPerPeer) rooms")
            }
            var peer = session.description
            peer.metadata = request.metadata
            let joined: (room: RoomDirectory.Room, others: [PeerDescription], effects: [RoomDirectory.Effect])
            do { joined = try rooms.join(key, peer: peer, now: now, wallMillis: wallMillis) } catch { throw error.body }
            session.rooms.insert(request.room)
            metrics.increment("switchboard_room_joins_total")
            logger.info("joined room", ["peer": session.peerID, "room": request.room, "peers": String(joined.room.members.count)])
            let reply = RoomJoined(
                room: request.room, peerID: session.peerID, peers: joined.others, metadata: joined.room.metadata,
                iceServers: turn.credentials(for: session.identity).iceServers)
            return Outcome(reply: jsonValue(reply), effects: joined.effects)

        case MessageType.roomLeave:
            let request: RoomLeaveRequest = try decodeData(object)
            let effects: [RoomDirectory.Effect]
            do {
                effects = try rooms.leave(RoomKey(appID: session.app.id, name: request.room), peerID: session.peerID, reason: .left)
            } catch { throw error == .notFound(request.room) ? RoomError.notInRoom(request.room).body : error.body }
            session.rooms.remove(request.room)
            return Outcome(reply: nil, effects: effects)

        case MessageType.signal:
            // The hot path: fields straight from the message already parsed.
            guard case .object(let data)? = object["data"], let room = data["room"]?.stringValue, let to = data["to"]?.stringValue,
                let signal = data["signal"]
            else { throw ErrorBody(.badRequest, "invalid data: signal needs room, to and signal") }
            let request = SignalRequest(room: room, to: to, signal: signal)
            metrics.signals.increment()
            do {
                return Outcome(
                    effects: try rooms.signal(
                        RoomKey(appID: session.app.id, name: request.room), from: session.peerID, to: request.to,
                        signal: request.signal))
            } catch { throw error.body }

        case MessageType.data:
            guard case .object(let fields)? = object["data"], let room = fields["room"]?.stringValue, let payload = fields["data"] else {
                throw ErrorBody(.badRequest, "invalid data: data needs room and data")
            }
            if let to = fields["to"], to != .null, to.stringValue == nil { throw ErrorBody(.badRequest, "invalid data: to is a peer id") }
            let request = DataRequest(room: room, to: fields["to"]?.stringValue, data: payload)
            try checkSize(request.data, what: "data")
            do {
                return Outcome(
                    effects: try rooms.data(
                        RoomKey(appID: session.app.id, name: request.room), from: session.peerID, to: request.to,
                        data: request.data))
            } catch { throw error.body }

        case MessageType.roomSetMetadata:
            let request: RoomMetadataRequest = try decodeData(object)
            guard session.claims.grants.admin == true else {
                throw ErrorBody(.forbidden, "setting room metadata needs the admin grant")
            }
            guard !Self.isCallRoomName(request.room) else { throw Self.callRoomRefusal(request.room) }
            try checkSize(request.metadata, what: "metadata")
            do {
                return Outcome(effects: try rooms.setMetadata(RoomKey(appID: session.app.id, name: request.room), request.metadata))
            } catch { throw error.body }

        case MessageType.callCreate:
            let request: CallCreateRequest = try decodeData(object)
            createCall(request, caller: session.claims, app: session.app, device: session.deviceKey, answer: answer)
            return .later
        case MessageType.callAnswer, MessageType.callDecline, MessageType.callCancel, MessageType.callEnd, MessageType.callAck:
            let request: CallActionRequest = try decodeData(object)
            callAction(type, request, identity: session.identity, app: session.app, device: session.deviceKey, answer: answer)
            return .later
        case MessageType.callHold:
            let request: CallHoldRequest = try decodeData(object)
            holdCall(request, identity: session.identity, app: session.app, device: session.deviceKey, answer: answer)
            return .later

        default:
            throw ErrorBody(.unknownType, "unknown message type '\(type.prefix(64))'")
        }
    }

    /// The relay's hot path: a signal from one room member to another, its payload spliced
    /// from the bytes it arrived in. The same checks, replies and errors as any request.
    private func relay(_ request: SignalRequestBytes, from session: Session) {
        guard MessageCodec.isUsableID(request.id) else {
            reply(.error(id: nil, MessageCodec.missingID), to: session)
            return
        }
        guard session.rate.take(now: now) else {
            reply(.error(id: request.id, rateLimited), to: session)
            return
        }
        metrics.signals.increment()
        let recipient: String
        do {
            recipient = try rooms.signalRecipient(RoomKey(appID: session.app.id, name: request.room), from: session.peerID, to: request.to)
        } catch {
            reply(.error(id: request.id, error.body), to: session)
            return
        }
        reply(.ok(id: request.id, data: nil), to: session)
        var data: [UInt8] = []
        data.reserveCapacity(request.signal.count + request.room.utf8.count + session.peerID.utf8.count + 32)
        data.append(contentsOf: #"{"room":"#.utf8)
        JSONText.appendQuoted(request.room, to: &data)
        data.append(contentsOf: #","from":"#.utf8)
        JSONText.appendQuoted(session.peerID, to: &data)
        data.append(contentsOf: #","signal":"#.utf8)
        data.append(contentsOf: request.signal)
        data.append(0x7D)
        delivery.deliver(OutgoingEvent(type: MessageType.signal, data: .encoded(data)), toPeer: recipient)
    }

    // MARK: Admin (REST)

    func createRoom(app: App, name: String, request: CreateRoomRequest) throws(ErrorBody) -> RoomInfo {
        let key = RoomKey(appID: app.id, name: name)
        let timeout = request.emptyTimeoutSeconds.map { Duration.seconds($0) }
        do {
            let effects = try rooms.create(
                key, maxParticipants: request.maxParticipants, emptyTimeout: timeout, metadata: request.metadata, now: now,
                wallMillis: wallMillis)
            apply(effects)
        } catch { throw error.body }
        logger.info("room created", ["app": app.id, "room": name])
        return info(rooms.room(key)!)
    }

    func listRooms(app: App) -> [RoomInfo] {
        rooms.rooms(ofApp: app.id).map(info)
    }

    func room(app: App, name: String) throws(ErrorBody) -> RoomInfo {
        guard let room = rooms.room(RoomKey(appID: app.id, name: name)) else { throw RoomError.notFound(name).body }
        return info(room)
    }

    func deleteRoom(app: App, name: String) throws(ErrorBody) {
        do { try closeRoom(RoomKey(appID: app.id, name: name), reason: .deleted) } catch { throw error.body }
        logger.info("room deleted", ["app": app.id, "room": name])
    }

    /// Closes a room: every member gets `room.closed` with `reason` and is no longer in it.
    func closeRoom(_ key: RoomKey, reason: RoomClosedReason) throws(RoomError) {
        let result = try rooms.delete(key, reason: reason)
        for peerID in result.members { sessions.session(peerID: peerID)?.rooms.remove(key.name) }
        apply(result.effects)
    }

    func kick(app: App, room name: String, peerID: String) throws(ErrorBody) {
        let key = RoomKey(appID: app.id, name: name)
        guard rooms.room(key) != nil else { throw RoomError.notFound(name).body }
        let effects: [RoomDirectory.Effect]
        do { effects = try rooms.leave(key, peerID: peerID, reason: .kicked) } catch {
            throw RoomError.peerNotInRoom(peer: peerID, room: name).body
        }
        sessions.session(peerID: peerID)?.rooms.remove(name)
        apply(effects)
    }

    func sendData(app: App, room name: String, request: RoomDataRequest) throws(ErrorBody) {
        try checkSize(request.data, what: "data")
        do { apply(try rooms.data(RoomKey(appID: app.id, name: name), from: nil, to: request.to, data: request.data)) } catch {
            throw error.body
        }
    }

    private func info(_ room: RoomDirectory.Room) -> RoomInfo {
        RoomInfo(
            name: room.key.name, createdAt: room.createdAtWallMillis, maxParticipants: room.maxParticipants,
            emptyTimeoutSeconds: Int(room.emptyTimeout.components.seconds), metadata: room.metadata, peers: room.members)
    }

    // MARK: Effects and sending

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
                    }
                }
            case .disarmEmptyTimer(let key):
                if let timer = emptyTimers.removeValue(forKey: key) { scheduler?.cancel(timer) }
            }
        }
        metrics.set("switchboard_rooms", to: Double(rooms.rooms.count))
    }

    /// Sends a sequenced event: logged for replay, delivered now if attached.
    func sendEvent(_ type: String, _ data: JSONValue, to session: Session) {
        sendEvent(OutgoingEvent(type: type, data: .value(data)), to: session)
    }

    /// Sends a sequenced event: logged for replay, delivered now if attached. Data already
    /// written as JSON (a relayed signal) is spliced in as it is.
    func sendEvent(_ event: OutgoingEvent, to session: Session) {
        session.lastSequence += 1
        guard let bytes = codec.event(event, seq: session.lastSequence) else { return }
        let frame = OutboundFrame(bytes)
        session.log.append(seq: session.lastSequence, frame: frame)
        transmit(frame, to: session)
    }

    /// Sends an unsequenced connection message (`session.welcome`, `session.resumed`).
    private func sendControl(_ type: String, _ data: some Encodable, to session: Session) {
        guard let bytes = codec.control(type, data) else { return }
        transmit(OutboundFrame(bytes), to: session)
    }

    private func reply(_ envelope: Envelope, to session: Session) {
        if let error = envelope.error { metrics.increment("switchboard_errors_total", ["code": error.code.rawValue]) }
        guard let bytes = codec.encode(envelope) else { return }
        transmit(OutboundFrame(bytes), to: session)
    }

    private func transmit(_ frame: OutboundFrame, to session: Session) {
        guard let connection = session.connection else { return }
        if output?.send(frame, to: connection) == true { metrics.messagesOut.increment() }
    }

    // MARK: Helpers

    func checkSize(_ value: JSONValue, what: String) throws(ErrorBody) {
        try Self.checkSize(value, what: what, limit: configuration.limits.maxDataBytes)
    }

    static func checkSize(_ value: JSONValue, what: String, limit: Int) throws(ErrorBody) {
        let size = (try? JSONEncoder().encode(value).count) ?? Int.max
        guard size <= limit else {
            throw ErrorBody(.payloadTooLarge, "\(what) is \(size) bytes; the limit is \(limit)")
        }
    }

    func jsonValue(_ value: some Encodable) -> JSONValue { codec.value(value) }

    func decodeData<T: Decodable>(_ request: [String: JSONValue]) throws(ErrorBody) -> T { try MessageCodec.data(of: request) }

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
