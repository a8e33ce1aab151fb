// The load generator of `make bench` (see scripts/bench.sh and BENCHMARKS.md).
//
//   switchboard-bench push --url URL --ca-file PEM --count N --concurrency C [--connections K]
//
// Sends N VoIP pushes with at most C in flight over K HTTP/2 connections and prints one JSON
// line: {"pushes_per_second": …, "count": …, "seconds": …, "failures": …, "connections": …}.

import Foundation
import SwitchboardServer
import SwitchboardSystem

func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: "--" + name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(2)
}

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
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    print(#"{"pushes_per_second": \#(Int(Double(count) / seconds)), "count": \#(count), "seconds": \#(String(format: "%.3f", seconds)), "failures": \#(failures), "connections": \#(client.connectionsOpened)}"#)
    client.shutdown()
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "push":
    try await benchPush(Array(arguments.dropFirst()))
default:
    fail("usage: switchboard-bench push --url URL --ca-file PEM [--count N] [--concurrency C] [--connections K]")
}
