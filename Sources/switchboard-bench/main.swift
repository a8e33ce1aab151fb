// The load generator of `make bench` (see scripts/bench.sh and BENCHMARKS.md).
//
//   switchboard-bench push --url URL --ca-file PEM --count N --concurrency C [--connections K]
//
// Sends N VoIP pushes with at most C in flight over K HTTP/2 connections and prints one JSON
// line: {"pushes_per_second": …, "count": …, "seconds": …, "failures": …, "connections": …}.

import Foundation
import Synchronization
import SwitchboardProtocol
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

/// Signal relay: `pairs` pairs of clients, each pair in its own room; every sender keeps
/// `window` ~300-byte signals in flight to its partner. Prints delivered signals per second.
func benchRelay(_ arguments: [String]) async throws {
    guard let server = option("server", in: arguments), let apiKey = option("api-key", in: arguments),
        let secret = option("api-secret", in: arguments)
    else { fail("--server, --api-key and --api-secret are required") }
    let pairs = Int(option("pairs", in: arguments) ?? "50") ?? 50
    let total = Int(option("messages", in: arguments) ?? "200000") ?? 200_000
    let window = Int(option("window", in: arguments) ?? "20") ?? 20
    let loop = try EventLoop(name: "bench-relay")
    func token(_ identity: String) -> String {
        let claims = AccessTokenIssuer.claims(
            apiKey: apiKey, identity: identity, name: nil, grants: SwitchboardProtocol.Grants(room: "*", roomJoin: true), ttlSeconds: 3600)
        return AccessTokenVerifier.sign(claims, secret: secret)
    }
    final class Counter: Sendable { let value = Atomic<Int>(0) }
    let delivered = Counter()
    let ready = Counter()
    let perPair = total / pairs
    let sdp = String(repeating: "a", count: 200)
    var clients: [(WebSocketClient, WebSocketClient, String)] = []
    for index in 0..<pairs {
        let receiver = try await WebSocketClient.connect(to: URL(string: "\(server)/v1/ws?access_token=\(token("r\(index)"))")!, on: loop)
        let sender = try await WebSocketClient.connect(to: URL(string: "\(server)/v1/ws?access_token=\(token("s\(index)"))")!, on: loop)
        clients.append((sender, receiver, "bench-\(index)"))
    }
    let started = ContinuousClock.now
    await withTaskGroup(of: Void.self) { group in
        for (sender, receiver, room) in clients {
            // The receiver joins first and counts the signals it gets.
            group.addTask {
                var received = 0
                receiver.send(text: #"{"type":"room.join","id":1,"data":{"room":"\#(room)"}}"#)
                for await event in receiver.events {
                    guard case .text(let text) = event else { continue }
                    if text.hasPrefix(#"{"type":"ok""#) || text.contains(#""type":"ok""#) {
                        // Joined: the sender may join now.
                        ready.value.add(1, ordering: .relaxed)
                        continue
                    }
                    guard text.contains(#""type":"signal""#) else { continue }
                    received += 1
                    delivered.value.add(1, ordering: .relaxed)
                    if received == perPair { return }
                }
            }
            // The sender joins, learns the receiver's peer id from the reply, then keeps
            // `window` signals in flight (one more for each reply).
            group.addTask {
                while ready.value.load(ordering: .relaxed) < pairs { try? await Task.sleep(for: .milliseconds(5)) }
                sender.send(text: #"{"type":"room.join","id":0,"data":{"room":"\#(room)"}}"#)
                var sent = 0
                var replies = 0
                var frame: String?
                for await event in sender.events {
                    guard case .text(let text) = event else { continue }
                    if frame == nil, text.contains(#""id":0"#), text.contains("peer_id") {
                        guard let reply = try? JSONDecoder().decode(SwitchboardProtocol.JSONValue.self, from: Data(text.utf8)),
                            case .array(let peers)? = reply["data"]?["peers"], let to = peers.first?["peer_id"]?.stringValue
                        else { return }
                        frame = String(#"{"type":"signal","id":1,"data":{"room":"\#(room)","to":"\#(to)","signal":{"type":"candidate","candidate":"\#(sdp)"}}}"#)
                        while sent < min(window, perPair) {
                            sender.send(text: frame!)
                            sent += 1
                        }
                        continue
                    }
                    guard let frame, text.contains(#""type":"ok""#) else { continue }
                    replies += 1
                    if sent < perPair {
                        sender.send(text: frame)
                        sent += 1
                    }
                    if replies == perPair { return }
                }
            }
        }
    }
    let elapsed = ContinuousClock.now - started
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let count = delivered.value.load(ordering: .relaxed)
    print(#"{"messages_per_second": \#(Int(Double(count) / seconds)), "delivered": \#(count), "seconds": \#(String(format: "%.3f", seconds)), "pairs": \#(pairs)}"#)
    for (sender, receiver, _) in clients {
        sender.close()
        receiver.close()
    }
    loop.stop()
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "push":
    try await benchPush(Array(arguments.dropFirst()))
case "relay":
    try await benchRelay(Array(arguments.dropFirst()))
default:
    fail("usage: switchboard-bench push --url URL --ca-file PEM [--count N] [--concurrency C] [--connections K]\n"
        + "       switchboard-bench relay --server ws://HOST:PORT --api-key K --api-secret S [--pairs N] [--messages M] [--window W]")
}
