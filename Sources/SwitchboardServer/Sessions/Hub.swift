import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore

/// Owns sessions, rooms and calls, and dispatches what arrives to them: this file holds the
/// owner, its one table of message types and the sending; each concern is an extension in its
/// folder (`Sessions/Hub+Sessions`, `Rooms/Hub+Rooms`, `Calls/Hub+Calls`, `Hub+Ringing`,
/// `Hub+CallReads`). Runs on the event loop thread only: the gateway calls it from transport
/// callbacks, timers call it from the loop.
///
/// Safety of `@unchecked Sendable`: confined to the loop thread; work from other threads (push
/// results, the store's answers) reaches it only through `scheduler.execute`.
final class Hub: @unchecked Sendable {
    /// What a new connection asks for when it wants its old session back.
    struct ResumeRequest {
        var token: String
        var lastSequence: UInt64
    }

    let store: Store
    /// Checks the access tokens sessions refresh themselves with (and the gateway's).
    let tokens: TokenChecker
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
    /// How often each caller may ring (`invites_per_minute`, `invites_per_pair_per_minute`).
    var invites: InvitePolicy
    /// Calls whose setup waits for the store (`max_pending_call_setups`).
    var pendingCallSetups = 0
    /// Each app's accepted secrets (`Hub.secretTag`) when the apps were last read: a session
    /// sweep follows only a change (`appsRefreshed`).
    var acceptedSecretTags: [String: Set<String>] = [:]
    /// Ordinary rooms each user creates (`rooms_per_identity_per_minute`).
    var roomCreations: KeyedRateLimit
    /// When `callIdempotency` was last pruned.
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
    /// The timer that closes each room once it has been empty `empty_timeout_seconds`.
    var emptyTimers: [RoomKey: TimerID] = [:]
    /// Every message in and out goes through it.
    let codec = MessageCodec()

    /// `push`: APNs through the apps' credentials (`PushRouter`) in the server; a recording
    /// double in `HubTests`.
    init(configuration: ServerConfiguration, store: Store, metrics: Metrics, logger: Logger, push: any PushDispatching) {
        self.configuration = configuration
        self.store = store
        tokens = TokenChecker(configuration: configuration, store: store)
        self.metrics = metrics
        self.logger = logger
        self.push = push
        let limits = configuration.limits
        rooms = RoomDirectory(
            settings: .init(
                maxParticipants: limits.maxRoomParticipants, emptyTimeout: .seconds(limits.emptyRoomTimeoutSeconds),
                maxRoomsPerApp: limits.maxRoomsPerApp))
        turn = configuration.turnService
        invites = InvitePolicy(perCaller: limits.invitesPerMinute, perPair: limits.invitesPerPairPerMinute)
        roomCreations = KeyedRateLimit(perMinute: limits.roomsPerIdentityPerMinute)
        acceptedSecretTags = Self.acceptedSecretTags(store.cachedApps(), at: Date())
    }

    /// Delivery to the sessions of this process.
    private(set) lazy var localDelivery = LocalDelivery(hub: self)
    /// Every event to a session goes through here: `localDelivery` on one node,
    /// `ClusterDelivery` in a cluster.
    private(set) lazy var delivery: any EventDelivery = localDelivery
    /// This node's part in a cluster; nil on one node.
    private(set) var cluster: Cluster?
    /// In a cluster: the node that runs each room this node's sessions are in and it does not
    /// run (their requests go there).
    var roomHomes: [RoomKey: String] = [:]
    /// In a cluster: the node of each member of this node's rooms whose session is on another.
    var remoteMembers: [String: String] = [:]
    /// The process each other node ran when this node last heard from it (`Cluster.instance`):
    /// a node started again under its id has lost the members and rooms it had.
    var nodeProcesses: [String: String] = [:]
    /// When this node last wrote what Redis knows of the ordinary rooms it runs (`Cluster.roomKeyRewrite`).
    var roomKeysWritten: ContinuousClock.Instant?
    /// In a cluster: connections waiting for their session (the cluster's connect count, or
    /// the session from another node).
    var pendingResumes: Set<ConnectionID> = []
    /// Messages those connections sent before their session opened, handled once it has
    /// (at most `message_burst` each).
    var framesBeforeSession: [ConnectionID: [(bytes: [UInt8], binary: Bool)]] = [:]
    /// In a cluster: user events for the users of those connections, held until their session
    /// is here (`Hub+ClusterSessions`).
    var heldUserEvents: [String: HeldEvents] = [:]
    /// In a cluster: this node is draining (SIGTERM). It starts no call and takes none over,
    /// and makes no room: what it would run is gone with it in a few seconds.
    var clusterDraining = false
    /// In a cluster: until when no other node can take this node's calls, as far as it knows:
    /// its lease renewed in Redis, or in the store while it still held them (another node takes
    /// a call only once both ran out). Past it (the node stalled, or cut off from both), what
    /// it would do with its calls waits (`whileHoldingCalls`) until a renewal says which are
    /// still its own.
    var callLeaseHeld: (redis: ContinuousClock.Instant, store: ContinuousClock.Instant)?
    var waitingForCallLease: [() -> Void] = []
    /// The lease in Redis ran out and the calls' keys were not yet all written again: which
    /// calls another node took meanwhile is not known yet.
    var reclaimPending = false

