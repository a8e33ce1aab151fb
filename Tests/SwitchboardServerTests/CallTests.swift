import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// The real server with the APNs sandbox behind it, and users with several devices.
final class CallFixture: Sendable {
    let sandbox: APNsSandbox
    let server: TestServer
    let directory: String

    /// `certificate`: the app authenticates to APNs with a client certificate instead of a key.
    init(
        certificate: Bool = false, engine: StoreEngine = .sqlite, _ configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in }
    ) throws {
        directory = try makeTemporaryDirectory()
        let key = try ECPrivateKey.generate()
        var sandboxConfiguration = APNsSandbox.Configuration()
        sandboxConfiguration.port = 0
        sandboxConfiguration.adminPort = 0
        sandboxConfiguration.directory = directory
        sandboxConfiguration.keys = ["KEY1234567": try ECPublicKey(pem: key.publicKeyPEM)]
        let certificatePEM = try key.selfSignedCertificate(commonName: "VoIP Services: com.example.chat", days: 30)
        if certificate {
            try certificatePEM.write(toFile: directory + "/client-ca.pem", atomically: true, encoding: .utf8)
            sandboxConfiguration.clientCAPath = directory + "/client-ca.pem"
        }
        let sandbox = try APNsSandbox(configuration: sandboxConfiguration, logger: Logger(minimumLevel: .error))
        self.sandbox = sandbox
        server = try TestServer(engine: engine) {
            $0.apnsURL = sandbox.url
            $0.apnsCAFile = sandbox.certificatePath
            configure(&$0)
        }
        let settings: AppPushSettings =
            certificate ? .certificate(pem: certificatePEM + key.pem, password: nil) : .key(pem: key.pem, keyID: "KEY1234567", teamID: "TEAM123456")
        try server.server.store.setPushSettings(settings, appID: server.app.id)
    }

    func stop() {
        server.stop()
        sandbox.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A token with the call grant, and the handle the app's backend signs into it.
    func token(_ identity: String) -> String {
        server.token(identity, grants: Grants(room: "*", roomJoin: true, call: true), handle: identity + "@example.com")
    }

    /// Registers an iPhone (VoIP and regular tokens) for `identity`.
    @discardableResult
    func registerPhone(
        _ identity: String, device: String, seed: Int, callKit: Bool = true, ringtone: String? = nil
    ) async throws -> (voip: String, apns: String) {
        let voip = String(format: "%064x", seed)
        let apns = String(format: "%064x", seed + 1_000_000)
        let body = DeviceRegistration(
            platform: "ios", voipToken: voip, apnsToken: apns, environment: "sandbox", bundleID: server.app.bundleID,
            callKitEnabled: callKit, appVersion: "1.0", ringtone: ringtone)
        let response = try await HTTPClient.request(
            "PUT", server.baseURL + "/v1/devices/\(device)", headers: [("Authorization", "Bearer " + token(identity))],
            body: Array(try JSONEncoder().encode(body)))
        #expect(response.status == 200, "\(response.text)")
        return (voip, apns)
    }

    /// A connection for `identity` as `device`.
    func connect(_ identity: String, device: String) async throws -> TestClient {
        let client = try await TestClient.connect(server.webSocketURL + "?access_token=\(token(identity))&device_id=\(device)")
        #expect(try await client.nextEnvelope().type == MessageType.sessionWelcome)
        return client
    }

    func call(_ from: TestClient, to callees: [String], timeout: Int? = nil) async throws -> String {
        let reply = try await from.request(
            MessageType.callCreate, id: "create", encoding: CallCreateRequest(callees: callees, video: true, ringTimeoutSeconds: timeout))
        #expect(reply.type == MessageType.ok, "\(String(describing: reply.error))")
        return try #require(reply.data?["call_id"]?.stringValue)
    }

    func act(_ client: TestClient, _ type: String, _ callID: String) async throws -> Envelope {
        try await client.request(type, id: .string(type), encoding: CallActionRequest(callID: callID))
    }

    /// Pushes the sandbox accepted, by type, for a call.
    func pushes(type: String, callID: String? = nil, token: String? = nil) -> [APNsSandbox.Record] {
        sandbox.records.filter { record in
            record.status == 200 && record.pushType == type && (token == nil || record.token == token)
                && (callID == nil || record.payload?["call_id"]?.stringValue == callID)
        }
    }

    /// Waits until every call's VoIP push has an outcome in its trace, then returns the
    /// outcome entries (`apns_accepted` / `apns_refused`) by callee.
    func voipOutcomes(_ calls: [String: String], as caller: String) async throws -> [String: [JSONValue]] {
        @Sendable func outcomes(_ callID: String) async throws -> [JSONValue] {
            let trace = try await get("/v1/calls/\(callID)/trace", as: caller)
            guard case .array(let entries)? = trace["trace"] else { throw Timeout(what: "a trace") }
            return entries.filter { $0["channel"] == "voip_push" && ($0["event"] == "apns_accepted" || $0["event"] == "apns_refused") }
        }
        return try await within(.seconds(20), "an outcome for every push") {
            while true {
                var found: [String: [JSONValue]] = [:]
                for (callee, callID) in calls {
                    let entries = try await outcomes(callID)
                    if !entries.isEmpty { found[callee] = entries }
                }
                if found.count == calls.count { return found }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// A barrier for "no push was sent": a call from `caller` to a phone of its own, sent after
    /// everything before it, whose VoIP push has arrived (then cancelled). APNs pushes go out
    /// in order on the server's connections, so any push that was coming has come by then.
    func pushBarrier(from caller: TestClient) async throws {
        let seed = Int.random(in: 900_000..<999_999)
        try await registerPhone("barrier-\(seed)", device: "phone", seed: seed)
        let callID = try await call(caller, to: ["barrier-\(seed)"])
        try await waitForPushes(1, type: "voip", callID: callID)
        _ = try await act(caller, MessageType.callCancel, callID)
    }

    func waitForPushes(_ count: Int, type: String, callID: String) async throws {
        try await within(.seconds(5), "\(count) \(type) pushes") { [self] in
            while pushes(type: type, callID: callID).count < count { try await Task.sleep(for: .milliseconds(20)) }
        }
    }

    func get(_ path: String, as identity: String) async throws -> JSONValue {
        let response = try await HTTPClient.request("GET", server.baseURL + path, headers: [("Authorization", "Bearer " + token(identity))])
        return try JSONDecoder().decode(JSONValue.self, from: Data(response.body))
    }
}

/// Skips events until one of `type` arrives (other events may interleave).
func event(_ client: TestClient, _ type: String, timeout: Duration = .seconds(15)) async throws -> Envelope {
    let deadline = ContinuousClock.now + timeout * testSlowdown
    while ContinuousClock.now < deadline {
        let envelope = try await client.nextEnvelope(timeout: deadline - .now)
        if envelope.type == type { return envelope }
    }
    throw Timeout(what: type)
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct CallTests {
    @Test(arguments: StoreEngine.available)
    func aOneToOneCallRingsEveryDeviceAndTheFirstAnswerWins(engine: StoreEngine) async throws {
        let fixture = try CallFixture(engine: engine)
        defer { fixture.stop() }
        let phone = try await fixture.registerPhone("bob", device: "b-phone", seed: 1)
        let tablet = try await fixture.registerPhone("bob", device: "b-ipad", seed: 2)
        let alice = try await fixture.connect("alice", device: "a-web")
        let bobPhone = try await fixture.connect("bob", device: "b-phone")
        let bobWeb = try await fixture.connect("bob", device: "b-web")

        let callID = try await fixture.call(alice, to: ["bob"])
        let incoming = try await event(bobWeb, "call.incoming")
        #expect(incoming.data?["call_id"]?.stringValue == callID)
        #expect(incoming.data?["caller"]?["identity"] == "alice")
        #expect(incoming.data?["media"]?["type"] == "room")
        _ = try await event(bobPhone, "call.incoming")
        let ringing = try await event(alice, "call.ringing")
        #expect(ringing.data?["callee"] == "bob")

        // One VoIP push per iOS device, to the .voip topic, expiring with the ring.
        try await fixture.waitForPushes(2, type: "voip", callID: callID)
        let voip = fixture.pushes(type: "voip", callID: callID)
        #expect(Set(voip.map(\.token)) == [phone.voip, tablet.voip])
        let first = try #require(voip.first)
        #expect(first.topic == fixture.server.app.bundleID + ".voip")
        #expect(first.priority == 10)
        let payload = try #require(first.payload)
        #expect(payload["UUID"]?.stringValue == callID.uppercased())
        #expect(payload["hasVideo"] == true)
        #expect(payload["handle"] == "alice@example.com")
        let expires = try #require(payload["ring_expires_at"])
        guard case .int(let ringEnd) = expires, let expiration = first.expiration else { throw Timeout(what: "expiry fields") }
        #expect(expiration <= ringEnd / 1000, "apns-expiration is never later than the ring's end")

        // The phone answers; the other devices stop; a racing answer is refused.
        let answered = try await fixture.act(bobPhone, MessageType.callAnswer, callID)
        #expect(answered.type == MessageType.ok)
        #expect(answered.data?["state"] == "accepted")
        #expect(try await event(alice, "call.accepted").data?["by"] == "bob")
        let elsewhere = try await event(bobWeb, "call.answered_elsewhere")
        #expect(elsewhere.data?["device"] == "b-phone")
        let race = try await fixture.act(bobWeb, MessageType.callAnswer, callID)
        #expect(race.error?.code == .conflict)

        // Alice hangs up; both hear who and why.
        #expect(try await fixture.act(alice, MessageType.callEnd, callID).data?["outcome"] == "completed")
        let ended = try await event(bobPhone, "call.ended")
        #expect(ended.data?["by"] == "alice")
        #expect(ended.data?["outcome"] == "completed")

        // No further VoIP push for anything but the invite.
        try await fixture.pushBarrier(from: alice)
        #expect(fixture.pushes(type: "voip", callID: callID).count == 2)
        #expect(fixture.pushes(type: "voip").filter { [phone.voip, tablet.voip].contains($0.token) }.count == 2)

        fixture.server.server.store.flush()
        let aliceHistory = try await fixture.get("/v1/calls", as: "alice")
        let aliceEntry = try #require(
            aliceHistory["calls"].flatMap { if case .array(let list) = $0 { list.first { $0["call_id"]?.stringValue == callID } } else { nil } })
        #expect(aliceEntry["direction"] == "outgoing")
        #expect(aliceEntry["outcome"] == "completed")
        #expect(aliceEntry["peers"] == ["bob"])
        let bobHistory = try await fixture.get("/v1/calls", as: "bob")
        guard case .array(let bobCalls)? = bobHistory["calls"] else { throw Timeout(what: "bob's history: \(bobHistory)") }
        #expect(bobCalls.count == 1)
        #expect(bobCalls.first?["outcome"] == "completed")
        #expect(bobCalls.first?["ended_by"] == "alice")

        // The trace tells how each device was reached.
        let trace = try await fixture.get("/v1/calls/\(callID)/trace", as: "alice")
        guard case .array(let entries)? = trace["trace"] else { throw Timeout(what: "a trace") }
        let accepted = entries.filter { $0["event"] == "apns_accepted" && $0["channel"] == "voip_push" }
        #expect(Set(accepted.compactMap { $0["device"]?.stringValue }) == ["b-phone", "b-ipad"])
        #expect(accepted.allSatisfy { $0["apns_status"] == 200 && $0["apns_id"]?.stringValue?.count == 36 })
        #expect(entries.contains { $0["device"] == "b-web" && $0["channel"] == "websocket" && $0["event"] == "delivered" })
        #expect(entries.contains { $0["device"] == "b-phone" && $0["event"] == "answered" })
        let stranger = try await HTTPClient.request(
            "GET", fixture.server.baseURL + "/v1/calls/\(callID)/trace", headers: [("Authorization", "Bearer " + fixture.token("mallory"))])
        #expect(stranger.status == 403)
    }

    @Test func aDeclineOnOneDeviceEndsTheCallForAll() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let alice = try await fixture.connect("alice", device: "a-web")
        let bobPhone = try await fixture.connect("bob", device: "b-phone")
        let bobWeb = try await fixture.connect("bob", device: "b-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        _ = try await event(bobWeb, "call.incoming")
        #expect(try await fixture.act(bobWeb, MessageType.callDecline, callID).type == MessageType.ok)
        #expect(try await event(alice, "call.declined").data?["by"] == "bob")
        #expect(try await event(alice, "call.ended").data?["outcome"] == "declined")
        #expect(try await event(bobPhone, "call.declined_elsewhere").data?["device"] == "b-web")
    }

    @Test func inAGroupOneCalleeDeclinesAndAnotherAnswers() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let alice = try await fixture.connect("alice", device: "a")
        let bob = try await fixture.connect("bob", device: "b")
        let carol = try await fixture.connect("carol", device: "c")
        let callID = try await fixture.call(alice, to: ["bob", "carol"])
        _ = try await event(bob, "call.incoming")
        _ = try await event(carol, "call.incoming")
        _ = try await fixture.act(bob, MessageType.callDecline, callID)
        #expect(try await event(alice, "call.declined").data?["by"] == "bob")
        try await carol.expectSilence(for: .milliseconds(200))
        let answer = try await fixture.act(carol, MessageType.callAnswer, callID)
        #expect(answer.data?["state"] == "accepted")
        #expect(try await event(alice, "call.accepted").data?["by"] == "carol")
        _ = try await fixture.act(carol, MessageType.callEnd, callID)
        fixture.server.server.store.flush()
        let history = try await fixture.get("/v1/calls", as: "bob")
        guard case .array(let calls)? = history["calls"] else { throw Timeout(what: "history") }
        #expect(calls.first?["outcome"] == "declined")
    }

    @Test(arguments: StoreEngine.available)
    func aCancelledCallRingsNoMoreAndLeavesAMissedCallAlert(engine: StoreEngine) async throws {
        let fixture = try CallFixture(engine: engine)
        defer { fixture.stop() }
        let phone = try await fixture.registerPhone("bob", device: "b-phone", seed: 11)
        let alice = try await fixture.connect("alice", device: "a")
        let bobWeb = try await fixture.connect("bob", device: "b-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        try await fixture.waitForPushes(1, type: "voip", callID: callID)
        _ = try await fixture.act(alice, MessageType.callCancel, callID)
        #expect(try await event(bobWeb, "call.cancelled").data?["call_id"]?.stringValue == callID)
        #expect(try await event(alice, "call.ended").data?["outcome"] == "cancelled")
        try await fixture.waitForPushes(1, type: "alert", callID: callID)
        let alert = try #require(fixture.pushes(type: "alert", callID: callID).first)
        #expect(alert.token == phone.apns, "missed-call notice to the regular token")
        #expect(alert.payload?["aps"]?["alert"]?["title"] == "Missed call")
        #expect(fixture.pushes(type: "voip").count == 1, "no VoIP push for the cancel")
        let summary = try await fixture.get("/v1/calls/\(callID)", as: "bob")
        #expect(summary["state"] == "ended")
        #expect(summary["outcome"] == "cancelled")
        try await within(.seconds(5), "the trace to show both pushes") {
            while true {
                let trace = try await fixture.get("/v1/calls/\(callID)/trace", as: "alice")
                guard case .array(let entries)? = trace["trace"] else { continue }
                let channels = Set(entries.filter { $0["event"] == "apns_accepted" }.compactMap { $0["channel"]?.stringValue })
                if channels == ["voip_push", "alert_push"] { return }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        fixture.server.server.store.flush()
        let history = try await fixture.get("/v1/calls", as: "bob")
        guard case .array(let calls)? = history["calls"] else { throw Timeout(what: "history") }
        #expect(calls.first?["outcome"] == "missed")
        #expect(calls.first?["end_reason"] == "cancelled")
    }

    /// `call.create` is answered once the store has the call; a ping sent right behind it is
    /// answered at once, but its reply waits: replies come in the order requests arrived.
    @Test(arguments: StoreEngine.available)
    func repliesComeInTheOrderTheRequestsArrived(engine: StoreEngine) async throws {
        let fixture = try CallFixture(engine: engine)
        defer { fixture.stop() }
        let alice = try await fixture.connect("alice", device: "a")
        _ = try await fixture.connect("bob", device: "b")
        alice.sendRaw(#"{"type":"call.create","id":"create","data":{"callees":["bob"]}}"#)
        alice.sendRaw(#"{"type":"ping","id":"p1"}"#)
        alice.sendRaw(#"{"type":"nonsense","id":"p2"}"#)
        alice.sendRaw(#"{"type":"call.create","id":"again","data":{"callees":["bob"]}}"#)
        alice.sendRaw(#"{"type":"ping","id":"p3"}"#)
        var replies: [String] = []
        while replies.count < 5 {
            let next = try await alice.nextEnvelope()
            if next.type == MessageType.ok || next.type == MessageType.error { replies.append(next.id?.stringValue ?? "?") }
        }
        #expect(replies == ["create", "p1", "p2", "again", "p3"])
    }

    /// Covers: limit:ring_timeout_seconds
    @Test func nobodyAnswersBeforeTheRingTimeout() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let alice = try await fixture.connect("alice", device: "a")
        let bob = try await fixture.connect("bob", device: "b")
        let callID = try await fixture.call(alice, to: ["bob"], timeout: 5)
        _ = try await event(bob, "call.incoming")
        #expect(try await event(bob, "call.missed", timeout: .seconds(8)).data?["call_id"]?.stringValue == callID)
        #expect(try await event(alice, "call.ended").data?["outcome"] == "missed")
        fixture.server.server.store.flush()
        let history = try await fixture.get("/v1/calls", as: "alice")
        guard case .array(let calls)? = history["calls"] else { throw Timeout(what: "history") }
        #expect(calls.first?["outcome"] == "no_answer")
    }

    @Test func aCalleeInAnotherCallIsBusyAndNotRung() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 21)
        let alice = try await fixture.connect("alice", device: "a")
        let bob = try await fixture.connect("bob", device: "b")
        let carol = try await fixture.connect("carol", device: "c")
        let first = try await fixture.call(carol, to: ["bob"])
        _ = try await fixture.act(bob, MessageType.callAnswer, first)
        try await fixture.waitForPushes(1, type: "voip", callID: first)
        let second = try await fixture.call(alice, to: ["bob"])
        #expect(try await event(alice, "call.busy").data?["callee"] == "bob")
        #expect(try await event(alice, "call.ended").data?["outcome"] == "busy")
        try await fixture.pushBarrier(from: alice)
        #expect(fixture.pushes(type: "voip", callID: second).isEmpty)
    }

    // Covers: limit:alert_ring_repeat_seconds
    @Test func aDeviceWithoutCallKitGetsAnAlertPushNeverVoIP() async throws {
        let fixture = try CallFixture { $0.limits.alertRingRepeatSeconds = 1 }
        defer { fixture.stop() }
        let phone = try await fixture.registerPhone("bob", device: "b-china", seed: 31, callKit: false, ringtone: "ring.caf")
        let alice = try await fixture.connect("alice", device: "a")
        let callID = try await fixture.call(alice, to: ["bob"])
        try await fixture.waitForPushes(1, type: "alert", callID: callID)
        let alert = try #require(fixture.pushes(type: "alert", callID: callID).first)
        #expect(alert.token == phone.apns)
        #expect(alert.payload?["aps"]?["alert"]?["title"] == "Incoming call")
        #expect(alert.payload?["aps"]?["interruption-level"] == "time-sensitive", "heard through a Focus that allows the app")
        #expect(alert.payload?["aps"]?["sound"] == "ring.caf", "the app's ringtone, as the device registered it")
        let devices = try await fixture.get("/v1/devices", as: "bob")
        guard case .array(let listed)? = devices["devices"] else { throw Timeout(what: "bob's devices") }
        #expect(listed.first { $0["device_id"] == "b-china" }?["ringtone"] == "ring.caf")
        // A ringtone is a file name of the app, never a path.
        let bad = try await HTTPClient.request(
            "PUT", fixture.server.baseURL + "/v1/devices/b-other", headers: [("Authorization", "Bearer " + fixture.token("bob"))],
            body: Array(#"{"platform":"ios","callkit_enabled":false,"ringtone":"../../etc/passwd"}"#.utf8))
        #expect(bad.status == 400, "\(bad.text)")
        #expect(fixture.pushes(type: "voip").isEmpty)
        _ = try await event(alice, "call.ringing")
        // Rung again while it rings (one collapse id: one alert on the lock screen), and no more
        // once the call is over.
        try await fixture.waitForPushes(3, type: "alert", callID: callID)
        #expect(Set(fixture.pushes(type: "alert", callID: callID).compactMap(\.collapseID)) == [callID])
        _ = try await fixture.act(alice, MessageType.callCancel, callID)
        let sent = fixture.pushes(type: "alert", callID: callID).filter { $0.payload?["missed"] == nil }.count
        try await Task.sleep(for: .seconds(2))
        #expect(fixture.pushes(type: "alert", callID: callID).filter { $0.payload?["missed"] == nil }.count == sent, "no ring after the call ended")
        let trace = try await fixture.get("/v1/calls/\(callID)/trace", as: "alice")
        guard case .array(let entries)? = trace["trace"] else { throw Timeout(what: "a trace") }
        #expect(entries.contains { $0["device"] == "b-china" && $0["channel"] == "alert_push" && $0["event"] == "apns_accepted" })
        #expect(!entries.contains { $0["channel"] == "voip_push" })
    }

    /// Covers: limit:invites_per_pair_per_minute
    @Test(arguments: StoreEngine.available)
    func blockedAndRateLimitedCallersRingNobody(engine: StoreEngine) async throws {
        let fixture = try CallFixture(engine: engine) { $0.limits.invitesPerPairPerMinute = 2 }
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 41)
        let block = try await HTTPClient.request(
            "PUT", fixture.server.baseURL + "/v1/users/me/blocked", headers: [("Authorization", "Bearer " + fixture.token("bob"))],
            body: Array(#"{"identities":["mallory"]}"#.utf8))
        #expect(block.status == 204)
        let mallory = try await fixture.connect("mallory", device: "m")
        let refused = try await mallory.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        #expect(refused.error?.code == .forbidden)

        let alice = try await fixture.connect("alice", device: "a")
        for _ in 0..<2 {
            let id = try await fixture.call(alice, to: ["bob"])
            _ = try await fixture.act(alice, MessageType.callCancel, id)
        }
        let limited = try await HTTPClient.request(
            "POST", fixture.server.baseURL + "/v1/calls", headers: [("Authorization", "Bearer " + fixture.token("alice"))],
            body: Array(#"{"callees":["bob"]}"#.utf8))
        #expect(limited.status == 429)
        let carol = try await fixture.connect("carol", device: "c")
        try await fixture.pushBarrier(from: carol)
        #expect(fixture.pushes(type: "voip").filter { $0.payload?["caller"]?["identity"] != "carol" }.count == 2, "only the two allowed calls pushed")
        #expect(!fixture.sandbox.records.contains { $0.payload?["caller"]?["identity"] == "mallory" })
        let noGrant = try await TestClient.connect(fixture.server.webSocketURL + "?access_token=" + fixture.server.token("dave", grants: Grants()))
        _ = try await noGrant.nextEnvelope()
        #expect(try await noGrant.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"])).error?.code == .forbidden)
    }

    @Test(arguments: StoreEngine.available)
    func aLateDeviceLearnsTheCallEndedAndARetriedCreateMakesOneCall(engine: StoreEngine) async throws {
        let fixture = try CallFixture(engine: engine)
        defer { fixture.stop() }
        try await fixture.registerPhone("bob", device: "b-phone", seed: 61)
        let alice = try await fixture.connect("alice", device: "a")
        let request = CallCreateRequest(callees: ["bob"], idempotencyKey: "tap-42")
        let first = try await alice.request(MessageType.callCreate, id: "1", encoding: request)
        let again = try await alice.request(MessageType.callCreate, id: "2", encoding: request)
        let callID = try #require(first.data?["call_id"]?.stringValue)
        #expect(again.data?["call_id"]?.stringValue == callID)
        _ = try await fixture.act(alice, MessageType.callCancel, callID)

        // Bob's phone wakes from a late push and asks.
        let state = try await fixture.get("/v1/calls/\(callID)", as: "bob")
        #expect(state["state"] == "ended")
        #expect(state["outcome"] == "cancelled")
        let late = try await HTTPClient.request(
            "POST", fixture.server.baseURL + "/v1/calls/\(callID)/answer", headers: [("Authorization", "Bearer " + fixture.token("bob"))])
        #expect(late.status == 409)
    }

    /// `switchboard serve` killed with SIGKILL (no shutdown code runs) with one call ringing and
    /// one answered: started again on its data directory, it ends both as failed /
    /// server_restart, in the call state and in every participant's history.
    @Test(arguments: StoreEngine.available)
    func aRestartEndsCallsInFlightAsFailedAndLosesNoHistory(engine: StoreEngine) async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var arguments = ["serve", "--port", "0", "--data-dir", directory, "--web-root", repositoryRoot + "/web"]
        var dropDatabase: @Sendable () -> Void = {}
        defer { dropDatabase() }
        if engine == .postgres {
            let database = try TestPostgres.database()
            dropDatabase = database.drop
            arguments += ["--store-url", database.url]
        }
        let first = try ToolProcess(arguments)
        defer { first.stopNow() }
        let port = try await first.waitForPort()
        let apiKey = try await first.waitFor(/API key\s+(sbk_\w+)/, inOutput: true, what: "the development app's key")
        let secret = try await first.waitFor(/API secret\s+(\w+)/, inOutput: true, what: "the development app's secret")
        func token(_ identity: String) -> String {
            AccessTokenVerifier.sign(
                AccessTokenIssuer.claims(apiKey: apiKey, identity: identity, name: nil, grants: Grants(call: true), ttlSeconds: 600), secret: secret)
        }
        func connect(_ identity: String, to port: Int) async throws -> TestClient {
            let client = try await TestClient.connect("ws://127.0.0.1:\(port)/v1/ws?access_token=\(token(identity))&device_id=\(identity)-web")
            #expect(try await client.nextEnvelope().type == MessageType.sessionWelcome)
            return client
        }
        let alice = try await connect("alice", to: port)
        let bob = try await connect("bob", to: port)
        let carol = try await connect("carol", to: port)
        let dave = try await connect("dave", to: port)
        let ringing = try #require(try await alice.request(MessageType.callCreate, id: "r", encoding: CallCreateRequest(callees: ["bob"])).data?["call_id"]?.stringValue)
        _ = try await event(bob, "call.incoming")
        let answered = try #require(try await carol.request(MessageType.callCreate, id: "a", encoding: CallCreateRequest(callees: ["dave"])).data?["call_id"]?.stringValue)
        _ = try await event(dave, "call.incoming")
        #expect(try await dave.request(MessageType.callAnswer, id: "ok", encoding: CallActionRequest(callID: answered)).type == MessageType.ok)
        _ = try await event(carol, "call.accepted")
        // No wait for the store: an `ok` comes once what it acknowledges is stored.
        first.kill9()
        #expect(first.endedBySignal)
        let second = try ToolProcess(arguments)
        defer { second.stopNow() }
        let restarted = try await second.waitForPort()
        for (callID, participants) in [(ringing, ["alice", "bob"]), (answered, ["carol", "dave"])] {
            for identity in participants {
                let headers = [("Authorization", "Bearer " + token(identity))]
                let state = try JSONDecoder().decode(
                    JSONValue.self, from: Data(try await HTTPClient.request("GET", "http://127.0.0.1:\(restarted)/v1/calls/\(callID)", headers: headers).body))
                #expect(state["state"] == "ended", "\(identity): \(state)")
                #expect(state["outcome"] == "failed")
                #expect(state["end_reason"] == "server_restart")
                let history = try JSONDecoder().decode(
                    JSONValue.self, from: Data(try await HTTPClient.request("GET", "http://127.0.0.1:\(restarted)/v1/calls", headers: headers).body))
                guard case .array(let entries)? = history["calls"] else { throw Timeout(what: "\(identity)'s history: \(history)") }
                #expect(entries.count == 1, "\(identity): \(entries)")
                #expect(entries.first?["call_id"]?.stringValue == callID)
                #expect(entries.first?["outcome"] == "failed")
                #expect(entries.first?["end_reason"] == "server_restart")
            }
        }
        #expect(try await second.stop() == 0)
        if engine == .postgres, let url = arguments.last {
            // The child processes wrote their calls here, not to an SQLite file in --data-dir.
            #expect(try PostgresConnection(url: url).query("SELECT count(*) FROM calls") == [[.integer(2)]])
        }
    }

    @Test func anAppWithACertificateInsteadOfAKeyRingsToo() async throws {
        let fixture = try CallFixture(certificate: true)
        defer { fixture.stop() }
        let phone = try await fixture.registerPhone("bob", device: "b-phone", seed: 71)
        let alice = try await fixture.connect("alice", device: "a")
        let callID = try await fixture.call(alice, to: ["bob"])
        try await fixture.waitForPushes(1, type: "voip", callID: callID)
        #expect(fixture.pushes(type: "voip", callID: callID).first?.token == phone.voip)
        #expect(try await event(alice, "call.ringing").data?["callee"] == "bob")
    }

    /// A ring storm while APNs misbehaves: bursts of 429 and 503, GOAWAY every few streams and
    /// slow answers. Every push ends in a recorded outcome, and no phone rings twice.
    @Test func aRingStormThroughAPNsFaultsRecordsEveryOutcomeAndRingsNoPhoneTwice() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let callees = (0..<24).map { "callee\($0)" }
        var tokens: [String: String] = [:]
        for (index, callee) in callees.enumerated() {
            tokens[callee] = try await fixture.registerPhone(callee, device: "phone", seed: 7000 + index).voip
        }
        fixture.sandbox.inject(.status(429, count: 6))
        fixture.sandbox.inject(.goAway(afterStreams: 5))
        fixture.sandbox.inject(.latency(.milliseconds(30)))
        let caller = try await fixture.connect("alice", device: "alice-phone")
        var calls: [String: String] = [:]
        for (index, callee) in callees.enumerated() {
            if index == 12 { fixture.sandbox.inject(.status(503, count: 6)) }
            calls[callee] = try await fixture.call(caller, to: [callee], timeout: 60)
        }
        // Every push has an outcome in its call's trace: accepted here, after the retries.
        let outcomesByCallee = try await fixture.voipOutcomes(calls, as: "alice")
        for (callee, callID) in calls {
            let outcomes = outcomesByCallee[callee] ?? []
            #expect(outcomes.count == 1, "\(callee): one outcome per push, got \(outcomes.count)")
            #expect(outcomes.first?["event"] == "apns_accepted", "\(callee): \(String(describing: outcomes.first))")
            // The phone rang once: one accepted VoIP push for this call, to this token.
            #expect(fixture.pushes(type: "voip", callID: callID, token: tokens[callee]).count == 1, "\(callee) rang more than once")
        }
        // The faults happened (the 503 burst replaces whatever is left of the 429 one).
        #expect(fixture.sandbox.records.filter { $0.status == 503 }.count == 6)
        #expect(fixture.sandbox.records.contains { $0.status == 429 })
        #expect(Set(fixture.sandbox.records.map(\.connection)).count > 2, "GOAWAY moved the pushes to new connections")
        #expect(fixture.server.server.metrics.counter("switchboard_apns_pushes_total", ["type": "voip", "reason": "Success"]) == Double(callees.count))
    }

    /// Covers: limit:apns_request_timeout_seconds
    @Test func aRingStormThroughStallsAndConnectionResetsEndsEveryPushAndNeverSendsOneTwice() async throws {
        let fixture = try CallFixture { $0.limits.apnsRequestTimeoutSeconds = 1 }
        defer { fixture.stop() }
        let callees = (0..<20).map { "callee\($0)" }
        var tokens: [String: String] = [:]
        for (index, callee) in callees.enumerated() {
            tokens[callee] = try await fixture.registerPhone(callee, device: "phone", seed: 8000 + index).voip
        }
        let caller = try await fixture.connect("alice", device: "alice-phone")
        var calls: [String: String] = [:]
        // Stalls: two pushes are taken and never answered; they time out, the rest flow on.
        fixture.sandbox.inject(.stall(count: 2))
        for callee in callees.prefix(6) {
            calls[callee] = try await fixture.call(caller, to: [callee], timeout: 60)
        }
        let stalled = try await fixture.voipOutcomes(calls, as: "alice").values.filter { $0.first?["event"] == "apns_refused" }
        #expect(stalled.count == 2, "\(stalled)")
        // Resets: every fifth request's connection dies. Answers come late, so other streams
        // are still waiting on it when it does.
        fixture.sandbox.inject(.latency(.milliseconds(40)))
        fixture.sandbox.inject(.reset(every: 5))
        for callee in callees.dropFirst(6) {
            calls[callee] = try await fixture.call(caller, to: [callee], timeout: 60)
        }
        let outcomes = try await fixture.voipOutcomes(calls, as: "alice")
        var accepted = 0
        for (callee, callID) in calls {
            let entries = outcomes[callee] ?? []
            #expect(entries.count == 1, "\(callee): one outcome per push, got \(entries)")
            // No push is sent twice: whatever APNs got, it got once, answered or not. One still
            // queued in the client when its connection was reset never reached APNs at all.
            let received = fixture.sandbox.records.filter { $0.payload?["call_id"]?.stringValue == callID && $0.token == tokens[callee] }
            #expect(received.count <= 1, "\(callee): APNs got the push \(received.count) times")
            if entries.first?["event"] == "apns_accepted" {
                #expect(received.count == 1, "\(callee): accepted, so APNs got it")
                accepted += 1
            } else {
                // Never answered: a transport failure, recorded after one attempt.
                #expect(entries.first?["reason"]?.stringValue == "Transport", "\(callee): \(String(describing: entries.first))")
                #expect(entries.first?["attempts"] == .int(1))
            }
        }
        let unanswered = fixture.sandbox.records.count - accepted
        #expect(unanswered >= 2 + 1, "two stalls and at least one reset went unanswered (\(unanswered))")
        #expect(accepted >= 1, "pushes after the faults are accepted")
        #expect(fixture.sandbox.connectionsAccepted > 1, "a reset connection is replaced")
        // The server keeps serving calls after the storm.
        fixture.sandbox.inject(.reset(every: nil))
        fixture.sandbox.inject(.latency(.zero))
        let after = try await fixture.call(caller, to: [callees[0]], timeout: 60)
        let afterOutcome = try await fixture.voipOutcomes([callees[0]: after], as: "alice")
        #expect(afterOutcome[callees[0]]?.first?["event"] == "apns_accepted")
    }

    /// Covers: limit:max_devices_per_user, error:conflict
    @Test func registrationsPastTheDeviceLimitAreRefusedAndUpdatesStillWork() async throws {
        let fixture = try CallFixture { $0.limits.maxDevicesPerUser = 2 }
        defer { fixture.stop() }
        try await fixture.registerPhone("alice", device: "one", seed: 1)
        try await fixture.registerPhone("alice", device: "two", seed: 2)
        func put(_ device: String) async throws -> HTTPClientResponse {
            try await HTTPClient.request(
                "PUT", fixture.server.baseURL + "/v1/devices/\(device)", headers: [("Authorization", "Bearer " + fixture.token("alice"))],
                body: Array(#"{"platform":"web"}"#.utf8))
        }
        let third = try await put("three")
        #expect(third.status == 409, "\(third.text)")
        #expect(third.text.contains("conflict"))
        #expect(try await put("one").status == 200, "re-registering a known device is always allowed")
        let removed = try await HTTPClient.request(
            "DELETE", fixture.server.baseURL + "/v1/devices/two", headers: [("Authorization", "Bearer " + fixture.token("alice"))])
        #expect(removed.status == 204)
        #expect(try await put("three").status == 200)
        try await fixture.registerPhone("bob", device: "one", seed: 3)  // the limit is per user
    }

    @Test(arguments: StoreEngine.available)
    func devicesAreListedWithTokensRedactedAndTokensMoveBetweenUsers(engine: StoreEngine) async throws {
        let fixture = try CallFixture(engine: engine)
        defer { fixture.stop() }
        let phone = try await fixture.registerPhone("bob", device: "shared", seed: 51)
        let list = try await fixture.get("/v1/devices", as: "bob")
        guard case .array(let devices)? = list["devices"] else { throw Timeout(what: "devices") }
        #expect(devices.count == 1)
        #expect(devices.first?["voip_token"]?.stringValue == String(phone.voip.prefix(8)) + "…")
        #expect(!(try JSONEncoder().encode(list)).contains(Array(phone.voip.utf8)))
        // The same phone signs in as carol: the token moves.
        try await fixture.registerPhone("carol", device: "shared", seed: 51)
        let bobAfter = try fixture.server.server.store.devices(appID: fixture.server.app.id, userID: "bob")
        #expect(bobAfter.first?.voipToken == nil)
        let removed = try await HTTPClient.request(
            "DELETE", fixture.server.baseURL + "/v1/devices/shared", headers: [("Authorization", "Bearer " + fixture.token("carol"))])
        #expect(removed.status == 204)
    }
}
