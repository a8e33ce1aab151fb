import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

/// What the cluster knows of calls: presence, busy and the limits at a call's setup, who owns
/// each call and whom it rings, and actions passed on to a call's owner.
extension Cluster {
    // MARK: Setup

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
            guard left == 0 else { return }
            // Another part unanswered: the node goes on with what it knows, as when Redis is
            // away, and what Redis counted for this call (and its idempotency key) is taken
            // back, so that nothing names a call the node may not start (nothing is removed
            // where nothing was counted: the removals name this call).
            if failed, presence.admitted == true, presence.earlierCall == nil {
                uncountInvite(appID: appID, caller: caller, callees: identities, idempotencyKey: idempotencyKey, callID: callID)
            }
            then(failed ? nil : presence)
        }
        commands.send(["PUBSUB", "NUMSUB"] + identities.map { Self.userChannel(appID: appID, identity: $0) }) { result in
            if case .success(.array(let counts)) = result {
                for (index, identity) in identities.enumerated() where counts.count > index * 2 + 1 && (counts[index * 2 + 1].integer ?? 0) > 0 {
                    presence.connected.insert(identity)
                }
            } else { failed = true }
            done()
        }
        let inviteKeys = Self.inviteKeys(appID: appID, caller: caller, callees: identities)
        if let idempotencyKey {
            // The idempotency key first: a retry of a call made already counts as no new invite.
            commands.run(
                Self.inviteScript, keys: [Self.idempotencyKey(appID: appID, caller: caller, key: idempotencyKey)] + inviteKeys,
                arguments: [String(nowMillis), String(limits.invitesPerMinute), String(limits.invitesPerPairPerMinute), callID]
            ) { result in
                switch result {
                case .success(.array(let reply)) where reply.count == 2:
                    presence.admitted = reply[0].integer == 1
                    if reply[0].integer == 2 { presence.earlierCall = reply[1].text }
                default: failed = true
                }
                done()
            }
        } else {
            count(callID, in: inviteKeys, limits: [limits.invitesPerMinute] + Array(repeating: limits.invitesPerPairPerMinute, count: identities.count),
                nowMillis: nowMillis) { admitted in
                if let admitted { presence.admitted = admitted } else { failed = true }
                done()
            }
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
        guard commands?.isConnected == true else { return then(true) }
        nextForward += 1
        count(instance + "/c" + String(nextForward), in: ["sb:conn:" + appID + ":" + identity], limits: [limit], nowMillis: nowMillis) { admitted in
            then(admitted ?? true)
        }
    }

    /// Counts `member` (a call, a connect) over the last minute in each of `keys`, sorted sets
    /// of what each counted, in one transaction: old members out, this one in, then each set's
    /// count; `then` hears whether every count is within its limit (`limits`, one per key), or
    /// nil when Redis did not answer. One refused is taken out again at once: it counts for
    /// nothing, as on one node (until then, one round trip, others counting see it too, and
    /// are refused as they would be anyway, the limit being reached without it). A
    /// transaction rather than a script costs Redis a third as much.
    private func count(_ member: String, in keys: [String], limits: [Int], nowMillis: Int64, then: @escaping (Bool?) -> Void) {
        guard let commands else { return then(nil) }
        let now = Array(String(nowMillis).utf8), since = Array(String(nowMillis - 60_000).utf8), added = Array(member.utf8)
        let sets = keys.map { Array($0.utf8) }
        var transaction: [[[UInt8]]] = []
        for key in sets {
            transaction += [[Self.zremrangebyscore, key, Self.negativeInfinity, since], [Self.zadd, key, now, added], [Self.pexpire, key, Self.minute]]
        }
        transaction += sets.map { [Self.zcard, $0] }
        commands.transaction(transaction) { [weak self] result in
            guard case .success(.array(let replies)) = result, replies.count == transaction.count else { return then(nil) }
            let counts = replies.suffix(keys.count).compactMap(\.integer)
            guard counts.count == keys.count else { return then(nil) }  // a command refused (a key of another type)
            let admitted = zip(counts, limits).allSatisfy { count, limit in count <= Int64(limit) }
            if !admitted { for key in keys { self?.sendIgnoringReply(["ZREM", key, member]) } }
            then(admitted)
        }
    }

    private static let zremrangebyscore = Array("ZREMRANGEBYSCORE".utf8), zadd = Array("ZADD".utf8), pexpire = Array("PEXPIRE".utf8),
        zcard = Array("ZCARD".utf8), negativeInfinity = Array("-inf".utf8), minute = Array("60000".utf8)

    /// A call refused after it took an idempotency key: the key is free again (if still its).
    func forgetIdempotencyKey(appID: String, caller: String, key: String, callID: String) {
        commands?.runIgnoringReply(Self.deleteIfScript, keys: [Self.idempotencyKey(appID: appID, caller: caller, key: key)], arguments: [callID])
    }

    /// A caller followed by something else in a key: the caller's length first, so that
    /// `alice` with key `x:k` and `alice:x` with key `k` name two keys, whatever characters an
    /// identity holds.
    static func callerAnd(_ caller: String, _ rest: String) -> String {
        String(caller.utf8.count) + ":" + caller + ":" + rest
    }

    static func idempotencyKey(appID: String, caller: String, key: String) -> String {
        "sb:idem:" + appID + ":" + callerAnd(caller, key)
    }

    /// An invite `callSetup` counted for call `callID`, which did not start (a block list
    /// refused it): it counts no longer, and its idempotency key is free again.
    func uncountInvite(appID: String, caller: String, callees: [String], idempotencyKey: String?, callID: String) {
        for key in Self.inviteKeys(appID: appID, caller: caller, callees: callees) { sendIgnoringReply(["ZREM", key, callID]) }
        if let idempotencyKey { forgetIdempotencyKey(appID: appID, caller: caller, key: idempotencyKey, callID: callID) }
    }

    /// The sorted sets of invites a call setup counts in: the caller's, then each pair's (under
    /// another prefix: no caller's set is a pair's).
    private static func inviteKeys(appID: String, caller: String, callees: [String]) -> [String] {
        ["sb:inv:" + appID + ":" + caller] + callees.map { "sb:invp:" + appID + ":" + callerAnd(caller, $0) }
    }

    /// An idempotency key and the invite limits over the last minute, in one step (a call
    /// without a key is counted by `count`, which costs Redis less). KEYS[1]: the key's, then
    /// the caller's and each pair's sorted set of invites. Answers {2, call} when the key names
    /// a call already (no invite counted), {0} when a limit refuses it (nothing counted, as on
    /// one node), {1} when the call may go: its invite counted and the key taken for it (a day).
    static let inviteScript = RedisScript("""
        local earlier = redis.call('get', KEYS[1])
        if earlier then return {2, earlier} end
        local now = tonumber(ARGV[1])
        for i = 2, #KEYS do redis.call('zremrangebyscore', KEYS[i], '-inf', now - 60000) end
        if redis.call('zcard', KEYS[2]) >= tonumber(ARGV[2]) then return {0, ''} end
        for i = 3, #KEYS do if redis.call('zcard', KEYS[i]) >= tonumber(ARGV[3]) then return {0, ''} end end
        for i = 2, #KEYS do redis.call('zadd', KEYS[i], now, ARGV[4]) redis.call('pexpire', KEYS[i], 60000) end
        redis.call('set', KEYS[1], ARGV[4], 'PX', 86400000)
        return {1, ''}
        """)

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

    /// Which of `identities` are in an answered call some live node runs (`nil`: Redis did not
    /// answer). A mark is a call id in the user's `sb:busy` set; it counts while the call's
    /// owner is live (`sb:leases`), so the marks of a node that died count no longer, although
    /// nothing renews or removes them, until a node taking the call over writes them again.
    /// Marks of calls whose key is gone (they ended) are removed.
    func busy(_ identities: [String], appID: String, nowMillis: Int64, then: @escaping (Set<String>?) -> Void) {
        var marks: [(identity: String, callID: String)] = []
        var left = identities.count
        var failed = false
        for identity in identities {
            commands?.send(["ZRANGEBYSCORE", Self.busyKey(appID: appID, identity: identity), String(nowMillis), "+inf"]) { [weak self] result in
                switch result {
                case .success(.array(let ids)): marks += ids.compactMap(\.text).map { (identity, $0) }
                default: failed = true
                }
                left -= 1
                guard left == 0 else { return }
                if failed { return then(nil) }
                guard let self, !marks.isEmpty else { return then([]) }
                liveOwners(of: marks, appID: appID, then: then)
            }
        }
    }

    /// Which of the users marked busy are in a call a live node runs.
    private func liveOwners(of marks: [(identity: String, callID: String)], appID: String, then: @escaping (Set<String>?) -> Void) {
        guard let commands else { return then(nil) }
        let keys = [Self.leasesKey] + marks.map { Self.callKey($0.callID) }
        commands.run(Self.callOwnersScript, keys: keys, arguments: []) { [weak self] result in
            guard case .success(.array(let owners)) = result, owners.count == marks.count else { return then(nil) }
            var inCall: Set<String> = []
            for (mark, owner) in zip(marks, owners) {
                switch owner.integer {
                case 1: inCall.insert(mark.identity)
                case -1: self?.sendIgnoringReply(["ZREM", Self.busyKey(appID: appID, identity: mark.identity), mark.callID])
                default: break
                }
            }
            then(inCall)
        }
    }

    /// KEYS[1]: `sb:leases`, then call keys. Answers for each call 1 when a live node holds it,
    /// 0 when the node holding it stopped renewing its lease, -1 when its key is gone. Leases
    /// are times on Redis's clock (`leaseScript`).
    static let callOwnersScript = RedisScript("""
        \(now)
        local owners = {}
        for i = 2, #KEYS do
            local owner = redis.call('get', KEYS[i])
            if owner == false then owners[i - 1] = -1
            elseif tonumber(redis.call('hget', KEYS[1], owner) or '0') >= now then owners[i - 1] = 1
            else owners[i - 1] = 0 end
        end
        return owners
        """)

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

    /// A call created here is this node's: its key names the node (and lasts until `untilMillis`,
    /// past the call's longest life: nothing renews it). The node's lease in `sb:leases`
    /// (`renewLease`) says whether it is still live.
    func hold(callID: String, untilMillis: Int64) {
        sendIgnoringReply(["SET", Self.callKey(callID), nodeID, "PXAT", String(untilMillis)])
    }

    /// Renews this node's lease on every call it holds (one field of `sb:leases`) for `lease`;
    /// `lapsed` runs when it had run out (Redis lost it in a restart, or this node was cut off
    /// or stalled longer than the lease, and another may have taken its calls).
    func renewLease(for lease: Duration, renewed: @escaping (_ lapsed: Bool) -> Void) {
        guard let commands, commands.isConnected else { return }
        commands.run(Self.leaseScript, keys: [Self.leasesKey], arguments: [nodeID, String(lease.milliseconds)]) { result in
            guard case .success(.integer(let lapsed)) = result else { return }
            renewed(lapsed == 1)
        }
    }

    /// KEYS[1]: `sb:leases`; ARGV: the node, the lease in ms. The lease's end is a time on
    /// Redis's clock (as a key's expiry would be), so that only Redis's clock decides whether
    /// it ran out. Answers 1 when it had run out (or there was none), else 0.
    static let leaseScript = RedisScript("""
        \(now)
        local before = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
        redis.call('hset', KEYS[1], ARGV[1], string.format('%.0f', now + tonumber(ARGV[2])))
        if before < now then return 1 end
        return 0
        """)

    /// A script's first line: `now`, Redis's time in ms since 1970.
    static let now = "local t = redis.call('time') local now = t[1] * 1000 + math.floor(t[2] / 1000)"

    /// Writes again this node's keys of `calls` (each until its `until`) and the busy marks of
    /// each one's answered participants, after its lease lapsed: `lost` hears each call another
    /// node holds now.
    func reclaim(
        _ calls: [(id: String, appID: String, busy: [String], until: Int64)], lost: @escaping (String) -> Void, done: @escaping (_ answered: Bool) -> Void
    ) {
        guard !calls.isEmpty else { return done(true) }
        let marks = calls.flatMap { call in call.busy.map { (key: Self.busyKey(appID: call.appID, identity: $0), callID: call.id, until: call.until) } }
        let keys = calls.map { Self.callKey($0.id) } + marks.map(\.key)
        let arguments = [nodeID, String(calls.count)] + calls.map { String($0.until) } + marks.flatMap { [$0.callID, String($0.until)] }
        commands?.run(Self.reclaimScript, keys: keys, arguments: arguments) { result in
            guard case .success(.array(let indexes)) = result else { return done(false) }
            for index in indexes.compactMap(\.integer) where index >= 1 && index <= calls.count { lost(calls[Int(index) - 1].id) }
            done(true)
        }
    }

    /// KEYS: ARGV[2] call keys, then busy keys; ARGV: the node, the number of call keys, each
    /// call key's end (ms since 1970), then each busy key's call and end. Each call key this
    /// node or nobody holds is set to this node; each busy mark is written (its key lasting at
    /// least as long). Answers the (1-based) call keys another node holds.
    static let reclaimScript = RedisScript("""
        local lost = {}
        local calls = tonumber(ARGV[2])
        for i = 1, calls do
            local v = redis.call('get', KEYS[i])
            if v == false or v == ARGV[1] then redis.call('set', KEYS[i], ARGV[1], 'PXAT', ARGV[2 + i]) else lost[#lost + 1] = i end
        end
        for i = calls + 1, #KEYS do
            local at = 2 + calls + 2 * (i - calls)
            redis.call('zadd', KEYS[i], ARGV[at], ARGV[at - 1])
            if redis.call('pexpiretime', KEYS[i]) < tonumber(ARGV[at]) then redis.call('pexpireat', KEYS[i], ARGV[at]) end
        end
        return lost
        """)

    /// Takes a call whose owner's lease ran out, if no other node took it first (a key this
    /// node's id holds is its own: the process before it under the same id is gone); `taken`
    /// hears whether this node now holds it (its key until `untilMillis`).
    func takeOver(callID: String, untilMillis: Int64, taken: @escaping (Bool) -> Void) {
        guard let commands, commands.isConnected else { return taken(false) }
        commands.run(Self.takeOverScript, keys: [Self.callKey(callID), Self.leasesKey], arguments: [nodeID, String(untilMillis)]) {
            result in
            if case .success(.integer(1)) = result { taken(true) } else { taken(false) }
        }
    }

    /// KEYS: the call's key, `sb:leases`; ARGV: this node, the key's end (ms since 1970).
    /// Sets the key to this node when it is this node's or nobody's, or its node's lease ran
    /// out; answers 1 when it did, 0 when a live node holds it.
    static let takeOverScript = RedisScript("""
        \(now)
        local v = redis.call('get', KEYS[1])
        if v == false or v == ARGV[1] or tonumber(redis.call('hget', KEYS[2], v) or '0') < now then
            redis.call('set', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
            return 1
        end
        return 0
        """)

    /// The live node that holds call `callID` (nil: none; a key whose node's lease ran out
    /// names no live node).
    private func liveOwner(of callID: String, then: @escaping (String?) -> Void) {
        guard let commands else { return then(nil) }
        commands.run(Self.liveOwnerScript, keys: [Self.callKey(callID), Self.leasesKey], arguments: []) { result in
            then((try? result.get())?.text)
        }
    }

    /// KEYS: the call's key, `sb:leases`. Answers the node holding the call if its lease has
    /// not run out.
    static let liveOwnerScript = RedisScript("""
        \(now)
        local v = redis.call('get', KEYS[1])
        if v and tonumber(redis.call('hget', KEYS[2], v) or '0') >= now then return v end
        return false
        """)

    /// The call ended: its key goes (when still this node's).
    func release(callID: String) {
        cleanUp(.releaseCall(callID))
    }

    /// What an ended call leaves in Redis for this node to remove: its key, a busy mark.
    enum Cleanup {
        case releaseCall(String)
        case unmark(key: String, callID: String)
    }

    /// Sends a clean-up, and keeps it a while: a connection lost before it was written loses it
    /// (and one sent while Redis is away is not sent at all), which would leave a user busy
    /// until the call's key expires. Those kept from shortly before the loss on are sent again
    /// once Redis is back (`cleanUpAgain`); each is harmless twice.
    func cleanUp(_ cleanup: Cleanup) {
        let nowMillis = wallMillis
        let window = redisTimeout.milliseconds + 1000
        if commands?.isConnected == true, let first = cleanups.first, first.atMillis < nowMillis - window {
            cleanups.removeFirst(cleanups.firstIndex { $0.atMillis >= nowMillis - window } ?? cleanups.count)
        }
        if cleanups.count < Self.maxCleanups { cleanups.append((nowMillis, cleanup)) }
        send(cleanup)
    }

    private func send(_ cleanup: Cleanup) {
        switch cleanup {
        case .releaseCall(let callID): commands?.runIgnoringReply(Self.deleteIfScript, keys: [Self.callKey(callID)], arguments: [nodeID])
        case .unmark(let key, let callID): sendIgnoringReply(["ZREM", key, callID])
        }
    }

    /// Redis is back: the clean-ups kept from shortly before the connection was lost on go again.
    func cleanUpAgain(lostAtMillis: Int64) {
        let since = lostAtMillis - redisTimeout.milliseconds - 1000
        for (atMillis, cleanup) in cleanups where atMillis >= since { send(cleanup) }
        cleanups.removeAll()
    }

    /// Clean-ups kept at most (while Redis is away; the oldest stay, the rest are not kept).
    static let maxCleanups = 100_000

    /// Which of `callees` call `callID` rings now (until `untilMillis`, the end of its ring: a
    /// mark no renewal needs): a device of theirs that connects to any node gets its invite
    /// (`ringingCalls`).
    func markRinging(appID: String, callees: [String], ringing: Set<String>, callID: String, untilMillis: Int64) {
        for callee in callees {
            let key = "sb:ringing:" + appID + ":" + callee
            if ringing.contains(callee) {
                mark(key, callID: callID, untilMillis: untilMillis)
            } else {
                sendIgnoringReply(["ZREM", key, callID])
            }
        }
    }

    /// Adds `callID` to a set of marks until `untilMillis`; the set's key lasts at least that
    /// long (never shortened: another call's mark in it may last longer).
    private func mark(_ key: String, callID: String, untilMillis: Int64) {
        sendIgnoringReply(["ZADD", key, String(untilMillis), callID])
        sendIgnoringReply(["PEXPIREAT", key, String(untilMillis), "NX"])
        sendIgnoringReply(["PEXPIREAT", key, String(untilMillis), "GT"])
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
        liveOwner(of: callID) { [weak self] owner in
            guard let self, let owner, owner != nodeID else { return }
            tell("offer", ["call": .string(callID), "peer": .string(peer), "identity": .string(identity), "device": .string(device), "node": .string(nodeID)], toNode: owner)
        }
    }

    /// `identity` is in answered call `callID` (the mark lasts until `untilMillis`, past the
    /// call's longest life, and counts while the call's node is live), or no longer (nil).
    func markBusy(appID: String, identity: String, callID: String, untilMillis: Int64?) {
        let key = Self.busyKey(appID: appID, identity: identity)
        if let untilMillis {
            mark(key, callID: callID, untilMillis: untilMillis)
        } else {
            cleanUp(.unmark(key: key, callID: callID))
        }
    }

    /// Passes an action on a call this node does not run to the node that does: `notHere` runs
    /// when no live node holds the call (it ended, or its owner died and nobody took it over
    /// yet: then this node may take it over).
    func forward(_ action: [String: JSONValue], callID: String, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void, notHere: @escaping () -> Void) {
        guard let commands, commands.isConnected else { return notHere() }
        liveOwner(of: callID) { [weak self] owner in
            guard let self else { return }
            guard let owner, owner != nodeID else { return notHere() }
            request("act", action, toNode: owner, answer: answer)
        }
    }
}
