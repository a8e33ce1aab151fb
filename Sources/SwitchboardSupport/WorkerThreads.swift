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
/// A job wakes one idle thread (`workAvailable` is signalled, not broadcast: waking every
/// idle thread for each job, all but one to go back to sleep, cost two thread switches a job
/// for nothing); whoever waits for idleness waits on a condition of its own (`becameIdle`).
///
/// Safety of `@unchecked Sendable`: every stored property but the three pthread objects is
/// only touched under `mutex`; those are made in `init` and destroyed in `deinit`.
public final class WorkerThreads: @unchecked Sendable {
    private struct Lane {
        var jobs: [@Sendable () -> Void] = []
        var next = 0
        var running = 0
        var waiting: Int { jobs.count - next }
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// Signalled when a job comes (one thread wakes), broadcast at `stop`.
    private let workAvailable = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Broadcast when the last job running finishes with none waiting.
    private let becameIdle = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var lanes: [String: Lane] = [:]
    /// The lanes with jobs waiting, in the order they take turns.
    private var turns: [String] = []
    private var stopped = false
    /// Jobs taken and not yet finished, and jobs waiting, in every lane.
    private var running = 0
    private var waiting = 0
    /// Starts `count` threads named `name-0`, `name-1`…
    public init(count: Int, name: String) {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(workAvailable, nil)
        pthread_cond_init(becameIdle, nil)
        for index in 0..<count {
            let thread = Thread { [self] in work() }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    deinit {
        pthread_cond_destroy(becameIdle)
        pthread_cond_destroy(workAvailable)
        pthread_mutex_destroy(mutex)
        becameIdle.deallocate()
        workAvailable.deallocate()
        mutex.deallocate()
    }

    /// Runs `job` on the first thread free, after the jobs handed to `lane` before it.
    public func submit(lane: String = "", _ job: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(mutex)
        if lanes[lane] == nil { lanes[lane] = Lane() }
        lanes[lane]!.jobs.append(job)
        if lanes[lane]!.waiting == 1 { turns.append(lane) }
        waiting += 1
        // One more job: one idle thread, if any. A busy thread takes it when its job ends.
        pthread_cond_signal(workAvailable)
        pthread_mutex_unlock(mutex)
    }

    /// Waits until every job handed over before has finished.
    public func waitUntilIdle() {
        pthread_mutex_lock(mutex)
        while waiting > 0 || running > 0 { pthread_cond_wait(becameIdle, mutex) }
        pthread_mutex_unlock(mutex)
    }

    /// The threads finish the work already handed to them, then end.
    public func stop() {
        pthread_mutex_lock(mutex)
        stopped = true
        pthread_cond_broadcast(workAvailable)
        pthread_mutex_unlock(mutex)
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
        pthread_mutex_lock(mutex)
        while true {
            if let (name, job) = take() {
                pthread_mutex_unlock(mutex)
                job()
                pthread_mutex_lock(mutex)
                running -= 1
                lanes[name]!.running -= 1
                if lanes[name]!.running == 0 && lanes[name]!.waiting == 0 { lanes.removeValue(forKey: name) }
                if running == 0 && waiting == 0 { pthread_cond_broadcast(becameIdle) }
                continue
            }
            if stopped && waiting == 0 { break }
            pthread_cond_wait(workAvailable, mutex)
        }
        pthread_mutex_unlock(mutex)
    }
}
