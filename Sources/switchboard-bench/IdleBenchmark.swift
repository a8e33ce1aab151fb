// idle: how fast the server accepts authenticated WebSockets, and whether it keeps them all
// open while they sit idle.
//
//   switchboard-bench idle --server ws://HOST:PORT --api-key K --api-secret S [--connections N]
//       [--parallel P] [--hold SECONDS]
//
// Opens N WebSockets (10000), P handshakes at a time (64), then holds them open SECONDS (30:
// long enough for the server's keepalive pings). Prints two JSON lines, each as its phase ends:
// {"phase": "connected", "connections": …, "seconds": …, "connects_per_second": …}
// {"phase": "held", "connections": …, "closed_while_held": …, "hold_seconds": …}

import Foundation
import Synchronization
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem

func benchIdle(_ arguments: [String]) async throws {
    let target = serverOptions(arguments)
    let count = Int(option("connections", in: arguments) ?? "10000") ?? 10_000
    let parallel = Int(option("parallel", in: arguments) ?? "64") ?? 64
    let hold = Int(option("hold", in: arguments) ?? "30") ?? 30
    let loop = try EventLoop(name: "bench-idle")
    let started = ContinuousClock.now
    let clients = try await withThrowingTaskGroup(of: WebSocketClient.self) { group in
        var opened: [WebSocketClient] = []
        opened.reserveCapacity(count)
        for index in 0..<count {
            if index >= parallel, let client = try await group.next() { opened.append(client) }
            group.addTask {
                let token = target.token(for: "idle-\(index)", grants: SwitchboardProtocol.Grants())
                return try await WebSocketClient.connect(to: URL(string: "\(target.server)/v1/ws?access_token=\(token)")!, on: loop)
            }
        }
        for try await client in group { opened.append(client) }
        return opened
    }
    let elapsed = ContinuousClock.now - started
    let seconds = elapsed.seconds
    emit(#"{"phase": "connected", "connections": \#(clients.count), "seconds": \#(String(format: "%.3f", seconds)), "connects_per_second": \#(Int(Double(clients.count) / seconds))}"#)
    // Count the connections that end while held (the server must keep every one).
    final class Closed: Sendable { let value = Atomic<Int>(0) }
    let closed = Closed()
    let watchers = Task {
        await withTaskGroup(of: Void.self) { group in
            for client in clients {
                group.addTask {
                    for await event in client.events { if case .closed = event { closed.value.add(1, ordering: .relaxed) } }
                }
            }
        }
    }
    try await Task.sleep(for: .seconds(hold))
    emit(#"{"phase": "held", "connections": \#(clients.count), "closed_while_held": \#(closed.value.load(ordering: .relaxed)), "hold_seconds": \#(hold)}"#)
    watchers.cancel()
    for client in clients { client.close() }
    loop.stop()
}
