import SwitchboardSystem

extension Hub {
    // MARK: Call leases

    /// Until when a call saved now is this server's (`call_lease_seconds` from now).
    var leaseUntilMillis: Int64 { wallMillis + Int64(configuration.limits.callLeaseSeconds) * 1000 }

    /// Every third of `call_lease_seconds`: extends this server's hold on its live calls (one
    /// queued statement; in a cluster, their keys in Redis too), and on a store other servers
    /// share ends the calls whose owner stopped renewing (it died without ending them), or in
    /// a cluster takes them over. On SQLite no other server can run, so there is nothing to
    /// sweep: the start ended what a previous process left.
    func keepCallLeases() {
        let period = Duration.milliseconds(configuration.limits.callLeaseSeconds * 1000 / 3)
        if cluster != nil && callLeaseHeld == nil { callLeaseHeld = (now + callLease, now + callLease) }
        _ = scheduler?.schedule(after: period) { [weak self] in
            guard let self else { return }
            renewCallLeases()
            if cluster != nil {
                // A cluster continues the calls of a dead node instead of ending them.
                takeOverAbandonedCalls()
                keepClusterRooms()
            } else if store.engine == .postgres {
                let logger = self.logger
                store.endAbandonedCallsLater(.leaseExpired(), nowMillis: wallMillis) { ended in
                    if ended > 0 { logger.warning("calls of a server that stopped renewing them ended as failed", ["count": String(ended)]) }
                }
            }
            keepCallLeases()
        }
    }

    var callLease: Duration { .seconds(configuration.limits.callLeaseSeconds) }

    /// Renews this server's hold on its calls: in the store (one row, when it has calls) and,
    /// in a cluster, in Redis.
    func renewCallLeases() {
        if !calls.isEmpty {
            let sentAt = now
            let scheduler = self.scheduler
            let renewed = LoopBound({ [weak self] in self?.callLeaseRenewed(store: sentAt) })
            store.renewCallLeases(untilMillis: leaseUntilMillis) { [weak scheduler] in scheduler?.execute { renewed.value() } }
        } else if let held = callLeaseHeld {
            callLeaseHeld?.store = max(held.store, now + callLease)  // no call to take
            callLeaseRenewed()
        }
        if cluster != nil { renewClusterLeases() }
    }

    /// Whether no other node can have taken this node's calls (always, on one node).
    var holdsCalls: Bool {
        guard let held = callLeaseHeld else { return true }
        return max(held.redis, held.store) > now
    }

    /// Runs `body`, which acts on this node's calls, now if it holds them, else once a renewal
    /// says which are still its own (in order with everything else waiting).
    func whileHoldingCalls(_ body: @escaping () -> Void) {
        if waitingForCallLease.isEmpty && holdsCalls { return body() }
        waitingForCallLease.append(body)
        guard waitingForCallLease.count == 1 else { return }
        logger.warning("this node's hold on its calls ran out (it stalled, or lost Redis and the store): its calls wait until it is renewed")
        renewCallLeases()
    }

    /// A renewal sent at `store` (in the store) or `redis` (in Redis: the calls another node
    /// took meanwhile are let go by then) came back.
    func callLeaseRenewed(store sentToStore: ContinuousClock.Instant? = nil, redis sentToRedis: ContinuousClock.Instant? = nil) {
        guard let held = callLeaseHeld else { return }
        if let sentToStore, sentToStore <= max(held.redis, held.store) {
            // Renewed while the node held its calls: no break in which another could take them.
            callLeaseHeld?.store = max(held.store, sentToStore + callLease)
        }
        if let sentToRedis { callLeaseHeld?.redis = max(held.redis, sentToRedis + callLease) }
        guard holdsCalls, !waitingForCallLease.isEmpty else { return }
        let waiting = waitingForCallLease
        waitingForCallLease = []
        logger.info("this node holds its calls again", ["waited": String(waiting.count)])
        for body in waiting { body() }
    }
}
