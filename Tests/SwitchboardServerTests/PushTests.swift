import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport
import SwitchboardPush

/// A clock tests move by hand, shared by the client and the sandbox.
final class ManualClock: Sendable {
    private let now = Locked(Date(timeIntervalSince1970: 1_800_000_000))
    var date: Date { now.withLock { $0 } }
    func advance(by seconds: TimeInterval) { now.withLock { $0 = $0.addingTimeInterval(seconds) } }
    var function: @Sendable () -> Date { { self.date } }
}

/// The APNs sandbox on free ports with one registered signing key, and a client pointed at it.
final class PushFixture: Sendable {
    let sandbox: APNsSandbox
    let key: ECPrivateKey
    let tokens: ProviderTokenCache
    let client: APNsClient
    let clock: ManualClock
    let metrics = Metrics()
    let directory: String

    init(connections: Int = 1, maxConcurrentStreams: UInt32 = 1000, useClock: Bool = false, backoff: Duration = .milliseconds(20)) throws {
        directory = try makeTemporaryDirectory()
        let clock = ManualClock()
        self.clock = clock
        key = try ECPrivateKey.generate()
        var configuration = APNsSandbox.Configuration()
        configuration.port = 0
        configuration.adminPort = 0
        configuration.directory = directory
        configuration.keys = ["KEY1234567": try ECPublicKey(pem: key.publicKeyPEM)]
        configuration.maxConcurrentStreams = maxConcurrentStreams
        if useClock { configuration.clock = clock.function }
        sandbox = try APNsSandbox(configuration: configuration, logger: Logger(minimumLevel: .error))
        var tokenClock: @Sendable () -> Date = { Date() }
        if useClock { tokenClock = clock.function }
        tokens = ProviderTokenCache(key: key, keyID: "KEY1234567", teamID: "TEAM123456", clock: tokenClock)
        var clientConfiguration = APNsClientConfiguration(credentials: .token(tokens), environment: .sandbox)
        clientConfiguration.baseURL = sandbox.url
        clientConfiguration.caFile = sandbox.certificatePath
        clientConfiguration.connections = connections
        clientConfiguration.initialBackoff = backoff
        clientConfiguration.maxBackoff = .milliseconds(200)
        client = APNsClient(configuration: clientConfiguration, logger: Logger(minimumLevel: .error), observe: metrics.recordPush)
    }

    func stop() {
        client.shutdown()
        sandbox.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    static func token(_ seed: Int) -> String {
        String(format: "%064x", seed)
    }

    func voip(_ seed: Int = 1, payload: [UInt8]? = nil) -> PushNotification {
        PushNotification(
            deviceToken: Self.token(seed), type: .voip, topic: "com.example.chat",
            payload: payload ?? Array(#"{"call_id":"c-\#(seed)","created_at":1,"ring_expires_at":2}"#.utf8), expiration: 0)
    }

    /// A request straight through HTTP/2, for what the APNs client would never send.
    func raw(
        _ headers: [(String, String)], token: String = PushFixture.token(1), body: String = #"{"aps":{}}"#, path: String? = nil
    ) async throws -> (Int, String?) {
        let http = HTTP2Client(options: {
            var options = HTTP2Client.Options()
            options.caFile = sandbox.certificatePath
            return options
        }())
        defer { http.shutdown() }
        let response = try await http.send(
            HTTP2Request(url: sandbox.url + (path ?? "/3/device/\(token)"), headers: headers, body: Array(body.utf8)))
        let reason = (try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))?["reason"]?.stringValue
        return (response.status, reason)
    }
}

@Suite(.timeLimit(.minutes(3))) struct PushTests {
    /// One rule for a device token's form, used by the registry, the client, the sandbox and
    /// `switchboard push`: 64 ASCII hex digits, either case; nothing that only looks like one.
    @Test func aDeviceTokenIsSixtyFourASCIIHexDigits() {
        let token = String(repeating: "0123456789abcdef", count: 4)
        #expect(PushNotification.isDeviceToken(token))
        #expect(PushNotification.isDeviceToken(token.uppercased()))
        #expect(PushNotification.isDeviceToken(token[...]))
        #expect(!PushNotification.isDeviceToken(String(token.dropLast())))
        #expect(!PushNotification.isDeviceToken(token + "0"))
        #expect(!PushNotification.isDeviceToken(String(token.dropLast()) + "g"))
        #expect(!PushNotification.isDeviceToken(String(token.dropLast()) + " "))
        // Fullwidth digits are hex digits to `Character.isHexDigit`, but not in a token.
        #expect(!PushNotification.isDeviceToken(String(token.dropLast()) + "\u{FF41}"))
        #expect(!PushNotification.isDeviceToken(String(repeating: "\u{FF41}", count: 64)))
        #expect(!PushNotification.isDeviceToken(""))
    }

    @Test func rfc7515AppendixA3ES256VectorVerifies() throws {
        // RFC 7515 A.3: the JWK's x and y, as a SubjectPublicKeyInfo.
        let x = try #require(Base64URL.decode("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"))
        let y = try #require(Base64URL.decode("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"))
        let prefix: [UInt8] = [
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
            0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04,
        ]
        let pem = "-----BEGIN PUBLIC KEY-----\n" + Data(prefix + x + y).base64EncodedString(options: .lineLength64Characters)
            + "\n-----END PUBLIC KEY-----\n"
        let key = try ECPublicKey(pem: pem)
        let input = "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
        let signature = try #require(Base64URL.decode(
            "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"))
        #expect(key.verify(signature, of: Array(input.utf8)))
        var tampered = signature
        tampered[10] ^= 1
        #expect(!key.verify(tampered, of: Array(input.utf8)))
    }

