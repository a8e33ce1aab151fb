import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// `switchboard serve` as a child process on a fixed port, so it can be killed with SIGKILL and
/// started again where the clients expect it.
final class ServerProcess: Sendable {
    let port: Int
    let dataDirectory: String
    private let arguments: [String]
    private let current = Locked<ChildProcess?>(nil)

    var baseURL: String { "http://127.0.0.1:\(port)" }
    /// The server's log (both runs).
    var logPath: String { dataDirectory + "/../serve.log" }

    init(dataDirectory: String, sandbox: APNsSandbox) throws {
        self.dataDirectory = dataDirectory
        port = try freeLoopbackPort()
        arguments = [
            "serve", "--port", String(port), "--data-dir", dataDirectory, "--web-root", repositoryRoot + "/web",
            "--apns-url", sandbox.url, "--apns-ca-file", sandbox.certificatePath, "--log-level", "warning",
        ]
        try blockingStart()
    }

    /// Starts the server and waits until it answers `/healthz` (on a thread of its own: the
    /// wait polls with blocking requests).
    func start() async throws {
        try await offThePool { try self.blockingStart() }
    }

    private func blockingStart() throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: productsDirectory + "/switchboard")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        if !FileManager.default.fileExists(atPath: logPath) { _ = FileManager.default.createFile(atPath: logPath, contents: nil) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        log.seekToEndOfFile()
        process.standardError = log
        try ToolProcess.launch(process)
        current.withLock { $0 = process }
        let deadline = ContinuousClock.now + .seconds(15) * kitSlowdown
        while ContinuousClock.now < deadline {
            if let response = try? HTTPClient.perform("GET", baseURL + "/healthz", timeout: .seconds(1)), response.status == 200 { return }
            guard process.isRunning else { throw Timeout(what: "the server (it exited with \(process.terminationStatus))") }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw Timeout(what: "the server to listen on \(port)")
    }

    /// SIGKILL: no shutdown code runs, as in a crash or an OOM kill.
    func kill9() {
        guard let process = current.withLock({ $0 }) else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM, then SIGKILL if it has not exited within 20 s.
    func stop() {
        guard let process = current.withLock({ $0 }), process.isRunning else { return }
        process.terminate()
        let deadline = ContinuousClock.now + .seconds(20) * kitSlowdown
        while process.isRunning && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

@Suite(.timeLimit(.minutes(3))) struct CrashRecoveryTests {
    /// The server is killed with SIGKILL with one call in progress and one ringing. On restart
    /// the history is whole and says what happened, the phones reconnect on their own, end both
    /// calls with the reason the server gives, and the next call rings as usual.
    @Test func killMinus9DuringCallsLeavesConsistentHistoryAndClientsResume() async throws {
        let stack = try Stack(asProcess: true)
        defer { stack.stop() }
        let process = try #require(stack.process)
        let bob = try await stack.phone("bob", device: "b-phone", seed: 41)
        let carol = try await stack.phone("carol", device: "c-phone", seed: 42)
        try await bob.client.connect()
        try await carol.client.connect()
        let alice = try await caller(stack)

        let inProgress = try await createCall(alice, to: "bob")
        try await bob.receivePush()
        #expect(await bob.system.userAnswers(inProgress))
        try await eventually("bob's call to be connected") {
            bob.managerEvents.withLock { $0.contains(.connected(inProgress)) }
        }
        let ringing = try await createCall(alice, to: "carol")
        try await carol.receivePush()
        try await eventually("carol's phone to ring") { carol.system.call(ringing) != nil }

        process.kill9()
        try await process.start()

        // The phones come back by themselves and learn what became of their calls.
        try await eventually("both calls to end on the phones", within: .seconds(15)) {
            bob.ended(inProgress) != nil && carol.ended(ringing) != nil
        }
        #expect(bob.ended(inProgress) == .failed)
        #expect(carol.ended(ringing) == .failed)
        #expect(bob.manager.liveCallIDs.isEmpty && carol.manager.liveCallIDs.isEmpty)
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        #expect(carol.system.violations.isEmpty, "\(carol.system.violations)")

        // The caller's client reconnects by itself too.
        try await eventually("alice to reconnect", within: .seconds(10)) { await alice.isConnected }

        // The history: both calls, ended as failed by the restart, nothing else.
        let transport = CurlHTTPTransport()
        for id in [inProgress, ringing] {
            let summary = try await alice.callState(id.uuidString.lowercased(), http: transport)
            #expect(summary["state"] == "ended")
            #expect(summary["outcome"] == "failed")
            #expect(summary["end_reason"] == "server_restart")
        }
        let history = try await HTTPClient.request(
            "GET", stack.baseURL + "/v1/calls", headers: [("Authorization", "Bearer " + stack.token("alice"))])
        let calls = try JSONDecoder().decode(JSONValue.self, from: Data(history.body))
        guard case .array(let entries)? = calls["calls"] else { throw Timeout(what: "alice's history") }
        #expect(Set(entries.compactMap { $0["call_id"]?.stringValue }) == Set([inProgress, ringing].map { $0.uuidString.lowercased() }))

        // Life goes on: a new call rings bob's phone and connects.
        let next = try await createCall(alice, to: "bob")
        try await bob.receivePush()
        #expect(await bob.system.userAnswers(next))
        try await eventually("the new call to connect") { bob.managerEvents.withLock { $0.contains(.connected(next)) } }
        // The restarted server pushed with the provider token it had stored: a new one this soon
        // would be Apple's TooManyProviderTokenUpdates.
        #expect(stack.sandbox.tokenUpdates == 0, "the provider token is adopted after kill -9, not minted again")
        #expect(!stack.sandbox.records.contains { $0.reason == "TooManyProviderTokenUpdates" })
        #expect(bob.system.violations.isEmpty, "\(bob.system.violations)")
        await alice.disconnect()
        await bob.client.disconnect()
        await carol.client.disconnect()

        // The file the killed server left passes SQLite's integrity check.
        process.stop()
        let store = try Store(directory: process.dataDirectory)
        #expect(try store.integrityCheck() == "ok")
        store.close()
    }
}
