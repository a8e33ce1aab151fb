// calls: how many calls a second the server sets up, each ringing a callee's registered
// iPhone, and how long the caller waits for its reply (and, with --callee-server, how long the
// callee waits for the invite).
//
//   switchboard-bench calls --server ws://HOST:PORT --api-key K --api-secret S [--rate PER_SECOND]
//       [--seconds N] [--callers C] [--callees D] [--ring-timeout S] [--callee-server ws://HOST:PORT]
//       [--cancel-at-end] [--timeline FILE]
//
// Registers D callees (500), each with an iOS device and a VoIP token, then C callers (50) start
// calls at the given rate (500) for N seconds (20), round robin over callees; each call rings
// until S seconds (120) pass, past the end of the run. With --callee-server each callee also
// keeps one WebSocket session on that server (another node of a cluster, or --server again),
// connected before the first call, and every call's invite is timed from the caller's
// `call.create` to the callee's `call.incoming`. Prints one JSON line:
// {"calls_per_second": …, "created": …, "failed": …, "seconds": …, "rate": …, "reply_p50_us": …, "reply_p99_us": …},
// with --callee-server also "invite_p50_us", "invite_p99_us" and "invites" (the created calls
// whose invite arrived, waited for at most 5 s after the last reply). With --cancel-at-end each
// caller then cancels its calls, and the run waits for the replies (at most 30 s), so that no
// call of this run is left ringing in a store the next run shares (a server sweeping up a
// stopped server's calls would be measured with it). --timeline writes one line per reply to
// FILE, "SENT_US LATENCY_US" (microseconds from the first call, whose wall-clock time is on the
// first line), to see when slow replies came.

import Foundation
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem

/// Callers on one loop start calls at a steady rate; each call rings one callee's registered
/// iPhone (a VoIP push to the APNs the server is configured with) and its session, if it has one.
func benchCalls(_ arguments: [String]) async throws {
    let target = serverOptions(arguments)
    let rate = Int(option("rate", in: arguments) ?? "500") ?? 500
    let seconds = Int(option("seconds", in: arguments) ?? "20") ?? 20
    let callerCount = Int(option("callers", in: arguments) ?? "50") ?? 50
    let calleeCount = Int(option("callees", in: arguments) ?? "500") ?? 500
    let ringTimeout = Int(option("ring-timeout", in: arguments) ?? "120") ?? 120
    let calleeServer = option("callee-server", in: arguments)
    let cancelAtEnd = arguments.contains("--cancel-at-end")
    let timeline = option("timeline", in: arguments)
    func token(_ identity: String) -> String {
        target.token(for: identity, grants: SwitchboardProtocol.Grants(call: true))
    }
    let http = target.server.replacingOccurrences(of: "ws://", with: "http://")
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
        callers.append(try await WebSocketClient.connect(to: URL(string: "\(target.server)/v1/ws?access_token=\(token("caller-\(run)-\(index)"))")!, on: loop))
    }
    var sessions: [WebSocketClient] = []
    if let calleeServer {
        for callee in callees {
            sessions.append(try await connect("\(calleeServer)/v1/ws?access_token=\(token(callee))", on: loop))
        }
    }
    let calls = CallRun(
        callers: callers, calleeSessions: sessions, callees: callees, rate: rate, total: rate * seconds, ringTimeout: ringTimeout, loop: loop)
    calls.cancelAtEnd = cancelAtEnd
    let elapsed = await withCheckedContinuation { (done: CheckedContinuation<Double, Never>) in
        loop.execute { calls.start(done) }
    }
    if let timeline {
        let first = calls.sentAt.first ?? 0
        // The first call's wall-clock time, to line the replies up with other records.
        let startedAtMillis = Int64(Date().timeIntervalSince1970 * 1000) - Int64((monotonicMicros() &- first) / 1000)
        let lines = "# first call at \(startedAtMillis) ms since 1970\n" + calls.replied.map { "\($0.sent &- first) \($0.latency)\n" }.joined()
        try lines.write(toFile: timeline, atomically: true, encoding: .utf8)
    }
    let replies = calls.replyLatencies.sorted()
    var line = #"{"calls_per_second": \#(Int(Double(calls.created) / elapsed)), "created": \#(calls.created), "failed": \#(calls.failed), "seconds": \#(String(format: "%.3f", elapsed)), "rate": \#(rate), "reply_p50_us": \#(percentile(0.5, of: replies)), "reply_p99_us": \#(percentile(0.99, of: replies))"#
    if calleeServer != nil {
        let invites = calls.inviteLatencies.sorted()
        line += #", "invite_p50_us": \#(percentile(0.5, of: invites)), "invite_p99_us": \#(percentile(0.99, of: invites)), "invites": \#(invites.count)"#
    }
    print(line + "}")
    if let first = calls.firstError { FileHandle.standardError.write(Data("first error: \(first)\n".utf8)) }
    for caller in callers { caller.close() }
    for session in sessions { session.close() }
    loop.stop()
}

