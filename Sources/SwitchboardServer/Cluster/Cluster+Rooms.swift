import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

/// Where each room runs (`sb:room:<app>:<name>`; a call's room where its call runs).
extension Cluster {
    /// Which node runs room `key`, making it this node's when none does (an ordinary room; a
    /// call's room runs where its call does: nil when no node runs the call). Nil when Redis
    /// did not answer; `Self.appFull` when making it would pass `max_rooms_per_app` across the
    /// nodes.
    /// `claim` false: only where it runs (nil: nowhere).
    func locateRoom(appID: String, name: String, callID: String?, claim makeIt: Bool = true, nowMillis: Int64, then: @escaping (String?) -> Void) {
        guard let commands, commands.isConnected else { return then(nil) }
        if !makeIt {
            commands.send(["GET", callID.map(Self.callKey) ?? Self.roomKey(appID: appID, name: name)]) { result in then((try? result.get())?.text) }
            return
        }
        if let callID {
            commands.send(["GET", Self.callKey(callID)]) { result in then((try? result.get())?.text) }
            return
        }
        claimRoom(appID: appID, name: name, nowMillis: nowMillis, then: then)
    }

    /// The node an app's room already runs on, or this node, which now runs it, when the app's
    /// rooms across the nodes (those whose lease has not run out) are fewer than
    /// `max_rooms_per_app`; `Self.appFull` when they are not. Nil when Redis did not answer.
    func claimRoom(appID: String, name: String, nowMillis: Int64, then: @escaping (String?) -> Void) {
        guard let commands, commands.isConnected else { return then(nil) }
        commands.send([
            "EVAL", Self.claimScript, "2", Self.roomKey(appID: appID, name: name), Self.appRoomsKey(appID), nodeID, String(roomLease.milliseconds),
            String(nowMillis), String(maxRoomsPerApp), name,
        ]) { result in
            then((try? result.get())?.text)
        }
    }

    /// What `claimRoom` answers when the app has `max_rooms_per_app` rooms already.
    static let appFull = ""

    static let claimScript = """
        local v = redis.call('get', KEYS[1])
        if v ~= false then return v end
        redis.call('zremrangebyscore', KEYS[2], '-inf', ARGV[3])
        if redis.call('zscore', KEYS[2], ARGV[5]) == false and redis.call('zcard', KEYS[2]) >= tonumber(ARGV[4]) then return '' end
        redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
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

    /// Holds room `name` for this node a lease longer (it runs it); `lost` hears when another
    /// node holds it now.
    func holdRoom(appID: String, name: String, lost: @escaping () -> Void = {}) {
        commands?.send(["EVAL", Self.holdScript, "1", Self.roomKey(appID: appID, name: name), nodeID, String(roomLease.milliseconds)]) { result in
            if case .success(.integer(0)) = result { lost() }
        }
    }

    /// The room closed here: its key goes (when still this node's), and it no longer counts
    /// for its app.
    func releaseRoom(appID: String, name: String) {
        let release = """
            if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('zrem', KEYS[2], ARGV[2]) return redis.call('del', KEYS[1]) end return 0
            """
        commands?.send(["EVAL", release, "2", Self.roomKey(appID: appID, name: name), Self.appRoomsKey(appID), nodeID, name]) { _ in }
    }
}
