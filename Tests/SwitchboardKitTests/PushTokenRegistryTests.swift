import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardSupport
import SwitchboardSystem
import Testing

/// The platform's REST transport, except that the first registrations are slow or fail, as on
/// a phone waking on a poor network.
final class UnevenHTTP: HTTPTransport, @unchecked Sendable {
    // Safety: mutable state is behind `state`.
    private let inner = CurlHTTPTransport()
    private let state = Locked<(puts: Int, failing: Int, slowFirst: Duration?)>((0, 0, nil))

    init(failing: Int = 0, slowFirst: Duration? = nil) { state.withLock { $0 = (0, failing, slowFirst) } }

    var puts: Int { state.withLock { $0.puts } }

    func send(_ method: String, _ url: URL, bearer: String, json: Data?) async throws -> (status: Int, body: Data) {
        if method == "PUT" {
            let (number, fail, slow) = state.withLock { state -> (Int, Bool, Duration?) in
                state.puts += 1
                let fail = state.failing > 0
                if fail { state.failing -= 1 }
                return (state.puts, fail, state.puts == 1 ? state.slowFirst : nil)
            }
            if fail { throw URLError(.networkConnectionLost) }
            if let slow, number == 1 { try await Task.sleep(for: slow) }
        }
        return try await inner.send(method, url, bearer: bearer, json: json)
    }
}

@Suite(.timeLimit(.minutes(3))) struct PushTokenRegistryTests {
    static let voip = Data((0..<32).map { UInt8($0) })
    static let apns = Data((0..<32).map { UInt8(255 - $0) })

    func registry(_ stack: Stack, http: UnevenHTTP) throws -> PushTokenRegistry {
        let token = stack.token("bob")
        let client = try SwitchboardClient(serverURL: stack.url, deviceID: "b-phone") { token }
        return PushTokenRegistry(
            client: client, policy: .callKit, environment: "sandbox", bundleID: "com.example.chat", appVersion: "1.0", http: http,
            maxBackoff: .milliseconds(200))
    }

    /// The APNs token arrives first, its registration is slow, the VoIP token comes meanwhile:
    /// the registrations go one after the other, the last with both tokens, so the server keeps
    /// the VoIP token (issue 31, defect 3: sent at once, the slow one landed last and wiped it).
    @Test func tokensInAnyOrderEndRegisteredTogether() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let http = UnevenHTTP(slowFirst: .milliseconds(500))
        let tokens = try registry(stack, http: http)
        await tokens.setAPNsToken(Self.apns)
        await tokens.setVoIPToken(Self.voip)
        await tokens.settled()
        #expect(try await tokens.check() == PushTokenRegistry.Check(registered: true, voipTokenMatches: true, apnsTokenMatches: true))
        #expect(http.puts == 2)
        #expect(await tokens.voipToken == Self.voip)
        await tokens.client.disconnect()
    }

    /// Registrations that fail are retried until one lands; after every new connect (a
    /// sign-in) the tokens are registered again, and the self-check sees a token the server
    /// lost.
    @Test func aFailedRegistrationIsRetriedAndEveryConnectRegistersAgain() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let http = UnevenHTTP(failing: 3)
        let tokens = try registry(stack, http: http)
        await tokens.setVoIPToken(Self.voip)
        await tokens.setAPNsToken(Self.apns)
        await tokens.settled()
        #expect(try await tokens.check().ok)
        #expect(http.puts >= 4)
        #expect(await tokens.lastError == nil)

        // The server loses the device (deleted elsewhere); the self-check says so.
        let removed = try await HTTPClient.request(
            "DELETE", stack.baseURL + "/v1/devices/b-phone", headers: [("Authorization", "Bearer " + stack.token("bob"))])
        #expect(removed.status == 200 || removed.status == 204)
        #expect(try await tokens.check().registered == false)

        // A sign-out then a sign-in: the next connect registers both tokens again.
        await tokens.start()
        let before = await tokens.registrations
        await tokens.client.disconnect()
        try await tokens.client.connect()
        try await eventually("a registration after the connect") { await tokens.registrations > before }
        await tokens.settled()
        #expect(try await tokens.check().ok)
        await tokens.stop()
        await tokens.client.disconnect()
    }

    /// The storefront moves to mainland China: switching the policy registers the install
    /// without its VoIP token and with CallKit off, and returns only once the server has it (so
    /// the app may then drop PushKit); a VoIP token PushKit hands over later is not sent. Back
    /// out: the VoIP token is registered again. The policy decided is kept across launches.
    @Test func aPolicySwitchTakesTheVoIPTokenOffTheServerBeforeItReturns() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let http = UnevenHTTP(failing: 1)
        let tokens = try registry(stack, http: http)
        await tokens.setVoIPToken(Self.voip)
        await tokens.setAPNsToken(Self.apns)
        await tokens.settled()
        func device() async throws -> JSONValue? {
            let response = try await HTTPClient.request(
                "GET", stack.baseURL + "/v1/devices", headers: [("Authorization", "Bearer " + stack.token("bob"))])
            let body = try JSONDecoder().decode(JSONValue.self, from: Data(response.body))
            guard case .array(let devices)? = body["devices"] else { return nil }
            return devices.first { $0["device_id"] == "b-phone" }
        }
        #expect(try await device()?["voip_token"]?.stringValue != nil)

        await tokens.switchPolicy(to: .noCallKit)
        let china = try await device()
        #expect(china?["voip_token"] == nil || china?["voip_token"] == .null, "\(String(describing: china))")
        #expect(china?["callkit_enabled"] == false)
        #expect(china?["apns_token"]?.stringValue != nil, "alert pushes still reach it")
        await tokens.setVoIPToken(Self.voip)
        await tokens.settled()
        let later = try await device()?["voip_token"]
        #expect(later == nil || later == .null, "a VoIP token PushKit hands over later is not sent")

        await tokens.switchPolicy(to: .callKit)
        await tokens.setVoIPToken(Self.voip)
        await tokens.settled()
        #expect(try await tokens.check().ok)
        #expect(try await device()?["callkit_enabled"] == true)

        let suite = "switchboard.tests.policy." + UUID().uuidString
        #expect(RegionPolicyMemory(suiteName: suite).decided == nil, "nothing decided on a first launch")
        RegionPolicyMemory(suiteName: suite).remember(.noCallKit)
        #expect(RegionPolicyMemory(suiteName: suite).decided == .noCallKit)
        #expect(RegionPolicy.forRegion("CHN") == .noCallKit && RegionPolicy.forRegion("USA") == .callKit, "storefronts are alpha-3")
        await tokens.client.disconnect()
    }
}
