import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

/// Where each room runs (`sb:room:<app>:<name>`; a call's room where its call runs).
///
/// A room's key names its node and is written when the room is made; nothing renews it while
/// the room runs. Whether the node still runs it is its lease (`sb:leases`), as for calls: a
/// key whose node's lease ran out names no room, and the next join makes the room again. The
/// key lasts `roomKeyLifetime` and its node writes it again every `roomKeyRewrite`, so that the
/// key of a room whose node died goes within a day even if nobody joins it again.
extension Cluster {
    static let roomKeyLifetime: Duration = .seconds(86_400)
    static let roomKeyRewrite: Duration = .seconds(43_200)

    /// Which node runs room `key`, making it this node's when none does (an ordinary room; a
    /// call's room runs where its call does: nil when no node runs the call). Nil when Redis
    /// did not answer; `Self.appFull` when making it would pass `max_rooms_per_app` across the
    /// nodes.
    /// `claim` false: only where it runs (nil: nowhere).
    func locateRoom(appID: String, name: String, callID: String?, claim makeIt: Bool = true, nowMillis: Int64, then: @escaping (String?) -> Void) {
        guard let commands, commands.isConnected else { return then(nil) }
        if !makeIt {
            if let callID {
                commands.send(["GET", Self.callKey(callID)]) { result in then((try? result.get())?.text) }
            } else {
                commands.run(Self.liveOwnerScript, keys: [Self.roomKey(appID: appID, name: name), Self.leasesKey], arguments: []) { result in
                    then((try? result.get())?.text)
                }
            }
            return
        }
        if let callID {
            commands.send(["GET", Self.callKey(callID)]) { result in then((try? result.get())?.text) }
            return
        }
        claimRoom(appID: appID, name: name, nowMillis: nowMillis, then: then)
    }

    /// The live node an app's room already runs on, or this node, which now runs it, when the
    /// app's rooms on the nodes whose lease runs (and on this one) are fewer than
    /// `max_rooms_per_app`; `Self.appFull` when they are not. Nil when Redis did not answer.
    func claimRoom(appID: String, name: String, nowMillis: Int64, then: @escaping (String?) -> Void) {
        guard let commands, commands.isConnected else { return then(nil) }
        let key = Self.roomKey(appID: appID, name: name)
        roomsBeingClaimed[key, default: (appID, name, 0)].count += 1
        commands.run(
            Self.claimScript, keys: [key, Self.leasesKey, Self.nodeRoomsKey(appID: appID, node: nodeID), Self.roomAppsKey(nodeID)],
            arguments: [nodeID, appID, String(maxRoomsPerApp), name, String(Self.roomKeyLifetime.milliseconds)]
        ) { [weak self] result in
            if let self, let claims = roomsBeingClaimed[key] {
                roomsBeingClaimed[key] = claims.count > 1 ? (appID, name, claims.count - 1) : nil
            }
            then((try? result.get())?.text)
        }
    }

    /// Whether a claim of the room waits for Redis's answer.
    func isBeingClaimed(appID: String, name: String) -> Bool {
        roomsBeingClaimed[Self.roomKey(appID: appID, name: name)] != nil
    }

    /// What `claimRoom` answers when the app has `max_rooms_per_app` rooms already.
    static let appFull = ""

    /// KEYS: the room's key, `sb:leases`, this node's rooms of the app, this node's apps
    /// (`roomAppsKey`); ARGV: this node, the app, `max_rooms_per_app`, the room's name, the
    /// key's lifetime in ms. A key naming a node whose lease runs (on Redis's clock), or this
    /// node with the room in its set, is the room's node (a key naming this node without it is a
    /// previous process's under this node's id). Else the room is this node's if the app's rooms on this node
    /// and on those whose lease runs are fewer than the limit: a node's rooms are counted from
    /// the set it keeps of their names (no room is renewed), and a dead node's stop counting
    /// when its lease runs out. The other nodes' sets are named here, from `sb:leases`.
    static let claimScript = RedisScript("""
        \(now)
        local v = redis.call('get', KEYS[1])
        local counted = redis.call('sismember', KEYS[3], ARGV[4]) == 1
        if v == ARGV[1] and counted then return v end
        if v ~= false and v ~= ARGV[1] and tonumber(redis.call('hget', KEYS[2], v) or '0') >= now then return v end
        local leases = redis.call('hgetall', KEYS[2])
        local rooms = redis.call('scard', KEYS[3])
        for i = 1, #leases, 2 do
            if leases[i] ~= ARGV[1] and tonumber(leases[i + 1]) >= now then
                rooms = rooms + redis.call('scard', 'sb:rooms:' .. ARGV[2] .. ':' .. leases[i])
            end
        end
        if not counted and rooms >= tonumber(ARGV[3]) then return '' end
        redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[5])
        redis.call('sadd', KEYS[3], ARGV[4])
        redis.call('sadd', KEYS[4], ARGV[2])
        return ARGV[1]
        """)

