import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// How much slower than usual the tests run (`SWITCHBOARD_TEST_SLOWDOWN`, set by
/// `make test-sanitize`): deadlines stretch by this much.
let kitSlowdown = Int(ProcessInfo.processInfo.environment["SWITCHBOARD_TEST_SLOWDOWN"] ?? "") ?? 1

struct Timeout: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Waits for `condition`, at most `limit` (stretched by `SWITCHBOARD_TEST_SLOWDOWN`).
func eventually(_ what: String, within limit: Duration = .seconds(5), _ condition: @Sendable () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + limit * kitSlowdown
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw Timeout(what: what)
}

/// The server, the APNs sandbox, and a way to make phones and tokens. The server runs in this
/// process, or as a `switchboard serve` process (`asProcess`) that tests can kill.
final class Stack: Sendable {
    let sandbox: APNsSandbox
    /// The in-process server (nil when it runs as a process).
    let server: SwitchboardServer?
    let process: ServerProcess?
    let baseURL: String
    let app: App
    let directory: String
    let clientLoop: EventLoop

    init(asProcess: Bool = false) throws {
        directory = NSTemporaryDirectory() + "switchboard-kit-" + RandomID.alphanumeric(8)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let key = try ECPrivateKey.generate()
        var sandboxConfiguration = APNsSandbox.Configuration()
        sandboxConfiguration.port = 0
        sandboxConfiguration.adminPort = 0
        sandboxConfiguration.directory = directory + "/sandbox"
        sandboxConfiguration.keys = ["KEY1234567": try ECPublicKey(pem: key.publicKeyPEM)]
        sandbox = try APNsSandbox(configuration: sandboxConfiguration, logger: Logger(minimumLevel: .error))
        app = App.make(name: "Kit", bundleID: "com.example.chat")
        let settings = AppPushSettings.key(pem: key.pem, keyID: "KEY1234567", teamID: "TEAM123456")
        if asProcess {
            let store = try Store(directory: directory + "/data")
            try store.insert(app)
            try store.setPushSettings(settings, appID: app.id)
            store.close()
            let process = try ServerProcess(dataDirectory: directory + "/data", sandbox: sandbox)
            self.process = process
            server = nil
            baseURL = process.baseURL
        } else {
            var configuration = ServerConfiguration()
            configuration.port = 0
            configuration.dataDirectory = directory + "/data"
            configuration.apnsURL = sandbox.url
            configuration.apnsCAFile = sandbox.certificatePath
            configuration.logLevel = .error
            let server = try SwitchboardServer.start(configuration, logger: Logger(minimumLevel: .error))
            try server.store.insert(app)
            try server.store.setPushSettings(settings, appID: app.id)
            self.server = server
            process = nil
            baseURL = server.baseURL
        }
        clientLoop = try EventLoop(name: "kit-test")
    }

    func stop() {
        server?.shutdown()
        process?.stop()
        sandbox.stop()
        if ProcessInfo.processInfo.environment["SWITCHBOARD_KEEP_TEST_FILES"] == nil { try? FileManager.default.removeItem(atPath: directory) }
    }

    var url: URL { URL(string: baseURL)! }

    func token(_ identity: String) -> String {
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: identity, name: identity.capitalized, grants: Grants(room: "*", roomJoin: true, call: true),
            ttlSeconds: 3600)
        return AccessTokenVerifier.sign(claims, secret: app.apiSecret)
    }

    /// An iPhone for `identity`: registered with tokens, the SDK with a simulated call UI, and the
    /// sandbox's device stream standing in for PushKit.
    func phone(
        _ identity: String, device: String, seed: Int, system: SimulatedCallSystem = SimulatedCallSystem(), serverTimeout: Duration = .seconds(5)
    ) async throws -> Phone {
        let phone = try Phone(stack: self, identity: identity, device: device, seed: seed, system: system, serverTimeout: serverTimeout)
        try await phone.register()
        return phone
    }
}

final class Phone: Sendable {
    let identity: String
    let device: String
    let voipToken: String
    let apnsToken: String
    let client: SwitchboardClient
    let system: SimulatedCallSystem
    let manager: CallManager
    let stack: Stack
    private let pushes = Locked<[[String: JSONValue]]>([])
    let managerEvents = Locked<[CallManagerEvent]>([])

