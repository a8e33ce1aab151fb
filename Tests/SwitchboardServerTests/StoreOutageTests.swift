import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// A PostgreSQL server of its own, for a test that stops and starts it (the run's shared one
/// stays up for the other tests). As root it runs as the `postgres` user: PostgreSQL refuses
/// root.
final class PostgresInstance: Sendable {
    let directory: String
    let port: Int
    var url: String { "postgres://sb@127.0.0.1:\(port)/postgres?connect_timeout=2" }
    private static let bin = "/usr/lib/postgresql/15/bin"

    init() throws {
        directory = try makeTemporaryDirectory()
        if getuid() == 0 { try FileManager.default.setAttributes([.ownerAccountName: "postgres"], ofItemAtPath: directory) }
        port = try freeLoopbackPort()
        try run(Self.bin + "/initdb", ["-D", directory + "/data", "-A", "trust", "-U", "sb", "--no-sync"])
        try start()
    }

    /// Starts the server and returns once it takes connections. (`pg_ctl` is not waited for:
    /// the server it starts keeps the pipe Foundation watches for the child's end.)
    func start() throws {
        try spawn(
            Self.bin + "/pg_ctl",
            ["-D", directory + "/data", "-l", directory + "/server.log", "-o", "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off",
             "start"])
        try wait("PostgreSQL to take connections") { (try? PostgresConnection(url: self.url)) != nil }
    }

    /// Stops the server as an operator would (`pg_ctl stop -m fast`: every connection cut), and
    /// returns once it is gone.
    func stop() throws {
        try spawn(Self.bin + "/pg_ctl", ["-D", directory + "/data", "-m", "fast", "stop"])
        try wait("PostgreSQL to stop") { !FileManager.default.fileExists(atPath: self.directory + "/data/postmaster.pid") }
    }

