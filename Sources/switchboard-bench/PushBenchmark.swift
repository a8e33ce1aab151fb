// push: how many VoIP pushes a second the APNs client sends to an APNs (the bench's sandbox).
//
//   switchboard-bench push --url URL --ca-file PEM [--count N] [--concurrency C] [--connections K]
//
// Sends N pushes (20000) with at most C (1000) in flight over K (1) HTTP/2 connections, after one
// to warm up, and prints one JSON line:
// {"pushes_per_second": …, "count": …, "seconds": …, "failures": …, "connections": …}

import Foundation
import SwitchboardPush
import SwitchboardSupport
import SwitchboardSystem

func benchPush(_ arguments: [String]) async throws {
    guard let url = option("url", in: arguments) else { fail("--url is required") }
    let count = Int(option("count", in: arguments) ?? "20000") ?? 20000
    let concurrency = Int(option("concurrency", in: arguments) ?? "1000") ?? 1000
    let connections = Int(option("connections", in: arguments) ?? "1") ?? 1
    let key = try ECPrivateKey.generate()
    var configuration = APNsClientConfiguration(
        credentials: .token(ProviderTokenCache(key: key, keyID: "BENCH12345", teamID: "TEAM123456")), environment: .sandbox)
    configuration.baseURL = url
    configuration.caFile = option("ca-file", in: arguments)
    configuration.connections = connections
    let client = APNsClient(configuration: configuration, logger: Logger(minimumLevel: .error))
    let payload = Array(#"{"call_id":"bench","created_at":1,"ring_expires_at":2,"caller":"Alice"}"#.utf8)
    func push(_ index: Int) -> PushNotification {
        PushNotification(deviceToken: String(format: "%064x", index + 1), type: .voip, topic: "com.example.bench", payload: payload, expiration: 0)
    }
    // Warm up: one connection, one token.
    _ = await client.send(push(0))

    let started = ContinuousClock.now
    var failures = 0
    await withTaskGroup(of: Bool.self) { group in
        var next = 0
        while next < min(concurrency, count) {
            let index = next
            group.addTask { await client.send(push(index)).accepted }
            next += 1
        }
        for await accepted in group {
            if !accepted { failures += 1 }
            if next < count {
                let index = next
                group.addTask { await client.send(push(index)).accepted }
                next += 1
            }
        }
    }
    let elapsed = ContinuousClock.now - started
    let seconds = elapsed.seconds
    print(#"{"pushes_per_second": \#(Int(Double(count) / seconds)), "count": \#(count), "seconds": \#(String(format: "%.3f", seconds)), "failures": \#(failures), "connections": \#(client.connectionsOpened)}"#)
    client.shutdown()
}
