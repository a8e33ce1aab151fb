import Synchronization
import SwitchboardSupport

/// Times the server's share of starting one call: from the invite arriving to every push
/// handed to the APNs connection and the call's record written, whichever comes last.
/// Each part `begin()`s before it starts and calls `end()` when done; the creator holds one
/// part while it sets the call up.
final class CallSetupClock: Sendable {
    private let started = ContinuousClock.now
    private let parts = Atomic<Int>(1)
    private let metrics: Metrics

    init(metrics: Metrics) { self.metrics = metrics }

    func begin() { parts.add(1, ordering: .relaxed) }

    func end() {
        guard parts.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        let elapsed = ContinuousClock.now - started
        metrics.observeRecent(
            "switchboard_call_setup_seconds",
            seconds: elapsed.seconds)
    }
}
