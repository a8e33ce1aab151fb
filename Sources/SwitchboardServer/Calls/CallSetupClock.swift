import Synchronization
import SwitchboardSupport

/// Times the server's share of starting one call: from the invite arriving to every push
/// handed to the APNs connection and the call's record written, whichever comes last.
/// Each part `begin()`s before it starts and calls `end()` when done; the creator holds one
/// part while it sets the call up. The last part to end may be a push task: it measures there
/// and hands the figure to `record`, which takes it to the loop (no metrics lock on a push task).
final class CallSetupClock: Sendable {
    private let started = ContinuousClock.now
    private let parts = Atomic<Int>(1)
    private let record: @Sendable (Duration) -> Void

    init(record: @escaping @Sendable (Duration) -> Void) { self.record = record }

    func begin() { parts.add(1, ordering: .relaxed) }

    func end() {
        guard parts.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        record(ContinuousClock.now - started)
    }
}
