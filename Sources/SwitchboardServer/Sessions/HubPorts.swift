import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// Where the hub's frames go, and how it closes a connection: the WebSocket server in
/// production, `MemoryOutput` in tests. Called on the hub's thread only.
package protocol SessionOutput: AnyObject {
    /// Queues `frame` on `connection`; false when the connection is gone or its queue is full.
    func send(_ frame: OutboundFrame, to connection: ConnectionID) -> Bool
    func close(_ connection: ConnectionID, code: UInt16, reason: String)
}

/// Time and timers on the hub's thread: the event loop in production, `ManualScheduler` in
/// tests (time moves only when the test moves it).
package protocol LoopScheduler: AnyObject, Sendable {
    var now: ContinuousClock.Instant { get }
    /// Wall-clock milliseconds since 1970: what clients, history and traces see.
    var wallMillis: Int64 { get }
    /// Runs `body` on the hub's thread after `delay`.
    func schedule(after delay: Duration, _ body: @escaping () -> Void) -> TimerID
    func cancel(_ timer: TimerID)
    /// Runs `work` on the hub's thread; callable from any thread (push results come back so).
    func execute(_ work: @escaping @Sendable () -> Void)
}

extension HTTPServer: SessionOutput {}

extension EventLoop: LoopScheduler {
    package var now: ContinuousClock.Instant { .now }
    package var wallMillis: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

/// A value that crosses to another thread only to come back to the hub's thread, where it is
/// used (a continuation of the hub's work).
///
/// Safety of `@unchecked Sendable`: `value` is touched on the hub's thread only.
struct LoopBound<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
