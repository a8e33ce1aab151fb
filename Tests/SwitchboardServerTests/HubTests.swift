import Foundation
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem
import SwitchboardPush
import SwitchboardCore
import Testing

@testable import SwitchboardServer

/// The hub driven without sockets or real time: an in-memory output, a manual clock and a real
/// SQLite store in a temporary directory. Ring timeouts, resume grace and empty-room timers run
/// in microseconds, at exactly their deadlines.
final class HubHarness {
    let scheduler = ManualScheduler()
    let output = MemoryOutput()
    let push = RecordingPush()
    let hub: Hub
    let store: Store
    let metrics = Metrics()
    let app = App.make(name: "Chat", bundleID: "com.example.chat")
    let directory: String
    /// What the hub logged (info and above).
    let logged: @Sendable () -> [String]
    private var nextConnection: UInt64 = 0

    init(_ configure: (inout ServerConfiguration) -> Void = { _ in }) throws {
        directory = try makeTemporaryDirectory()
        var configuration = ServerConfiguration()
        configuration.dataDirectory = directory
        configure(&configuration)
        store = try Store(directory: directory, metrics: metrics, logger: Logger(minimumLevel: .error))
        try store.insert(app)
        let (sink, lines) = Logger.Sink.memory()
        logged = lines
        hub = Hub(configuration: configuration, store: store, metrics: metrics, logger: Logger(minimumLevel: .info, sink: sink), push: push)
        hub.attach(output: output, scheduler: scheduler)
    }

    /// Seconds since 1970 on the harness's clock (what a token's `exp` counts in).
    var nowSeconds: Int64 { scheduler.wallMillis / 1000 }

    /// A token of the harness's app for `identity`, signed as the app's backend would.
    func token(_ identity: String, expiresIn seconds: Int64 = 3600, grants: Grants = Grants(room: "*", roomJoin: true, call: true)) -> String {
        AccessTokenVerifier.sign(
            AccessTokenClaims(iss: app.apiKey, sub: identity, exp: nowSeconds + seconds, name: identity.capitalized, grants: grants),
            secret: app.apiSecret)
    }

