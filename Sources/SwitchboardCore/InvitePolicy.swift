import SwitchboardSupport

/// How often a caller may ring others: at most `perCaller` invites in any minute, and at most
/// `perPair` of them to any one callee (`invites_per_minute`, `invites_per_pair_per_minute`).
/// A value: the owner passes `now`; a refused invite counts for nothing.
package struct InvitePolicy {
    package let perCaller: Int
    package let perPair: Int
    /// When each caller, and each (caller, callee) pair, last invited, within the last minute.
    private var sent: [Key: [ContinuousClock.Instant]] = [:]
    private var lastPrune: ContinuousClock.Instant?

    private struct Key: Hashable {
        var caller: String
        var callee: String?
    }

    package init(perCaller: Int, perPair: Int) {
        self.perCaller = perCaller
        self.perPair = perPair
    }

    /// Whether `caller` may ring `callees` now; if so, the invite is counted.
    package mutating func admit(caller: String, callees: [String], now: ContinuousClock.Instant) -> Bool {
        prune(now: now)
        let callerKey = Key(caller: caller, callee: nil)
        guard recent(callerKey, now: now) < perCaller,
            callees.allSatisfy({ recent(Key(caller: caller, callee: $0), now: now) < perPair })
        else { return false }
        sent[callerKey, default: []].append(now)
        for callee in callees { sent[Key(caller: caller, callee: callee), default: []].append(now) }
        return true
    }

    /// Callers and pairs with an invite in the last minute (what the policy remembers).
    package var remembered: Int { sent.count }

    /// The invites of `key` in the minute before `now`; older ones are forgotten.
    private mutating func recent(_ key: Key, now: ContinuousClock.Instant) -> Int {
        let times = (sent[key] ?? []).filter { now - $0 < .seconds(60) }
        sent[key] = times.isEmpty ? nil : times
        return times.count
    }

    /// Forgets everyone whose invites are all older than a minute (at most every ten seconds),
    /// so that what is remembered stays bounded by the last minute's callers.
    private mutating func prune(now: ContinuousClock.Instant) {
        if let lastPrune, now - lastPrune <= .seconds(10) { return }
        lastPrune = now
        sent = sent.compactMapValues { times in
            let recent = times.filter { now - $0 < .seconds(60) }
            return recent.isEmpty ? nil : recent
        }
    }
}
