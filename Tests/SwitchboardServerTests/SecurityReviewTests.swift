import Foundation
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem
import SwitchboardPush
import SwitchboardCore
import Testing

@testable import SwitchboardServer

/// The findings of the security review (docs/security.md's threat model), each on the hub
/// with a manual clock: what a client could do before, and what it gets now.
@Suite(.timeLimit(.minutes(3))) struct SecurityReviewTests {
    // MARK: 1. A resume the server cannot serve

    /// A session that missed more than a connection's send queue holds used to get
    /// `session.resumed` and a replay dropped as a slow consumer, again at every retry. Now
    /// the log keeps at most what fits, and a resume past it gets a fresh session at once.
    // Covers: limit:resume_buffer_bytes
    @Test func aResumeThatMissedMoreThanASendQueueHoldsGetsAFreshSessionNotAReplay() throws {
        let h = try HubHarness {
            $0.limits.sendQueueBytes = 64 * 1024
            $0.limits.resumeBufferBytes = 1 << 20  // larger than the queue: the queue bounds it
        }
        let alice = h.connect("alice"), bob = h.connect("bob")
        let (bobPeer, bobResume) = h.welcome(bob)
        h.send(alice, MessageType.roomJoin, ["room": "lobby"])
        h.send(bob, MessageType.roomJoin, ["room": "lobby"])
        _ = h.output.take(alice)
        _ = h.output.take(bob)
        h.hub.disconnected(bob, reason: .lost)
        let chunk = String(repeating: "x", count: 8_000)
        for index in 0..<10 { h.send(alice, MessageType.data, ["room": "lobby", "to": .string(bobPeer), "data": ["n": .int(Int64(index)), "pad": .string(chunk)]]) }
        let back = h.connect("bob", resume: Hub.ResumeRequest(token: bobResume, lastSequence: 0))
        let first = try #require(h.output.take(back).first)
        #expect(first["type"] == "session.welcome", "a fresh session, not a replay the queue would drop: \(first["type"] ?? .null)")
        #expect(first["data"]?["resume_failed"] == true)
        #expect(first["data"]?["peer_id"]?.stringValue != bobPeer)
        #expect(h.output.take(alice).contains { $0["type"] == "room.peer_left" && $0["data"]?["reason"] == "disconnected" })
    }

    /// A resume that arrives while the old connection is still open (a half-dead socket)
    /// replaces it: the old one is closed with 4001, the new one carries on the session.
    // Covers: close:4001
    @Test func aResumeOnANewConnectionClosesTheStillOpenOneWith4001() throws {
        let h = try HubHarness()
        let bob = h.connect("bob")
        let (peer, token) = h.welcome(bob)
        let back = h.connect("bob", resume: Hub.ResumeRequest(token: token, lastSequence: 0))
        #expect(h.output.closed[bob]?.code == 4001)
        let first = h.output.take(back).first
        #expect(first?["type"] == "session.resumed")
        #expect(first?["data"]?["peer_id"]?.stringValue == peer)
    }

    /// What a replay would send is bounded in bytes too: the log drops its oldest events past
    /// `resume_buffer_bytes`, whatever their number.
    @Test func theReplayLogIsBoundedInBytesAsWellAsInEvents() {
        var log = EventLog(capacity: 1_000, maxBytes: 10_000)
        for seq in 1...20 { log.append(seq: UInt64(seq), frame: OutboundFrame(Array(repeating: UInt8(ascii: "a"), count: 1_000))) }
        #expect(log.count == 10)
        #expect(log.bytes == 10_000)
        #expect(log.events(after: 10, newest: 20)?.count == 10)
        #expect(log.events(after: 9, newest: 20) == nil, "the 10th is gone: a resume from 9 cannot be served")
        log.append(seq: 21, frame: OutboundFrame(Array(repeating: UInt8(ascii: "a"), count: 20_000)))
        #expect(log.count == 0, "a frame larger than the whole budget is not kept either")
    }

    // MARK: 5. The APNs topic

    /// A device registered (before this check) with a bundle id the app does not have, or one
    /// carrying CR and LF, is pushed on the app's own topic; one of the app's extra bundle ids
    /// is pushed on it.
    @Test func aPushGoesOnlyToATopicOfTheApp() throws {
        let h = try HubHarness()
        _ = try h.store.setExtraBundleIDs(["com.example.chat.lite"], apiKey: h.app.apiKey)
        try h.store.refreshApps()
        for (device, bundle, seed) in [("b-1", "com.other.bank", "a1"), ("b-2", "com.example.chat\r\nx-injected: yes", "a2"), ("b-3", "com.example.chat.lite", "a3")] {
            try h.store.register(Device(
                appID: h.app.id, userID: "bob", deviceID: device, platform: "ios", voipToken: String(repeating: seed, count: 32),
                apnsToken: nil, environment: .sandbox, bundleID: bundle, callKitEnabled: true, appVersion: nil, updatedAt: 1))
        }
        guard case .found(let current) = h.store.cachedApp(apiKey: h.app.apiKey) else { throw Timeout(what: "the app") }
        let alice = h.connect("alice", app: current)
        h.send(alice, MessageType.callCreate, ["callees": ["bob"]])
        h.settle()
        let topics = Dictionary(uniqueKeysWithValues: h.push.take().map { ($0.notification.deviceToken.prefix(2), $0.notification.apnsTopic) })
        #expect(topics["a1"] == "com.example.chat.voip", "another app's bundle id is not a topic of this app")
        #expect(topics["a2"] == "com.example.chat.voip")
        #expect(topics["a3"] == "com.example.chat.lite.voip", "a bundle id the operator allowed")
    }

    // MARK: 7. The call grant

    /// Answering, declining, cancelling, ending and holding need the `call` grant, as placing
    /// a call does: a token without it was able to answer and hold a call.
    @Test(arguments: [MessageType.callAnswer, MessageType.callDecline, MessageType.callEnd, MessageType.callHold, MessageType.callAck])
    func everyCallActionNeedsTheCallGrant(type: String) throws {
        let h = try HubHarness()
        let alice = h.connect("alice", device: "a-phone")
        let bob = h.connect("bob", device: "b-phone", grants: Grants(room: "*", roomJoin: true))
        _ = h.output.take(alice)
        _ = h.output.take(bob)
        h.send(alice, MessageType.callCreate, ["callees": ["bob"]])
        h.settle()
        let callID = try #require(h.output.take(alice).first { $0["type"] == "ok" }?["data"]?["call_id"]?.stringValue)
        h.send(bob, type, ["call_id": .string(callID), "on_hold": true])
        h.settle()
        let reply = try #require(h.output.take(bob).first { $0["type"] == "ok" || $0["type"] == "error" })
        #expect(reply["error"]?["code"] == "forbidden", "\(type): \(reply)")
        #expect(h.hub.calls[callID]?.state.status["bob"] == .ringing, "nothing changed")
    }

    // MARK: 9. Log lines

    /// A callee named with CR, LF, a line separator or an escape character forges no line: each
    /// is escaped, whatever Swift's graphemes make of `\r\n`.
    @Test func aNameWithLineBreaksForgesNoLogLine() throws {
        let h = try HubHarness()
        let alice = h.connect("alice")
        let forged = "victim\r\nts=2026-01-01T00:00:00.000Z level=error msg=FORGED\u{2028}x\u{1B}[31m\u{0}"
        h.send(alice, MessageType.callCreate, ["callees": [.string(forged)]])
        h.settle()
        let lines = h.logged()
        let created = try #require(lines.first { $0.contains("msg=\"call created\"") })
        #expect(created.contains(#"victim\r\nts=2026"#), "\(created)")
        #expect(created.contains(#"\u2028x\u001B[31m\u0000"#), "\(created)")
        for line in lines {
            #expect(!line.unicodeScalars.contains { $0 == "\r" || $0 == "\n" || $0 == "\u{2028}" || $0 == "\u{1B}" || $0 == "\u{0}" })
            #expect(!line.hasPrefix("ts=2026-01-01"))
        }
    }

    @Test func everyControlAndSeparatorIsEscapedInALogValue() {
        #expect(Logger.quote("a\r\nb") == #""a\r\nb""#)
        #expect(Logger.quote("\u{85}\u{2028}\u{2029}\u{202E}\u{7F}") == #""\u0085\u2028\u2029\u202E\u007F""#)
        #expect(Logger.quote("tag\u{E0001}") == #""tag\U000E0001""#)
        #expect(Logger.quote("plain-value_1.2:3/4@5+6*…") == "plain-value_1.2:3/4@5+6*…")
        #expect(Logger.quote("名前") == "名前")
        #expect(Logger.quote("two words") == #""two words""#)
    }

    // MARK: 10. Sessions and their tokens

    /// A session ends with its token: `session.expiring` ahead of `exp`, then a close with 4003
    /// once `exp` and the leeway have passed. A session could place calls for as long as its
    /// connection lasted.
    // Covers: limit:token_expiry_warning_seconds, close:4003
    @Test func aSessionIsWarnedThenClosedWhenItsTokenExpires() throws {
        let h = try HubHarness {
            $0.limits.tokenExpiryWarningSeconds = 60
            $0.limits.tokenLeewaySeconds = 30
        }
        let alice = h.connect("alice", exp: h.nowSeconds + 300)
        _ = h.output.take(alice)
        h.scheduler.advance(by: .seconds(240) - .milliseconds(1))
        #expect(h.output.take(alice).isEmpty)
        h.scheduler.advance(by: .milliseconds(1))
        let warning = try #require(h.output.take(alice).first)
        #expect(warning["type"] == "session.expiring")
        #expect(warning["data"]?["expires_at"] == .int(h.nowSeconds + 60))
        #expect(warning["seq"] == nil, "a connection message, not an event")
        h.scheduler.advance(by: .seconds(90) - .milliseconds(1))
        #expect(h.output.closed[alice] == nil, "open until exp and the leeway")
        h.scheduler.advance(by: .milliseconds(1))
        #expect(h.output.closed[alice]?.code == 4003)
    }

    /// `session.refresh` with a fresh token of the same identity keeps the session; one of
    /// another identity, or an expired one, is refused and changes nothing.
    @Test func aFreshTokenKeepsTheSessionAndNoOtherTokenDoes() throws {
        let h = try HubHarness { $0.limits.tokenExpiryWarningSeconds = 60 }
        let alice = h.connect("alice", exp: h.nowSeconds + 120)
        _ = h.output.take(alice)
        h.send(alice, MessageType.sessionRefresh, ["access_token": .string(h.token("mallory"))], id: "m")
        #expect(h.output.take(alice).first?["error"]?["code"] == "forbidden")
        h.send(alice, MessageType.sessionRefresh, ["access_token": .string(h.token("alice", expiresIn: -3600))], id: "x")
        #expect(h.output.take(alice).first?["error"]?["code"] == "token_expired")
        h.send(alice, MessageType.sessionRefresh, ["access_token": .string(h.token("alice", expiresIn: 7200))], id: "ok")
        let reply = try #require(h.output.take(alice).first)
        #expect(reply["type"] == "ok")
        #expect(reply["data"]?["token_expires_at"] == .int(h.nowSeconds + 7200))
        h.scheduler.advance(by: .seconds(3600))
        #expect(h.output.closed[alice] == nil, "the old token's expiry no longer counts")
        #expect(h.output.take(alice).isEmpty, "nor its warning")
    }

    /// A rotated secret: sessions whose token the old secret signed are closed with 4003 once
    /// the app no longer accepts it (at once with no grace); during a grace they stay.
    @Test func aSessionSignedByARetiredSecretIsClosedWhenTheAppsAreReadAgain() throws {
        let h = try HubHarness()
        let old = h.app.apiSecret
        let alice = h.connect("alice", secret: old)
        let now = Date(timeIntervalSince1970: Double(h.nowSeconds))
        _ = try h.store.rotateSecret(apiKey: h.app.apiKey, graceSeconds: 3600, now: now)
        try h.store.refreshApps()
        h.hub.appsRefreshed()
        #expect(h.output.closed[alice] == nil, "the old secret is still accepted during the grace")
        _ = try h.store.rotateSecret(apiKey: h.app.apiKey, graceSeconds: 0, now: now)
        try h.store.refreshApps()
        h.hub.appsRefreshed()
        #expect(h.output.closed[alice]?.code == 4003)
    }

    // MARK: 12. Calls that never end

    /// An answered call whose phones vanished used to stay `accepted` for ever (its users busy).
    /// Now it ends `call_unattended_seconds` after its last participant's session went, unless
    /// one comes back first.
    // Covers: limit:call_unattended_seconds
    @Test func anAnsweredCallNobodyIsConnectedToEndsAfterTheUnattendedTime() throws {
        let h = try HubHarness {
            $0.limits.callUnattendedSeconds = 60
            $0.limits.resumeGraceSeconds = 20
        }
        let (alice, bob, callID) = try h.answeredCall()
        h.hub.disconnected(alice, reason: .lost)
        h.hub.disconnected(bob, reason: .lost)
        h.scheduler.advance(by: .seconds(20))  // the graces end: nobody is in the call
        h.scheduler.advance(by: .seconds(59))
        #expect(h.hub.calls[callID] != nil, "still within the unattended time")
        let back = h.connect("bob", device: "b-phone")
        h.scheduler.advance(by: .seconds(120))
        #expect(h.hub.calls[callID] != nil, "bob came back: the call goes on")
        h.hub.disconnected(back, reason: .peer(code: 1000))
        h.scheduler.advance(by: .seconds(60))
        #expect(h.hub.calls[callID] == nil)
        h.store.flush()
        let record = try #require(try h.store.callSummary(id: callID, appID: h.app.id))
        #expect(record.summary["outcome"] == "completed")
        #expect(record.summary["end_reason"] == "unattended")
        #expect(!h.hub.isInCall("alice", appID: h.app.id), "nobody reads as busy any more")
    }

    /// Any call ends at `max_call_duration_seconds` from its start, connected or not.
    // Covers: limit:max_call_duration_seconds
    @Test func everyCallEndsAtItsMaximumDuration() throws {
        let h = try HubHarness { $0.limits.maxCallDurationSeconds = 3600 }
        let (alice, bob, callID) = try h.answeredCall()
        h.scheduler.advance(by: .seconds(3600) - .milliseconds(1))
        #expect(h.hub.calls[callID] != nil)
        _ = h.output.take(alice)
        h.scheduler.advance(by: .milliseconds(1))
        #expect(h.hub.calls[callID] == nil)
        let ended = try #require(h.output.take(bob).first { $0["type"] == "call.ended" })
        #expect(ended["data"]?["reason"] == "max_duration")
        #expect(ended["data"]?["outcome"] == "completed")
        #expect(h.scheduler.armed == 2, "only each session's token timer is left")
    }

    // MARK: 13. A refused request records nothing

    /// A stranger's `call.decline` with `filtered` is refused and leaves nothing in the trace
    /// (it used to add a `filtered` entry to the caller's trace); a filtered decline of a call
    /// that no longer rings is not traced either.
    @Test func aRefusedDeclineWritesNothingInTheTrace() throws {
        let h = try HubHarness()
        let alice = h.connect("alice", device: "a-phone")
        let mallory = h.connect("mallory", device: "m-phone")
        _ = h.connect("bob", device: "b-phone")
        h.send(alice, MessageType.callCreate, ["callees": ["bob"]])
        h.settle()
        let callID = try #require(h.output.take(alice).first { $0["type"] == "ok" }?["data"]?["call_id"]?.stringValue)
        _ = h.output.take(mallory)
        h.send(mallory, MessageType.callDecline, ["call_id": .string(callID), "reason": "filtered", "filter": "block_list"])
        h.send(mallory, MessageType.callAck, ["call_id": .string(callID)])
        h.settle()
        #expect(h.output.take(mallory).allSatisfy { $0["error"]?["code"] == "forbidden" })
        h.store.flush()
        let trace = try h.store.trace(callID: callID)
        #expect(!trace.contains { $0["user"] == "mallory" }, "\(trace)")
    }

    // MARK: 14. The call's room seat

    /// The side bob answered on belongs to the connection that answered: another connection
    /// saying the same `device_id` (another device of bob, which learned the id from
    /// `call.answered_elsewhere`) is refused, before and after the answering one joins.
    @Test func anotherConnectionNamingTheAnsweringDeviceCannotTakeTheSeat() throws {
        let h = try HubHarness()
        let alice = h.connect("alice", device: "a-phone")
        let bob = h.connect("bob", device: "b-phone")
        let thief = h.connect("bob", device: "b-ipad")
        h.send(alice, MessageType.callCreate, ["callees": ["bob"]])
        h.settle()
        let callID = try #require(h.output.take(alice).first { $0["type"] == "ok" }?["data"]?["call_id"]?.stringValue)
        h.send(bob, MessageType.callAnswer, ["call_id": .string(callID)])
        h.settle()
        let spoofed = h.connect("bob", device: "b-phone")
        _ = h.output.take(spoofed)
        _ = h.output.take(bob)
        _ = h.output.take(thief)
        h.send(spoofed, MessageType.roomJoin, ["room": .string("call-" + callID)])
        #expect(h.output.take(spoofed).first?["error"]?["code"] == "forbidden")
        h.send(bob, MessageType.roomJoin, ["room": .string("call-" + callID)])
        #expect(h.output.take(bob).first?["type"] == "ok")
        h.send(spoofed, MessageType.roomJoin, ["room": .string("call-" + callID)])
        #expect(h.output.take(spoofed).first?["error"]?["code"] == "forbidden")
    }
}