    deinit {
        store.close()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Opens a session for `identity` on a new connection; returns the connection.
    func connect(
        _ identity: String, device: String? = nil, resume: Hub.ResumeRequest? = nil, exp: Int64 = 4_000_000_000,
        grants: Grants = Grants(room: "*", roomJoin: true, call: true), secret: String? = nil, app: App? = nil
    ) -> ConnectionID {
        nextConnection += 1
        let connection = ConnectionID(rawValue: nextConnection)
        let app = app ?? self.app
        let claims = AccessTokenClaims(iss: app.apiKey, sub: identity, exp: exp, name: identity.capitalized, grants: grants)
        hub.connected(
            connection, claims: claims, app: app, resume: resume, deviceID: device, secretTag: Hub.secretTag(secret ?? app.apiSecret))
        return connection
    }

    func send(_ connection: ConnectionID, _ type: String, _ data: JSONValue, id: String = "r") {
        let message: JSONValue = ["type": .string(type), "id": .string(id), "data": data]
        hub.received(Array(try! JSONEncoder().encode(message)), binary: false, on: connection)
    }

    /// Waits until the store has answered everything the hub asked of it and runs what the
    /// answers continue with on the hub's thread, until nothing more comes back.
    func settle(sourceLocation: SourceLocation = #_sourceLocation) {
        repeat {
            let done = DispatchSemaphore(value: 0)
            DispatchQueue.global().async { [store] in
                store.waitForRequests()
                // A call's reply waits for its write: what is queued is committed first.
                store.flush()
                done.signal()
            }
            guard done.wait(timeout: .now() + .seconds(10 * testSlowdown)) == .success else {
                Issue.record("the store did not answer within 10 s", sourceLocation: sourceLocation)
                return
            }
        } while scheduler.runPending() > 0
    }

    /// Bob has a CallKit iPhone with a VoIP token and no connection; alice (connected) calls him
    /// with a 30 s ring and the store has answered. Returns alice's connection, her welcome taken.
    func aliceCallsBobsIPhone() throws -> ConnectionID {
        try store.register(Device(
            appID: app.id, userID: "bob", deviceID: "b-phone", platform: "ios", voipToken: String(repeating: "ab", count: 32),
            apnsToken: nil, environment: .sandbox, bundleID: "com.example.chat", callKitEnabled: true, appVersion: nil, updatedAt: 1))
        let alice = connect("alice", device: "a-phone")
        _ = output.take(alice)
        send(alice, MessageType.callCreate, ["callees": ["bob"], "ring_timeout_seconds": 30])
        settle()
        return alice
    }

    func welcome(_ connection: ConnectionID) -> (peerID: String, resumeToken: String) {
        let message = output.take(connection).first { $0["type"] == "session.welcome" }
        return (message?["data"]?["peer_id"]?.stringValue ?? "", message?["data"]?["resume_token"]?.stringValue ?? "")
    }
}

@Suite(.timeLimit(.minutes(3))) struct HubTests {
    @Test func anUnansweredCallIsMissedAtItsRingTimeoutAndNotBefore() throws {
        let h = try HubHarness()
        let alice = h.connect("alice", device: "a-phone")
        let bob = h.connect("bob", device: "b-phone")
        _ = h.output.take(alice)
        _ = h.output.take(bob)
        h.send(alice, MessageType.callCreate, ["callees": ["bob"], "ring_timeout_seconds": 20])
        h.settle()
        let sent = h.output.take(alice)
        let reply = sent.first { $0["type"] == "ok" }
        #expect(sent.contains { $0["type"] == "call.ringing" }, "bob's connection was reached")
        let callID = try #require(reply?["data"]?["call_id"]?.stringValue)
        #expect(h.output.types(bob) == ["call.incoming"])
        h.scheduler.advance(by: .seconds(20) - .milliseconds(1))
        #expect(h.output.types(alice).allSatisfy { $0 != "call.ended" }, "still ringing 1 ms before the timeout")
        h.scheduler.advance(by: .milliseconds(1))
        let ended = h.output.take(alice).filter { $0["type"] == "call.ended" }
        #expect(ended.count == 1)
        #expect(ended.first?["data"]?["outcome"] == "missed")
        #expect(h.output.types(bob).contains("call.ended"))
        h.store.flush()  // history is written on the store's writer queue
        let history = try h.store.history(appID: h.app.id, userID: "bob", limit: 10, before: nil)
        #expect(history.first?["call_id"]?.stringValue == callID)
        #expect(history.first?["outcome"] == "missed")
        #expect(h.scheduler.armed == 2, "no timer of the call is left behind: only each session's token timer")
    }

    @Test func aSessionThatLostItsConnectionLeavesItsRoomsWhenTheGraceEndsAndNotBefore() throws {
        let h = try HubHarness { $0.limits.resumeGraceSeconds = 30 }
        let alice = h.connect("alice")
        let bob = h.connect("bob")
        let bobPeer = h.welcome(bob).peerID
        h.send(alice, MessageType.roomJoin, ["room": "r"])
        h.send(bob, MessageType.roomJoin, ["room": "r"])
        _ = h.output.take(alice)
        h.hub.disconnected(bob, reason: .lost)
        h.scheduler.advance(by: .seconds(30) - .milliseconds(1))
        #expect(h.output.types(alice).isEmpty, "bob may still come back")
        h.scheduler.advance(by: .milliseconds(1))
        let left = h.output.take(alice)
        #expect(left.map { $0["type"] } == ["room.peer_left"])
        #expect(left.first?["data"]?["peer_id"]?.stringValue == bobPeer)
        #expect(left.first?["data"]?["reason"] == "disconnected")
    }

    @Test func aSessionResumedWithinTheGraceGetsWhatItMissedAndStaysInItsRooms() throws {
        let h = try HubHarness { $0.limits.resumeGraceSeconds = 30 }
        let alice = h.connect("alice")
        let bob = h.connect("bob")
        let (bobPeer, resumeToken) = h.welcome(bob)
        h.send(bob, MessageType.roomJoin, ["room": "r"])
        h.send(alice, MessageType.roomJoin, ["room": "r"])
        let lastSeen = h.output.take(bob).compactMap { $0["seq"]?.intValue }.max() ?? 0
        h.hub.disconnected(bob, reason: .lost)
        h.send(alice, MessageType.data, ["room": "r", "data": ["n": 1]])
        h.scheduler.advance(by: .seconds(29))
        let back = h.connect("bob", resume: Hub.ResumeRequest(token: resumeToken, lastSequence: UInt64(lastSeen)))
        let replayed = h.output.take(back)
        #expect(replayed.first?["type"] == "session.resumed")
        #expect(replayed.first?["data"]?["peer_id"]?.stringValue == bobPeer)
        #expect(replayed.dropFirst().map { $0["type"] } == ["room.data"], "the data message sent while away")
        h.scheduler.advance(by: .seconds(60))
        #expect(!h.output.types(alice).contains("room.peer_left"), "bob came back in time")
    }

    @Test func anEmptyRoomClosesAtItsEmptyTimeout() throws {
        let h = try HubHarness()
        _ = try h.hub.createRoomHere(app: h.app, name: "standup", request: CreateRoomRequest(emptyTimeoutSeconds: 5))
        let alice = h.connect("alice")
        h.send(alice, MessageType.roomJoin, ["room": "standup"])
        h.send(alice, MessageType.roomLeave, ["room": "standup"])
        h.scheduler.advance(by: .seconds(5) - .milliseconds(1))
        #expect((try? h.hub.room(appID: h.app.id, name: "standup")) != nil, "open until its timeout")
        h.scheduler.advance(by: .milliseconds(1))
        #expect((try? h.hub.room(appID: h.app.id, name: "standup")) == nil, "closed at its timeout")
    }

    /// Ringing an iPhone that has no connection: the hub hands APNs one VoIP push for it; the
    /// caller hears `call.ringing` only once APNs accepted it; a push still retrying after the
    /// callee answered elsewhere is no longer wanted.
    @Test func anIPhoneIsRungByOneVoIPPushAndTheCallerHearsRingingWhenAPNsAcceptsIt() throws {
        let h = try HubHarness()
        let alice = try h.aliceCallsBobsIPhone()
        let callID = try #require(h.output.take(alice).first { $0["type"] == "ok" }?["data"]?["call_id"]?.stringValue)
        let jobs = h.push.take()
        #expect(jobs.count == 1)
        let job = try #require(jobs.first)
        #expect(job.notification.type == .voip)
        #expect(job.notification.apnsTopic == "com.example.chat.voip")
        #expect(job.notification.expiration == (h.scheduler.wallMillis + 30_000) / 1000, "expires with the ring")
        #expect(job.deadline == h.scheduler.now + .seconds(30))
        #expect(job.stillWanted())
        h.scheduler.runPending()
        #expect(!h.output.types(alice).contains("call.ringing"), "not before APNs accepted the push")
        job.answered(PushResult(apnsID: "x", status: 200, failure: nil, attempts: 1, latency: .milliseconds(5)))
        let pushes = ["type": "voip", "reason": "Success"] as KeyValuePairs
        #expect(h.metrics.counter("switchboard_apns_pushes_total", pushes) == 0, "counted on the loop, not on the push's thread")
        h.scheduler.runPending()
        #expect(h.output.types(alice) == ["call.ringing"])
        #expect(h.metrics.counter("switchboard_apns_pushes_total", pushes) == 1)
        // bob answers from a connection: the push is no longer wanted (no retry rings again).
        let bob = h.connect("bob", device: "b-phone")
        h.send(bob, MessageType.callAnswer, ["call_id": .string(callID)])
        #expect(!job.stillWanted())
        h.store.flush()
        let trace = try h.store.trace(callID: callID).compactMap { $0["event"]?.stringValue }
        #expect(trace.contains("push_sent") && trace.contains("apns_accepted"))
    }

    /// An app without an APNs key sends nothing: its push counts as a configuration alarm, not
    /// as a push, once the result is back on the loop.
    @Test func aPushThatCouldNotGoOutForWantOfAKeyCountsOnlyAsAnAlarm() throws {
        let h = try HubHarness()
        _ = try h.aliceCallsBobsIPhone()
        let job = try #require(h.push.take().first)
        job.answered(PushResult(apnsID: "", status: 0, failure: .notConfigured, attempts: 0, latency: .zero))
        #expect(h.metrics.counter("switchboard_apns_config_alarms_total", ["reason": "NotConfigured"]) == 0)
        h.scheduler.runPending()
        #expect(h.metrics.counter("switchboard_apns_config_alarms_total", ["reason": "NotConfigured"]) == 1)
        #expect(h.metrics.counter("switchboard_apns_pushes_total", ["type": "voip", "reason": "NotConfigured"]) == 0)
    }

    /// A call read just after it ended reads as ended, its history too, even while the store is
    /// slow to write the end: the reads answer once the store has it, never from before it.
    @Test func aCallReadJustAfterItEndedReadsAsEndedEvenWhileTheStoreIsSlow() throws {
        let h = try HubHarness()
        let alice = h.connect("alice", device: "a-phone")
        let bob = h.connect("bob", device: "b-phone")
        h.send(alice, MessageType.callCreate, ["callees": ["bob"]])
        h.settle()
        let callID = try #require(h.output.take(alice).first { $0["type"] == "ok" }?["data"]?["call_id"]?.stringValue)
        h.send(bob, MessageType.callAnswer, ["call_id": .string(callID)])
        h.settle()
        // Another connection holds SQLite's write lock: the store's writes wait for it.
        let blocker = try SQLiteDatabase(path: h.store.path)
        try blocker.execute("BEGIN IMMEDIATE")
        h.send(bob, MessageType.callEnd, ["call_id": .string(callID)])
        var summary: Result<JSONValue, ErrorBody>?
        var history: Result<(entries: [JSONValue], more: Bool), any Error>?
        h.hub.callSummary(id: callID, identity: "alice", app: h.app, admin: false) { summary = $0 }
        h.hub.callHistory(app: h.app, identity: "alice", limit: 10, before: nil) { history = $0 }
        h.scheduler.runPending()
        #expect(summary == nil && history == nil, "no answer while the end waits to be written")
        try blocker.execute("COMMIT")
        h.settle()
        let call = try #require(try summary?.get())
        #expect(call["state"] == "ended")
        #expect(call["ended_by"] == "bob")
        let entries = try #require(try history?.get().entries)
        #expect(entries.map { $0["call_id"]?.stringValue } == [callID], "once, as ended")
        #expect(entries.first?["outcome"] == "completed")
    }

    /// On one node a call's events go out at once, but the `ok` of its creation, and of an
    /// answer, comes only once that state is stored: a client told of a call (or that its answer
    /// counted) finds it so in the history after a `kill -9`, never "no such call".
    @Test func aCallActionIsAcknowledgedOnceStoredWhileItsEventsGoOutAtOnce() throws {
        let h = try HubHarness()
        let alice = h.connect("alice", device: "a-phone")
        let bob = h.connect("bob", device: "b-phone")
        // Another connection holds SQLite's write lock: the store's writes wait for it.
        let blocker = try SQLiteDatabase(path: h.store.path)
        try blocker.execute("BEGIN IMMEDIATE")
        h.send(alice, MessageType.callCreate, ["callees": ["bob"]])
        h.store.waitForRequests()  // the setup's read (not the write, which waits for the lock)
        h.scheduler.runPending()
        let invite = try #require(h.output.take(bob).first { $0["type"] == "call.incoming" }, "bob rings before the call is written")
        let callID = try #require(invite["data"]?["call_id"]?.stringValue)
        #expect(!h.output.types(alice).contains("ok"), "no ok while the call waits to be written")
        try blocker.execute("COMMIT")
        h.store.flush()
        h.settle()
        #expect(h.output.take(alice).first { $0["type"] == "ok" }?["data"]?["call_id"]?.stringValue == callID)

        try blocker.execute("BEGIN IMMEDIATE")
        h.send(bob, MessageType.callAnswer, ["call_id": .string(callID)])
        h.scheduler.runPending()
        #expect(h.output.types(alice).contains("call.accepted"))
        #expect(!h.output.types(bob).contains("ok"), "no ok while the answer waits to be written")
        try blocker.execute("COMMIT")
        h.store.flush()
        h.settle()
        #expect(h.output.types(bob).contains("ok"))
        #expect(try h.store.callSummary(id: callID, appID: h.app.id)?.summary["state"] == "accepted")
    }

    /// An iPhone without CallKit rings by a visible alert, and at the ring timeout gets a
    /// missed-call alert (never a VoIP push, which would have to ring); a device without any
    /// push token gets neither.
    @Test func aPhoneWithoutCallKitRingsByAnAlertAndHearsItMissedTheCall() throws {
        let h = try HubHarness()
        let alertToken = String(repeating: "cd", count: 32)
        try h.store.register(Device(
            appID: h.app.id, userID: "bob", deviceID: "b-phone", platform: "ios", voipToken: String(repeating: "ab", count: 32),
            apnsToken: alertToken, environment: .production, bundleID: nil, callKitEnabled: false, appVersion: nil, updatedAt: 1))
        try h.store.register(Device(
            appID: h.app.id, userID: "bob", deviceID: "b-old", platform: "ios", voipToken: nil, apnsToken: nil,
            environment: .production, bundleID: nil, callKitEnabled: true, appVersion: nil, updatedAt: 1))
        let alice = h.connect("alice", device: "a-phone")
        h.send(alice, MessageType.callCreate, ["callees": ["bob"], "ring_timeout_seconds": 20])
        h.settle()
        #expect(h.output.take(alice).contains { $0["type"] == "ok" && $0["data"]?["state"] == "ringing" })
        let invites = h.push.take()
        #expect(invites.map(\.notification.type) == [.alert])
        #expect(invites.first?.notification.deviceToken == alertToken)
        #expect(invites.first?.notification.apnsTopic == "com.example.chat", "the app's bundle id")
        let invite = try JSONDecoder().decode(JSONValue.self, from: Data(invites.first?.notification.payload ?? []))
        #expect(invite["aps"]?["alert"]?["title"] == "Incoming call")
        h.scheduler.advance(by: .seconds(20))
        let notices = h.push.take()
        #expect(notices.map(\.notification.type) == [.alert])
        let notice = try JSONDecoder().decode(JSONValue.self, from: Data(notices.first?.notification.payload ?? []))
        #expect(notice["missed"] == true)
        #expect(notice["aps"]?["alert"]?["title"] == "Missed call")
    }

    /// Calls past `max_pending_call_setups` waiting for the store are refused with 503 without
    /// waiting for it; those admitted start once it answers, and the room they took is free
    /// again. The refusals are sent in their place among the replies (after the replies to the
    /// calls before them: replies keep the order of requests).
    // Covers: limit:max_pending_call_setups
    @Test func callsPastThePendingSetupLimitAreRefusedAtOnce() throws {
        let h = try HubHarness { $0.limits.maxPendingCallSetups = 3 }
        let alice = h.connect("alice", device: "a-phone")
        _ = h.connect("bob", device: "b-phone")
        _ = h.output.take(alice)
        for index in 1...5 { h.send(alice, MessageType.callCreate, ["callees": ["bob"], "busy_policy": "ring"], id: "c\(index)") }
        func replies() -> [JSONValue] { h.output.take(alice).filter { $0["type"] == "ok" || $0["type"] == "error" } }
        #expect(replies().isEmpty, "every reply waits behind c1's")
        h.settle()
        let answered = replies()
        #expect(answered.compactMap { $0["id"]?.stringValue } == ["c1", "c2", "c3", "c4", "c5"], "each once, in order")
        #expect(answered.prefix(3).allSatisfy { $0["type"] == "ok" })
        #expect(answered.suffix(2).allSatisfy { $0["error"]?["code"] == "unavailable" })
        h.send(alice, MessageType.callCreate, ["callees": ["bob"], "busy_policy": "ring"], id: "c6")
        h.settle()
        #expect(h.output.take(alice).contains { $0["type"] == "ok" && $0["id"] == "c6" }, "room again once the store answered")
    }
}

@Suite struct ContinuationTests {
    /// What a node taking a call over reads: the continuation written at each transition brings
    /// the call back as it stood at that transition, with what it was started with.
    @Test func aContinuationWrittenAtEachTransitionBringsTheCallBackAsItStands() throws {
        let start = ContinuousClock.now
        let phone = Device(
            appID: "app1", userID: "bob", deviceID: "bob-phone", platform: "ios", voipToken: String(repeating: "ab", count: 32),
            apnsToken: nil, environment: .sandbox, bundleID: "com.example.chat", callKitEnabled: true, appVersion: "2.1",
            updatedAt: 1_700_000_000_000, ringtone: "bell.caf")
        let state = CallState(
            id: "call1", appID: "app1", caller: "alice", callerDevice: "alice-laptop", callees: ["bob"], connected: ["bob"],
            phones: ["bob": [.init(id: "bob-phone", voip: true, alert: false)]], now: start, nowMillis: 1_700_000_000_000,
            ringTimeout: .seconds(45))
        let browser = Device(
            appID: "app1", userID: "bob", deviceID: "bob-web", platform: "web", voipToken: nil, apnsToken: nil, environment: .production,
            bundleID: nil, callKitEnabled: false, appVersion: nil, updatedAt: 1_700_000_000_001)
        let request = CallCreateRequest(
            callees: ["bob"], video: true, callerName: "Alice", handle: "alice@example.com", media: .external(["url": "sip:x", "port": 5060]),
            metadata: ["topic": "release", "n": .double(2.5)], ringTimeoutSeconds: 30, busyPolicy: .ring, idempotencyKey: "k1")
        let call = ActiveCall(
            state: state, request: request, media: .room("room-call1"), callerName: "Alice", handle: "alice@example.com",
            topic: "com.example.chat", allowedTopics: ["com.example.chat", "com.example.chat.beta"], devices: ["bob": [phone, browser]])

        func continued() throws -> ActiveCall {
            // Written without an encoder: what Foundation's encoder would write.
            let written = try JSONDecoder().decode(JSONValue.self, from: Data(call.continuation.utf8))
            let encoded = try JSONDecoder().decode(
                JSONValue.self,
                from: JSONEncoder().encode(
                    ActiveCall.Continuation(
                        state: call.state.snapshot, request: call.request, media: call.media, callerName: call.callerName,
                        handle: call.handle, topic: call.topic, allowedTopics: call.allowedTopics.sorted(), devices: call.devices)))
            #expect(written == encoded)
            return try #require(ActiveCall(continuing: call.continuation, now: start, nowMillis: 1_700_000_001_000))
        }
        _ = call.state.start(nowMillis: 1_700_000_000_000)
        let ringing = try continued()
        #expect(ringing.state.snapshot == call.state.snapshot)
        #expect(ringing.state.isRinging)
        #expect(ringing.request == call.request && ringing.media == call.media && ringing.devices == call.devices)
        #expect(ringing.callerName == "Alice" && ringing.handle == "alice@example.com" && ringing.topic == "com.example.chat")
        #expect(ringing.allowedTopics == call.allowedTopics)

        // The next transition's continuation has the state of then, not the one first written.
        _ = try call.state.answer(by: "bob", device: "bob-phone", nowMillis: 1_700_000_002_000)
        let answered = try continued()
        #expect(answered.state.snapshot == call.state.snapshot)
        #expect(!answered.state.isRinging && answered.state.answeredOn["bob"] == "bob-phone")
        #expect(answered.devices == call.devices && answered.request == call.request)
    }
}
