import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

/// This node's part in a cluster (`cluster_redis_url`): its name in Redis, the channels it
/// listens on and the messages it exchanges with the other nodes. Redis holds no state a node
/// cannot rebuild: who is a live node (`sb:node:<id>`, renewed every third of
/// `node_timeout_seconds`), which node owns each live call (`sb:call:<id>`, renewed with the
/// call's lease), who is in an answered call (`sb:busy:<app>:<identity>`, a sorted set of call
/// ids scored by their lease), and pub/sub: a channel per node (`sb:n:<id>`: actions passed on
/// to a call's owner, their answers, invite receipts) and a channel per user (`sb:u:<app>:
/// <identity>`) every node with a session of that user listens on. Loop thread only, after
/// `claim`.
///
/// Safety of `@unchecked Sendable`: confined to the loop thread like the hub (the server
/// hands it to the loop once, through `execute`).
final class Cluster: @unchecked Sendable {
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
    /// How long a room's key lasts unless its node renews it (with its calls').
    private let roomLease: Duration
    private var commands: RedisConnection?
    private var subscriber: RedisConnection?
    /// The user channels this node listens on (it has a session of the user).
    private var userChannels: Set<String> = []
    /// Actions passed on to other nodes, waiting for their answer, by request number.
    private var forwards: [UInt64: Forward] = [:]
    private var nextForward: UInt64 = 0
    private var eventCount: UInt64 = 0
    private var heartbeat: TimerID?
    private weak var loop: EventLoop?
    /// What arrives from other nodes goes to the hub.
    weak var hub: Hub?

    struct Forward {
        var answer: (Result<JSONValue, ErrorBody>) -> Void
        var timer: TimerID?
    }

    init(nodeID: String, instance: String, previousInstance: String?, url: RedisURL, limits: ServerConfiguration.Limits, logger: Logger) {
        self.nodeID = nodeID
        self.instance = instance
        self.previousInstance = previousInstance
        self.url = url
        self.logger = logger.with("component", "cluster")
        nodeTimeout = .seconds(limits.nodeTimeoutSeconds)
        forwardTimeout = .milliseconds(limits.clusterForwardTimeoutMillis)
        roomLease = .seconds(limits.callLeaseSeconds)
    }

    // MARK: Keys and channels

    static func nodeKey(_ node: String) -> String { "sb:node:" + node }
    static func nodeChannel(_ node: String) -> String { "sb:n:" + node }
    /// What every node hears (`tellEveryone`).
    static let allChannel = "sb:all"
    static func userChannel(appID: String, identity: String) -> String { "sb:u:" + appID + ":" + identity }
    static func callKey(_ callID: String) -> String { "sb:call:" + callID }
    static func busyKey(appID: String, identity: String) -> String { "sb:busy:" + appID + ":" + identity }
    static func roomKey(appID: String, name: String) -> String { "sb:room:" + appID + ":" + name }