    func destroy() {
        _ = try? spawn(Self.bin + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "stop"])
        try? wait("PostgreSQL to stop") { !FileManager.default.fileExists(atPath: self.directory + "/data/postmaster.pid") }
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func wait(_ what: String, until done: () -> Bool) throws {
        let deadline = ContinuousClock.now + .seconds(30) * testSlowdown
        while !done() {
            guard ContinuousClock.now < deadline else {
                let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
                throw Timeout(what: "\(what): \(log.suffix(600))")
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    /// Starts `tool` as the server's user, without waiting for it.
    @discardableResult
    private func spawn(_ tool: String, _ arguments: [String]) throws -> ChildProcess {
        let process = ChildProcess()
        if getuid() == 0 {
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            process.arguments = ["-u", "postgres", "--", tool] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = arguments
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try ToolProcess.launch(process)
        return process
    }

    /// Runs `tool` as the server's user to its end, which must be a success.
    private func run(_ tool: String, _ arguments: [String]) throws {
        let process = try spawn(tool, arguments)
        let deadline = ContinuousClock.now + .seconds(60) * testSlowdown
        while process.isRunning {
            guard ContinuousClock.now < deadline else {
                process.terminate()
                throw Timeout(what: "\((tool as NSString).lastPathComponent) \(arguments.last ?? "")")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        guard process.terminationStatus == 0 else {
            let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
            throw Timeout(what: "\((tool as NSString).lastPathComponent) to succeed (exit \(process.terminationStatus)): \(log.suffix(600))")
        }
    }
}

/// The store's database going away under a running server: like a full disk, nothing committed
/// or asked for is lost, and the server recovers by itself.
@Suite(.enabled(if: TestPostgres.runs, TestPostgres.skipReason), .timeLimit(.minutes(3)))
struct StoreOutageTests {
    @Test func aPostgreSQLStoppedMidCallLosesNothingAndTheServerRecoversWhenItIsBack() async throws {
        // Starting and stopping a server blocks for a second or so: on a thread of its own, not
        // one of the few the tests share.
        let postgres = try await offThePool { try PostgresInstance() }
        defer { postgres.destroy() }
        let fixture = try CallFixture { $0.storeURL = postgres.url }
        defer { fixture.stop() }
        let base = fixture.server.baseURL
        let alice = try await fixture.connect("alice", device: "a-web")
        let bob = try await fixture.connect("bob", device: "b-web")
        let callID = try await fixture.call(alice, to: ["bob"])
        _ = try await event(bob, "call.incoming")
        #expect(try await fixture.act(bob, MessageType.callAnswer, callID).type == MessageType.ok)
        _ = try await event(alice, "call.accepted")
        #expect(try await HTTPClient.request("GET", base + "/readyz").status == 200)

        try await offThePool { try postgres.stop() }
        // The call goes on in memory and ends while the database is down.
        #expect(try await fixture.act(alice, MessageType.callEnd, callID).data?["outcome"] == "completed")
        _ = try await event(bob, "call.ended")
        try await within(.seconds(10), "/readyz to say the store is down") {
            while try await HTTPClient.request("GET", base + "/readyz").status != 503 { try await Task.sleep(for: .milliseconds(50)) }
        }
        let metrics = try await HTTPClient.request("GET", base + "/metrics").text
        #expect(metrics.contains("switchboard_store_writable 0"))
        let refused = try await alice.request(MessageType.callCreate, id: "c2", encoding: CallCreateRequest(callees: ["bob"]))
        #expect(refused.error?.code == .unavailable, "no call that could not be recorded")

        try await offThePool { try postgres.start() }
        try await within(.seconds(20), "the store to take writes again") {
            while try await HTTPClient.request("GET", base + "/readyz").status != 200 { try await Task.sleep(for: .milliseconds(100)) }
        }
        let summary = try await fixture.get("/v1/calls/\(callID)", as: "bob")
        #expect(summary["state"] == "ended" && summary["ended_by"] == "alice", "\(summary)")
        let history = try await fixture.get("/v1/calls", as: "bob")
        guard case .array(let calls)? = history["calls"] else { throw Timeout(what: "bob's history: \(history)") }
        #expect(calls.map { $0["call_id"]?.stringValue } == [callID])
        #expect(calls.first?["outcome"] == "completed")
        let trace = try await fixture.get("/v1/calls/\(callID)/trace", as: "alice")
        guard case .array(let entries)? = trace["trace"] else { throw Timeout(what: "a trace") }
        let events = entries.compactMap { $0["event"]?.stringValue }
        #expect(events.contains("answered") && events.contains("ended"), "\(events)")
        #expect(events.filter { $0 == "ended" }.count == 1, "written once")
        #expect(try await alice.request(MessageType.callCreate, id: "c3", encoding: CallCreateRequest(callees: ["bob"])).type == MessageType.ok)
    }

    /// A read connection whose server went away connects again by itself, at its next read, with
    /// no write first (a write's recovery renews every read connection, which would hide it).
    @Test func aReadConnectionReconnectsByItselfWhenPostgreSQLIsBack() async throws {
        let postgres = try await offThePool { try PostgresInstance() }
        defer { postgres.destroy() }
        // One read connection (the pool counts the writer): every read below is on it.
        let store = try await offThePool { try Store(postgres: postgres.url, limits: Store.Limits(poolSize: 2)) }
        defer { store.close() }
        let backend: @Sendable () throws -> [[SQLValue]] = { try store.read { try $0.query("SELECT pg_backend_pid()") } }
        let before = try await offThePool(backend)
        try await offThePool { try postgres.stop() }
        let down = await #expect(throws: (any Error).self) { try await offThePool(backend) }
        #expect((down as? any StorageFailure)?.storageProblem == "database unavailable", "\(String(describing: down))")
        try await offThePool { try postgres.start() }
        // Nothing written, flushed or performed since: only the read path can have reconnected.
        let after = try await offThePool(backend)
        #expect(after != before, "a new session on the restarted server")
        #expect(try store.allApps().isEmpty)
    }
}
