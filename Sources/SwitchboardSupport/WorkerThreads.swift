import Foundation

/// Threads of its own that run the work handed to them, started in the order it came: for
/// blocking calls (a database client's) that should neither wait for a shared pool to grow a
/// thread nor hold up the threads others share.
///
/// Safety of `@unchecked Sendable`: `jobs` and `stopped` are only touched under `condition`.
public final class WorkerThreads: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var next = 0
    private var stopped = false
    /// Jobs taken and not yet finished.
    private var running = 0

    /// Starts `count` threads named `name-0`, `name-1`…
    public init(count: Int, name: String) {
        for index in 0..<count {
            let thread = Thread { [self] in work() }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    /// Runs `job` on the first thread free.
    public func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Waits until every job handed over before has finished.
    public func waitUntilIdle() {
        condition.lock()
        while next < jobs.count || running > 0 { condition.wait() }
        condition.unlock()
    }

    /// The threads finish the work already handed to them, then end.
    public func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while next == jobs.count && !stopped { condition.wait() }
            guard next < jobs.count else {
                condition.unlock()
                return
            }
            let job = jobs[next]
            next += 1
            if next == jobs.count || next > 1_024 {
                jobs.removeFirst(next)
                next = 0
            }
            running += 1
            condition.unlock()
            job()
            condition.lock()
            running -= 1
            // Wakes the threads waiting for idleness (and, spuriously, idle workers: they wait again).
            if running == 0 && next == jobs.count { condition.broadcast() }
            condition.unlock()
        }
    }
}
