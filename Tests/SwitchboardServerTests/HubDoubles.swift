import Foundation
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem
import SwitchboardPush
@testable import SwitchboardServer

/// A `LoopScheduler` whose time moves only when the test says so: timers run, in deadline
/// order, inside `advance(by:)`; work from other threads waits for `runPending()`.
final class ManualScheduler: LoopScheduler, @unchecked Sendable {
    // Safety: `timers` and `offset` are touched only by the test's task (the hub's "thread");
    // `pending` may be filled from other threads and is locked.
    private let start = ContinuousClock.now
    private let startMillis: Int64 = 1_800_000_000_000
    private var offset = Duration.zero
    private var timers: [(deadline: Duration, id: Int, body: () -> Void)] = []
    private var nextID = 0
    private let pending = Locked<[@Sendable () -> Void]>([])

    var now: ContinuousClock.Instant { start + offset }
    var wallMillis: Int64 { startMillis + Int64(offset.components.seconds * 1000) + offset.components.attoseconds / 1_000_000_000_000_000 }

    func schedule(after delay: Duration, _ body: @escaping () -> Void) -> TimerID {
        nextID += 1
        timers.append((offset + max(delay, .zero), nextID, body))
        return TimerID(rawValue: UInt64(nextID))
    }

    func cancel(_ timer: TimerID) { timers.removeAll { UInt64($0.id) == timer.rawValue } }

    func execute(_ work: @escaping @Sendable () -> Void) { pending.withLock { $0.append(work) } }

    /// Timers still armed.
    var armed: Int { timers.count }

    /// Moves time forward by `duration`, running every timer that falls due, in order.
    func advance(by duration: Duration) {
        let target = offset + duration
        while let next = timers.enumerated().filter({ $0.element.deadline <= target }).min(by: { ($0.element.deadline, $0.element.id) < ($1.element.deadline, $1.element.id) }) {
            timers.remove(at: next.offset)
            offset = max(offset, next.element.deadline)
            next.element.body()
        }
        offset = target
    }

    /// Runs the work other threads handed over; returns how much there was.
    @discardableResult
    func runPending() -> Int {
        let work = pending.withLock { work in defer { work = [] }; return work }
        work.forEach { $0() }
        return work.count
    }
}

/// A `SessionOutput` that keeps what the hub sends, by connection.
final class MemoryOutput: SessionOutput {
    private(set) var sent: [ConnectionID: [JSONValue]] = [:]
    private(set) var closed: [ConnectionID: (code: UInt16, reason: String)] = [:]
    private var read: [ConnectionID: Int] = [:]

    func send(_ frame: OutboundFrame, to connection: ConnectionID) -> Bool {
        guard closed[connection] == nil else { return false }
        let value = (try? JSONDecoder().decode(JSONValue.self, from: Data(frame.bytes))) ?? .null
        sent[connection, default: []].append(value)
        return true
    }

    func close(_ connection: ConnectionID, code: UInt16, reason: String) { closed[connection] = (code, reason) }

    /// The messages sent to `connection` since the last call.
    func take(_ connection: ConnectionID) -> [JSONValue] {
        let all = sent[connection] ?? []
        let from = read[connection] ?? 0
        read[connection] = all.count
        return Array(all[from...])
    }

    /// The types of the messages sent to `connection` since the last `take`.
    func types(_ connection: ConnectionID) -> [String] { take(connection).compactMap { $0["type"]?.stringValue } }
}

/// A `PushDispatching` that keeps every push the hub hands it; the test answers each one as
/// APNs would, when it chooses.
final class RecordingPush: PushDispatching {
    struct Job: Sendable {
        var notification: PushNotification
        var deadline: ContinuousClock.Instant
        var stillWanted: @Sendable () -> Bool
        var answered: @Sendable (PushResult) -> Void
    }

    private let jobs = Locked<[Job]>([])

    func dispatch(
        _ notification: PushNotification, appID: String, environment: APNsEnvironment, deadline: ContinuousClock.Instant,
        stillWanted: @escaping @Sendable () -> Bool, onSubmitted: (@Sendable () -> Void)?,
        answered: @escaping @Sendable (PushResult) -> Void
    ) {
        onSubmitted?()
        jobs.withLock { $0.append(Job(notification: notification, deadline: deadline, stillWanted: stillWanted, answered: answered)) }
    }

    func shutdown() {}

    /// The pushes handed over since the last call.
    func take() -> [Job] { jobs.withLock { jobs in defer { jobs = [] }; return jobs } }
}