    struct HeldEvents {
        /// Sessions of the user on their way here.
        var waiting = 0
        var events: [(eventID: String?, event: OutgoingEvent, except: String?)] = []
    }

    /// Joins the hub to a cluster: events for users go to every node, the node listens for its
    /// users' events, and calls, presence and busy are read and written cluster-wide.
    func join(_ cluster: Cluster) {
        self.cluster = cluster
        cluster.hub = self
        delivery = ClusterDelivery(local: localDelivery, cluster: cluster)
        sessions.userPresenceChanged = { [weak cluster] appID, identity, present in
            cluster?.userPresenceChanged(appID: appID, identity: identity, present: present)
        }
    }

    /// The session with this peer id, attached or in its grace period.
    func session(peerID: String) -> Session? { sessions.session(peerID: peerID) }
    /// Whether the session has not ended (an answer from elsewhere may come after it did).
    func isLive(_ session: Session) -> Bool { sessions.session(peerID: session.peerID) === session }

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
    /// `appID`: whose request it is; the store takes each app's requests in turn (`Store.perform`).
    func withStore<T: Sendable>(
        for appID: String, _ body: @escaping @Sendable (Store) throws -> T, afterQueuedWrites: Bool = true,
        then: @escaping (Result<T, any Error>) -> Void
    ) {
        let then = LoopBound(then)
        let scheduler = self.scheduler
        store.perform(body, afterQueuedWrites: afterQueuedWrites, lane: appID) { result in scheduler?.execute { then.value(result) } }
    }

    /// Sessions attached to a connection or waiting in their grace period.
    var sessionCount: Int { sessions.count }

    /// A user across the app: the key of the maps of its sessions and calls.
    static func userKey(_ appID: String, _ identity: String) -> String { appID + "\u{0}" + identity }

    // MARK: Messages