/// The state of a call-setup run, confined to the loop thread.
final class CallRun: @unchecked Sendable {
    // Safety: every method runs on the event loop thread (start through execute, the rest from
    // timers and the callers' and callee sessions' event handlers).
    let callers: [WebSocketClient]
    /// One session per callee, or none: then invites are not timed.
    let calleeSessions: [WebSocketClient]
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
    /// Each reply's send time and latency, in the order they came (`--timeline`).
    var replied: [(sent: UInt64, latency: UInt64)] = []
    /// From `call.create` sent to `call.incoming` received, one per call whose both ends are known.
    var inviteLatencies: [UInt64] = []
    /// Calls known from one end only, by call id: the reply or the invite came first.
    private var halfSeen: [String: HalfSeenCall] = [:]
    var started = ContinuousClock.now
    /// Seconds from the first call to the last reply, once every reply is in.
    private var repliedAfter: Double?
    var done: CheckedContinuation<Double, Never>?
    /// Cancel every created call once the run is measured (`--cancel-at-end`).
    var cancelAtEnd = false
    /// The created calls' ids, by request id (kept with `cancelAtEnd`).
    private var createdIDs: [Int: String] = [:]
    /// Cancels sent and answered.
    private var cancelsSent = 0
    private var cancelsAnswered = 0

    /// How an invite event starts (the server writes `type` first).
    private static let invitePrefix = #"{"type":"\#(CallEvent.Kind.incoming.rawValue)""#
    /// How long the run waits for invites still missing after the last reply.
    static let inviteGrace: Duration = .seconds(5)

    /// A call seen from one end: `sent` (its `ok` came first; when `call.create` went) or
    /// `invited` (its `call.incoming` came first; when it arrived).
    enum HalfSeenCall {
        case sent(at: UInt64)
        case invited(at: UInt64)
    }

    init(
        callers: [WebSocketClient], calleeSessions: [WebSocketClient], callees: [String], rate: Int, total: Int, ringTimeout: Int,
        loop: EventLoop
    ) {
        self.callers = callers
        self.calleeSessions = calleeSessions
        self.callees = callees
        self.rate = rate
        self.total = total
        self.ringTimeout = ringTimeout
        self.loop = loop
        sentAt = Array(repeating: 0, count: total)
        replyLatencies.reserveCapacity(total)
        if !calleeSessions.isEmpty { inviteLatencies.reserveCapacity(total) }
    }

    private var timesInvites: Bool { !calleeSessions.isEmpty }

