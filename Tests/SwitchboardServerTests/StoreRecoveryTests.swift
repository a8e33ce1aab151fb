import Foundation
import SwitchboardProtocol
import Testing

@testable import SwitchboardServer
import SwitchboardCore

/// Recovery at start ends only the calls of processes that are gone, never those of the
/// process that runs it (the design a store shared by several servers needs).
@Suite(.timeLimit(.minutes(3))) struct StoreRecoveryTests {
    func ringing(_ id: String) -> CallState {
        CallState(
            id: id, appID: "app", caller: "alice", callerDevice: "a", callees: ["bob"], busy: [], connected: ["bob"], phones: [:],
            now: .now, nowMillis: 1_000, ringTimeout: .seconds(45))
    }

    @Test func recoveryEndsTheCallsOfOtherOwnersOnly() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let crashed = try Store(directory: directory, owner: "p_crashed")
        crashed.saveCall(ringing("c-crashed"), idempotencyKey: nil)
        crashed.close()

        let running = try Store(directory: directory, owner: "p_running")
        defer { running.close() }
        running.saveCall(ringing("c-running"), idempotencyKey: nil)
        running.flush()
        #expect(try running.failInterruptedCalls(nowMillis: 2_000) == 1)
        #expect(try running.callSummary(id: "c-crashed", appID: "app")?.summary["outcome"] == "failed")
        #expect(try running.callSummary(id: "c-crashed", appID: "app")?.summary["end_reason"] == "server_restart")
        #expect(try running.callSummary(id: "c-running", appID: "app")?.summary["state"] == "ringing", "its own call is untouched")
        #expect(try running.history(appID: "app", userID: "bob", limit: 10, before: nil).count == 1)
    }
}