    init(
        stack: Stack, identity: String, device: String, seed: Int, system: SimulatedCallSystem = SimulatedCallSystem(),
        serverTimeout: Duration = .seconds(5), serverURL: URL? = nil, transport: (any WebSocketTransport)? = nil,
        http: (any HTTPTransport)? = nil, callers: CallerDirectory = CallerDirectory(), audioActivationTimeout: Duration = .seconds(5)
    ) throws {
        self.stack = stack
        self.system = system
        self.identity = identity
        self.device = device
        voipToken = String(format: "%064x", seed)
        apnsToken = String(format: "%064x", seed + 1_000_000)
        let token = stack.token(identity)
        var options = SwitchboardClient.Options()
        options.initialBackoff = .milliseconds(50)
        client = try SwitchboardClient(serverURL: serverURL ?? stack.url, deviceID: device, options: options, transport: transport) { token }
        manager = CallManager(
            client: client, system: system, http: http, serverTimeout: serverTimeout, callers: callers, audioActivationTimeout: audioActivationTimeout)
        manager.start()
        let events = manager.events
        let log = managerEvents
        Task { for await event in events { log.withLock { $0.append(event) } } }
    }

    func register() async throws {
        let body = DeviceRegistration(
            platform: "ios", voipToken: voipToken, apnsToken: apnsToken, environment: "sandbox", bundleID: "com.example.chat",
            callKitEnabled: true)
        let response = try await HTTPClient.request(
            "PUT", stack.baseURL + "/v1/devices/\(device)", headers: [("Authorization", "Bearer " + stack.token(identity))],
            body: Array(try JSONEncoder().encode(body)))
        guard response.status == 200 else { throw Timeout(what: "device registration (\(response.status))") }
        // The sandbox's device stream plays PushKit.
        let stream = try await WebSocketClient.connect(
            to: URL(string: "ws://127.0.0.1:\(stack.sandbox.adminPort)/devices/\(voipToken)")!, on: stack.clientLoop)
        let pushes = self.pushes
        let subscribed = Locked(false)
        Task {
            for await event in stream.events {
                guard case .text(let text) = event, let record = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)).objectValue
                else { continue }
                if record["subscribed"] == true { subscribed.withLock { $0 = true } }
                guard case .object(let payload)? = record["payload"], record["push_type"] == "voip" else { continue }
                pushes.withLock { $0.append(payload) }
            }
        }
        // Pushes reach this stream only once the sandbox says it is subscribed.
        try await eventually("the sandbox to confirm the device subscription") { subscribed.withLock { $0 } }
    }

    /// Waits for the next VoIP push and hands it to the app as PushKit would.
    func receivePush() async throws {
        try await receivePush(to: { payload, completion in deliver(payload); completion() })
    }

    /// Waits for the next VoIP push and gives its payload to `handler`.
    func receivePush(to handler: ([String: Any], () -> Void) -> Void) async throws {
        let taken = Locked<[String: JSONValue]?>(nil)
        let pushes = self.pushes
        try await eventually("a VoIP push") {
            let next = pushes.withLock { $0.isEmpty ? nil : $0.removeFirst() }
            taken.withLock { $0 = next }
            return next != nil
        }
        let payload = taken.withLock { $0 } ?? [:]
        handler(try JSONSerialization.jsonObject(with: JSONEncoder().encode(JSONValue.object(payload))) as! [String: Any]) {}
    }

    /// Delivers `payload` as a VoIP push.
    func deliver(_ payload: [String: Any]) {
        system.deliverVoIPPush(payload) { payload, completion in
            manager.handleIncomingVoIPPush(payload: payload, completion: completion)
        }
    }

    func ended(_ id: UUID) -> CallEndedReason? { system.call(id)?.ended }
}

/// A caller on the plain WebSocket protocol.
func caller(_ stack: Stack, _ identity: String = "alice") async throws -> SwitchboardClient {
    let token = stack.token(identity)
    let client = try SwitchboardClient(serverURL: stack.url, deviceID: identity + "-web") { token }
    try await client.connect()
    return client
}