    func received(_ bytes: [UInt8], binary: Bool, on connection: ConnectionID) {
        guard let session = sessions.session(on: connection) else {
            if pendingResumes.contains(connection) { holdUntilSession(bytes, binary: binary, on: connection) }
            return
        }
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
            let later = LaterReply()
            let result = try handle(type: type, object: object, from: session) { [weak self, weak session] result in
                guard let self, let session else { return }
                let envelope: Envelope
                switch result {
                case .success(let value): envelope = .ok(id: id, data: value)
                case .failure(let error): envelope = .error(id: id, error)
                }
                if let slot = later.slot { replyLater(envelope, slot: slot, to: session) } else { reply(envelope, to: session) }
                later.answered = true
            }
            guard !result.answeredLater else {
                // Its place among the replies, unless it was answered already.
                if !later.answered {
                    later.slot = session.nextReplySlot
                    session.nextReplySlot += 1
                    session.repliesInOrder.append((later.slot!, nil))
                }
                return
            }
            reply(.ok(id: id, data: result.reply), to: session)
            apply(result.effects)
        } catch {
            reply(.error(id: id, error), to: session)
        }
    }

    /// Where the reply of a request answered later goes: `slot` once the request has returned
    /// (its place among the replies), or at once when it was answered before that.
    private final class LaterReply {
        var slot: UInt64?
        var answered = false
    }

    /// The refusal of a message past the session's rate.
    var rateLimited: ErrorBody {
        ErrorBody(.rateLimited, "more than \(configuration.limits.messagesPerSecond) messages per second")
    }

    /// What a request handler gives back: the reply's data and the room effects to apply
    /// after it, or that it answers later.
    struct Outcome {
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

    /// The one table from a request's type to its handler. `answer`: how a handler that waits
    /// for the store replies (exactly once, on the loop).
    private func handle(
        type: String, object: [String: JSONValue], from session: Session,
        answer: @escaping (Result<JSONValue, ErrorBody>) -> Void
    ) throws(ErrorBody) -> Outcome {
        switch type {
        case MessageType.ping: return Outcome(reply: ["server_time": .int(wallMillis)])
        case MessageType.sessionInfo: return Outcome(reply: info(of: session))
        case MessageType.sessionRefresh: return try refreshToken(decodeData(object), session: session)
        case MessageType.roomJoin: return try join(decodeData(object), session: session, answer: answer)
        case MessageType.roomLeave: return try leave(decodeData(object), session: session)
        case MessageType.signal: return try signal(object, from: session)
        case MessageType.data: return try data(object, from: session, answer: answer)
        case MessageType.roomSetMetadata: return try setMetadata(decodeData(object), session: session, answer: answer)
        case MessageType.callCreate:
            createCall(try decodeData(object), caller: session.claims, app: session.app, device: session.deviceKey, seat: session.peerID, answer: answer)
            return .later
        case MessageType.callAnswer, MessageType.callDecline, MessageType.callCancel, MessageType.callEnd, MessageType.callAck:
            callAction(
                type, try decodeData(object), claims: session.claims, app: session.app, device: session.deviceKey, seat: session.peerID,
                answer: answer)
            return .later
        case MessageType.callHold:
            holdCall(try decodeData(object), claims: session.claims, app: session.app, device: session.deviceKey, answer: answer)
            return .later
        default:
            throw ErrorBody(.unknownType, "unknown message type '\(type.prefix(64))'")
        }
    }

    /// `session.info`: who this session is, as the server sees it.
    private func info(of session: Session) -> JSONValue {
        [
            "peer_id": .string(session.peerID), "identity": .string(session.identity),
            "name": session.claims.name.map(JSONValue.string) ?? .null, "app_id": .string(session.app.id),
            "grants": jsonValue(session.claims.grants), "token_expires_at": .int(session.claims.exp),
            "rooms": .array(session.rooms.sorted().map(JSONValue.string)),
        ]
    }

    // MARK: Effects and sending

    /// Sends a sequenced event: logged for replay, delivered now if attached. Data already
    /// written as JSON (a relayed signal) is spliced in as it is. Only `LocalDelivery` calls
    /// it: everything else delivers through `delivery`.
    func sendEvent(_ event: OutgoingEvent, to session: Session) {
        session.lastSequence += 1
        guard let bytes = codec.event(event, seq: session.lastSequence) else { return }
        let frame = OutboundFrame(bytes)
        session.log.append(seq: session.lastSequence, frame: frame)
        transmit(frame, to: session)
    }

    /// Sends an unsequenced connection message (`session.welcome`, `session.resumed`).
    func sendControl(_ type: String, _ data: some Encodable, to session: Session) {
        guard let bytes = codec.control(type, data) else { return }
        transmit(OutboundFrame(bytes), to: session)
    }

    /// Sends the reply to a request, after the replies to earlier requests still owed.
    func reply(_ envelope: Envelope, to session: Session) {
        guard let frame = replyFrame(envelope) else { return }
        guard session.repliesInOrder.isEmpty else {
            session.repliesInOrder.append((session.nextReplySlot, frame))
            session.nextReplySlot += 1
            return
        }
        transmit(frame, to: session)
    }

    /// A reply as it goes out, its error counted.
    private func replyFrame(_ envelope: Envelope) -> OutboundFrame? {
        if let error = envelope.error { metrics.increment("switchboard_errors_total", ["code": error.code.rawValue]) }
        return codec.encode(envelope).map { OutboundFrame($0) }
    }

    /// The reply to a request answered later, in its place: it and the replies held behind it
    /// go out once every earlier one has.
    private func replyLater(_ envelope: Envelope, slot: UInt64, to session: Session) {
        guard let index = session.repliesInOrder.firstIndex(where: { $0.slot == slot }) else { return }
        if let frame = replyFrame(envelope) {
            session.repliesInOrder[index].frame = frame
        } else {
            session.repliesInOrder.remove(at: index)
        }
        var sent = 0
        while sent < session.repliesInOrder.count, let frame = session.repliesInOrder[sent].frame {
            transmit(frame, to: session)
            sent += 1
        }
        session.repliesInOrder.removeFirst(sent)
    }

    func transmit(_ frame: OutboundFrame, to session: Session) {
        guard let connection = session.connection else { return }
        if output?.send(frame, to: connection) == true { metrics.messagesOut.increment() }
    }

    // MARK: Helpers

    func jsonValue(_ value: some Encodable) -> JSONValue { codec.value(value) }

    func decodeData<T: Decodable>(_ request: [String: JSONValue]) throws(ErrorBody) -> T { try MessageCodec.data(of: request) }
}
