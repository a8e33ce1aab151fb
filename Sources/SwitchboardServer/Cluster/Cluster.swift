import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

/// This node's part in a cluster (`cluster_redis_url`): its name in Redis, the channels it
/// listens on and the messages it exchanges with the other nodes. Redis holds no state a node
/// cannot rebuild: who is a live node (`sb:node:<id>`, renewed every third of
/// `node_timeout_seconds`), which node owns each live call (`sb:call:<id>`, written when the
/// call starts or moves, never renewed) and whether that node still holds its calls (its lease
/// in `sb:leases`, one field per node renewed every third of `call_lease_seconds`, as the store
/// renews one row), who is in an answered call (`sb:busy:<app>:<identity>`, a sorted set of
/// call ids, each counting while its call's node is live), which node runs each ordinary room
/// and the names of each node's rooms of an app (`Cluster+Rooms.swift`), and pub/sub: a channel per node
/// (`sb:n:<id>`: actions passed on to a call's owner, their answers, invite receipts) and a
/// channel per user (`sb:u:<app>:<identity>`) every node with a session of that user listens
/// on. Each user event is also kept for `cluster_event_replay_seconds` in one stream
/// (`sb:events`, added and published in one transaction), which a node that lost its
/// subscription reads back to the last it received (`catchUp`). Loop thread only, after `claim`.
///
/// Safety of `@unchecked Sendable`: confined to the loop thread like the hub (the server
/// hands it to the loop once, through `execute`).
package final class Cluster: @unchecked Sendable {
    let nodeID: String
    /// This process's value of the node key: a node restarted under the same id is another one.
    let instance: String
    /// The process that ran before this one on its data directory: gone, so its calls are
    /// taken over at once, whatever their lease says.
    let previousInstance: String?
    let url: RedisURL
    let logger: Logger
    private let nodeTimeout: Duration
    private let forwardTimeout: Duration
    /// How long Redis may leave a command unanswered before the connection counts as lost.
    let redisTimeout: Duration
    /// Clean-ups of ended calls sent lately, or while Redis was away (`cleanUp`).
    var cleanups: [(atMillis: Int64, cleanup: Cleanup)] = []
    /// When the connection for commands was last lost.
    private var commandsLostAtMillis: Int64?
    /// Keys one command or script writes at most when a node writes many again (its calls', its
    /// rooms'), so that none holds Redis up for long.
    static let keysPerScript = 200
    /// `max_rooms_per_app`, counted across the nodes (`sb:rooms:<app>:<node>`).
    let maxRoomsPerApp: Int
    /// The rooms whose claim Redis has not answered yet, by key, with how many (`claimRoom`).
    var roomsBeingClaimed: [String: (appID: String, name: String, count: Int)] = [:]
    /// Commands and publishes (`Cluster+Calls`, `Cluster+Rooms` send theirs here too).
    private(set) var commands: RedisConnection?
    private var subscriber: RedisConnection?
    /// The user channels this node listens on (it has a session of the user).
    private var userChannels: Set<String> = []
    /// Actions passed on to other nodes, waiting for their answer, by request number.
    private var forwards: [UInt64: Forward] = [:]
    var nextForward: UInt64 = 0
    private var eventCount: UInt64 = 0
    /// How long `sb:events` keeps a user event, and this node one it could not publish.
    private let eventReplay: Duration
    /// User events not in Redis yet (it was away, or the connection was lost before it
    /// answered), oldest first: published in order once it is back, unless older than
    /// `eventReplay`. While any wait, newer events wait behind them, so none overtakes another.
    private var unpublished: [(channel: [UInt8], message: [UInt8], atMillis: Int64, counted: Bool)] = []
    /// The id (`eid`) of the last user event this node received on its subscription: reading
    /// back stops there. None until one came: reading back then stops at `startedAt`.
    private var lastEvent: String?
    /// When this node started listening (its wall clock, for an `sb:events` id).
    private var startedAt = StreamID(millis: 0, sequence: 0)
    /// Set from the loss of the subscription until what was published meanwhile is read back.
    private var catchingUp: CatchUp?
    private var heartbeat: TimerID?
    /// Reads the signals other nodes pass on (on the loop, as messages arrive).
    private let signalReader = SignalReader()
    private(set) weak var loop: EventLoop?
    /// What arrives from other nodes goes to the hub.
    weak var hub: Hub?

    struct Forward {
        var answer: (Result<JSONValue, ErrorBody>) -> Void
        var timer: TimerID?
    }

    /// Reading back the user events published while the subscription was down, once every
    /// channel is subscribed again (`awaiting`: the last one asked for, until Redis confirms
    /// it; empty while not connected): `sb:events` from its newest entry back to `after`, the
    /// last event received before (or to `floor`), page by page, then delivered oldest first.
    struct CatchUp {
        var lostAtMillis: Int64
        /// The `eid` of the last event received before the loss.
        var after: String?
        /// Where reading back stops when no event was received (the node's start).
        var floor: StreamID
        var awaiting: String?
        /// A page of `sb:events` is asked for.
        var reading = false
        /// Where the next page ends (the oldest entry read so far; none: the newest entry).
        var before: StreamID?
        /// The entries read so far for this node's users, newest first.
        var found: [(id: StreamID, message: [UInt8])] = []
        /// Events delivered since the subscription came back (their `eid`): passed over.
        var delivered: Set<String> = []
        /// Live events that came while catching up: delivered after what is read back, each in
        /// its place in the stream when it was read back too.
        var held: [[String: JSONValue]] = []
        /// Heartbeats that found reading stopped (Redis lost, or a page refused): after
        /// `catchUpTries` the node gives up and delivers what it has.
        var stalls = 0
        /// Events read back that reached a session.
        var count = 0
        /// How many times reading started again from the newest entry: a page asked for
        /// before is not used.
        var round = 0

        /// The subscription was lost again before the end: what was published meanwhile is
        /// newer than the first page, so reading starts again from the newest entry.
        mutating func restart() {
            before = nil
            found = []
            round += 1
            stalls = 0
        }
    }

    init(nodeID: String, instance: String, previousInstance: String?, url: RedisURL, limits: ServerConfiguration.Limits, logger: Logger) {
        self.nodeID = nodeID
        self.instance = instance
        self.previousInstance = previousInstance
        self.url = url
        self.logger = logger.with("component", "cluster")
        nodeTimeout = .seconds(limits.nodeTimeoutSeconds)
        forwardTimeout = .milliseconds(limits.clusterForwardTimeoutMillis)
        redisTimeout = .milliseconds(limits.clusterRedisTimeoutMillis)
        eventReplay = .seconds(limits.clusterEventReplaySeconds)
        maxRoomsPerApp = limits.maxRoomsPerApp
    }

    // MARK: Keys and channels

    static func nodeKey(_ node: String) -> String { "sb:node:" + node }
    static func nodeChannel(_ node: String) -> String { "sb:n:" + node }
    /// What every node hears (`tellEveryone`).
    static let allChannel = "sb:all"
    static func userChannel(appID: String, identity: String) -> String { "sb:u:" + appID + ":" + identity }
    static func callKey(_ callID: String) -> String { "sb:call:" + callID }
    static func busyKey(appID: String, identity: String) -> String { "sb:busy:" + appID + ":" + identity }
    /// Each node's lease on the calls it holds: until when (ms since 1970), by node id.
    static let leasesKey = "sb:leases"
    static func roomKey(appID: String, name: String) -> String { "sb:room:" + appID + ":" + name }
    /// The names of the ordinary rooms of an app one node runs: the app's rooms across the
    /// nodes are those of the nodes whose lease runs (`max_rooms_per_app`).
    static func nodeRoomsKey(appID: String, node: String) -> String { "sb:rooms:" + appID + ":" + node }
    /// The apps a node has a `nodeRoomsKey` set for.
    static func roomAppsKey(_ node: String) -> String { "sb:roomapps:" + node }
    /// Every user event of the last `cluster_event_replay_seconds`: its channel (`c`) and
    /// message (`m`).
    static let eventsKey = "sb:events"

    /// Sets a key to this node's value when it is this node's or nobody's; answers 1 when it
    /// did, 0 when another holds it.
    static let holdScript = RedisScript("""
        local v = redis.call('get', KEYS[1])
        if v == false or v == ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
        return 0
        """)

    /// KEYS[1]: `sb:events`; ARGV[1]: how long it keeps entries, in ms. Trims older ones, by
    /// Redis's time.
    static let trimEventsScript = RedisScript("""
        local t = redis.call('time')
        local oldest = t[1] * 1000 + math.floor(t[2] / 1000) - tonumber(ARGV[1])
        return redis.call('xtrim', KEYS[1], 'MINID', '~', string.format('%.0f', oldest))
        """)

    /// Deletes a key when it holds ARGV[1] (a node's key, a call's key, an idempotency key).
    static let deleteIfScript = RedisScript(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0")

    // MARK: Membership

    /// Takes `nodeID` for this process before the server listens, or refuses with a sentence
    /// when a live node holds it (or Redis cannot be reached).
    static func claim(nodeID: String, instance: String, url: RedisURL, timeout: Duration) throws -> Void {
        let replies: [RedisValue]
        do {
            replies = try RedisConnection.blocking(url, [["SET", nodeKey(nodeID), instance, "NX", "PX", String(timeout.milliseconds)]])
        } catch {
            throw StartError(description: "cluster_redis_url: \(error.description)")
        }
        if case .error(let message)? = replies.first {
            throw StartError(description: "cluster_redis_url: Redis at \(url) refused to register the node: \(message)")
        }
        guard replies.first?.text == "OK" else {
            throw StartError(
                description: "another live node uses node_id '\(nodeID)' (Redis at \(url)): give each node its own --node-id, or wait \(Int(timeout.seconds)) s after a node stopped")
        }
    }

    /// Opens the connections on `loop` (the hub's thread), listens on the node's channel and
    /// renews the node's key every third of `node_timeout_seconds`.
    func start(on loop: EventLoop) {
        self.loop = loop
        let commands = RedisConnection(url: url, loop: loop)
        commands.replyTimeout = redisTimeout
        // A signal passed on is a `PUBLISH` nobody reads the reply of: Redis writes none.
        commands.leavesOutIgnoredReplies = true
        commands.onStateChange = { [weak self] up in
            guard let self else { return }
            guard up else {
                commandsLostAtMillis = wallMillis
                return lost("commands")
            }
            logger.info("connected to Redis", ["redis": url.description])
            if let lostAt = commandsLostAtMillis { cleanUpAgain(lostAtMillis: lostAt) }
            commandsLostAtMillis = nil
            publishUnpublished()
            catchUp()
            hub?.clusterRedisConnected()
        }
        let subscriber = RedisConnection(url: url, loop: loop)
        subscriber.replyTimeout = redisTimeout
        subscriber.onStateChange = { [weak self] up in
            guard let self else { return }
            // Redis closes a subscriber that reads too slowly (past `client-output-buffer-limit
            // pubsub`) as it closes any other: what was published to the user channels meanwhile
            // is read back from `sb:events` once subscribed again; the rest is lost (docs/scaling.md).
            guard up, let subscriber = self.subscriber else {
                lost("subscriber")
                if catchingUp == nil { catchingUp = CatchUp(lostAtMillis: wallMillis, after: lastEvent, floor: startedAt) }
                catchingUp?.restart()
                catchingUp?.awaiting = ""  // no channel: waits for the connection first
                return
            }
            let channels = [Self.nodeChannel(nodeID), Self.allChannel] + userChannels.sorted()
            catchingUp?.awaiting = channels.last
            subscriber.subscribe(channels)
        }
        subscriber.onSubscribed = { [weak self] channel in
            guard let self, catchingUp?.awaiting == channel else { return }
            catchingUp?.awaiting = nil
            catchUp()
        }
        subscriber.onMessage = { [weak self] channel, payload in self?.received(payload, on: channel) }
        startedAt = StreamID(millis: wallMillis, sequence: 0)
        self.commands = commands
        self.subscriber = subscriber
        renewNode()
    }

    /// One of the node's two connections to Redis closed (it reconnects by itself).
    private func lost(_ connection: String) {
        logger.warning(
            connection == "subscriber" ? "lost the Redis subscription; reconnecting (what other nodes publish meanwhile does not reach this node)"
                : "lost Redis; reconnecting", ["redis": url.description, "connection": connection])
        hub?.metrics.increment("switchboard_cluster_redis_disconnects_total", ["connection": connection])
    }

    /// The other live nodes (those in `sb:nodes` whose key is there; the dead are dropped).
    func otherNodes(then: @escaping ([String]) -> Void) {
        guard let commands, commands.isConnected else { return then([]) }
        commands.send(["SMEMBERS", Self.nodesKey]) { [weak self] result in
            guard let self else { return }
            let members = Set(((try? result.get())?.array ?? []).compactMap(\.text))
            alive(members) { [weak self] living in
                guard let self, let living else { return then([]) }
                let dead = members.subtracting(living.keys)
                if !dead.isEmpty { commands.send(["SREM", Self.nodesKey] + dead.sorted()) { _ in } }
                then(living.keys.filter { $0 != nodeID }.sorted())
            }
        }
    }

    /// Every node that ever joined, until found dead (`otherNodes`).
    static let nodesKey = "sb:nodes"

    private func renewNode() {
        commands?.send(["SADD", Self.nodesKey, nodeID]) { _ in }
        // `sb:events` keeps what the last `cluster_event_replay_seconds` published (and up to a
        // heartbeat more); Redis trims it by whole blocks of entries (`~`), on its own clock,
        // which also made the entries' ids (a node's clock ahead would trim them early).
        commands?.run(Self.trimEventsScript, keys: [Self.eventsKey], arguments: [String(eventReplay.milliseconds)]) { _ in }
        let timeout = nodeTimeout
        commands?.run(Self.holdScript, keys: [Self.nodeKey(nodeID)], arguments: [instance, String(timeout.milliseconds)]) { [weak self] result in
            guard let self else { return }
            if case .success(.integer(0)) = result {
                logger.error("another process took this node's id in Redis: two nodes run as one", ["node": nodeID])
            }
        }
        heartbeatCatchUp()
        heartbeat = loop?.schedule(after: timeout / 3) { [weak self] in self?.renewNode() }
    }

    /// Leaves the cluster: the node's key goes (if still its own), the connections close. Not
    /// from inside a Redis reply.
    func stop() {
        if let heartbeat { loop?.cancel(heartbeat) }
        heartbeat = nil
        commands?.run(Self.deleteIfScript, keys: [Self.nodeKey(nodeID)], arguments: [instance]) { _ in }
        // Its calls were handed over (a drain) or end with it: its lease goes at once.
        sendIgnoringReply(["HDEL", Self.leasesKey, nodeID])
        // What was sent (the key's removal) goes out before the connections close.
        commands?.close(graceful: true)
        subscriber?.close(graceful: true)
        commands = nil
        subscriber = nil
        for (_, forward) in forwards { forward.answer(.failure(Self.ownerGone)) }
        forwards.removeAll()
    }

    /// Both connections to Redis are up (`/readyz` says 503 otherwise).
    var isConnected: Bool { commands?.isConnected == true && subscriber?.isConnected == true }

    // MARK: Users

    /// A user got its first session on this node, or lost its last: the node listens on the
    /// user's channel while it has one.
    func userPresenceChanged(appID: String, identity: String, present: Bool) {
        let channel = Self.userChannel(appID: appID, identity: identity)
        if present {
            guard userChannels.insert(channel).inserted else { return }
            subscriber?.subscribe([channel])
        } else {
            guard userChannels.remove(channel) != nil else { return }
            subscriber?.unsubscribe([channel])
        }
    }

    /// A new id for a user event: unique in the cluster (this node's id and instance, and a count).
    func nextEventID() -> String {
        eventCount += 1
        return instance + "/" + String(eventCount)
    }

    /// Publishes an event for a user's sessions on the other nodes, and keeps it in
    /// `sb:events`. `invitation`: their nodes answer this node with where it went. Held while
    /// Redis is away, and published once it is back (`unpublished`).
    func publish(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, invitation: Invitation?, eventID: String) {
        let data: JSONValue
        switch event.data {
        case .value(let value): data = value
        case .encoded(let bytes): data = JSONText.parse(bytes) ?? .null
        }
        var message: [String: JSONValue] = [
            "k": "event", "from": .string(nodeID), "app": .string(appID), "user": .string(identity), "type": .string(event.type), "data": data,
        ]
        message["eid"] = .string(eventID)
        if let except { message["except"] = .string(except) }
        if let invitation { message["invite"] = ["call": .string(invitation.callID), "callee": .string(invitation.callee)] }
        let channel = Array(Self.userChannel(appID: appID, identity: identity).utf8), bytes = JSONText.serialize(.object(message))
        guard commands?.isConnected == true else { return hold(channel, bytes, atMillis: wallMillis) }
        // Those held go first (connected again, or one Redis did not take while connected).
        publishUnpublished()
        sendEvent(channel, bytes, atMillis: wallMillis)
    }

    /// Adds a user event to `sb:events` (its channel `c` and message `m`, as nodes of every
    /// version since the stream came read it) and publishes it, in one transaction: the
    /// stream's order is the order of publishing, which reading back relies on. Neither a
    /// script (which costs Redis several times the two commands) nor the stream trimmed here
    /// (every node's heartbeat does it).
    private func sendEvent(_ channel: [UInt8], _ message: [UInt8], atMillis: Int64, counted: Bool = false) {
        guard let commands else { return }
        commands.transaction([[Self.xadd, Self.eventsKeyBytes, Self.newestID, Self.c, channel, Self.m, message], [Self.publish, channel, message]]) {
            [weak self] result in
            guard let self else { return }
            switch result {
            case .failure: hold(channel, message, atMillis: atMillis, counted: counted)
            case .success(.error(let refusal)):
                // Refused a write (Redis at `maxmemory`, say), and so the whole transaction:
                // published all the same, not kept.
                commands.sendIgnoringReply([Self.publish, channel, message])
                refusedToKeep(refusal)
            case .success(.array(let replies)):
                if case .error(let refusal)? = replies.first { refusedToKeep(refusal) }
            case .success: break
            }
        }
    }

    private func refusedToKeep(_ refusal: String) {
        guard wallMillis - refusalLoggedAtMillis > 10_000 else { return }
        refusalLoggedAtMillis = wallMillis
        logger.warning("Redis refused to keep an event for other nodes: published without it", ["error": refusal])
    }

    private static let xadd = Array("XADD".utf8), newestID = Array("*".utf8), c = Array("c".utf8), m = Array("m".utf8)

    /// When the last refusal to keep an event was logged (once in 10 s at most).
    private var refusalLoggedAtMillis: Int64 = 0

    private static let eventsKeyBytes = Array(eventsKey.utf8)

    /// Keeps a user event Redis did not take, dropping those held past `eventReplay` (checked
    /// once they are a second past it, so that a long outage drops them in batches).
    private func hold(_ channel: [UInt8], _ message: [UInt8], atMillis: Int64, counted: Bool = false) {
        if unpublished.isEmpty { logger.warning("events for other nodes wait for Redis", ["redis": url.description]) }
        unpublished.append((channel, message, atMillis, counted))
        if let oldest = unpublished.first?.atMillis, oldest < wallMillis - eventReplay.milliseconds - 1000 { dropExpiredEvents() }
    }

    private func dropExpiredEvents() {
        let oldest = wallMillis - eventReplay.milliseconds
        let expired = unpublished.firstIndex { $0.atMillis >= oldest } ?? unpublished.count
        guard expired > 0 else { return }
        unpublished.removeFirst(expired)
        hub?.metrics.increment("switchboard_cluster_late_events_total", ["outcome": "dropped"], by: Double(expired))
        logger.warning(
            "events for other nodes dropped: Redis was away longer than cluster_event_replay_seconds", ["count": String(expired)])
    }

    /// Redis is back: the events held meanwhile go out, in order.
    private func publishUnpublished() {
        guard !unpublished.isEmpty else { return }
        dropExpiredEvents()
        guard !unpublished.isEmpty else { return }
        let held = unpublished
        unpublished.removeAll()
        for event in held { sendEvent(event.channel, event.message, atMillis: event.atMillis, counted: true) }
        // Each once: one Redis lost again on its way goes out again later, not counted again.
        hub?.metrics.increment("switchboard_cluster_late_events_total", ["outcome": "republished"], by: Double(held.filter { !$0.counted }.count))
        logger.info("events held while Redis was away published", ["count": String(held.count)])
    }

    /// Reads back, once subscribed again, the user events published while the subscription was
    /// down, page by page from the newest back to the last one received before, and delivers
    /// those for this node's users, oldest first, to the sessions that were open when each was
    /// published (and had not had it). Live user events that arrive while it reads wait and go
    /// after it, each in its place in the stream when read back too, so that no session hears
    /// a call's later event before its earlier one.
    private func catchUp() {
        guard let state = catchingUp, state.awaiting == nil, !state.reading, commands?.isConnected == true, subscriber?.isConnected == true
        else { return }
        catchingUp?.reading = true
        readBack()
    }

    private static let catchUpPage = 512

    private func readBack() {
        guard let state = catchingUp, let commands else { return }
        let end = state.before.map { "(" + $0.description } ?? "+"
        let start = state.after == nil ? state.floor.description : "-"
        // The last event received, as its message in the stream names it (the serializer that
        // wrote the message writes the id the same way here): found without parsing each entry.
        let last = state.after.map { Array("\"eid\":".utf8) + JSONText.serialize(.string($0)) }
        commands.send(["XREVRANGE", Self.eventsKey, end, start, "COUNT", String(Self.catchUpPage)]) { [weak self] result in
            guard let self, catchingUp != nil else { return }
            // The subscription was lost meanwhile: again from the newest entry, now if it is
            // back already (else once Redis confirms the channels). The live events held go on
            // waiting: the new reading finds them in the stream, after what was published before.
            guard catchingUp?.round == state.round else {
                catchingUp?.reading = false
                return catchUp()
            }
            // Again once Redis is back (`catchUp` when the connection is up again), or at the next
            // heartbeat; the live events held go on waiting (`heartbeatCatchUp`).
            guard case .success(.array(let entries)) = result else {
                catchingUp?.reading = false
                if case .success(.error(let message)) = result { logger.warning("Redis refused to read back the events", ["error": message]) }
                return
            }
            catchingUp?.stalls = 0  // reading goes on
            var reachedLast = false
            for entry in entries {
                guard let items = entry.array, items.count == 2, let id = items[0].text.flatMap(StreamID.init), let fields = items[1].array
                else { continue }
                catchingUp?.before = id
                guard fields.count == 4, let channel = fields[1].text, case .string(let message) = fields[3] else { continue }
                if let last, message.firstRange(of: last) != nil {
                    reachedLast = true
                    break
                }
                if userChannels.contains(channel) { catchingUp?.found.append((id, message)) }
            }
            if !reachedLast && entries.count == Self.catchUpPage {
                if commands.isConnected { return readBack() }
                catchingUp?.reading = false  // on once Redis is back (the live events held wait)
                return
            }
            deliverFound()
            stopReading()
            guard let done = catchingUp, done.awaiting == nil else { return }
            catchingUp = nil
            hub?.metrics.increment("switchboard_cluster_late_events_total", ["outcome": "caught_up"], by: Double(done.count))
            logger.info("caught up on the events published while the subscription was down", ["count": String(done.count)])
        }
    }

    /// Delivers what was read back, oldest first. One that also came live while reading goes
    /// here as it came live (to every session), the others to the sessions open when the
    /// subscription was lost, or when it was published if that was earlier.
    private func deliverFound() {
        guard let state = catchingUp else { return }
        catchingUp?.found = []
        let live = Set(state.held.compactMap { $0["eid"]?.stringValue })
        for (id, bytes) in state.found.reversed() {
            guard case .object(let event)? = JSONText.parse(bytes) else { continue }
            let eventID = event["eid"]?.stringValue
            if let eventID, catchingUp?.delivered.insert(eventID).inserted == false { continue }
            if let eventID, live.contains(eventID) {
                userEvent(event, openedBy: nil)
            } else if userEvent(event, openedBy: min(id.millis, state.lostAtMillis)) {
                catchingUp?.count += 1
            }
        }
    }

    /// At each heartbeat while catching up: reading that stopped (Redis lost, or a page
    /// refused) is tried again, and given up after `catchUpTries` heartbeats: what was read and
    /// what came live since go to the sessions, and the rest is lost (docs/scaling.md).
    private func heartbeatCatchUp() {
        guard let state = catchingUp, !state.reading, state.awaiting == nil else { return }
        catchingUp?.stalls += 1
        guard state.stalls + 1 >= Self.catchUpTries else { return catchUp() }
        deliverFound()
        stopReading()
        let count = catchingUp?.count ?? 0
        catchingUp = nil
        hub?.metrics.increment("switchboard_cluster_late_events_total", ["outcome": "caught_up"], by: Double(count))
        logger.warning("gave up reading back the events published while the subscription was down", ["count": String(count)])
    }

    private static let catchUpTries = 3

    /// Reading back is done or given up: the live events that waited go now.
    private func stopReading() {
        guard let held = catchingUp?.held else { return }
        catchingUp?.reading = false
        catchingUp?.held = []
        for live in held {
            if let eventID = live["eid"]?.stringValue, catchingUp?.delivered.insert(eventID).inserted == false { continue }
            userEvent(live, openedBy: nil)
        }
    }

    var wallMillis: Int64 { hub?.wallMillis ?? Int64(Date().timeIntervalSince1970 * 1000) }

    /// Sends `message` to node `node`, saying which node and process it comes from.
    func publish(_ message: [String: JSONValue], toNode node: String) {
        var message = message
        message["from"] = .string(nodeID)
        message["inst"] = .string(instance)
        commands?.sendIgnoringReply([Self.publish, Array(Self.nodeChannel(node).utf8), JSONText.serialize(.object(message))])
    }

    private static let publish = Array("PUBLISH".utf8)

    /// A command whose reply nobody reads (a mark, a key given up): Redis leaves the reply out
    /// where it can (`RedisConnection.sendIgnoringReply`), nothing waits for it here.
    func sendIgnoringReply(_ arguments: [String]) {
        commands?.sendIgnoringReply(arguments.map { Array($0.utf8) })
    }

    /// Asks node `node` to carry out `op` (`Hub.clusterRequest`); `answer` hears its answer, or
    /// `ownerGone` after `cluster_forward_timeout_ms`, or at once when no node listens on its
    /// channel.
    func request(_ op: String, _ body: [String: JSONValue], toNode node: String, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        nextForward += 1
        let number = nextForward
        var message = body
        message["k"] = "req"
        message["op"] = .string(op)
        message["from"] = .string(nodeID)
        message["inst"] = .string(instance)
        message["req"] = .int(Int64(number))
        // Not carried out past the time this node gives up on it (a session handed over to a
        // node that no longer waits for it would belong to nobody).
        message["until"] = .int(wallMillis + forwardTimeout.milliseconds)
        let timer = loop?.schedule(after: forwardTimeout) { [weak self] in
            guard let forward = self?.forwards.removeValue(forKey: number) else { return }
            forward.answer(.failure(Self.ownerGone))
        }
        forwards[number] = Forward(answer: answer, timer: timer)
        // Nobody listening on the node's channel: it died (Redis dropped its subscription with
        // its connection) or lost Redis; the caller hears so at once, not after the timeout.
        commands?.send([Self.publish, Array(Self.nodeChannel(node).utf8), JSONText.serialize(.object(message))]) { [weak self] result in
            guard case .success(let receivers) = result, receivers.integer == 0, let self,
                let forward = forwards.removeValue(forKey: number)
            else { return }
            if let timer = forward.timer { loop?.cancel(timer) }
            forward.answer(.failure(Self.ownerGone))
        }
    }

    /// Tells node `node` something that needs no answer (`Hub.clusterMessage`).
    func tell(_ op: String, _ body: [String: JSONValue], toNode node: String) {
        var message = body
        message["k"] = "tell"
        message["op"] = .string(op)
        message["from"] = .string(nodeID)
        publish(message, toNode: node)
    }

    /// Tells every node (this one too) something that needs no answer.
    func tellEveryone(_ op: String, _ body: [String: JSONValue] = [:]) {
        var message = body
        message["k"] = "tell"
        message["op"] = .string(op)
        message["from"] = .string(nodeID)
        message["inst"] = .string(instance)
        commands?.send([Array("PUBLISH".utf8), Array(Self.allChannel.utf8), JSONText.serialize(.object(message))]) { _ in }
    }

    /// A signal for the node running its room, its payload spliced as it came (no JSON tree).
    func tellSignal(appID: String, room: String, from: String, to: String, signal: ArraySlice<UInt8>, toNode node: String) {
        let bytes = Self.signalMessage(from: nodeID, appID: appID, room: room, peer: from, to: to, signal: signal)
        commands?.sendIgnoringReply([Self.publish, Array(Self.nodeChannel(node).utf8), bytes])
    }

    /// The message `tellSignal` publishes: its fields, then the payload last, as it came.
    package static func signalMessage(from node: String, appID: String, room: String, peer: String, to: String, signal: ArraySlice<UInt8>) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(signal.count + room.utf8.count + 128)
        bytes.append(contentsOf: #"{"k":"tell","op":"sig","from":"#.utf8)
        JSONText.appendQuoted(node, to: &bytes)
        for (name, value) in [("app", appID), ("room", room), ("peer", peer), ("to", to)] {
            bytes.append(contentsOf: #",""#.utf8)
            bytes.append(contentsOf: name.utf8)
            bytes.append(contentsOf: #"":"#.utf8)
            JSONText.appendQuoted(value, to: &bytes)
        }
        bytes.append(contentsOf: #","signal":"#.utf8)
        bytes.append(contentsOf: signal)
        bytes.append(0x7D)
        return bytes
    }

    /// A signal from `tellSignal` as its fields and its payload's bytes, without parsing the
    /// payload into a tree (an SDP is kilobytes): simdjson validates the message and reads the
    /// fields; the fields come first, all of them strings that hold no quote unescaped, so the
    /// first `,"signal":` is the member, and the payload runs to the last byte but the closing
    /// brace. Nil for any other message.
    package static func splitSignal(_ payload: [UInt8], reader: SignalReader) -> (fields: PassedSignalFields, signal: ArraySlice<UInt8>)? {
        guard payload.count > signalPrefix.count + signalMember.count, payload.last == 0x7D else { return nil }
        // A loop over the bytes, not `firstRange(of:)`: that generic search was a third of a
        // receiving node's CPU per relayed signal.
        let found: Int? = payload.withUnsafeBufferPointer { bytes in
            guard memcmp(bytes.baseAddress!, signalPrefix, signalPrefix.count) == 0 else { return nil }
            let first = signalMember[0], last = bytes.count - signalMember.count
            var at = signalPrefix.count
            while at <= last {
                if bytes[at] == first, memcmp(bytes.baseAddress! + at, signalMember, signalMember.count) == 0 { return at }
                at += 1
            }
            return nil
        }
        guard let at = found, let fields = reader.readPassedSignal(payload) else { return nil }
        return (fields, payload[(at + signalMember.count)..<(payload.count - 1)])
    }

    private static let signalPrefix = Array(#"{"k":"tell","op":"sig","#.utf8)
    private static let signalMember = Array(#","signal":"#.utf8)

    /// Which of `nodes` are alive (their key is there), with the process each runs now (the
    /// key's value); nil when Redis did not answer.
    func alive(_ nodes: Set<String>, then: @escaping ([String: String]?) -> Void) {
        guard let commands, commands.isConnected, !nodes.isEmpty else { return then(commands?.isConnected == true ? [:] : nil) }
        let ordered = nodes.sorted()
        var living: [String: String] = [:]
        var left = ordered.count
        var failed = false
        for node in ordered {
            commands.send(["GET", Self.nodeKey(node)]) { result in
                switch result {
                case .success(.string(let bytes)): living[node] = String(decoding: bytes, as: UTF8.self)
                case .success(.null): break
                default: failed = true
                }
                left -= 1
                if left == 0 { then(failed ? nil : living) }
            }
        }
    }

    static let ownerGone = ErrorBody(.unavailable, "the node running this call did not answer; retry in a few seconds")

    /// A user event another node published (live, or read back by `catchUp` with `openedBy`):
    /// to the user's sessions here; an invite's receipts go back to the call's owner. Whether
    /// it reached a session.
    @discardableResult
    private func userEvent(_ message: [String: JSONValue], openedBy: Int64?) -> Bool {
        guard let hub, message["from"]?.stringValue != nodeID, let appID = message["app"]?.stringValue, let identity = message["user"]?.stringValue,
            let type = message["type"]?.stringValue
        else { return false }
        let receipts = hub.userEventArrived(
            OutgoingEvent(type: type, data: .value(message["data"] ?? .null)), toUser: identity, appID: appID, except: message["except"]?.stringValue,
            eventID: message["eid"]?.stringValue, openedBy: openedBy)
        if let invite = message["invite"], let owner = message["from"]?.stringValue, !receipts.isEmpty {
            publish(
                ["k": "rang", "call": invite["call"] ?? .null, "callee": invite["callee"] ?? .null,
                 "devices": .array(receipts.map { ["device": .string($0.device), "attached": .bool($0.attached)] })],
                toNode: owner)
        }
        return !receipts.isEmpty
    }

    // MARK: Receiving

    private func received(_ payload: [UInt8], on channel: String) {
        guard let hub else { return }
        if let (fields, signal) = Self.splitSignal(payload, reader: signalReader) {
            return hub.forwardedSignal(appID: fields.appID, room: fields.room, from: fields.peer, to: fields.to, signal: signal)
        }
        guard case .object(let message)? = JSONText.parse(payload) else { return }
        // A node heard from under another process than before was started again: what this
        // node knew of the process before goes first.
        if let from = message["from"]?.stringValue, let process = message["inst"]?.stringValue, from != nodeID {
            hub.nodeProcessSeen(from, process)
        }
        switch message["k"]?.stringValue {
        case "event":
            if let eventID = message["eid"]?.stringValue {
                lastEvent = eventID
                if catchingUp != nil {
                    catchingUp?.held.append(message)
                    return
                }
                catchingUp?.delivered.insert(eventID)
            }
            userEvent(message, openedBy: nil)
        case "rang":
            guard let callID = message["call"]?.stringValue, let callee = message["callee"]?.stringValue, case .array(let devices)? = message["devices"]
            else { return }
            let receipts = devices.compactMap { item in
                item["device"]?.stringValue.map { DeliveryReceipt(device: $0, attached: item["attached"] == .bool(true)) }
            }
            hub.invitationDelivered(receipts, Invitation(callID: callID, callee: callee))
        case "req":
            guard let from = message["from"]?.stringValue, let number = message["req"], let op = message["op"]?.stringValue else { return }
            if let until = message["until"]?.intValue, wallMillis > until {
                return logger.warning("a request from another node came after it gave up on it: not carried out", ["op": op, "node": from])
            }
            hub.clusterRequest(op, message) { [weak self] result in
                var reply: [String: JSONValue] = ["k": "reply", "req": number]
                switch result {
                case .success(let value): reply["ok"] = value
                case .failure(let error):
                    reply["error"] = ["code": .string(error.code.rawValue), "message": .string(error.message), "reason": error.reason.map(JSONValue.string) ?? .null]
                }
                self?.publish(reply, toNode: from)
            }
        case "reply":
            guard case .int(let number)? = message["req"], let forward = forwards.removeValue(forKey: UInt64(number)) else { return }
            if let timer = forward.timer { loop?.cancel(timer) }
            if let value = message["ok"] {
                forward.answer(.success(value))
            } else {
                let error = message["error"]
                forward.answer(.failure(ErrorBody(
                    ErrorCode(rawValue: error?["code"]?.stringValue ?? "") ?? .internal, error?["message"]?.stringValue ?? "refused",
                    reason: error?["reason"]?.stringValue)))
            }
        case "tell":
            guard let op = message["op"]?.stringValue, let from = message["from"]?.stringValue else { return }
            if op == "sig", let signal = message["signal"], let appID = message["app"]?.stringValue, let room = message["room"]?.stringValue,
                let peer = message["peer"]?.stringValue, let to = message["to"]?.stringValue
            {
                return hub.forwardedSignal(appID: appID, room: room, from: peer, to: to, signal: JSONText.serialize(signal)[...])
            }
            hub.clusterMessage(op, message, from: from)
        default:
            return
        }
    }
}

/// An entry's id in a Redis stream (`<ms>-<seq>`).
struct StreamID: Hashable, CustomStringConvertible {
    var millis: Int64
    var sequence: Int64

    init(millis: Int64, sequence: Int64) {
        self.millis = millis
        self.sequence = sequence
    }

    init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let millis = Int64(parts[0]), let sequence = Int64(parts[1]) else { return nil }
        self.init(millis: millis, sequence: sequence)
    }

    var description: String { "\(millis)-\(sequence)" }
}