func createCall(_ client: SwitchboardClient, to callee: String) async throws -> UUID {
    let reply = try await client.request(MessageType.callCreate, encoding: CallCreateRequest(callees: [callee]))
    return UUID(uuidString: reply?["call_id"]?.stringValue ?? "")!
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct CallManagerTests {
    @Test func aPushForACallAlreadyCancelledIsReportedThenEndedAtOnce() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 1)
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await alice.request(MessageType.callCancel, encoding: CallActionRequest(callID: id.uuidString.lowercased()))

        // The phone was asleep; the push arrives late.
        try await bob.receivePush()
        #expect(bob.system.call(id) != nil, "reported before the handler returned")
        // Ended because the phone asked the server, not by the 45 s ring timeout (how fast is a
        // benchmark's business, not a test's).
        try await eventually("the call to end") { bob.ended(id) != nil }
        #expect(bob.ended(id) == .remoteEnded)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    @Test func aMalformedPushIsReportedThenEnded() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 2)
        bob.deliver(["aps": [:], "garbage": true])
        #expect(bob.system.calls.count == 1)
        try await eventually("the placeholder call to end") { bob.system.liveCalls.isEmpty }
        #expect(bob.system.calls.first?.ended == .failed)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
    }

    @Test func aStalePushIsReportedThenEndedAsUnanswered() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 13)
        try await bob.client.connect()  // the server's clock is known
        let id = UUID()
        let expired = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        bob.deliver([
            "call_id": id.uuidString.lowercased(), "caller": ["identity": "alice", "name": "Alice"], "ring_expires_at": expired,
        ])
        #expect(bob.system.call(id) != nil, "reported before the handler returned")
        // Ended once CallKit's report completion came back, never before (D3).
        try await eventually("the stale call to end") { bob.ended(id) != nil }
        #expect(bob.ended(id) == .unanswered)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
    }

    /// A phone whose clock runs ten minutes ahead of the server's: a fresh push's
    /// `ring_expires_at` is in the phone's past, and the call rings all the same (issue 31,
    /// defect 10: it used to be ended at once as unanswered).
    @Test func aPhoneWhoseClockRunsAheadStillRings() async throws {
        let skew: TimeInterval = 600
        let transport = WelcomingTransport(serverTimeMillis: Int64((Date().timeIntervalSince1970 - skew) * 1000))
        let client = try SwitchboardClient(serverURL: URL(string: "http://127.0.0.1:9")!, deviceID: "b-phone", transport: transport) { "token" }
        let system = SimulatedCallSystem()
        let manager = CallManager(client: client, system: system, http: UnreachableHTTP(), serverTimeout: .seconds(30))
        manager.start()
        try await client.connect()
        let offset = try #require(client.serverClockOffset)
        #expect(abs(offset + skew) < 2, "the offset the welcome gave: \(offset)")
        let id = UUID()
        let serverNow = Date().timeIntervalSince1970 - skew
        system.deliverVoIPPush(["call_id": id.uuidString.lowercased(), "ring_expires_at": Int64((serverNow + 40) * 1000)]) { payload, completion in
            manager.handleIncomingVoIPPush(payload: payload, completion: completion)
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(system.call(id)?.ended == nil, "\(system.timeline)")
        #expect(system.violations.isEmpty, "\(system.violations)")
        await client.disconnect()
    }

    /// iOS 26.4 says a push needs no report (`mustReport` false): nothing is shown for a push
    /// with nothing to ring for (issue 31, defect 6), and a new call still rings.
    @Test func whenNoReportIsNeededNothingIsShownForAPushWithNothingToRing() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 23)
        try await bob.client.connect()
        func deliver(_ payload: [String: Any]) {
            bob.system.deliverVoIPPush(payload, mustReport: false) { payload, mustReport, completion in
                bob.manager.handleIncomingVoIPPush(payload: payload, mustReport: mustReport, completion: completion)
            }
        }
        deliver(["aps": [:], "garbage": true])
        let expired = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        deliver(["call_id": UUID().uuidString.lowercased(), "ring_expires_at": expired])
        #expect(bob.system.calls.isEmpty, "\(bob.system.timeline)")

        // A call declined here, then its late push: not shown again.
        let alice = try await caller(stack, "alice")
        let id = try await createCall(alice, to: "bob")
        try await eventually("the invite to ring") { bob.system.call(id) != nil }
        #expect(await bob.system.userEnds(id))
        deliver(["call_id": id.uuidString.lowercased(), "caller": ["identity": "alice"]])
        try await Task.sleep(for: .milliseconds(100))
        #expect(bob.system.call(id)?.timesShown == 1, "\(bob.system.timeline)")

        // A new call with no report needed (the app in the foreground) still rings.
        let next = try await createCall(alice, to: "bob")
        deliver(["call_id": next.uuidString.lowercased(), "caller": ["identity": "alice"]])
        try await eventually("the new call to ring") { bob.system.call(next) != nil }
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// A locked phone: the app's token provider cannot read its credentials (Keychain
    /// `WhenUnlocked`). The pushed call rings on past `serverTimeout` until the ring is over,
    /// and an answer once the phone is unlocked reaches the server (issue 31, defect 2); a call
    /// whose ring ends before that ends as unanswered on the phone.
    @Test func aLockedPhoneRingsOnUntilTheRingIsOver() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let locked = Locked(true)
        let token = stack.token("bob")
        var options = SwitchboardClient.Options()
        options.initialBackoff = .milliseconds(50)
        let client = try SwitchboardClient(serverURL: stack.url, deviceID: "b-phone", options: options) {
            if locked.withLock({ $0 }) { throw URLError(.userAuthenticationRequired) }
            return token
        }
        let system = SimulatedCallSystem()
        let manager = CallManager(client: client, system: system, serverTimeout: .seconds(1))
        manager.start()
        let bob = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 24)
        try await bob.register()
        func deliverNextPush() async throws {
            try await bob.receivePush(to: { payload, completion in
                system.deliverVoIPPush(payload) { payload, done in manager.handleIncomingVoIPPush(payload: payload, completion: done) }
                completion()
            })
        }
        let alice = try await caller(stack, "alice")

        let id = try await createCall(alice, to: "bob")
        try await deliverNextPush()
        try await Task.sleep(for: .seconds(2))
        #expect(system.call(id)?.ended == nil, "rings on past serverTimeout: \(system.timeline)")
        locked.withLock { $0 = false }
        try await eventually("the phone to reach the server") { await client.isConnected }
        #expect(await system.userAnswers(id))
        let state = try await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport())
        #expect(state["state"] == "accepted", "\(state)")
        #expect(await system.userEnds(id))
        await manager.settle()
        await client.disconnect()

        // Locked for the whole ring: the phone stops when the ring is over.
        locked.withLock { $0 = true }
        let reply = try await alice.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"], ringTimeoutSeconds: 5))
        let short = UUID(uuidString: reply?["call_id"]?.stringValue ?? "")!
        try await deliverNextPush()
        try await Task.sleep(for: .seconds(2))
        #expect(system.call(short)?.ended == nil)
        try await eventually("the ring to end", within: .seconds(10)) { system.call(short)?.ended != nil }
        #expect(system.call(short)?.ended == .unanswered)
        #expect(system.violations.isEmpty, "\(system.violations)")
        await alice.disconnect()
    }

    @Test func anAnswerBeforeTheConnectionIsUpIsHeldThenFulfilled() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 3)
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await bob.receivePush()
        // The user taps Answer at once, while the SDK is still connecting.
        let answered = await bob.system.userAnswers(id)
        #expect(answered)
        #expect(bob.system.call(id)?.answered == true)
        #expect(bob.system.timeline.contains("audio activated"))
        bob.system.mediaWillStartAudio(id)
        try await eventually("alice to hear it was accepted") {
            (try? await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport()))?["state"] == "accepted"
        }
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    @Test func anAnswerForACallThatEndedIsFailed() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 4)
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await bob.receivePush()
        try await alice.request(MessageType.callCancel, encoding: CallActionRequest(callID: id.uuidString.lowercased()))
        // Whether or not the phone has heard of the cancel yet, the answer must fail.
        let answered = await bob.system.userAnswers(id)
        #expect(!answered)
        try await eventually("the call to end on the phone") { bob.ended(id) != nil }
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    @Test func theOtherPhoneHearsAnsweredElsewhereAndDeclinedElsewhere() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let phone = try await stack.phone("bob", device: "b-phone", seed: 5)
        let tablet = try await stack.phone("bob", device: "b-ipad", seed: 6)
        let alice = try await caller(stack)
        try await phone.client.connect()
        try await tablet.client.connect()

        let first = try await createCall(alice, to: "bob")
        try await eventually("both devices to ring") { phone.system.call(first) != nil && tablet.system.call(first) != nil }
        try await phone.receivePush()  // the push and the WebSocket invite are one call
        #expect(phone.system.calls.count == 1)
        #expect(await phone.system.userAnswers(first))
        try await eventually("the tablet to stop") { tablet.ended(first) != nil }
        #expect(tablet.ended(first) == .answeredElsewhere)
        #expect(await phone.system.userEnds(first))
        try await eventually("the first call to end on the server") {
            (try? await alice.callState(first.uuidString.lowercased(), http: CurlHTTPTransport()))?["state"] == "ended"
        }

        let second = try await createCall(alice, to: "bob")
        try await eventually("both devices to ring again") { phone.system.call(second) != nil && tablet.system.call(second) != nil }
        #expect(await tablet.system.userEnds(second))
        try await eventually("the phone to stop") { phone.ended(second) != nil }
        #expect(phone.ended(second) == .declinedElsewhere)
        for device in [phone, tablet] { #expect(device.system.violations.isEmpty, "\(device.system.violations)") }
        await alice.disconnect()
        await phone.client.disconnect()
        await tablet.client.disconnect()
    }

    @Test func aLatePushForACallAnsweredHereDoesNotEndIt() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 12)
        try await bob.client.connect()
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await eventually("bob's phone to ring") { bob.system.call(id) != nil }
        #expect(await bob.system.userAnswers(id))
        // The push for the same call arrives after the answer; the phone asks the server about
        // it (the barrier: that request was answered) and keeps the call.
        let metrics = try #require(stack.server?.metrics)
        let asked: @Sendable () -> Double = { metrics.counter("switchboard_http_requests_total", ["method": "GET", "route": "/v1/calls/{call_id}", "status": "200"]) }
        let before = asked()
        try await bob.receivePush()
        try await eventually("the phone to ask the server about the late push's call") { asked() > before }
        await bob.manager.settle()  // the late push's reconcile and the answer's handling are done
        #expect(bob.ended(id) == nil, "still in the call")
        #expect(bob.system.calls.count == 1)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    @Test func aReconnectionInTheMiddleOfACallLosesNoEvent() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 7)
        try await bob.client.connect()
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await eventually("bob's phone to ring") { bob.system.call(id) != nil }
        #expect(await bob.system.userAnswers(id))

        // The network drops; meanwhile Alice hangs up.
        await bob.client.simulateNetworkDrop()
        try await alice.request(MessageType.callEnd, encoding: CallActionRequest(callID: id.uuidString.lowercased()))
        try await eventually("the end to arrive after the resume") { bob.ended(id) != nil }
        #expect(bob.ended(id) == .remoteEnded)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    @Test func aProviderResetMidCallEndsTheCallOnTheServer() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 8)
        try await bob.client.connect()
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await eventually("bob's phone to ring") { bob.system.call(id) != nil }
        #expect(await bob.system.userAnswers(id))
        bob.system.reset()
        try await eventually("the server to end the call") {
            (try? await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport()))?["state"] == "ended"
        }
        #expect(bob.manager.liveCallIDs.isEmpty)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct KitMoreTests {
    @Test func roomsThroughTheSDKCarrySignalsAndData() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let alice = try await caller(stack, "alice")
        let bob = try await caller(stack, "bob")
        let bobRoom = try await Room.join("lobby", client: bob)
        let aliceRoom = try await Room.join("lobby", client: alice)
        #expect(aliceRoom.peers.map(\.identity) == ["bob"])
        // Bob's room events, gathered as they come; each wait below is bounded.
        let heard = Locked<[Room.Event]>([])
        let roomEvents = bobRoom.events
        let gatherer = Task { for await event in roomEvents { heard.withLock { $0.append(event) } } }
        defer { gatherer.cancel() }
        func next(_ what: String) async throws -> Room.Event {
            try await eventually(what) { heard.withLock { !$0.isEmpty } }
            return heard.withLock { $0.removeFirst() }
        }
        guard case .peerJoined(let peer) = try await next("peer joined") else { throw Timeout(what: "peer joined first") }
        #expect(peer.identity == "alice")
        try await aliceRoom.signal(to: aliceRoom.peers[0].peerID, ["type": "offer", "sdp": "v=0"])
        guard case .signal(_, let payload) = try await next("a signal") else { throw Timeout(what: "a signal next") }
        #expect(payload["type"] == "offer")
        try await aliceRoom.send(["text": "hi"])
        guard case .data(_, let data) = try await next("data") else { throw Timeout(what: "data next") }
        #expect(data == ["text": "hi"])
        try await aliceRoom.leave()
        guard case .peerLeft(_, let reason) = try await next("peer left") else { throw Timeout(what: "peer left next") }
        #expect(reason == .left)
        await alice.disconnect()
        await bob.disconnect()
    }

    @Test func inChinaModeTheDeviceRegistersWithoutCallKitAndRingsFromAnAlertPush() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let phone = try Phone(stack: stack, identity: "bob", device: "b-cn", seed: 9)
        let registrar = DeviceRegistrar(client: phone.client)
        let voip = Data(repeating: 0xAB, count: 32)
        let apns = Data(repeating: 0xCD, count: 32)
        let policy = RegionPolicy.forRegion("CN")
        #expect(policy == .noCallKit)
        try await registrar.register(voipToken: voip, apnsToken: apns, environment: "sandbox", bundleID: "com.example.chat", appVersion: "1.0", policy: policy)
        let devices = try stack.server!.store.devices(appID: stack.app.id, userID: "bob")
        #expect(devices.first?.voipToken == nil)
        #expect(devices.first?.apnsToken == DeviceRegistrar.hex(apns))
        #expect(devices.first?.callKitEnabled == false)

        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await eventually("an alert push") {
            stack.sandbox.records.contains { $0.pushType == "alert" && $0.payload?["call_id"]?.stringValue == id.uuidString.lowercased() }
        }
        #expect(!stack.sandbox.records.contains { $0.pushType == "voip" })
        let alert = try #require(stack.sandbox.records.first { $0.pushType == "alert" })
        let userInfo = try JSONSerialization.jsonObject(with: Data(alert.payloadBytes)) as! [String: Any]
        phone.manager.handleIncomingAlertPush(userInfo: userInfo)
        #expect(phone.system.call(id) != nil, "rings in the app")
        #expect(await phone.system.userAnswers(id))
        #expect(phone.system.violations.isEmpty, "\(phone.system.violations)")
        await alice.disconnect()
        await phone.client.disconnect()
    }

    @Test func aSecondCallWhileInACallRingsButCannotBeAnsweredOverTheCallGroupLimit() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 10)
        try await bob.client.connect()
        let alice = try await caller(stack, "alice")
        let carol = try await caller(stack, "carol")
        let first = try await createCall(alice, to: "bob")
        try await eventually("the first call to ring") { bob.system.call(first) != nil }
        #expect(await bob.system.userAnswers(first))
        let reply = try await carol.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"], busyPolicy: .ring))
        let second = try #require(UUID(uuidString: reply?["call_id"]?.stringValue ?? ""))
        try await eventually("the second call to ring") { bob.system.call(second) != nil }
        #expect(await bob.system.userAnswers(second) == false, "one call group at a time")
        #expect(await bob.system.userEnds(second))
        try await eventually("carol to hear the decline") {
            (try? await carol.callState(second.uuidString.lowercased(), http: CurlHTTPTransport()))?["outcome"] == "declined"
        }
        #expect(bob.system.call(first)?.ended == nil, "the first call goes on")
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await carol.disconnect()
        await bob.client.disconnect()
    }

    /// A hang-up tapped just before the app disconnects is not lost with the connection: the
    /// manager's `settle()` returns once the end reached the server.
    /// A logout then a login with one client: the manager still hears the server's invites,
    /// cancels and hang-ups (issue 31, defect 4).
    @Test func afterDisconnectThenConnectTheManagerStillHearsTheServer() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 21)
        try await bob.client.connect()
        await bob.manager.settle()
        await bob.client.disconnect()
        try await bob.client.connect()
        let alice = try await caller(stack, "alice")
        let id = try await createCall(alice, to: "bob")
        try await eventually("the invite to ring") { bob.system.call(id) != nil }
        try await alice.request(MessageType.callCancel, encoding: CallActionRequest(callID: id.uuidString.lowercased()))
        try await eventually("the cancel to end the call") { bob.ended(id) != nil }
        #expect(bob.ended(id) == .remoteEnded)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// The user taps Answer, then End while the server's confirmation of the answer is on its
    /// way: the answer action is failed when the confirmation comes, never left for CallKit
    /// to time out (issue 31, defect 7).
    @Test func anAnswerWhoseCallTheUserEndedMeanwhileIsFailedNotLeftPending() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let gate = try AnswerReplyGate()
        let system = SimulatedCallSystem(actionTimeout: .seconds(4))
        let bob = try Phone(stack: stack, identity: "bob", device: "b-phone", seed: 22, system: system, transport: gate)
        try await bob.register()
        try await bob.client.connect()
        let alice = try await caller(stack, "alice")
        let id = try await createCall(alice, to: "bob")
        try await eventually("the call to ring") { bob.system.call(id) != nil }
        let answering = Task { await bob.system.userAnswers(id) }
        try await eventually("the server to confirm the answer (held back)") { gate.held }
        #expect(await bob.system.userEnds(id))
        gate.release()
        #expect(await answering.value == false, "the answer is failed: its call ended")
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// A UI and a media layer each follow the calls: both hear every event, the audio
    /// activation included (issue 31, defect 5: `events` is one stream, split between readers).
    @Test func everySubscriberHearsEveryEvent() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 25)
        let heard = (ui: Locked<[CallManagerEvent]>([]), media: Locked<[CallManagerEvent]>([]))
        for log in [heard.ui, heard.media] {
            let stream = bob.manager.subscribe()
            Task { for await event in stream { log.withLock { $0.append(event) } } }
        }
        try await bob.client.connect()
        let alice = try await caller(stack, "alice")
        let id = try await createCall(alice, to: "bob")
        try await eventually("the call to ring") { bob.system.call(id) != nil }
        #expect(await bob.system.userAnswers(id))
        try await eventually("both to hear the audio start") {
            [heard.ui, heard.media].allSatisfy { $0.withLock { $0.contains { if case .audioActive(true, _) = $0 { true } else { false } } } }
        }
        #expect(heard.ui.withLock { $0.contains { if case .incoming(id, _) = $0 { true } else { false } } })
        #expect(heard.media.withLock { $0.contains { if case .incoming(id, _) = $0 { true } else { false } } })
        #expect(await bob.system.userEnds(id))
        await bob.manager.settle()
        await alice.disconnect()
        await bob.client.disconnect()
    }

    /// A call-back from Recents gives the handle the call showed (the caller's phone number);
    /// the directory turns it back into the user to call, also in a later launch (issue 31,
    /// defect 8: the handle went to startCall(to:), which takes identities).
    @Test func aRecentsCallBackDialsTheUserBehindTheHandle() async throws {
        let suite = "switchboard.tests.\(UUID().uuidString)"
        defer { UserDefaults(suiteName: suite)?.removePersistentDomain(forName: suite) }
        let token = "token"
        let client = try SwitchboardClient(serverURL: URL(string: "http://127.0.0.1:9")!, deviceID: "b-phone") { token }
        let system = SimulatedCallSystem()
        let manager = CallManager(client: client, system: system, http: UnreachableHTTP(), callers: CallerDirectory(suiteName: suite))
        let id = UUID()
        system.deliverVoIPPush([
            "call_id": id.uuidString.lowercased(), "caller": ["identity": "alice", "name": "Alice", "handle": "+81 90 1234 5678"],
        ]) { payload, completion in manager.handleIncomingVoIPPush(payload: payload, completion: completion) }
        #expect(system.call(id)?.update.handle == "+81 90 1234 5678", "the call UI shows the handle")
        #expect(manager.callers.identity(forHandle: "+81 90 1234 5678") == "alice")
        #expect(CallerDirectory(suiteName: suite).identity(forHandle: "+81 90 1234 5678") == "alice", "kept for the next launch")
        #expect(manager.callers.identity(forHandle: "carol") == "carol", "an outgoing call's handle is the callee")
        await client.disconnect()
    }

    @Test func aHangUpJustBeforeDisconnectingReachesTheServerOnceSettled() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let bob = try await stack.phone("bob", device: "b-phone", seed: 20)
        try await bob.client.connect()
        let alice = try await caller(stack, "alice")
        let id = try await createCall(alice, to: "bob")
        try await eventually("the call to ring") { bob.system.call(id) != nil }
        #expect(await bob.system.userAnswers(id))
        #expect(await bob.system.userEnds(id))
        await bob.manager.settle()
        await bob.client.disconnect()
        let state = try await alice.callState(id.uuidString.lowercased(), http: CurlHTTPTransport())
        #expect(state["state"] == "ended", "the end was sent before the connection closed: \(state)")
        #expect(state["ended_by"] == "bob")
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
    }
}

