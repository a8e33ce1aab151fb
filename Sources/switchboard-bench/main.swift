// The load generator of `make bench` (see scripts/bench.sh and BENCHMARKS.md).
//
//   switchboard-bench push --url URL --ca-file PEM --count N --concurrency C [--connections K]
//
// Sends N VoIP pushes with at most C in flight over K HTTP/2 connections and prints one JSON
// line: {"pushes_per_second": …, "count": …, "seconds": …, "failures": …, "connections": …}.
//
//   switchboard-bench calls --server ws://HOST:PORT --api-key K --api-secret S --rate PER_SECOND --seconds N [--callers C] [--callees D]
//
// Registers D callees, each with an iOS device and a VoIP token, then C callers start calls at
// the given rate (round robin over callees, each rings until the run ends). Prints one JSON line:
// {"calls_per_second": …, "created": …, "failed": …, "reply_p50_us": …, "reply_p99_us": …}.
//
//   switchboard-bench relay … | idle … | churn … | store …   (see each function below)

import Foundation
import Synchronization
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardPush

func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: "--" + name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

/// One line on stdout, written at once (the bench script waits for it).
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// --server, --api-key and --api-secret, which every load against a Switchboard needs.
func serverOptions(_ arguments: [String]) -> (server: String, apiKey: String, secret: String) {
    guard let server = option("server", in: arguments), let apiKey = option("api-key", in: arguments),
        let secret = option("api-secret", in: arguments)
    else { fail("--server, --api-key and --api-secret are required") }
    return (server, apiKey, secret)
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
    let seconds = elapsed.seconds
    print(#"{"pushes_per_second": \#(Int(Double(count) / seconds)), "count": \#(count), "seconds": \#(String(format: "%.3f", seconds)), "failures": \#(failures), "connections": \#(client.connectionsOpened)}"#)
    client.shutdown()
}

/// Signal relay: `pairs` pairs of clients, each pair in its own room; every sender keeps
/// `window` ~300-byte signals in flight to its partner. Prints delivered signals per second.
/// Everything after connecting runs in event handlers on the loop thread, so the generator
/// spends its core on frames, not on hops between threads.
func benchRelay(_ arguments: [String]) async throws {
    let (server, apiKey, secret) = serverOptions(arguments)
    let pairs = Int(option("pairs", in: arguments) ?? "50") ?? 50
    let total = Int(option("messages", in: arguments) ?? "200000") ?? 200_000
    let window = Int(option("window", in: arguments) ?? "20") ?? 20
    let rate = option("rate", in: arguments).flatMap { Int($0) }
    let loop = try EventLoop(name: "bench-relay")
    func token(_ identity: String) -> String {
        let claims = AccessTokenIssuer.claims(
            apiKey: apiKey, identity: identity, name: nil, grants: SwitchboardProtocol.Grants(room: "*", roomJoin: true), ttlSeconds: 3600)
        return AccessTokenVerifier.sign(claims, secret: secret)
    }
    // --receiver-server: the receivers on another node of a cluster (they join first, so each
    // room runs on their node and every signal crosses between the two nodes).
    let receiverServer = option("receiver-server", in: arguments) ?? server
    /// A connection, asked again while a node has not seen the app yet (503, Retry-After: 1).
    func connect(_ url: String) async throws -> WebSocketClient {
        for attempt in 1...10 {
            do { return try await WebSocketClient.connect(to: URL(string: url)!, on: loop) } catch where attempt < 10 {
                try await Task.sleep(for: .seconds(1))
            }
        }
        fail("cannot connect to \(url)")
    }
    var clients: [(sender: WebSocketClient, receiver: WebSocketClient)] = []
    for index in 0..<pairs {
        let receiver = try await connect("\(receiverServer)/v1/ws?access_token=\(token("r\(index)"))")
        let sender = try await connect("\(server)/v1/ws?access_token=\(token("s\(index)"))")
        clients.append((sender, receiver))
    }
    let run = RelayRun(clients: clients, perPair: total / pairs, window: window, rate: rate, loop: loop)
    let seconds = await withCheckedContinuation { (done: CheckedContinuation<Double, Never>) in
        loop.execute { run.start(done) }
    }
    var line = #"{"messages_per_second": \#(Int(Double(run.delivered) / seconds)), "delivered": \#(run.delivered), "seconds": \#(String(format: "%.3f", seconds)), "pairs": \#(pairs)"#
    if rate != nil {
        let sorted = run.latencies.sorted()
        func percentile(_ p: Double) -> UInt64 { sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
        line += #", "rate": \#(rate!), "p50_us": \#(percentile(0.5)), "p99_us": \#(percentile(0.99)), "p999_us": \#(percentile(0.999))"#
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

    static func monotonicMicros() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
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
        let elapsed = ContinuousClock.now - started
        let micros = Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12
        let due = min(total, Int(micros * Double(rate) / 1e6))
        while pacedSent < due {
            let index = pacedSent % clients.count
            clients[index].sender.send(OutboundFrame(Self.stamped(prefixes[index], at: Self.monotonicMicros())))
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
                    if rate != nil, let stamp = Self.stamp(in: text) { latencies.append(Self.monotonicMicros() &- stamp) }
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

/// Idle connections: opens `connections` authenticated WebSockets (`parallel` handshakes at a
/// time), prints how fast they connected, then holds them open `hold` seconds (long enough for
/// the server's keepalive pings) and prints how many are still open.
func benchIdle(_ arguments: [String]) async throws {
    let (server, apiKey, secret) = serverOptions(arguments)
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
                let claims = AccessTokenIssuer.claims(apiKey: apiKey, identity: "idle-\(index)", name: nil, grants: SwitchboardProtocol.Grants(), ttlSeconds: 3600)
                let token = AccessTokenVerifier.sign(claims, secret: secret)
                return try await WebSocketClient.connect(to: URL(string: "\(server)/v1/ws?access_token=\(token)")!, on: loop)
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


/// Call setup: callers on one loop start calls at a steady rate; each call rings one callee's
/// registered iPhone (a VoIP push to the APNs the server is configured with).
func benchCalls(_ arguments: [String]) async throws {
    let (server, apiKey, secret) = serverOptions(arguments)
    let rate = Int(option("rate", in: arguments) ?? "500") ?? 500
    let seconds = Int(option("seconds", in: arguments) ?? "20") ?? 20
    let callerCount = Int(option("callers", in: arguments) ?? "50") ?? 50
    let calleeCount = Int(option("callees", in: arguments) ?? "500") ?? 500
    let ringTimeout = Int(option("ring-timeout", in: arguments) ?? "120") ?? 120
    func token(_ identity: String) -> String {
        let claims = AccessTokenIssuer.claims(
            apiKey: apiKey, identity: identity, name: nil, grants: SwitchboardProtocol.Grants(call: true), ttlSeconds: 3600)
        return AccessTokenVerifier.sign(claims, secret: secret)
    }
    let http = server.replacingOccurrences(of: "ws://", with: "http://")
    let run = UInt32.random(in: 0...UInt32.max)
    let callees = (0..<calleeCount).map { "callee-\(run)-\($0)" }
    for (index, callee) in callees.enumerated() {
        let body = #"{"platform":"ios","voip_token":"\#(String(format: "%056x%08x", UInt64(run), index))","environment":"sandbox","callkit_enabled":true}"#
        let response = try HTTPClient.perform(
            "PUT", "\(http)/v1/devices/phone-\(index)", headers: [("authorization", "Bearer \(token(callee))"), ("content-type", "application/json")],
            body: Array(body.utf8))
        guard response.status == 200 || response.status == 201 else { fail("device registration: HTTP \(response.status)") }
    }
    let loop = try EventLoop(name: "bench-calls")
    var callers: [WebSocketClient] = []
    for index in 0..<callerCount {
        callers.append(try await WebSocketClient.connect(to: URL(string: "\(server)/v1/ws?access_token=\(token("caller-\(run)-\(index)"))")!, on: loop))
    }
    let calls = CallRun(callers: callers, callees: callees, rate: rate, total: rate * seconds, ringTimeout: ringTimeout, loop: loop)
    let elapsed = await withCheckedContinuation { (done: CheckedContinuation<Double, Never>) in
        loop.execute { calls.start(done) }
    }
    let sorted = calls.replyLatencies.sorted()
    func percentile(_ p: Double) -> UInt64 { sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
    print(#"{"calls_per_second": \#(Int(Double(calls.created) / elapsed)), "created": \#(calls.created), "failed": \#(calls.failed), "seconds": \#(String(format: "%.3f", elapsed)), "rate": \#(rate), "reply_p50_us": \#(percentile(0.5)), "reply_p99_us": \#(percentile(0.99))}"#)
    if let first = calls.firstError { FileHandle.standardError.write(Data("first error: \(first)\n".utf8)) }
    for caller in callers { caller.close() }
    loop.stop()
}

/// The state of a call-setup run, confined to the loop thread.
final class CallRun: @unchecked Sendable {
    // Safety: every method runs on the event loop thread (start through execute, the rest from
    // timers and the callers' event handlers).
    let callers: [WebSocketClient]
    let callees: [String]
    let rate: Int
    let total: Int
    let ringTimeout: Int
    let loop: EventLoop
    var sent = 0
    var created = 0
    var failed = 0
    var firstError: String?
    var sentAt: [UInt64]
    var replyLatencies: [UInt64] = []
    var started = ContinuousClock.now
    var done: CheckedContinuation<Double, Never>?

    init(callers: [WebSocketClient], callees: [String], rate: Int, total: Int, ringTimeout: Int, loop: EventLoop) {
        self.callers = callers
        self.callees = callees
        self.rate = rate
        self.total = total
        self.ringTimeout = ringTimeout
        self.loop = loop
        sentAt = Array(repeating: 0, count: total)
        replyLatencies.reserveCapacity(total)
    }

    func start(_ done: CheckedContinuation<Double, Never>) {
        self.done = done
        for caller in callers {
            caller.handleEventsOnLoop { [self] event in
                guard case .text(let text) = event else { return }
                // Replies only; events are skipped. An `ok` starts with its type and id (the
                // server writes them first), so its id is read without parsing the rest: the
                // generator shares its core with the store, and should cost it as little as it
                // can. Error replies (rare; their keys come in any order) are parsed whole.
                let okPrefix = #"{"type":"ok","id":"#
                let id: Int
                let ok = text.hasPrefix(okPrefix)
                if ok {
                    let digits = text.utf8.dropFirst(okPrefix.utf8.count).prefix(while: { $0 >= 0x30 && $0 <= 0x39 })
                    guard (1...9).contains(digits.count) else { return }
                    id = digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }
                } else {
                    guard text.contains(#""type":"error""#),
                        let reply = try? JSONDecoder().decode(SwitchboardProtocol.JSONValue.self, from: Data(text.utf8)),
                        case .int(let parsed)? = reply["id"]
                    else { return }
                    id = Int(parsed)
                }
                guard id >= 0, id < total else { return }
                if ok {
                    created += 1
                    replyLatencies.append(RelayRun.monotonicMicros() &- sentAt[Int(id)])
                } else {
                    failed += 1
                    if firstError == nil { firstError = text }
                }
                if created + failed == total, let done = self.done {
                    self.done = nil
                    let elapsed = ContinuousClock.now - started
                    done.resume(returning: elapsed.seconds)
                }
            }
        }
        started = .now
        tick()
    }

    /// Every millisecond: the calls the rate says are due, round robin over callers and callees.
    private func tick() {
        let elapsed = ContinuousClock.now - started
        let micros = Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12
        let due = min(total, Int(micros * Double(rate) / 1e6))
        while sent < due {
            let callee = callees[sent % callees.count]
            sentAt[sent] = RelayRun.monotonicMicros()
            callers[sent % callers.count].send(
                text: #"{"type":"call.create","id":\#(sent),"data":{"callees":["\#(callee)"],"ring_timeout_seconds":\#(ringTimeout)}}"#)
            sent += 1
        }
        if sent < total { loop.schedule(after: .milliseconds(1)) { [self] in tick() } }
    }
}

/// Churn: `parallel` workers each connect an authenticated WebSocket (a fresh JWT each time),
/// close it, wait for the close to finish, and go again, for `seconds`. Prints connects/s.
func benchChurn(_ arguments: [String]) async throws {
    let (server, apiKey, secret) = serverOptions(arguments)
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
                    let claims = AccessTokenIssuer.claims(
                        apiKey: apiKey, identity: "churn-\(worker)-\(round)", name: nil,
                        grants: SwitchboardProtocol.Grants(room: "churn-*", roomJoin: true), ttlSeconds: 600)
                    let token = AccessTokenVerifier.sign(claims, secret: secret)
                    do {
                        let client = try await WebSocketClient.connect(to: URL(string: "\(server)/v1/ws?access_token=\(token)")!, on: loop)
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

/// Writes to a store as the server does, for `--seconds`: trace entries (the store's most
/// frequent write), queued (`--mode queued`: as the server writes, 1,000 queued then waited for,
/// the writes queued while one commits going in the next transaction, sent together), queued
/// as code (`--mode queued-code`: the same batches, each statement its own round trip) or one
/// transaction each, waited for (`--mode single`); `--commit-delay-ms` is the store's
/// `store_commit_delay_ms` (5). Prints {"writes_per_second": …, "writes": …, "commits": …}.
func benchStore(_ arguments: [String]) throws {
    let seconds = Double(option("seconds", in: arguments) ?? "5") ?? 5
    let single = option("mode", in: arguments) == "single"
    let asCode = option("mode", in: arguments) == "queued-code"
    let metrics = Metrics()
    let limits = Store.Limits(commitDelayMillis: Int(option("commit-delay-ms", in: arguments) ?? "5") ?? 5)
    let store: Store
    if let url = option("store-url", in: arguments) {
        store = try Store(postgres: url, metrics: metrics, limits: limits)
    } else if let directory = option("data-dir", in: arguments) {
        store = try Store(directory: directory, metrics: metrics, limits: limits)
    } else {
        fail("--data-dir or --store-url is required")
    }
    defer { store.close() }
    let detail = #"{"apns_status":200,"apns_id":"a3c8e4f0-1b2d-4c5e-8f90-123456789abc"}"#
    /// A trace entry as the server writes one for a push APNs accepted.
    func entry(_ index: Int) -> SQLStatement {
        Store.traceEntry(
            callID: "c\(index / 4)", user: "callee-\(index % 500)", device: "phone", channel: "voip_push", event: "apns_accepted",
            atMillis: 1_800_000_000_000 + Int64(index), detail: detail)
    }
    let started = ContinuousClock.now
    var written = 0
    while (ContinuousClock.now - started).seconds < seconds {
        if single {
            let statement = entry(written)
            _ = try store.write { database in try database.query(statement.sql, statement.parameters) }
            written += 1
        } else {
            for index in written..<(written + 1_000) {
                let statement = entry(index)
                if asCode {
                    store.enqueue("bench") { database in try database.query(statement.sql, statement.parameters) }
                } else {
                    store.enqueue("bench", statements: [statement])
                }
            }
            store.flush()
            written += 1_000
        }
    }
    let elapsed = (ContinuousClock.now - started).seconds
    let commits = Int(metrics.counter("switchboard_store_commits_total"))
    print(#"{"writes_per_second": \#(Int(Double(written) / elapsed)), "writes": \#(written), "commits": \#(commits), "seconds": \#(String(format: "%.3f", elapsed))}"#)
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "push":
    try await benchPush(Array(arguments.dropFirst()))
case "relay":
    try await benchRelay(Array(arguments.dropFirst()))
case "idle":
    try await benchIdle(Array(arguments.dropFirst()))
case "calls":
    try await benchCalls(Array(arguments.dropFirst()))
case "churn":
    try await benchChurn(Array(arguments.dropFirst()))
case "store":
    try benchStore(Array(arguments.dropFirst()))
default:
    fail("usage: switchboard-bench push --url URL --ca-file PEM [--count N] [--concurrency C] [--connections K]\n"
        + "       switchboard-bench relay --server ws://HOST:PORT --api-key K --api-secret S [--pairs N] [--messages M] [--window W | --rate PER_SECOND] [--receiver-server ws://HOST:PORT]\n"
        + "       switchboard-bench idle --server ws://HOST:PORT --api-key K --api-secret S [--connections N] [--parallel P] [--hold SECONDS]\n"
        + "       switchboard-bench calls --server ws://HOST:PORT --api-key K --api-secret S [--rate PER_SECOND] [--seconds N] [--callers C] [--callees D] [--ring-timeout S]\n"
        + "       switchboard-bench churn --server ws://HOST:PORT --api-key K --api-secret S [--seconds N] [--parallel P] [--join-rooms N]\n"
        + "       switchboard-bench store --data-dir DIR | --store-url URL [--seconds N] [--mode queued|queued-code|single] [--commit-delay-ms N]")
}
