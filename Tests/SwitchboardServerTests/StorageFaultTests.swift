import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// `switchboard serve` in a mount namespace of its own, its data directory on a small tmpfs (4 MiB unless asked)
/// that the test fills, empties and makes read-only through a control script.
final class ConfinedServer: @unchecked Sendable {  // one test drives it at a time
    private let process = ChildProcess()
    private let control = Pipe()
    private let replies = Pipe()
    let directory: String
    /// What the control script has answered and not been read yet (filled as it arrives, so
    /// that a silent script is a timeout, never a read that blocks).
    private let buffered = Locked("")

    /// Whether this machine lets us mount a tmpfs in a new mount namespace (root or user namespaces).
    static let available: Bool = {
        let probe = ChildProcess()
        probe.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        probe.arguments = ["-m", "/bin/sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"]
        probe.standardError = FileHandle.nullDevice
        guard (try? ToolProcess.launch(probe)) != nil else { return false }
        probe.waitUntilExit()
        return probe.terminationStatus == 0
    }()

    static let script = #"""
        set -u
        mnt="$1"; bin="$2"; web="$3"; log="$4"; size="$5"
        mount -t tmpfs -o size="$size" tmpfs "$mnt" || { echo "no mount"; exit 1; }
        pid=""
        while read -r command argument; do
          case "$command" in
            start) "$bin" serve --port 0 --data-dir "$mnt/data" --web-root "$web" --log-level warning $argument > "$log.out" 2>> "$log.err" &
                   pid=$!; echo ok;;
            stop)  kill "$pid"; wait "$pid"; echo "exit $?";;
            fill)  cat /dev/zero > "$mnt/filler" 2>/dev/null; echo ok;;
            free)  rm -f "$mnt/filler"; echo ok;;
            ro)    mount -o remount,ro "$mnt"; echo "ok $?";;
            rw)    mount -o remount,rw "$mnt"; echo "ok $?";;
            copy)  cp -r "$mnt/data" "$argument"; echo ok;;
            size)  stat -c %s "$mnt/data/$argument" 2>/dev/null || echo 0;;
            quit)  break;;
          esac
        done
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
        exit 0
        """#

    /// `size`: the tmpfs's (the store's WAL alone may grow to 4 MiB before a checkpoint).
    init(size: String = "4m") throws {
        directory = try makeTemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory + "/mnt", withIntermediateDirectories: true)
        try Self.script.write(toFile: directory + "/control.sh", atomically: true, encoding: .utf8)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        process.arguments = [
            "-m", "/bin/bash", directory + "/control.sh", directory + "/mnt", productsDirectory + "/switchboard",
            repositoryRoot + "/web", directory + "/serve", size,
        ]
        process.standardInput = control
        process.standardOutput = replies
        // Not a `readabilityHandler`: the test process once crashed in libdispatch's event
        // loop while this test was stopping its script.
        ToolProcess.collect(replies.fileHandleForReading, into: buffered)
        try ToolProcess.launch(process)
    }

    /// Runs one control command and returns its reply line (waiting on a thread of its own).
    @discardableResult
    func run(_ command: String) async throws -> String {
        try await offThePool { try self.blockingRun(command) }
    }

    private func blockingRun(_ command: String) throws -> String {
        guard process.isRunning else { throw Timeout(what: "the control script (it exited) to run \(command)") }
        control.fileHandleForWriting.write(Data((command + "\n").utf8))
        let deadline = ContinuousClock.now + .seconds(20) * testSlowdown
        while true {
            let line = buffered.withLock { text -> String? in
                guard let end = text.firstIndex(of: "\n") else { return nil }
                let line = String(text[..<end])
                text = String(text[text.index(after: end)...])
                return line
            }
            if let line { return line }
            guard ContinuousClock.now < deadline, process.isRunning else { throw Timeout(what: "the control script's reply to \(command)") }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    /// Starts the server (with more `arguments`); returns its base URL once it serves.
    func start(_ arguments: String = "") async throws -> String {
        try? FileManager.default.removeItem(atPath: directory + "/serve.out")
        #expect(try await run("start " + arguments) == "ok")
        return try await within(.seconds(15), "the server to start") { [directory] in
            while true {
                let printed = (try? String(contentsOfFile: directory + "/serve.out", encoding: .utf8)) ?? ""
                if let match = printed.firstMatch(of: /running: (http:\/\/127\.0\.0\.1:\d+)\//) { return String(match.1) }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// The development app's credentials, printed by the first start.
    func credentials() throws -> (apiKey: String, secret: String) {
        let printed = try String(contentsOfFile: directory + "/serve.out", encoding: .utf8)
        let key = try #require(printed.firstMatch(of: /API key\s+(sbk_\w+)/)?.1)
        let secret = try #require(printed.firstMatch(of: /API secret\s+(\w+)/)?.1)
        return (String(key), String(secret))
    }

    var log: String { (try? String(contentsOfFile: directory + "/serve.err", encoding: .utf8)) ?? "" }

    func stop() {
        _ = try? blockingRun("quit")
        let deadline = ContinuousClock.now + .seconds(20)
        while process.isRunning && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { process.terminate() }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct StorageFaultTests {
    static func waitUntilReady(_ base: String) async throws {
        let last = Locked("")
        do {
            try await within(.seconds(10) * testSlowdown, "the store to take writes again") {
                while true {
                    let ready = try await HTTPClient.request("GET", base + "/readyz")
                    if ready.status == 200 { return }
                    last.withLock { $0 = ready.text }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        } catch let timeout as Timeout {
            throw Timeout(what: timeout.what + " (/readyz: \(last.withLock { $0 }))")
        }
    }

    /// The disk fills up in the middle of a call, then frees up; later the server starts on a
    /// read-only disk that becomes writable. Clear errors meanwhile, nothing lost, no corruption.
    /// Covers: error:unavailable
    @Test(.enabled(if: ConfinedServer.available, "needs a mount namespace (unshare -m) to put the store on a small tmpfs"))
    func aFullOrReadOnlyDiskRefusesWritesClearlyLosesNothingAndRecovers() async throws {
        let confined = try ConfinedServer()
        defer { confined.stop() }
        var base = try await confined.start()
        let (apiKey, secret) = try confined.credentials()
        func token(_ identity: String) -> String {
            AccessTokenVerifier.sign(
                AccessTokenIssuer.claims(
                    apiKey: apiKey, identity: identity, name: nil, grants: Grants(room: "*", roomJoin: true, call: true), ttlSeconds: 600),
                secret: secret)
        }
        func connect(_ identity: String) async throws -> TestClient {
            let client = try await TestClient.connect(
                base.replacingOccurrences(of: "http:", with: "ws:") + "/v1/ws?access_token=\(token(identity))&device_id=\(identity)-web")
            #expect(try await client.nextEnvelope().type == MessageType.sessionWelcome)
            return client
        }
        func rest(_ method: String, _ path: String, as identity: String, body: String? = nil) async throws -> HTTPClientResponse {
            try await HTTPClient.request(
                method, base + path, headers: [("Authorization", "Bearer " + token(identity))], body: body.map { Array($0.utf8) })
        }

        let alice = try await connect("alice")
        let bob = try await connect("bob")
        let created = try await alice.request(MessageType.callCreate, id: "c1", encoding: CallCreateRequest(callees: ["bob"]))
        let callID = try #require(created.data?["call_id"]?.stringValue)
        _ = try await event(bob, "call.incoming")

        // The disk fills up.
        #expect(try await confined.run("fill") == "ok")
        let refusedDevice = try await rest("PUT", "/v1/devices/phone", as: "bob", body: #"{"platform":"web"}"#)
        #expect(refusedDevice.status == 503)
        #expect(refusedDevice.text.contains("unavailable") && refusedDevice.text.contains("disk full"), "\(refusedDevice.text)")
        #expect(try await HTTPClient.request("GET", base + "/readyz").status == 503)
        #expect(try await HTTPClient.request("GET", base + "/healthz").status == 200)
        let refusedCall = try await alice.request(MessageType.callCreate, id: "c2", encoding: CallCreateRequest(callees: ["bob"]))
        #expect(refusedCall.error?.code == .unavailable, "\(refusedCall)")
        // The call in progress goes on; its records wait for the disk.
        #expect(try await bob.request(MessageType.callAnswer, id: "a", encoding: CallActionRequest(callID: callID)).type == MessageType.ok)
        _ = try await event(alice, "call.accepted")
        let metricsURL = base + "/metrics"
        try await within(.seconds(5), "the answer's record to wait for the disk") {
            while true {
                let page = try await HTTPClient.request("GET", metricsURL).text
                let backlog = page.split(separator: "\n").first { $0.hasPrefix("switchboard_store_backlog ") }
                if let backlog, let value = Double(backlog.split(separator: " ")[1]), value >= 1 { return }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(try await alice.request(MessageType.callEnd, id: "e", encoding: CallActionRequest(callID: callID)).type == MessageType.ok)
        // Rooms live in memory: signalling is unaffected.
        #expect(try await alice.request(MessageType.roomJoin, id: "j", encoding: RoomJoinRequest(room: "still-works")).type == MessageType.ok)

        // Space returns: the waiting records are written, writes work again.
        #expect(try await confined.run("free") == "ok")
        try await Self.waitUntilReady(base)
        #expect(try await rest("PUT", "/v1/devices/phone", as: "bob", body: #"{"platform":"web"}"#).status == 200)
        let history = try JSONDecoder().decode(JSONValue.self, from: Data(try await rest("GET", "/v1/calls", as: "bob").body))
        guard case .array(let entries)? = history["calls"] else { throw Timeout(what: "bob's history") }
        #expect(entries.count == 1)
        #expect(entries.first?["call_id"]?.stringValue == callID)
        #expect(entries.first?["outcome"] == "completed", "\(String(describing: entries.first))")
        let trace = try JSONDecoder().decode(JSONValue.self, from: Data(try await rest("GET", "/v1/calls/\(callID)/trace", as: "alice").body))
        guard case .array(let steps)? = trace["trace"] else { throw Timeout(what: "the call's trace") }
        #expect(steps.contains { $0["event"] == "answered" } && steps.contains { $0["event"] == "ended" }, "\(steps)")
        #expect(confined.log.contains("storage refuses writes") && confined.log.contains("storage takes writes again"))
        alice.socket.close()
        bob.socket.close()

        // The server starts on a read-only disk: it serves, refuses writes clearly, and takes
        // them once the disk is writable again.
        #expect(try await confined.run("stop") == "exit 0")
        #expect(try await confined.run("ro") == "ok 0")
        base = try await confined.start()
        let readOnly = try await HTTPClient.request("GET", base + "/readyz")
        #expect(readOnly.status == 503 && readOnly.text.contains("read-only"), "\(readOnly.text)")
        #expect(try await rest("GET", "/v1/calls", as: "bob").status == 200, "reads work")
        #expect(try await rest("PUT", "/v1/devices/tablet", as: "bob", body: #"{"platform":"web"}"#).status == 503)
        #expect(try await confined.run("rw") == "ok 0")
        try await Self.waitUntilReady(base)
        #expect(try await rest("PUT", "/v1/devices/tablet", as: "bob", body: #"{"platform":"web"}"#).status == 200)

        // What the disk holds is sound and whole.
        #expect(try await confined.run("stop") == "exit 0")
        #expect(try await confined.run("copy \(confined.directory)/copy") == "ok")
        let store = try Store(directory: confined.directory + "/copy")
        defer { store.close() }
        #expect(try store.integrityCheck() == "ok")
        #expect(try store.devices(appID: try #require(store.allApps().first?.id), userID: "bob").map(\.deviceID).sorted() == ["phone", "tablet"])
        #expect(try store.history(appID: try #require(store.allApps().first?.id), userID: "alice", limit: 10, before: nil).count == 1)
    }

    /// The server starts on a read-only disk that then becomes writable. The thread that copies
    /// SQLite's WAL into the database opened its connection read-only; it opens it again, so
    /// the WAL starts over after a checkpoint instead of growing with every write until the
    /// disk is full.
    @Test(.enabled(if: ConfinedServer.available, "needs a mount namespace (unshare -m) to put the store on a small tmpfs"))
    func theWALIsCheckpointedOnceADiskThatWasReadOnlyAtTheStartIsWritable() async throws {
        let confined = try ConfinedServer(size: "64m")
        defer { confined.stop() }
        _ = try await confined.start()
        let (apiKey, secret) = try confined.credentials()
        #expect(try await confined.run("stop") == "exit 0")
        #expect(try await confined.run("ro") == "ok 0")
        let base = try await confined.start()
        #expect(try await HTTPClient.request("GET", base + "/readyz").status == 503)
        #expect(try await confined.run("rw") == "ok 0")
        try await Self.waitUntilReady(base)

        // One commit a registration, each a few pages of the WAL: some 24 MB in all, where a
        // checkpoint falls due every 4 MB (1,000 pages).
        let url = base + "/v1/devices/phone"
        var largest = 0
        for round in 0..<8 {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<4 {
                    group.addTask {
                        for index in 0..<250 {
                            let token = AccessTokenVerifier.sign(
                                AccessTokenIssuer.claims(
                                    apiKey: apiKey, identity: "user-\(round)-\(writer)-\(index)", name: nil, grants: Grants(call: true),
                                    ttlSeconds: 600),
                                secret: secret)
                            let response = try await HTTPClient.request(
                                "PUT", url, headers: [("Authorization", "Bearer " + token)],
                                body: Array(#"{"platform":"web","app_version":"\#(String(repeating: "9", count: 60))"}"#.utf8))
                            try #require(response.status == 200, "\(response.text)")
                        }
                    }
                }
                try await group.waitForAll()
            }
            largest = max(largest, Int(try await confined.run("size switchboard.db-wal")) ?? -1)
        }
        #expect(largest > 0 && largest < 12 << 20, "the WAL started over after checkpoints: it reached \(largest) bytes")
        #expect(try await HTTPClient.request("GET", base + "/readyz").status == 200)
    }

    /// The disk fills with more writes waiting than `store_backlog_writes`: the oldest are lost
    /// and counted, the backlog never holds more than the limit, and the newest are written
    /// once the disk recovers.
    /// Covers: limit:store_backlog_writes
    @Test(.enabled(if: ConfinedServer.available, "needs a mount namespace (unshare -m) to put the store on a small tmpfs"))
    func pastTheBacklogLimitTheOldestWaitingWritesAreLostAndTheNewestKept() async throws {
        let confined = try ConfinedServer(size: "32m")
        defer { confined.stop() }
        let base = try await confined.start("--store-backlog-writes 100 --invites-per-minute 1000 --invites-per-pair-per-minute 1000")
        let (apiKey, secret) = try confined.credentials()
        func token(_ identity: String) -> String {
            AccessTokenVerifier.sign(
                AccessTokenIssuer.claims(apiKey: apiKey, identity: identity, name: nil, grants: Grants(call: true), ttlSeconds: 600),
                secret: secret)
        }
        @Sendable func metric(_ name: String) async throws -> Double {
            let text = try await HTTPClient.request("GET", base + "/metrics").text
            let line = try #require(text.split(separator: "\n").first { $0.hasPrefix(name + " ") }, "\(name) in /metrics")
            return Double(line.split(separator: " ").last ?? "") ?? -1
        }
        let ws = base.replacingOccurrences(of: "http:", with: "ws:") + "/v1/ws?access_token="
        let alice = try await TestClient.connect(ws + token("alice") + "&device_id=a")
        #expect(try await alice.nextEnvelope().type == MessageType.sessionWelcome)
        let bob = try await TestClient.connect(ws + token("bob") + "&device_id=b")
        #expect(try await bob.nextEnvelope().type == MessageType.sessionWelcome)
        defer { bob.socket.close() }
        var calls: [String] = []
        for index in 0..<80 {
            let reply = try await alice.request(MessageType.callCreate, id: .string("c\(index)"), encoding: CallCreateRequest(callees: ["bob"]))
            calls.append(try #require(reply.data?["call_id"]?.stringValue, "\(reply)"))
        }
        try await Self.waitUntilReady(base)
        #expect(try await confined.run("fill") == "ok")
        // Each cancel waits to write the call, its history and its trace: far more than 100.
        for (index, callID) in calls.enumerated() {
            let reply = try await alice.request(MessageType.callCancel, id: .string("x\(index)"), encoding: CallActionRequest(callID: callID))
            #expect(reply.type == MessageType.ok, "\(reply)")
        }
        try await within(.seconds(10) * testSlowdown, "writes to be dropped") {
            while try await metric("switchboard_store_writes_dropped_total") < 1 { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(try await metric("switchboard_store_backlog") == 100, "the backlog holds the limit, no more")
        let dropped = try await metric("switchboard_store_writes_dropped_total")
        #expect(confined.log.contains("store backlog full"))

        #expect(try await confined.run("free") == "ok")
        try await Self.waitUntilReady(base)
        try await within(.seconds(10) * testSlowdown, "the backlog to be written") {
            while try await metric("switchboard_store_backlog") != 0 { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(try await metric("switchboard_store_writes_dropped_total") == dropped, "nothing more lost once writable")
        let response = try await HTTPClient.request("GET", base + "/v1/calls?limit=200", headers: [("Authorization", "Bearer " + token("alice"))])
        let history = try JSONDecoder().decode(JSONValue.self, from: Data(response.body))
        guard case .array(let entries)? = history["calls"] else { throw Timeout(what: "alice's history: \(response.text)") }
        let ended = entries.filter { $0["outcome"] == "cancelled" }.compactMap { $0["call_id"]?.stringValue }
        #expect(ended.contains(calls.last!), "the newest waiting write was kept")
        #expect(ended.count < calls.count, "the oldest were lost: \(ended.count) of \(calls.count) cancelled calls recorded")
        alice.socket.close()
    }
}