    /// Writes again what Redis knows of the ordinary rooms this node runs: each app's set of
    /// their names (the sets a process of this node's id kept before go first), and their keys
    /// (those another node holds are left as they are), `keysPerScript` to a command. At the start,
    /// whenever Redis answers again (it may have lost them, or a room closed meanwhile), when
    /// this node's lease had run out, and every `roomKeyRewrite`.
    func writeRooms(_ running: [(appID: String, name: String)]) {
        // With the rooms being claimed (whose claim Redis may have run before the sets go).
        var rooms = running
        let known = Set(running.map { Self.roomKey(appID: $0.appID, name: $0.name) })
        rooms += roomsBeingClaimed.filter { !known.contains($0.key) }.map { ($0.value.appID, $0.value.name) }
        commands?.runIgnoringReply(Self.forgetRoomsScript, keys: [Self.roomAppsKey(nodeID)], arguments: [nodeID])
        for (appID, names) in Dictionary(grouping: rooms, by: \.appID) {
            for batch in names.batches(of: Self.keysPerScript) {
                sendIgnoringReply(["SADD", Self.nodeRoomsKey(appID: appID, node: nodeID)] + batch.map(\.name))
            }
            sendIgnoringReply(["SADD", Self.roomAppsKey(nodeID), appID])
        }
        holdRooms(rooms)
    }

    /// Which of `rooms` another node holds the key of, `keysPerScript` to a command (those
    /// Redis did not answer for are left out).
    func roomsHeldElsewhere(_ rooms: [(appID: String, name: String)], then: @escaping ([(appID: String, name: String)]) -> Void) {
        guard let commands else { return then([]) }
        let batches = rooms.batches(of: Self.keysPerScript)
        var taken: [(appID: String, name: String)] = []
        var left = batches.count
        for batch in batches {
            commands.send(["MGET"] + batch.map { Self.roomKey(appID: $0.appID, name: $0.name) }) { [weak self] result in
                guard let self else { return }
                if case .success(.array(let values)) = result {
                    for (room, value) in zip(batch, values) where value.text.map({ $0 != nodeID }) ?? false { taken.append(room) }
                }
                left -= 1
                if left == 0 { then(taken) }
            }
        }
    }

    /// KEYS: this node's apps (`roomAppsKey`); ARGV: this node. Its sets of room names go.
    static let forgetRoomsScript = RedisScript("""
        for _, app in ipairs(redis.call('smembers', KEYS[1])) do redis.call('del', 'sb:rooms:' .. app .. ':' .. ARGV[1]) end
        return redis.call('del', KEYS[1])
        """)

    /// Room `name` is made here: its key names this node (unless another node holds it).
    func holdRoom(appID: String, name: String) {
        holdRooms([(appID, name)])
    }

    /// Sets the keys of rooms this node runs (those another node holds are left as they are),
    /// `keysPerScript` to a command.
    func holdRooms(_ rooms: [(appID: String, name: String)]) {
        for batch in rooms.batches(of: Self.keysPerScript) {
            let keys = batch.map { Self.roomKey(appID: $0.appID, name: $0.name) }
            commands?.runIgnoringReply(Self.holdRoomsScript, keys: keys, arguments: [nodeID, String(Self.roomKeyLifetime.milliseconds)])
        }
    }

    /// KEYS: room keys; ARGV: this node, the keys' lifetime in ms. Each key this node or nobody
    /// holds is set to this node.
    static let holdRoomsScript = RedisScript("""
        for i = 1, #KEYS do
            local v = redis.call('get', KEYS[i])
            if v == false or v == ARGV[1] then redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2]) end
        end
        return 0
        """)

    /// The room closed here: it no longer counts for its app, and its key goes (when still
    /// this node's).
    func releaseRoom(appID: String, name: String) {
        commands?.runIgnoringReply(
            Self.releaseRoomScript, keys: [Self.roomKey(appID: appID, name: name), Self.nodeRoomsKey(appID: appID, node: nodeID)],
            arguments: [nodeID, name])
    }

    /// KEYS: the room's key, this node's rooms of its app; ARGV: this node, the room's name.
    static let releaseRoomScript = RedisScript("""
        redis.call('srem', KEYS[2], ARGV[2])
        if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0
        """)
}