/// The platform's WebSocket transport, except that the server's reply to `call.answer` is
/// held until the test releases it (the confirmation "on its way").
final class AnswerReplyGate: WebSocketTransport, @unchecked Sendable {
    // Safety: mutable state is behind `state`.
    private let inner: any WebSocketTransport
    private let state = Locked<(answerIDs: Set<String>, held: Bool, released: Bool)>(([], false, false))

    init() throws { inner = try LibWebSocketsTransport() }

    var held: Bool { state.withLock { $0.held } }
    func release() { state.withLock { $0.released = true } }

    struct Connection: WebSocketConnection {
        let inner: any WebSocketConnection
        let gate: AnswerReplyGate
        let messages: AsyncStream<WebSocketMessage>
        func send(_ text: String) {
            if let request = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)), request.type == MessageType.callAnswer,
                let id = request.id
            {
                gate.state.withLock { _ = $0.answerIDs.insert("\(id)") }
            }
            inner.send(text)
        }
        func close(code: UInt16) { inner.close(code: code) }
        func abort() { inner.abort() }
    }

    func connect(to url: URL) async throws -> any WebSocketConnection {
        let connection = try await inner.connect(to: url)
        let (stream, continuation) = AsyncStream.makeStream(of: WebSocketMessage.self)
        Task { [self] in
            for await message in connection.messages {
                if case .text(let text) = message, let reply = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)),
                    let id = reply.id, state.withLock({ $0.answerIDs.contains("\(id)") })
                {
                    state.withLock { $0.held = true }
                    while !state.withLock({ $0.released }) { try? await Task.sleep(for: .milliseconds(5)) }
                }
                continuation.yield(message)
            }
            continuation.finish()
        }
        return Connection(inner: connection, gate: self, messages: stream)
    }
}

