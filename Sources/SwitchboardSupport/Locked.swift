#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a pthread mutex: the project's lock for state shared between threads.
///
/// It replaces `Synchronization.Mutex` because ThreadSanitizer cannot see the futex handoff
/// of that Mutex on Linux and reports every value passed through one as a race (shown with a
/// fifteen-line program), which would hide real races in `make test-sanitize`. pthread mutexes
/// are what ThreadSanitizer understands; uncontended they cost the same.
public final class Locked<Value>: @unchecked Sendable {
    // Safety: `value` is only touched while `mutex` is held.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
