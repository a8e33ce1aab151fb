import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

/// Where each room runs (`sb:room:<app>:<name>`; a call's room where its call runs).
extension Cluster {
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
}