    @Test func generatedKeysSignWhatTheirPublicHalfVerifies() throws {
        let key = try ECPrivateKey.generate()
        let message = Array("header.claims".utf8)
        let signature = try key.sign(message)
        #expect(signature.count == 64)
        let reread = try ECPrivateKey(pem: key.pem)
        #expect(try ECPublicKey(pem: reread.publicKeyPEM).verify(signature, of: message))
        let stranger = try ECPublicKey(pem: ECPrivateKey.generate().publicKeyPEM)
        #expect(!stranger.verify(signature, of: message))
    }

    @Test func aVoIPPushArrivesWithApplesHeadersAndItsPayload() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        let notification = push.voip(7)
        let result = await push.client.send(notification)
        #expect(result.accepted)
        #expect(result.attempts == 1)
        let record = try #require(push.sandbox.records.first)
        #expect(record.status == 200)
        #expect(record.apnsID == result.apnsID)
        #expect(record.token == PushFixture.token(7))
        #expect(record.pushType == "voip")
        #expect(record.topic == "com.example.chat.voip")
        #expect(record.priority == 10)
        #expect(record.expiration == 0)
        #expect(record.payload == ["call_id": "c-7", "created_at": 1, "ring_expires_at": 2])
    }

    @Test func theVoIPTopicSuffixIsAddedExactlyOnceAndEnforced() async throws {
        #expect(PushNotification(deviceToken: "", type: .voip, topic: "com.a", payload: []).apnsTopic == "com.a.voip")
        #expect(PushNotification(deviceToken: "", type: .voip, topic: "com.a.voip", payload: []).apnsTopic == "com.a.voip")
        #expect(PushNotification(deviceToken: "", type: .alert, topic: "com.a", payload: []).apnsTopic == "com.a")

        let push = try PushFixture()
        defer { push.stop() }
        let bearer = ("authorization", "bearer " + (try push.tokens.token().jwt))
        // As APNs answers them: a VoIP push on another topic is a token for another topic.
        #expect(try await push.raw([bearer, ("apns-push-type", "voip"), ("apns-topic", "com.example.chat")]) == (400, "DeviceTokenNotForTopic"))
        #expect(try await push.raw([bearer, ("apns-push-type", "alert"), ("apns-topic", "com.example.chat.voip")]) == (400, "InvalidPushType"))
        #expect(try await push.raw([bearer, ("apns-push-type", "voip"), ("apns-topic", "com.example.chat.voip")]) == (200, nil))
    }

    /// `apns-push-type` is required on watchOS only and recommended elsewhere (Apple's "Sending
    /// notification requests to APNs"): without it a `.voip` topic's push is a VoIP push (its
    /// 5,120-byte limit), any other an alert (4,096).
    @Test func aPushWithoutAPushTypeIsTakenAsItsTopicSays() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        let bearer = ("authorization", "bearer " + (try push.tokens.token().jwt))
        #expect(try await push.raw([bearer, ("apns-topic", "com.example.chat")]) == (200, nil))
        let large = #"{"x":""# + String(repeating: "a", count: 5000) + #""}"#
        #expect(try await push.raw([bearer, ("apns-topic", "com.example.chat.voip")], body: large) == (200, nil))
        #expect(try await push.raw([bearer, ("apns-topic", "com.example.chat")], body: large) == (413, "PayloadTooLarge"))
        #expect(push.sandbox.records.filter { $0.status == 200 }.allSatisfy { $0.pushType == nil }, "recorded as sent")
    }

    /// No header line with CR, LF or NUL is ever sent: the APNs client refuses a topic that is
    /// not a bundle id (`BadTopic`, before anything is sent), and the HTTP client refuses any
    /// header that holds one (a client's `bundle_id` once became `apns-topic`, and libcurl split
    /// the line into two headers).
    @Test func aHeaderThatWouldSplitIntoTwoIsNeverSent() async throws {
        #expect(!HTTPHeaders.isSafe("com.other.bank\r\nx-injected: yes"))
        #expect(!HTTPHeaders.isSafe("a\u{0}b") && !HTTPHeaders.isSafe("a\nb") && HTTPHeaders.isSafe("com.example.chat.voip"))
        #expect(!PushNotification.isTopic("com.example\r\nx: y") && PushNotification.isTopic("com.example.chat-lite"))
        let push = try PushFixture()
        defer { push.stop() }
        var injected = push.voip(1)
        injected.topic = "com.other.bank\r\nx-injected: yes"
        let result = await push.client.send(injected)
        #expect(result.failure == .badTopic)
        #expect(result.attempts == 0)
        let http = HTTP2Client(options: {
            var options = HTTP2Client.Options()
            options.caFile = push.sandbox.certificatePath
            return options
        }())
        defer { http.shutdown() }
        await #expect(throws: (any Error).self) {
            _ = try await http.send(HTTP2Request(url: push.sandbox.url + "/3/device/" + PushFixture.token(1), headers: [("apns-topic", "a\r\nb: c")], body: []))
        }
        #expect(push.sandbox.requestCount == 0, "nothing reached the sandbox")
    }

    @Test func theSandboxAnswersWithApplesReasons() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        let bearer = ("authorization", "bearer " + (try push.tokens.token().jwt))
        let voip = [("apns-push-type", "voip"), ("apns-topic", "com.example.chat.voip")]
        #expect(try await push.raw(voip) == (403, "MissingProviderToken"))
        #expect(try await push.raw(voip + [("authorization", "bearer not.a.jwt")]) == (403, "InvalidProviderToken"))
        let otherKey = ProviderTokenCache(key: try ECPrivateKey.generate(), keyID: "KEY1234567", teamID: "TEAM123456")
        #expect(try await push.raw(voip + [("authorization", "bearer " + (try otherKey.token().jwt))]) == (403, "InvalidProviderToken"))
        #expect(try await push.raw([bearer, ("apns-push-type", "nonsense"), ("apns-topic", "com.example.chat")]) == (400, "InvalidPushType"))
        #expect(try await push.raw([bearer, ("apns-push-type", "alert")]) == (400, "MissingTopic"))
        #expect(try await push.raw([bearer] + voip, token: "abc") == (400, "BadDeviceToken"))
        #expect(try await push.raw([bearer] + voip, token: "") == (400, "MissingDeviceToken"))
        #expect(try await push.raw([bearer] + voip, path: "/3/device") == (400, "MissingDeviceToken"))
        #expect(try await push.raw([bearer] + voip, path: "/3/devices/" + PushFixture.token(1)) == (404, "BadPath"))
        #expect(try await push.raw([bearer] + voip + [("apns-priority", "7")]) == (400, "BadPriority"))
        #expect(try await push.raw([bearer] + voip + [("apns-expiration", "soon")]) == (400, "BadExpirationDate"))
        #expect(try await push.raw([bearer] + voip + [("apns-id", "not-a-uuid")]) == (400, "BadMessageId"))
        #expect(try await push.raw([bearer] + voip + [("apns-topic", "com.example.chat.voip")]) == (400, "DuplicateHeaders"))
        #expect(try await push.raw([bearer] + voip, body: "") == (400, "PayloadEmpty"))
        #expect(try await push.raw([bearer] + voip, body: "[1]") == (400, "BadPayload"))
        let big = #"{"x":""# + String(repeating: "a", count: 5200) + #""}"#
        #expect(try await push.raw([bearer] + voip, body: big) == (413, "PayloadTooLarge"))
        push.sandbox.setToken(PushFixture.token(1), .topic("com.other.voip"))
        #expect(try await push.raw([bearer] + voip) == (400, "DeviceTokenNotForTopic"))
    }

    @Test func anOversizedPayloadIsRefusedBeforeAnythingIsSent() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        let tooBig = await push.client.send(push.voip(1, payload: Array(repeating: 0x20, count: 5121)))
        #expect(tooBig.failure == .payloadTooLarge)
        #expect(tooBig.attempts == 0)
        var alert = push.voip(2, payload: Array(repeating: 0x20, count: 4097))
        alert.type = .alert
        #expect(await push.client.send(alert).failure == .payloadTooLarge)
        #expect(push.sandbox.requestCount == 0)
        let limit = #"{"x":""# + String(repeating: "a", count: 5120 - 8) + #""}"#
        #expect(await push.client.send(push.voip(3, payload: Array(limit.utf8))).accepted)
    }

    @Test func oneProviderTokenIsReusedAndRefreshedEvery40Minutes() async throws {
        let push = try PushFixture(useClock: true)
        defer { push.stop() }
        // Three hours of traffic: 36 bursts of 20 concurrent pushes, five minutes apart.
        var failures: [PushFailureReason] = []
        for burst in 0..<36 {
            let results = await withTaskGroup(of: PushResult.self) { group in
                for index in 0..<20 { group.addTask { await push.client.send(push.voip(burst * 100 + index)) } }
                return await group.reduce(into: [PushResult]()) { $0.append($1) }
            }
            failures += results.compactMap(\.failure)
            push.clock.advance(by: 5 * 60)
        }
        #expect(failures.isEmpty, "\(failures.prefix(3))")
        // 180 minutes at one token per 40: tokens minted at 0, 40, 80, 120 and 160 minutes.
        #expect(push.tokens.mintCount == 5)
        #expect(push.tokens.mintCount <= 180 / 20 + 1, "never more than one new token per 20 minutes")
        #expect(push.sandbox.tokenUpdates == 4)
    }

    @Test func expiredProviderTokenIsReMintedOnceAndRetriedOnce() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        push.sandbox.inject(.expiredProviderToken(count: 1))
        let recovered = await push.client.send(push.voip(1))
        #expect(recovered.accepted)
        #expect(recovered.attempts == 2)
        #expect(push.tokens.mintCount == 2)

        push.sandbox.inject(.expiredProviderToken(count: 5))
        let refused = await push.client.send(push.voip(2))
        #expect(refused.failure == .expiredProviderToken)
        #expect(refused.attempts == 2, "one retry, not a loop")
        #expect(push.tokens.mintCount == 3)
    }

    @Test func unregisteredDisablesATokenOnlyWhenItWasNotRegisteredAgainLater() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        let store = try Store(directory: push.directory + "/store")
        defer { store.close() }
        let (sink, logged) = Logger.Sink.memory()
        let service = PushService(client: push.client, store: store, logger: Logger(minimumLevel: .info, sink: sink))
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        let stale = PushFixture.token(1)
        let fresh = PushFixture.token(2)
        try store.registerPushToken(stale, appID: "app", kind: "voip", at: t0)
        try store.registerPushToken(fresh, appID: "app", kind: "voip", at: t0.addingTimeInterval(120))
        let invalidSince = Int64(t0.addingTimeInterval(60).timeIntervalSince1970 * 1000)
        push.sandbox.setToken(stale, .unregistered(since: invalidSince))
        push.sandbox.setToken(fresh, .unregistered(since: invalidSince))

        let first = await service.send(push.voip(1))
        guard case .unregistered(let since)? = first.failure else {
            Issue.record("expected Unregistered, got \(String(describing: first.failure))")
            return
        }
        #expect(since.map { Int64($0.timeIntervalSince1970 * 1000) } == invalidSince)
        #expect(first.status == 410)
        #expect(try store.pushToken(stale)?.isActive == false)
        #expect(try store.pushToken(stale)?.disabledReason == "Unregistered")

        _ = await service.send(push.voip(2))
        #expect(try store.pushToken(fresh)?.isActive == true, "registered after the 410 timestamp: kept")

        push.sandbox.setToken(fresh, .bad)
        #expect(await service.send(push.voip(2)).failure == .badDeviceToken)
        #expect(try store.pushToken(fresh)?.isActive == false)

        // Each line about a dead token says where it was sent (a sandbox/production mix-up
        // reads as BadDeviceToken), and never the whole token.
        let lines = logged().filter { $0.contains("msg=\"push token") }
        #expect(lines.count == 3, "\(logged())")
        for line in lines {
            #expect(line.contains("environment=sandbox") && line.contains("bundle_id="), "\(line)")
            #expect(!line.contains(stale) && !line.contains(fresh), "\(line)")
        }
        #expect(lines.last?.contains("reason=BadDeviceToken") == true)
    }

    @Test func throttlingIsRetriedWithBackoffAndStopsAtTheDeadline() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        push.sandbox.inject(.status(503, count: 2))
        let recovered = await push.client.send(push.voip(1))
        #expect(recovered.accepted)
        #expect(recovered.attempts == 3)

        // Backoffs of 20, 40, 80, 160, 200 ms... leave room for several attempts before the
        // deadline even on a loaded machine (1.5 s once saw only two, right after a benchmark);
        // the answers never stop coming back 429.
        push.sandbox.inject(.status(429, count: 10_000))
        let started = ContinuousClock.now
        let deadline = Duration.milliseconds(3000) * testSlowdown
        let gaveUp = await push.client.send(push.voip(2), deadline: .now + deadline)
        let elapsed = ContinuousClock.now - started
        #expect(gaveUp.failure == .tooManyRequests)
        #expect(gaveUp.attempts >= 3)
        #expect(elapsed < deadline + .seconds(1) * testSlowdown, "stopped at the deadline, took \(elapsed)")
    }

    @Test func goAwayInTheMiddleOf1000ConcurrentPushesAnswersEachExactlyOnce() async throws {
        let push = try PushFixture(connections: 1)
        defer { push.stop() }
        push.sandbox.inject(.goAway(afterStreams: 300))
        let results = await withTaskGroup(of: PushResult.self) { group in
            for index in 0..<1000 { group.addTask { await push.client.send(push.voip(index)) } }
            return await group.reduce(into: [PushResult]()) { $0.append($1) }
        }
        #expect(results.count == 1000)
        let failures = results.compactMap(\.failure)
        #expect(failures.isEmpty, "\(failures.prefix(3))")
        let accepted = push.sandbox.records.filter { $0.status == 200 }
        #expect(accepted.count == 1000, "no push delivered twice")
        #expect(Set(accepted.map(\.apnsID)).count == 1000)
        #expect(Set(accepted.map(\.apnsID)) == Set(results.map(\.apnsID)))
        #expect(Set(accepted.map(\.connection)).count >= 2, "the GOAWAY moved traffic to a new connection")
        #expect(push.sandbox.peakConnectionCount <= 1, "never more usable connections than the pool")
        #expect(push.sandbox.connectionsAccepted >= 2, "each GOAWAY (every 300 streams) moved traffic to a replacement")
    }

    @Test func configurationErrorsRaiseAnAlarm() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        push.sandbox.setToken(PushFixture.token(1), .topic("com.somebody.else.voip"))
        let result = await push.client.send(push.voip(1))
        #expect(result.failure == .deviceTokenNotForTopic)
        #expect(push.metrics.counter("switchboard_apns_config_alarms_total", ["reason": "DeviceTokenNotForTopic"]) == 1)
        #expect(push.metrics.counter("switchboard_apns_pushes_total", ["type": "voip", "reason": "DeviceTokenNotForTopic"]) == 1)
    }

    @Test func aSimulatedDeviceReceivesEachAcceptedPush() async throws {
        let push = try PushFixture()
        defer { push.stop() }
        let device = try await TestClient.connect("ws://127.0.0.1:\(push.sandbox.adminPort)/devices/\(PushFixture.token(9))")
        #expect(try await device.next() == .text(#"{"subscribed":true}"#), "subscribed before any push is sent")
        let result = await push.client.send(push.voip(9))
        #expect(result.accepted)
        guard case .text(let text) = try await device.next() else {
            Issue.record("expected a text message")
            return
        }
        let record = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(record["apns_id"]?.stringValue == result.apnsID)
        #expect(record["payload"]?["call_id"] == "c-9")
        _ = await push.client.send(push.voip(10))
        try await device.expectSilence()
        device.socket.close()
    }
}

@Suite(.timeLimit(.minutes(3))) struct HTTPClientTimeoutTests {
    /// A timeout under a second is kept (a push with 300 ms of ringing left), not rounded down
    /// to 0, which libcurl reads as "wait forever".
    @Test func aSubSecondTimeoutEndsTheRequest() async throws {
        let silent = try ListeningSockets(host: "127.0.0.1", port: 0)  // accepts nothing, answers nothing
        defer { silent.close() }
        let url = "http://127.0.0.1:\(silent.port)/never"
        for timeout in [Duration.milliseconds(300), .microseconds(300)] {
            // On a thread of its own: a request that never ends must not hang the test.
            let ended = DispatchSemaphore(value: 0)
            let outcome = Locked("waiting")
            Thread.detachNewThread {
                do {
                    _ = try HTTPClient.perform("GET", url, timeout: timeout)
                    outcome.withLock { $0 = "answered" }
                } catch {
                    outcome.withLock { $0 = "failed" }
                }
                ended.signal()
            }
            let finished = ended.wait(timeout: .now() + 10 * Double(testSlowdown)) == .success
            #expect(finished, "a request with a \(timeout) timeout still waits after 10 s")
            #expect(outcome.withLock { $0 } == "failed", "\(timeout)")
        }
    }
}
