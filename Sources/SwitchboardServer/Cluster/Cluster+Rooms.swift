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
                commands.send(["EVAL", Self.liveOwnerScript, "2", Self.roomKey(appID: appID, name: name), Self.leasesKey]) { result in
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
    /// app's rooms across the nodes (those whose lease has not run out) are fewer than
    /// `max_rooms_per_app`; `Self.appFull` when they are not. Nil when Redis did not answer.
    func claimRoom(appID: String, name: String, nowMillis: Int64, then: @escaping (String?) -> Void) {
        guard let commands, commands.isConnected else { return then(nil) }
        commands.send([
            "EVAL", Self.claimScript, "3", Self.roomKey(appID: appID, name: name), Self.appRoomsKey(appID), Self.leasesKey, nodeID,
            String(roomLease.milliseconds), String(nowMillis), String(maxRoomsPerApp), name, String(Self.roomKeyLifetime.milliseconds),
        ]) { result in
            then((try? result.get())?.text)
        }
    }

    /// What `claimRoom` answers when the app has `max_rooms_per_app` rooms already.
    static let appFull = ""

    /// KEYS: the room's key, the app's rooms (`sb:rooms:<app>`), `sb:leases`; ARGV: this node,
    /// the lease in ms, the node's time (ms since 1970), `max_rooms_per_app`, the room's name,
    /// the key's lifetime in ms. A key naming this node, or a node whose lease runs (on Redis's
    /// clock), is the room's node; else the room is this node's if the app may have one more.
    static let claimScript = """
        \(now)
        local v = redis.call('get', KEYS[1])
        if v ~= false and (v == ARGV[1] or tonumber(redis.call('hget', KEYS[3], v) or '0') >= now) then return v end
        redis.call('zremrangebyscore', KEYS[2], '-inf', ARGV[3])
        if redis.call('zscore', KEYS[2], ARGV[5]) == false and redis.call('zcard', KEYS[2]) >= tonumber(ARGV[4]) then return '' end
        redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[6])
        redis.call('zadd', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]), ARGV[5])
        redis.call('pexpire', KEYS[2], ARGV[2])
        return ARGV[1]
        """

    /// The ordinary rooms this node runs count for their apps a lease longer (with `holdRoom`).
    func countRooms(_ names: [String: [String]], nowMillis: Int64) {
        let until = String(nowMillis + roomLease.milliseconds)
        for (appID, rooms) in names where !rooms.isEmpty {
            commands?.sendIgnoringReply([Array("ZADD".utf8), Array(Self.appRoomsKey(appID).utf8)] + rooms.flatMap { [Array(until.utf8), Array($0.utf8)] })
            commands?.sendIgnoringReply(["PEXPIRE", Self.appRoomsKey(appID), String(roomLease.milliseconds)].map { Array($0.utf8) })
        }
    }

    /// Room `name` is made here: its key names this node (unless another node holds it).
    func holdRoom(appID: String, name: String) {
        holdRooms([(appID, name)])
    }

    /// Writes again the keys of rooms this node runs (those another node holds are left as
    /// they are), `roomBatch` to a command: after this node's lease ran out (Redis lost them in
    /// a restart, say), and every `roomKeyRewrite`.
    func holdRooms(_ rooms: [(appID: String, name: String)]) {
        for start in stride(from: 0, to: rooms.count, by: Self.roomBatch) {
            let keys = rooms[start..<min(start + Self.roomBatch, rooms.count)].map { Self.roomKey(appID: $0.appID, name: $0.name) }
            sendIgnoringReply(["EVAL", Self.holdRoomsScript, String(keys.count)] + keys + [nodeID, String(Self.roomKeyLifetime.milliseconds)])
        }
    }

    static let roomBatch = 200

    /// KEYS: room keys; ARGV: this node, the keys' lifetime in ms. Each key this node or nobody
    /// holds is set to this node.
    static let holdRoomsScript = """
        for i = 1, #KEYS do
            local v = redis.call('get', KEYS[i])
            if v == false or v == ARGV[1] then redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2]) end
        end
        return 0
        """

    /// The room closed here: its key goes (when still this node's), and it no longer counts
    /// for its app.
    func releaseRoom(appID: String, name: String) {
        let release = """
            if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('zrem', KEYS[2], ARGV[2]) return redis.call('del', KEYS[1]) end return 0
            """
        commands?.send(["EVAL", release, "2", Self.roomKey(appID: appID, name: name), Self.appRoomsKey(appID), nodeID, name]) { _ in }
    }
}
