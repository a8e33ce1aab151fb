import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// The call UI an app ships where CallKit may not be used: the alert push rings the app's own
/// screen, the phone acknowledges it, the user's taps reach the server, and the app's audio
/// session is activated for the call and deactivated after it.
@Suite(.serialized, .timeLimit(.minutes(3))) struct InAppCallSystemTests {
    @Test func anAlertPushRingsTheAppsScreenAndTheUsersTapsReachTheServer() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let phone = try InAppPhone(stack: stack)
        defer { phone.stop() }
        let (system, manager, client, audio, screen, heard) = (phone.system, phone.manager, phone.client, phone.audio, phone.screen, phone.heard)
        try await DeviceRegistrar(client: client).register(
            voipToken: nil, apnsToken: Data(repeating: 0xCD, count: 32), environment: "sandbox", bundleID: "com.example.chat",
            appVersion: "1.0", policy: .noCallKit)

        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        let callID = id.uuidString.lowercased()
        try await eventually("an alert push") { stack.sandbox.records.contains { $0.pushType == "alert" } }
        let alert = try #require(stack.sandbox.records.first { $0.pushType == "alert" })
        let userInfo = try #require(try JSONSerialization.jsonObject(with: Data(alert.payloadBytes)) as? [String: Any])
        manager.handleIncomingAlertPush(userInfo: userInfo)
        manager.handleIncomingAlertPush(userInfo: userInfo)  // tapped later: the same call, not a second one
        try await eventually("the app's screen to ring") { screen.withLock { $0 }.contains { if case .incoming(id, _) = $0 { true } else { false } } }
        #expect(system.liveCallIDs == [id])
        #expect(screen.withLock { $0 }.filter { if case .incoming = $0 { true } else { false } }.count == 1)
        try await eventually("ringing_shown in the trace") {
            let response = try? await HTTPClient.request(
                "GET", stack.baseURL + "/v1/calls/\(callID)/trace", headers: [("Authorization", "Bearer " + stack.token("alice"))])
            return response?.text.contains("ringing_shown") == true
        }
        #expect(audio.withLock { $0 }.isEmpty, "no audio session while it rings")

        #expect(await system.answer(id))
        try await eventually("the call to be up on the server") { await self.state(alice, id)?["state"] == "accepted" }
        #expect(audio.withLock { $0 } == [true])
        try await eventually("the app to hear audio start") { heard.withLock { $0 }.contains { if case .audioActive(true, _) = $0 { true } else { false } } }
        #expect(heard.withLock { $0 }.contains(.connected(id)))

        #expect(await system.setHeld(id, true))
        try await eventually("the server to hear the hold") { await self.state(alice, id)?["on_hold"] == ["bob"] }
        #expect(audio.withLock { $0 } == [true, false], "a held call gives the session up")
        #expect(await system.setHeld(id, false))
        #expect(audio.withLock { $0 } == [true, false, true])

        #expect(await system.end(id))
        try await eventually("the call to end on the server") { await self.state(alice, id)?["state"] == "ended" }
        #expect(audio.withLock { $0 } == [true, false, true, false])
        #expect(screen.withLock { $0 }.last == .endedByUser(id))
        #expect(system.liveCallIDs.isEmpty)
        await #expect(throws: CallSystemError.unknownCallUUID) { try await system.request(.end(id)) }
        await alice.disconnect()
        await client.disconnect()
    }

    /// The caller ends first: the app's screen hears why, and the session is given up.
    @Test func aCallEndedByTheCallerLeavesTheAppsScreen() async throws {
        let stack = try Stack()
        defer { stack.stop() }
        let phone = try InAppPhone(stack: stack)
        defer { phone.stop() }
        let (system, client, audio, screen) = (phone.system, phone.client, phone.audio, phone.screen)
        try await client.connect()
        let alice = try await caller(stack)
        let id = try await createCall(alice, to: "bob")
        try await eventually("the app's screen to ring over the connection") { system.liveCallIDs == [id] }
        #expect(await system.answer(id))
        try await alice.request(MessageType.callEnd, encoding: CallActionRequest(callID: id.uuidString.lowercased()))
        try await eventually("the app's screen to hear the end") { screen.withLock { $0 }.last == .ended(id, .remoteEnded) }
        #expect(audio.withLock { $0 } == [true, false])
        await alice.disconnect()
        await client.disconnect()
    }

    func state(_ client: SwitchboardClient, _ id: UUID) async -> JSONValue? {
        try? await client.callState(id.uuidString.lowercased(), http: CurlHTTPTransport())
    }
}

/// Bob's phone with the in-app call UI: what its screen showed, what the app heard, and every
/// activation (true) and deactivation of its audio session.
final class InAppPhone: Sendable {
    let system: InAppCallSystem
    let client: SwitchboardClient
    let manager: CallManager
    let audio = Locked<[Bool]>([])
    let screen = Locked<[InAppCallSystem.Event]>([])
    let heard = Locked<[CallManagerEvent]>([])
    private let followers: [Task<Void, Never>]

    init(stack: Stack) throws {
        let audio = self.audio
        system = InAppCallSystem(audioSession: { active, _ in audio.withLock { $0.append(active) } })
        let token = stack.token("bob")
        client = try SwitchboardClient(serverURL: stack.url, deviceID: "b-cn") { token }
        manager = CallManager(client: client, system: system, serverTimeout: .seconds(5))
        manager.start()
        let (systemEvents, managerEvents, screen, heard) = (system.events, manager.events, screen, heard)
        followers = [
            Task { for await event in systemEvents { screen.withLock { $0.append(event) } } },
            Task { for await event in managerEvents { heard.withLock { $0.append(event) } } },
        ]
    }

    func stop() { followers.forEach { $0.cancel() } }
}
