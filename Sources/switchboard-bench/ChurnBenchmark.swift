// churn: how many authenticated WebSockets a second the server opens and closes.
//
//   switchboard-bench churn --server ws://HOST:PORT --api-key K --api-secret S [--seconds N]
//       [--parallel P] [--join-rooms N]
//
// P workers (64) each connect a WebSocket with a freshly signed token, close it, wait for the
// close to finish, and go again, for N seconds (60); with --join-rooms N each connection first
// joins one of N shared rooms and waits for the answer. Prints one JSON line:
// {"connects_per_second": …, "connected": …, "failed": …, "seconds": …}

import Foundation
import Synchronization
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem

func benchChurn(_ arguments: [String]) async throws {
    let target = serverOptions(arguments)
    let seconds = Int(option("seconds", in: arguments) ?? "60") ?? 60
    let parallel = Int(option("parallel", in: arguments) ?? "64") ?? 64
    /// With --join-rooms N, each connection joins one of N rooms before it closes.
    let joinRooms = option("join-rooms", in: arguments).flatMap { Int($0) }
    let loop = try EventLoop(name: "bench-churn")
    let started = ContinuousClock.now
    let deadline = started + .seconds(seconds)
    final class Counts: Sendable {
        let connected = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
    }
    let counts = Counts()
    await withTaskGroup(of: Void.self) { group in
        for worker in 0..<parallel {
            group.addTask {
                var round = 0
                while ContinuousClock.now < deadline {
                    round += 1
                    let token = target.token(
                        for: "churn-\(worker)-\(round)", grants: SwitchboardProtocol.Grants(room: "churn-*", roomJoin: true), ttlSeconds: 600)
                    do {
                        let client = try await WebSocketClient.connect(to: URL(string: "\(target.server)/v1/ws?access_token=\(token)")!, on: loop)
                        counts.connected.add(1, ordering: .relaxed)
                        if let rooms = joinRooms {
                            // Join one of a few shared rooms, wait for the answer, then leave by closing.
                            client.send(text: #"{"type":"room.join","id":1,"data":{"room":"churn-\#((worker + round) % rooms)"}}"#)
                            for await event in client.events {
                                guard case .text(let text) = event else { break }
                                if text.hasPrefix(#"{"type":"ok""#) { break }
                                if text.contains(#""type":"error""#) {
                                    counts.failed.add(1, ordering: .relaxed)
                                    break
                                }
                            }
                        }
                        client.close()
                        for await event in client.events { if case .closed = event { break } }
                    } catch {
                        counts.failed.add(1, ordering: .relaxed)
                    }
                }
            }
        }
    }
    let elapsed = ContinuousClock.now - started
    let total = elapsed.seconds
    let connected = counts.connected.load(ordering: .relaxed)
    print(#"{"connects_per_second": \#(Int(Double(connected) / total)), "connected": \#(connected), "failed": \#(counts.failed.load(ordering: .relaxed)), "seconds": \#(String(format: "%.3f", total))}"#)
    loop.stop()
}
