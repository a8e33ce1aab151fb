import Dispatch
import SwitchboardSupport
import SwitchboardSystem

/// The store's read connections: a read takes a free one (waiting while all are busy) and gives
/// it back. After `renew()` each is opened again before its next use (a disk that was
/// read-only, a database server that came back).
final class ReadPool: Sendable {
    private struct Slot {
        var connection: (any SQLDatabase)?
        var generation: Int
    }

    private struct State {
        var idle: [Slot]
        var generation = 0
        var closed = false
    }

    let count: Int
    private let state: Locked<State>
    private let idle: DispatchSemaphore
    private let open: @Sendable () throws -> any SQLDatabase

    /// `count` connections from `open`, opened now (a store whose reads cannot connect does
    /// not open).
    init(count: Int, open: @escaping @Sendable () throws -> any SQLDatabase) throws {
        self.count = count
        self.open = open
        var slots: [Slot] = []
        for _ in 0..<count { slots.append(Slot(connection: try open(), generation: 0)) }
        state = Locked(State(idle: slots))
        idle = DispatchSemaphore(value: count)
    }

    /// Runs `body` with a connection of its own.
    func withConnection<T>(_ body: (any SQLDatabase) throws -> T) throws -> T {
        idle.wait()
        defer { idle.signal() }
        let taken = state.withLock { state -> (slot: Slot, generation: Int)? in
            state.closed ? nil : (state.idle.removeLast(), state.generation)
        }
        guard let taken else { throw SQLiteError(code: 21, message: "store is closed") }
        var slot = taken.slot
        defer {
            let closed = state.withLock { state -> Bool in
                if !state.closed { state.idle.append(slot) }
                return state.closed
            }
            if closed { slot.connection?.close() }
        }
        if slot.connection == nil || slot.generation != taken.generation {
            slot.connection?.close()
            slot.connection = nil
            slot.connection = try open()
            slot.generation = taken.generation
        }
        return try body(slot.connection!)
    }

    /// Every connection is opened again before its next use; the idle ones are closed now.
    func renew() {
        let closing = state.withLock { state -> [any SQLDatabase] in
            state.generation += 1
            defer { for index in state.idle.indices { state.idle[index].connection = nil } }
            return state.idle.compactMap(\.connection)
        }
        closing.forEach { $0.close() }
    }

    /// Closes the idle connections now and the busy ones as they come back; later reads fail.
    func close() {
        let closing = state.withLock { state -> [any SQLDatabase] in
            state.closed = true
            defer { state.idle = [] }
            return state.idle.compactMap(\.connection)
        }
        closing.forEach { $0.close() }
    }
}