/// A server that only says hello: each connection gets a `session.welcome` with the given
/// server time, then stays open and silent.
final class WelcomingTransport: WebSocketTransport, @unchecked Sendable {
    // Safety: immutable.
    let serverTimeMillis: Int64
    init(serverTimeMillis: Int64) { self.serverTimeMillis = serverTimeMillis }

    struct Connection: WebSocketConnection {
        let messages: AsyncStream<WebSocketMessage>
        func send(_ text: String) {}
        func close(code: UInt16) {}
        func abort() {}
    }

    func connect(to url: URL) async throws -> any WebSocketConnection {
        let (stream, continuation) = AsyncStream.makeStream(of: WebSocketMessage.self)
        continuation.yield(
            .text(
                #"{"type":"session.welcome","data":{"peer_id":"p_1","identity":"bob","resume_token":"r","server_time":\#(serverTimeMillis),"#
                    + #""resume_failed":false,"limits":{"max_message_bytes":65536,"max_data_bytes":16384,"messages_per_second":50,"#
                    + #""ping_interval_seconds":20,"idle_timeout_seconds":45,"resume_grace_seconds":20}}}"#))
        return Connection(messages: stream)
    }
}

/// A REST API that cannot be reached.
struct UnreachableHTTP: HTTPTransport {
    func send(_ method: String, _ url: URL, bearer: String, json: Data?) async throws -> (status: Int, body: Data) {
        throw URLError(.cannotConnectToHost)
    }
}