    /// Sets a key to this node's value when it is this node's or nobody's; answers 1 when it
    /// did, 0 when another holds it.
    static let holdScript = """
        local v = redis.call('get', KEYS[1])
        if v == false or v == ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
        return 0
        """

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
        commands.onStateChange = { [weak self] up in
            guard let self else { return }
            if up { logger.info("connected to Redis", ["redis": url.description]) } else { logger.warning("lost Redis; reconnecting", ["redis": url.description]) }
        }
        let subscriber = RedisConnection(url: url, loop: loop)
        subscriber.onStateChange = { [weak self] up in
            guard let self, up, let subscriber = self.subscriber else { return }
            subscriber.subscribe([Self.nodeChannel(nodeID), Self.allChannel] + userChannels.sorted())
        }
        subscriber.onMessage = { [weak self] channel, payload in self?.received(payload, on: channel) }
        self.commands = commands
        self.subscriber = subscriber
        renewNode()
    }

    /// The other live nodes (those in `sb:nodes` whose key is there; the dead are dropped).
    func otherNodes(then: @escaping ([String]) -> Void) {
        guard let commands, commands.isConnected else { return then([]) }
        commands.send(["SMEMBERS", Self.nodesKey]) { [weak self] result in
            guard let self else { return }
            let members = Set(((try? result.get())?.array ?? []).compactMap(\.text))
            alive(members) { [weak self] living in
                guard let self, let living else { return then([]) }
                let dead = members.subtracting(living)
                if !dead.isEmpty { commands.send(["SREM", Self.nodesKey] + dead.sorted()) { _ in } }
                then(living.subtracting([nodeID]).sorted())
            }
        }
    }

    /// Every node that ever joined, until found dead (`otherNodes`).
    static let nodesKey = "sb:nodes"

    private func renewNode() {
        commands?.send(["SADD", Self.nodesKey, nodeID]) { _ in }
        let timeout = nodeTimeout
        commands?.send(["EVAL", Self.holdScript, "1", Self.nodeKey(nodeID), instance, String(timeout.milliseconds)]) { [weak self] result in
            guard let self else { return }
            if case .success(.integer(0)) = result {
                logger.error("another process took this node's id in Redis: two nodes run as one", ["node": nodeID])
            }
        }
        heartbeat = loop?.schedule(after: timeout / 3) { [weak self] in self?.renewNode() }
    }

    /// Leaves the cluster: the node's key goes (if still its own), the connections close. Not
    /// from inside a Redis reply.
    func stop() {
        if let heartbeat { loop?.cancel(heartbeat) }
        heartbeat = nil
        commands?.send(["EVAL", "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", "1", Self.nodeKey(nodeID), instance]) { _ in }
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

    /// Publishes an event for a user's sessions on the other nodes. `invitation`: their nodes
    /// answer this node with where it went.
    /// A new id for a user event: unique in the cluster (this node's id and instance, and a count).
    func nextEventID() -> String {
        eventCount += 1
        return instance + "/" + String(eventCount)
    }

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
        commands?.send([Array("PUBLISH".utf8), Array(Self.userChannel(appID: appID, identity: identity).utf8), JSONText.serialize(.object(message))]) {
            [weak self] result in
            if case .failure(let error) = result { self?.logger.warning("an event for another node was not published", ["error": error.description]) }
        }
    }

    func publish(_ message: [String: JSONValue], toNode node: String) {
        commands?.send([Array("PUBLISH".utf8), Array(Self.nodeChannel(node).utf8), JSONText.serialize(.object(message))]) { _ in }
    }

    /// What a call setup needs from the cluster: which callees have a session on some node and
    /// which are in an answered call; whether the caller may ring them now (the invite limits,
    /// counted across the nodes, over the last minute as on one node); and, for an idempotency
    /// key, the call it already names (nil: this call, `callID`, takes it). `nil`: Redis did not
    /// answer (the caller then knows only this node).
    func callSetup(
        callees identities: [String], appID: String, caller: String, idempotencyKey: String?, callID: String, limits: ServerConfiguration.Limits,
        nowMillis: Int64, then: @escaping (Presence?) -> Void
    ) {
        guard let commands, commands.isConnected, !identities.isEmpty else { return then(nil) }
        var presence = Presence(connected: [], inCall: [])
        var left = 3
        var failed = false
        func done() {
            left -= 1
            if left == 0 { then(failed ? nil : presence) }
        }
        commands.send(["PUBSUB", "NUMSUB"] + identities.map { Self.userChannel(appID: appID, identity: $0) }) { result in
            if case .success(.array(let counts)) = result {
                for (index, identity) in identities.enumerated() where counts.count > index * 2 + 1 && (counts[index * 2 + 1].integer ?? 0) > 0 {
                    presence.connected.insert(identity)
                }
            } else { failed = true }
            done()
        }
        // The idempotency key first: a retry of a call made already counts as no new invite.
        let idempotency = idempotencyKey.map { "sb:idem:" + appID + ":" + caller + ":" + $0 } ?? "sb:idem:-"
        let inviteKeys = [idempotency, "sb:inv:" + appID + ":" + caller] + identities.map { "sb:inv:" + appID + ":" + caller + ":" + $0 }
        commands.send(
            ["EVAL", Self.inviteScript, String(inviteKeys.count)] + inviteKeys
                + [String(nowMillis), String(limits.invitesPerMinute), String(limits.invitesPerPairPerMinute), callID, idempotencyKey == nil ? "0" : "1"]
        ) { result in
            switch result {
            case .success(.array(let reply)) where reply.count == 2:
                presence.admitted = reply[0].integer == 1
                if reply[0].integer == 2 { presence.earlierCall = reply[1].text }
            default: failed = true
            }
            done()
        }
        busy(identities, appID: appID, nowMillis: nowMillis) { inCall in
            if let inCall { presence.inCall = inCall } else { failed = true }
            done()
        }
    }

    /// Counts a connect of `identity` across the nodes over the last minute; `then` hears
    /// whether it is within `limit` (true too when Redis does not answer: each node's own limit
    /// still holds).
    func admitConnect(appID: String, identity: String, limit: Int, nowMillis: Int64, then: @escaping (Bool) -> Void) {
        guard let commands, commands.isConnected else { return then(true) }
        nextForward += 1
        commands.send(
            ["EVAL", Self.inviteScript, "2", "sb:idem:-", "sb:conn:" + appID + ":" + identity, String(nowMillis), String(limit), "0",
             instance + "/c" + String(nextForward), "0"]
        ) { result in
            if case .success(.array(let reply)) = result, reply.first?.integer == 0 { return then(false) }
            then(true)
        }
    }

    /// A call refused after it took an idempotency key: the key is free again (if still its).
    func forgetIdempotencyKey(appID: String, caller: String, key: String, callID: String) {
        commands?.send(
            ["EVAL", "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", "1",
             "sb:idem:" + appID + ":" + caller + ":" + key, callID]) { _ in }
    }

    /// An idempotency key and the invite limits over the last minute, in one step. KEYS[1]: the
    /// key's (ARGV[5] = 1 when there is one), then the caller's and each pair's sorted set of
    /// invites. Answers {2, call} when the key names a call already (no invite counted), {0}
    /// when a limit refuses it (nothing counted, as on one node), {1} when the call may go:
    /// its invite counted and the key taken for it (a day).
    static let inviteScript = """
        if ARGV[5] == '1' then
            local earlier = redis.call('get', KEYS[1])
            if earlier then return {2, earlier} end
        end
        local now = tonumber(ARGV[1])
        for i = 2, #KEYS do redis.call('zremrangebyscore', KEYS[i], '-inf', now - 60000) end
        if redis.call('zcard', KEYS[2]) >= tonumber(ARGV[2]) then return {0, ''} end
        for i = 3, #KEYS do if redis.call('zcard', KEYS[i]) >= tonumber(ARGV[3]) then return {0, ''} end end
        for i = 2, #KEYS do redis.call('zadd', KEYS[i], now, ARGV[4]) redis.call('pexpire', KEYS[i], 60000) end
        if ARGV[5] == '1' then redis.call('set', KEYS[1], ARGV[4], 'PX', 86400000) end
        return {1, ''}
        """

    /// Which of `identities` have a session on some node, and which are in an answered call:
    /// `nil` when Redis did not answer.
    func presence(of identities: [String], appID: String, nowMillis: Int64, then: @escaping (Presence?) -> Void) {
        guard let commands, commands.isConnected, !identities.isEmpty else { return then(nil) }
        commands.send(["PUBSUB", "NUMSUB"] + identities.map { Self.userChannel(appID: appID, identity: $0) }) { [weak self] result in
            guard let self, case .success(.array(let counts)) = result else { return then(nil) }
            var connected: Set<String> = []
            for (index, identity) in identities.enumerated() where counts.count > index * 2 + 1 && (counts[index * 2 + 1].integer ?? 0) > 0 {
                connected.insert(identity)
            }
            busy(identities, appID: appID, nowMillis: nowMillis) { inCall in
                then(inCall.map { Presence(connected: connected, inCall: $0) })
            }
        }
    }

    private func busy(_ identities: [String], appID: String, nowMillis: Int64, then: @escaping (Set<String>?) -> Void) {
        var inCall: Set<String> = []
        var left = identities.count
        var failed = false
        for identity in identities {
            commands?.send(["ZCOUNT", Self.busyKey(appID: appID, identity: identity), String(nowMillis), "+inf"]) { result in
                switch result {
                case .success(.integer(let count)): if count > 0 { inCall.insert(identity) }
                default: failed = true
                }
                left -= 1
                if left == 0 { then(failed ? nil : inCall) }
            }
        }
    }

    /// Who is where, cluster-wide (and, for a call setup, its limits and idempotency key).
    struct Presence {
        var connected: Set<String>
        var inCall: Set<String>
        /// The invite limits across the nodes admit the call.
        var admitted = true
        /// The call an earlier request with the same idempotency key made (on any node).
        var earlierCall: String?
    }

    // MARK: Calls

    /// Holds the call for this node until `untilMillis` (its creation, and every renewal of
    /// its lease); `lost` hears when another node holds it now (it was taken over).
    func hold(callID: String, untilMillis: Int64, nowMillis: Int64, lost: @escaping () -> Void = {}) {
        commands?.send(["EVAL", Self.holdScript, "1", Self.callKey(callID), nodeID, String(max(1, untilMillis - nowMillis))]) { result in
            if case .success(.integer(0)) = result { lost() }
        }
    }

    /// Takes a call whose owner stopped renewing it, if no other node took it first (a key
    /// this node's id holds is its own: the process before it under the same id is gone);
    /// `taken` hears whether this node now holds it.
    func takeOver(callID: String, leaseMillis: Int64, taken: @escaping (Bool) -> Void) {
        guard let commands, commands.isConnected else { return taken(false) }
        commands.send(["EVAL", Self.holdScript, "1", Self.callKey(callID), nodeID, String(leaseMillis)]) { result in
            if case .success(.integer(1)) = result { taken(true) } else { taken(false) }
        }
    }

    /// The call ended: its key goes (when still this node's).
    func release(callID: String) {
        commands?.send(["EVAL", "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", "1", Self.callKey(callID), nodeID]) { _ in }
    }

    /// Which of `callees` call `callID` rings now (until `untilMillis`): a device of theirs that
    /// connects to any node gets its invite (`ringingCalls`).
    func markRinging(appID: String, callees: [String], ringing: Set<String>, callID: String, untilMillis: Int64) {
        for callee in callees {
            let key = "sb:ringing:" + appID + ":" + callee
            if ringing.contains(callee) {
                commands?.send(["ZADD", key, String(untilMillis), callID]) { _ in }
                commands?.send(["PEXPIREAT", key, String(untilMillis)]) { _ in }
            } else {
                commands?.send(["ZREM", key, callID]) { _ in }
            }
        }
    }

    /// The calls ringing for `identity` now, on any node.
    func ringingCalls(appID: String, identity: String, nowMillis: Int64, then: @escaping ([String]) -> Void) {
        guard let commands, commands.isConnected else { return then([]) }
        commands.send(["ZRANGEBYSCORE", "sb:ringing:" + appID + ":" + identity, String(nowMillis), "+inf"]) { result in
            then((try? result.get())?.array?.compactMap(\.text) ?? [])
        }
    }

    /// Asks the node running call `callID` to ring a session that just connected here.
    func offerCall(_ callID: String, peer: String, identity: String, device: String) {
        commands?.send(["GET", Self.callKey(callID)]) { [weak self] result in
            guard let self, case .success(let value) = result, let owner = value.text, owner != nodeID else { return }
            tell("offer", ["call": .string(callID), "peer": .string(peer), "identity": .string(identity), "device": .string(device), "node": .string(nodeID)], toNode: owner)
        }
    }

    /// `identity` is in answered call `callID` until `untilMillis`, or no longer (nil).
    func markBusy(appID: String, identity: String, callID: String, untilMillis: Int64?) {
        let key = Self.busyKey(appID: appID, identity: identity)
        if let untilMillis {
            commands?.send(["ZADD", key, String(untilMillis), callID]) { _ in }
            commands?.send(["PEXPIREAT", key, String(untilMillis)]) { _ in }
        } else {
            commands?.send(["ZREM", key, callID]) { _ in }
        }
    }

    /// Passes an action on a call this node does not run to the node that does: `notHere` runs
    /// when no node holds the call (it ended, or its owner died and nobody took it over yet).
    func forward(_ action: [String: JSONValue], callID: String, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void, notHere: @escaping () -> Void) {
        guard let commands, commands.isConnected else { return notHere() }
        commands.send(["GET", Self.callKey(callID)]) { [weak self] result in
            guard let self else { return }
            guard case .success(let value) = result, let owner = value.text, owner != nodeID else { return notHere() }
            request("act", action, toNode: owner, answer: answer)
        }
    }

    /// Asks node `node` to carry out `op` (`Hub.clusterRequest`); `answer` hears its answer, or
    /// `ownerGone` after `cluster_forward_timeout_ms`.
    func request(_ op: String, _ body: [String: JSONValue], toNode node: String, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        nextForward += 1
        let number = nextForward
        var message = body
        message["k"] = "req"
        message["op"] = .string(op)
        message["from"] = .string(nodeID)
        message["req"] = .int(Int64(number))
        let timer = loop?.schedule(after: forwardTimeout) { [weak self] in
            guard let forward = self?.forwards.removeValue(forKey: number) else { return }
            forward.answer(.failure(Self.ownerGone))
        }
        forwards[number] = Forward(answer: answer, timer: timer)
        publish(message, toNode: node)
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
        commands?.send([Array("PUBLISH".utf8), Array(Self.allChannel.utf8), JSONText.serialize(.object(message))]) { _ in }
    }

    /// A signal for the node running its room, its payload spliced as it came (no JSON tree).
    func tellSignal(appID: String, room: String, from: String, to: String, signal: ArraySlice<UInt8>, toNode node: String) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(signal.count + room.utf8.count + 128)
        bytes.append(contentsOf: #"{"k":"tell","op":"sig","from":"#.utf8)
        JSONText.appendQuoted(nodeID, to: &bytes)
        for (name, value) in [("app", appID), ("room", room), ("peer", from), ("to", to)] {
            bytes.append(contentsOf: #",""#.utf8)
            bytes.append(contentsOf: name.utf8)
            bytes.append(contentsOf: #"":"#.utf8)
            JSONText.appendQuoted(value, to: &bytes)
        }
        bytes.append(contentsOf: #","signal":"#.utf8)
        bytes.append(contentsOf: signal)
        bytes.append(0x7D)
        commands?.send([Array("PUBLISH".utf8), Array(Self.nodeChannel(node).utf8), bytes]) { _ in }
    }

    /// Which node runs room `key`, making it this node's when none does (an ordinary room; a
    /// call's room runs where its call does: nil when no node runs the call). Nil when Redis
    /// did not answer.
    /// `claim` false: only where it runs (nil: nowhere).
    func locateRoom(appID: String, name: String, callID: String?, claim makeIt: Bool = true, then: @escaping (String?) -> Void) {
        guard let commands, commands.isConnected else { return then(nil) }
        if !makeIt {
            commands.send(["GET", callID.map(Self.callKey) ?? Self.roomKey(appID: appID, name: name)]) { result in then((try? result.get())?.text) }
            return
        }
        if let callID {
            commands.send(["GET", Self.callKey(callID)]) { result in then((try? result.get())?.text) }
            return
        }
        let claim = """
            local v = redis.call('get', KEYS[1])
            if v == false then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return ARGV[1] end
            return v
            """
        commands.send(["EVAL", claim, "1", Self.roomKey(appID: appID, name: name), nodeID, String(roomLease.milliseconds)]) { result in
            then((try? result.get())?.text)
        }
    }

    /// Holds room `name` for this node a lease longer (it runs it); `lost` hears when another
    /// node holds it now.
    func holdRoom(appID: String, name: String, lost: @escaping () -> Void = {}) {
        commands?.send(["EVAL", Self.holdScript, "1", Self.roomKey(appID: appID, name: name), nodeID, String(roomLease.milliseconds)]) { result in
            if case .success(.integer(0)) = result { lost() }
        }
    }

    /// The room closed here: its key goes (when still this node's).
    func releaseRoom(appID: String, name: String) {
        commands?.send(["EVAL", "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", "1", Self.roomKey(appID: appID, name: name), nodeID]) { _ in }
    }

    /// Which of `nodes` are alive (their key is there); nil when Redis did not answer.
    func alive(_ nodes: Set<String>, then: @escaping (Set<String>?) -> Void) {
        guard let commands, commands.isConnected, !nodes.isEmpty else { return then(commands?.isConnected == true ? [] : nil) }
        let ordered = nodes.sorted()
        var living: Set<String> = []
        var left = ordered.count
        var failed = false
        for node in ordered {
            commands.send(["EXISTS", Self.nodeKey(node)]) { result in
                switch result {
                case .success(.integer(let count)): if count > 0 { living.insert(node) }
                default: failed = true
                }
                left -= 1
                if left == 0 { then(failed ? nil : living) }
            }
        }
    }

    static let ownerGone = ErrorBody(.unavailable, "the node running this call did not answer; retry in a few seconds")

    // MARK: Receiving

    private func received(_ payload: [UInt8], on channel: String) {
        guard let hub, case .object(let message)? = JSONText.parse(payload) else { return }
        switch message["k"]?.stringValue {
        case "event":
            guard message["from"]?.stringValue != nodeID, let appID = message["app"]?.stringValue, let identity = message["user"]?.stringValue,
                let type = message["type"]?.stringValue
            else { return }
            let receipts = hub.userEventArrived(
                OutgoingEvent(type: type, data: .value(message["data"] ?? .null)), toUser: identity, appID: appID, except: message["except"]?.stringValue,
                eventID: message["eid"]?.stringValue)
            if let invite = message["invite"], let owner = message["from"]?.stringValue, !receipts.isEmpty {
                publish(
                    ["k": "rang", "call": invite["call"] ?? .null, "callee": invite["callee"] ?? .null,
                     "devices": .array(receipts.map { ["device": .string($0.device), "attached": .bool($0.attached)] })],
                    toNode: owner)
            }
        case "rang":
            guard let callID = message["call"]?.stringValue, let callee = message["callee"]?.stringValue, case .array(let devices)? = message["devices"]
            else { return }
            let receipts = devices.compactMap { item in
                item["device"]?.stringValue.map { DeliveryReceipt(device: $0, attached: item["attached"] == .bool(true)) }
            }
            hub.invitationDelivered(receipts, Invitation(callID: callID, callee: callee))
        case "req":
            guard let from = message["from"]?.stringValue, let number = message["req"], let op = message["op"]?.stringValue else { return }
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
            hub.clusterMessage(op, message, from: from)
        default:
            return
        }
    }
}

/// Delivery across the cluster: the user's sessions on this node at once (through
/// `LocalDelivery`), and a publish on the user's channel for the nodes holding the others.
final class ClusterDelivery: EventDelivery {
    let local: LocalDelivery
    let cluster: Cluster

    init(local: LocalDelivery, cluster: Cluster) {
        self.local = local
        self.cluster = cluster
    }

    /// A room member here, or on the node its session is on (a member of a room this node
    /// runs).
    func deliver(_ event: OutgoingEvent, toPeer peerID: String) {
        if local.hub.session(peerID: peerID) != nil { return local.deliver(event, toPeer: peerID) }
        guard let node = local.hub.remoteMembers[peerID] else { return }
        let data: JSONValue
        switch event.data {
        case .value(let value): data = value
        case .encoded(let bytes): data = JSONText.parse(bytes) ?? .null
        }
        cluster.tell("peer", ["peer": .string(peerID), "type": .string(event.type), "data": data], toNode: node)
    }

    func deliver(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, invitation: Invitation?) {
        let eventID = cluster.nextEventID()
        local.deliver(event, toUser: identity, appID: appID, except: except, invitation: invitation, eventID: eventID)
        cluster.publish(event, toUser: identity, appID: appID, except: except, invitation: invitation, eventID: eventID)
    }
}
