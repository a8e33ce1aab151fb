// relay: how many signals a second the server relays between peers of a room, and, paced, how
// long each takes from send to delivery.
//
//   switchboard-bench relay --server ws://HOST:PORT --api-key K --api-secret S [--pairs N] [--messages M]
//       [--window W | --rate PER_SECOND] [--receiver-server ws://HOST:PORT]
//
// N pairs of clients (50), each pair in its own room, relay M ~300-byte signals in all (200000):
// every sender keeps W in flight to its partner (20), or with --rate all senders together send
// that many a second, each signal stamped with its send time. --receiver-server puts the
// receivers on another node of a cluster. Prints one JSON line:
// {"messages_per_second": …, "delivered": …, "seconds": …, "pairs": …}, with --rate also
// "rate", "p50_us", "p99_us" and "p999_us" (send to delivery).

import Foundation
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem

/// Everything after connecting runs in event handlers on the loop thread, so the generator
/// spends its core on frames, not on hops between threads.
func benchRelay(_ arguments: [String]) async throws {
    let target = serverOptions(arguments)
    let pairs = Int(option("pairs", in: arguments) ?? "50") ?? 50
    let total = Int(option("messages", in: arguments) ?? "200000") ?? 200_000
    let window = Int(option("window", in: arguments) ?? "20") ?? 20
    let rate = option("rate", in: arguments).flatMap { Int($0) }
    let loop = try EventLoop(name: "bench-relay")
    func token(_ identity: String) -> String {
        target.token(for: identity, grants: SwitchboardProtocol.Grants(room: "*", roomJoin: true))
    }
    // --receiver-server: the receivers on another node of a cluster (they join first, so each
    // room runs on their node and every signal crosses between the two nodes).
    let receiverServer = option("receiver-server", in: arguments) ?? target.server
    var clients: [(sender: WebSocketClient, receiver: WebSocketClient)] = []
    for index in 0..<pairs {
        let receiver = try await connect("\(receiverServer)/v1/ws?access_token=\(token("r\(index)"))", on: loop)
        let sender = try await connect("\(target.server)/v1/ws?access_token=\(token("s\(index)"))", on: loop)
        clients.append((sender, receiver))
    }
    let run = RelayRun(clients: clients, perPair: total / pairs, window: window, rate: rate, loop: loop)
    let seconds = await withCheckedContinuation { (done: CheckedContinuation<Double, Never>) in
        loop.execute { run.start(done) }
    }
    var line = #"{"messages_per_second": \#(Int(Double(run.delivered) / seconds)), "delivered": \#(run.delivered), "seconds": \#(String(format: "%.3f", seconds)), "pairs": \#(pairs)"#
    if let rate {
        let sorted = run.latencies.sorted()
        line += #", "rate": \#(rate), "p50_us": \#(percentile(0.5, of: sorted)), "p99_us": \#(percentile(0.99, of: sorted)), "p999_us": \#(percentile(0.999, of: sorted))"#
    }
    print(line + "}")
    for (sender, receiver) in clients {
        sender.close()
        receiver.close()
    }
    loop.stop()
}

/// The state of a relay run, confined to the loop thread.
final class RelayRun: @unchecked Sendable {
    // Safety: every method runs on the event loop thread (start is called through execute,
    // the rest from the clients' event handlers).
    let clients: [(sender: WebSocketClient, receiver: WebSocketClient)]
    let perPair: Int
    let window: Int
    /// Paced mode: signals per second over all pairs, each stamped with its send time.
    let rate: Int?
    let loop: EventLoop
    var latencies: [UInt64] = []
    /// Paced mode: each pair's signal up to its candidate, whose first bytes are the send time.
    var prefixes: [[UInt8]] = []
    var sendersJoined = 0
    var pacedSent = 0
    var joined = 0
    var delivered = 0
    var started = ContinuousClock.now
    var done: CheckedContinuation<Double, Never>?
    let candidate = String(repeating: "a", count: 200)
    /// Rooms of this run only (a previous run's peers stay resumable in theirs for a while).
    let roomPrefix = "bench-\(UInt32.random(in: 0...UInt32.max))-"

    init(clients: [(sender: WebSocketClient, receiver: WebSocketClient)], perPair: Int, window: Int, rate: Int?, loop: EventLoop) {
        self.clients = clients
        self.perPair = perPair
        self.window = window
        self.rate = rate
        self.loop = loop
        prefixes = Array(repeating: [], count: clients.count)
        if rate != nil { latencies.reserveCapacity(perPair * clients.count) }
    }

