/// Identifies a scheduled timer so it can be cancelled.
public struct TimerID: Hashable, Sendable {
    package let rawValue: UInt64

    package init(rawValue: UInt64) { self.rawValue = rawValue }
}

/// A min-heap of deadlines for the event loop's timers; cancelled entries are skipped lazily.
package struct TimerHeap {
    private struct Entry {
        package var deadline: UInt64
        package var id: UInt64
    }

    private var heap: [Entry] = []
    private var bodies: [UInt64: () -> Void] = [:]
    private var nextID: UInt64 = 0

    package init() {}

    package mutating func nextDeadline() -> UInt64? {
        while let first = heap.first, bodies[first.id] == nil { removeFirst() }
        return heap.first?.deadline
    }

    package var count: Int { bodies.count }

    package mutating func insert(deadline: UInt64, _ body: @escaping () -> Void) -> TimerID {
        nextID += 1
        bodies[nextID] = body
        heap.append(Entry(deadline: deadline, id: nextID))
        siftUp(heap.count - 1)
        return TimerID(rawValue: nextID)
    }

    package mutating func cancel(_ id: TimerID) {
        bodies.removeValue(forKey: id.rawValue)
    }

    /// Removes and returns the body of the earliest timer due at `now`, if any.
    package mutating func popDue(now: UInt64) -> (() -> Void)? {
        while let first = heap.first {
            guard let body = bodies[first.id] else {
                removeFirst()
                continue
            }
            guard first.deadline <= now else { return nil }
            removeFirst()
            bodies.removeValue(forKey: first.id)
            return body
        }
        return nil
    }

    private mutating func removeFirst() {
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        if !heap.isEmpty { siftDown(0) }
    }

    private mutating func siftUp(_ index: Int) {
        var child = index
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ index: Int) {
        var parent = index
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count && heap[right].deadline < heap[smallest].deadline { smallest = right }
            if smallest == parent { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
