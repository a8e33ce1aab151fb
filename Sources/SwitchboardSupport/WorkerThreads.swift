import Foundation

/// Threads of its own that run the work handed to them: for blocking calls (a database
/// client's) that should neither wait for a shared pool to grow a thread nor hold up the
/// threads others share.
///
/// Work comes in lanes (one per app, say): each lane's jobs start in the order they came, and
/// a thread that frees up takes the next job of the waiting lane with the fewest jobs running,
/// the lanes taking turns among equals. A lane with a long backlog may use every thread while
/// nobody else waits; a job of another lane then starts as soon as one thread frees up, ahead
/// of that backlog: it waits for one job to finish, never for the backlog.
///
/// Safety of `@unchecked Sendable`: every stored property is only touched under `condition`.
public final class WorkerThreads: @unchecked Sendable {
    private struct Lane {
        var jobs: [@Sendable () -> Void] = []
        var next = 0
        var running = 0
        var waiting: Int { jobs.count - next }
    }

    private let condition = NSCondition()
    private var lanes: [String: Lane] = [:]
    /// The lanes with jobs waiting, in the order they take turns.
    private var turns: [String] = []
    private var stopped = false
    /// Jobs taken and not yet finished, and jobs waiting, in every lane.
    private var running = 0
    private var waiting = 0
    /// Starts `count` threads named `name-0`, `name-1`…
    public init(count: Int, name: String) {
        for index in 0..<count {
            let thread = Thread { [self] in work() }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    /// Runs `job` on the first thread free, after the jobs handed to `lane` before it.
    public func submit(lane: String = "", _ job: @escaping @Sendable () -> Void) {
        condition.lock()
        if lanes[lane] == nil { lanes[lane] = Lane() }
        lanes[lane]!.jobs.append(job)
        if lanes[lane]!.waiting == 1 { turns.append(lane) }
        waiting += 1
        // Broadcast: a thread waiting for idleness waits on the same condition, and must not
        // take the wakeup a worker needs.
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until every job handed over before has finished.
    public func waitUntilIdle() {
        condition.lock()
        while waiting > 0 || running > 0 { condition.wait() }
        condition.unlock()
    }

    /// The threads finish the work already handed to them, then end.
    public func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    /// Under the lock: the next job of the waiting lane with the fewest jobs running (the first
    /// in turn among equals); that lane goes to the back of the turns.
    private func take() -> (String, @Sendable () -> Void)? {
        guard var position = turns.indices.first else { return nil }
        for index in turns.indices where lanes[turns[index]]!.running < lanes[turns[position]]!.running { position = index }
        let name = turns.remove(at: position)
        var lane = lanes[name]!
        let job = lane.jobs[lane.next]
        lane.next += 1
        if lane.next == lane.jobs.count || lane.next > 1_024 {
            lane.jobs.removeFirst(lane.next)
            lane.next = 0
        }
        lane.running += 1
        if lane.waiting > 0 { turns.append(name) }
        lanes[name] = lane
        waiting -= 1
        running += 1
        return (name, job)
    }

    private func work() {
        condition.lock()
        while true {
            if let (name, job) = take() {
                condition.unlock()
                job()
                condition.lock()
                running -= 1
                lanes[name]!.running -= 1
                if lanes[name]!.running == 0 && lanes[name]!.waiting == 0 { lanes.removeValue(forKey: name) }
                // Wakes the threads waiting for idleness.
                if running == 0 && waiting == 0 { condition.broadcast() }
                continue
            }
            if stopped && waiting == 0 { break }
            condition.wait()
        }
        condition.unlock()
    }
}
