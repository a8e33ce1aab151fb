import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// Several `switchboard serve` processes on one PostgreSQL store (docs/operations.md says they
/// may share it): each one's calls are its own while it renews their lease.
@Suite(.enabled(if: TestPostgres.runs, TestPostgres.skipReason), .timeLimit(.minutes(3)))
struct SharedStoreTests {
    /// The review of the redesign found that starting a second server on a shared store ended
    /// every live call of the first (`server_restart`). Now the second leaves them alone for as
    /// long as the first lives (several leases), the first's call is answered and goes on; once
    /// the first is killed with SIGKILL, the second ends its call within the lease and its sweep,
    /// as `failed` / `server_restart`, with one history entry per participant.
    // Covers: limit:call_lease_seconds
    @Test func aSecondServerLeavesTheFirstsCallsAloneAndEndsThemOnlyOnceItDied() async throws {
        let database = try TestPostgres.database()
        defer { database.drop() }
        let store = try Store(postgres: database.url)
        defer { store.close() }
        let app = App.make(name: "Shared", bundleID: "com.example.shared")
        try store.insert(app)
        let lease = 3
        func serve() throws -> ToolProcess {
            try ToolProcess([
                "serve", "--port", "0", "--data-dir", try makeTemporaryDirectory(), "--store-url", database.url,
                "--web-root", repositoryRoot + "/web", "--call-lease-seconds", String(lease),
            ])
        }
        func token(_ identity: String) -> String {
            let claims = AccessTokenIssuer.claims(
                apiKey: app.apiKey, identity: identity, name: identity, handle: nil, grants: Grants(call: true), ttlSeconds: 600, now: Date())
            return AccessTokenVerifier.sign(claims, secret: app.apiSecret)
        }
        let first = try serve()
        defer { first.stopNow() }
        let firstPort = try await first.waitForPort()
        func connect(_ identity: String) async throws -> TestClient {
            let url = "ws://127.0.0.1:\(firstPort)/v1/ws?access_token=\(token(identity))&device_id=\(identity)-web"
            // The first connection of an app the server has not seen yet waits for its lookup.
            let client = try await within(.seconds(10), "a session on the first server") {
                while true {
                    if let client = try? await TestClient.connect(url) { return client }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(try await client.nextEnvelope().type == MessageType.sessionWelcome)
            return client
        }
        let alice = try await connect("alice"), bob = try await connect("bob")
        let created = try await alice.request(MessageType.callCreate, id: "create", encoding: CallCreateRequest(callees: ["bob"], ringTimeoutSeconds: 120))
        let callID = try #require(created.data?["call_id"]?.stringValue)
        _ = try await event(bob, "call.incoming")

        let second = try serve()
        defer { second.stopNow() }
        _ = try await second.waitForPort()
        // Two leases and more: the first renews, so its call is untouched and can be answered.
        try await Task.sleep(for: .seconds(lease * 2 + 1))
        #expect(try store.callSummary(id: callID, appID: app.id)?.summary["state"] == "ringing")
        let answered = try await bob.request(MessageType.callAnswer, id: "answer", encoding: CallActionRequest(callID: callID))
        #expect(answered.type == MessageType.ok, "\(String(describing: answered.error))")
        _ = try await event(alice, "call.accepted")
        try await Task.sleep(for: .seconds(lease + 1))
        #expect(try store.callSummary(id: callID, appID: app.id)?.summary["state"] == "accepted")

        first.kill9()
        let ended = try await within(.seconds(lease * 3 + 10), "the second server to end the dead server's call") {
            while true {
                if let summary = try store.callSummary(id: callID, appID: app.id)?.summary, summary["state"] == "ended" { return summary }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        #expect(ended["outcome"] == "failed")
        #expect(ended["end_reason"] == "server_restart")
        for user in ["alice", "bob"] {
            let history = try store.history(appID: app.id, userID: user, limit: 10, before: nil)
            #expect(history.map { $0["call_id"] } == [.string(callID)], "\(user)'s history holds the call once")
            #expect(history.first?["outcome"] == "failed")
        }
        #expect(second.standardError.contains("calls of a server that stopped renewing them ended as failed"))
        #expect(second.isRunning)
    }
}