    func start(_ done: CheckedContinuation<Double, Never>) {
        self.done = done
        for caller in callers {
            caller.handleEventsOnLoop { [self] event in
                guard case .text(let text) = event else { return }
                // Replies only; events are skipped. An `ok` starts with its type and id (the
                // server writes them first), so its id is read without parsing the rest: the
                // generator shares its core with the store, and should cost it as little as it
                // can. Error replies (rare; their keys come in any order) are parsed whole, and
                // so is an `ok` when invites are timed (its data is the call, with its id).
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
                if id >= total {
                    cancelsAnswered += 1
                    if cancelsAnswered == cancelsSent { finish() }
                    return
                }
                guard id >= 0 else { return }
                if ok {
                    created += 1
                    replyLatencies.append(monotonicMicros() &- sentAt[id])
                    replied.append((sentAt[id], replyLatencies[replyLatencies.count - 1]))
                    if cancelAtEnd, let callID = Self.quickCallID(in: text) { createdIDs[id] = callID }
                    if timesInvites, let callID = Self.callID(in: text) { see(callID, .sent(at: sentAt[id])) }
                } else {
                    failed += 1
                    if firstError == nil { firstError = text }
                }
                finishIfDone()
            }
        }
        for session in calleeSessions {
            session.handleEventsOnLoop { [self] event in
                guard case .text(let text) = event, text.hasPrefix(Self.invitePrefix) else { return }
                let arrived = monotonicMicros()
                guard let callID = Self.callID(in: text) else { return }
                see(callID, .invited(at: arrived))
                finishIfDone()
            }
        }
        started = .now
        tick()
    }

    /// `data.call_id` of a reply or event: the call's id in `call.create`'s `ok` and in
    /// `call.incoming`.
    private static func callID(in text: String) -> String? {
        let message = try? JSONDecoder().decode(SwitchboardProtocol.JSONValue.self, from: Data(text.utf8))
        return message?["data"]?["call_id"]?.stringValue
    }

    /// `"call_id":"…"` read without parsing the message (a `call.create` reply's call).
    private static func quickCallID(in text: String) -> String? {
        guard let key = text.range(of: #""call_id":""#) else { return nil }
        let rest = text[key.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }

    /// One end of a call seen: with the other already seen, the invite's latency.
    private func see(_ callID: String, _ end: HalfSeenCall) {
        switch (halfSeen[callID], end) {
        case (nil, _):
            halfSeen[callID] = end
        case (.sent(let sent)?, .invited(let arrived)), (.invited(let arrived)?, .sent(let sent)):
            halfSeen[callID] = nil
            inviteLatencies.append(arrived &- sent)
        default:
            break  // the same end twice (an invite delivered again): the first one counts
        }
    }

    /// Ends the run once every reply is in and, when invites are timed, every created call's
    /// invite has arrived or `inviteGrace` has passed. The run's seconds end at the last reply.
    private func finishIfDone() {
        guard done != nil else { return }
        if repliedAfter == nil {
            guard created + failed == total else { return }
            repliedAfter = (ContinuousClock.now - started).seconds
            if timesInvites { loop.schedule(after: Self.inviteGrace) { [self] in finish() } }
        }
        if !timesInvites || inviteLatencies.count == created { finish() }
    }

    private func finish() {
        guard let done, let repliedAfter else { return }
        if cancelAtEnd && cancelsSent == 0 && !createdIDs.isEmpty {
            // Each call cancelled by the session that created it (request id modulo callers).
            for (offset, request) in createdIDs.keys.sorted().enumerated() {
                callers[request % callers.count].send(
                    text: #"{"type":"call.cancel","id":\#(total + offset),"data":{"call_id":"\#(createdIDs[request]!)"}}"#)
            }
            cancelsSent = createdIDs.count
            loop.schedule(after: .seconds(30)) { [self] in
                cancelsSent = cancelsAnswered
                finish()
            }
            return
        }
        guard cancelsAnswered == cancelsSent else { return }
        self.done = nil
        done.resume(returning: repliedAfter)
    }

    /// Every millisecond: the calls the rate says are due, round robin over callers and callees.
    private func tick() {
        let dueNow = due(ofTotal: total, rate: rate, since: started)
        while sent < dueNow {
            let callee = callees[sent % callees.count]
            sentAt[sent] = monotonicMicros()
            callers[sent % callers.count].send(
                text: #"{"type":"call.create","id":\#(sent),"data":{"callees":["\#(callee)"],"ring_timeout_seconds":\#(ringTimeout)}}"#)
            sent += 1
        }
        if sent < total { loop.schedule(after: .milliseconds(1)) { [self] in tick() } }
    }
}