/// The gateway's answers that depend on its state, without sockets.
@Suite(.timeLimit(.minutes(3))) struct GatewayStateTests {
    /// While the server shuts down (from the drain on), `/readyz` answers 503 `unavailable`:
    /// a load balancer stops sending it traffic.
    @Test func readinessIsUnavailableFromTheMomentTheServerDrains() throws {
        let h = try HubHarness()
        let gateway = Gateway(configuration: ServerConfiguration(), hub: h.hub, metrics: h.metrics, logger: Logger(minimumLevel: .error))
        let request = RESTRequest(http: HTTPRequest(method: .get, path: "/readyz"), parameters: [:])
        func status() -> Int? {
            guard case .now(let response) = gateway.readiness(request) else { return nil }
            return response.status
        }
        #expect(status() == 200)
        gateway.drain(grace: .zero) {}
        #expect(status() == 503)
        guard case .now(let response) = gateway.readiness(request), case .bytes(let body) = response.body else {
            Issue.record("no answer")
            return
        }
        #expect(String(decoding: body, as: UTF8.self).contains("unavailable"))
    }
}

extension HubHarness {
    /// alice (a-phone) calls bob (b-phone), bob answers; the store has answered.
    func answeredCall() throws -> (alice: ConnectionID, bob: ConnectionID, callID: String) {
        let alice = connect("alice", device: "a-phone")
        let bob = connect("bob", device: "b-phone")
        send(alice, MessageType.callCreate, ["callees": ["bob"]])
        settle()
        let callID = try #require(output.take(alice).first { $0["type"] == "ok" }?["data"]?["call_id"]?.stringValue)
        send(bob, MessageType.callAnswer, ["call_id": .string(callID)])
        settle()
        _ = output.take(alice)
        _ = output.take(bob)
        #expect(hub.calls[callID]?.state.phase == .accepted)
        return (alice, bob, callID)
    }
}
