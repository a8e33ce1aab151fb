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
        _ = scheduler?.schedule(after: period) { [weak self] in
            guard let self else { return }
            if !calls.isEmpty { store.renewCallLeases(untilMillis: leaseUntilMillis) }
            if cluster != nil {
                // A cluster continues the calls of a dead node instead of ending them.
                renewClusterLeases()
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
}