    private static let candidateMarker = Array(#""candidate":""#.utf8)

    /// The send time stamped in a signal's candidate, as paced mode writes it (a byte scan:
    /// the generator reads tens of thousands of these a second on one core).
    static func stamp(in text: String) -> UInt64? {
        var text = text
        return text.withUTF8 { bytes -> UInt64? in
            let marker = candidateMarker
            guard bytes.count > marker.count else { return nil }
            var start = 0
            while start + marker.count <= bytes.count {
                if bytes[start] == marker[0], marker.indices.allSatisfy({ bytes[start + $0] == marker[$0] }) { break }
                start += 1
            }
            guard start + marker.count <= bytes.count else { return nil }
            var value: UInt64 = 0
            for byte in bytes[(start + marker.count)...] {
                guard byte >= 0x30 && byte <= 0x39 else { break }
                value = value * 10 + UInt64(byte - 0x30)
            }
            return value
        }
    }

    /// A paced signal: `prefix`, then `micros` in digits padded with "a" to the candidate's
    /// 200 bytes, then the closing braces; built as bytes, with no string in between.
    static func stamped(_ prefix: [UInt8], at micros: UInt64) -> [UInt8] {
        var bytes = prefix
        bytes.reserveCapacity(prefix.count + 204)
        let first = bytes.count
        var rest = micros
        repeat {
            bytes.append(0x30 + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        bytes[first...].reverse()
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "a"), count: max(0, 200 - (bytes.count - first))))
        bytes.append(contentsOf: #""}}}"#.utf8)
        return bytes
    }

    /// Paced mode: every 200 µs, sends what the rate says is due, round robin over pairs.
    private func tick() {
        guard let rate else { return }
        let total = perPair * clients.count
        let dueNow = due(ofTotal: total, rate: rate, since: started)
        while pacedSent < dueNow {
            let index = pacedSent % clients.count
            clients[index].sender.send(OutboundFrame(Self.stamped(prefixes[index], at: monotonicMicros())))
            pacedSent += 1
        }
        if pacedSent < total { loop.schedule(after: .microseconds(200)) { [self] in tick() } }
    }

    /// Every receiver joins its room; when all have, the senders join theirs and start.
    func start(_ done: CheckedContinuation<Double, Never>) {
        self.done = done
        for (index, pair) in clients.enumerated() {
            pair.receiver.handleEventsOnLoop { [self] event in
                guard case .text(let text) = event else { return }
                if text.hasPrefix(#"{"type":"signal""#) {
                    delivered += 1
                    if rate != nil, let stamp = Self.stamp(in: text) { latencies.append(monotonicMicros() &- stamp) }
                    if delivered == perPair * clients.count, let done = self.done {
                        self.done = nil
                        let elapsed = ContinuousClock.now - started
                        done.resume(returning: elapsed.seconds)
                    }
                } else if text.hasPrefix(#"{"type":"ok","id":1"#) {
                    joined += 1
                    if joined == clients.count { startSenders() }
                } else if text.contains(#""type":"error""#) {
                    fail("receiver \(index): \(text)")
                }
            }
            pair.receiver.send(text: #"{"type":"room.join","id":1,"data":{"room":"\#(roomPrefix)\#(index)"}}"#)
        }
    }

    private func startSenders() {
        started = .now
        for (index, pair) in clients.enumerated() {
            let room = "\(roomPrefix)\(index)"
            var frame = ""
            var sent = 0
            let sender = pair.sender
            sender.handleEventsOnLoop { [self] event in
                guard case .text(let text) = event else { return }
                if text.hasPrefix(#"{"type":"ok","id":1"#) {
                    // One reply: one more signal, until this pair's share is sent.
                    if rate == nil && sent < perPair {
                        sender.send(text: frame)
                        sent += 1
                    }
                } else if text.hasPrefix(#"{"type":"ok","id":0"#) {
                    guard let reply = try? JSONDecoder().decode(SwitchboardProtocol.JSONValue.self, from: Data(text.utf8)),
                        case .array(let peers)? = reply["data"]?["peers"], let to = peers.first?["peer_id"]?.stringValue
                    else { fail("sender \(index): no peer in the join reply: \(text)") }
                    frame = #"{"type":"signal","id":1,"data":{"room":"\#(room)","to":"\#(to)","signal":{"type":"candidate","candidate":"\#(candidate)"}}}"#
                    if rate != nil {
                        prefixes[index] = Array(#"{"type":"signal","id":1,"data":{"room":"\#(room)","to":"\#(to)","signal":{"type":"candidate","candidate":""#.utf8)
                        sendersJoined += 1
                        if sendersJoined == clients.count {
                            started = .now
                            tick()
                        }
                        return
                    }
                    while sent < min(window, perPair) {
                        sender.send(text: frame)
                        sent += 1
                    }
                } else if text.contains(#""type":"error""#) {
                    fail("sender \(index): \(text)")
                }
            }
            sender.send(text: #"{"type":"room.join","id":0,"data":{"room":"\#(room)"}}"#)
        }
    }
}
