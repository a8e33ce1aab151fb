import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSupport
import SwitchboardSystem
import Testing

/// The findings of the security review that need the real server: sockets, the store's
/// engines, files and processes.
@Suite(.timeLimit(.minutes(3))) struct SecurityIntegrationTests {
    func errorCode(_ response: HTTPClientResponse) -> String? {
        (try? JSONDecoder().decode(ErrorEnvelope.self, from: Data(response.body)))?.error.code.rawValue
    }

    func bearer(_ token: String) -> (String, String) { ("Authorization", "Bearer " + token) }

    // MARK: 1. Resume

    /// The review's run: a room peer sends 80 data messages of 15 KB (each within every limit)
    /// while bob's connection is lost; bob's resume used to be answered with a close 1008 (send
    /// queue full), at every retry. Now it gets a fresh session at once.
    @Test func aResumeThatMissedAMegabyteGetsAFreshSessionNotACloseForASlowConsumer() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let (alice, bob) = try await Peer.pair(in: "lobby", on: server)
        bob.client.socket.abort()
        try await within(.seconds(10), "the server to see bob's connection go") {
            while server.server.metrics.gauge("switchboard_connections") > 1 { try await Task.sleep(for: .milliseconds(10)) }
        }
        let chunk = String(repeating: "x", count: 15_000)
        for index in 0..<80 {
            let reply = try await alice.client.request(
                MessageType.data, id: .int(Int64(index)), encoding: DataRequest(room: "lobby", to: bob.peerID, data: ["pad": .string(chunk)]))
            #expect(reply.type == MessageType.ok)
        }
        let resumed = try await TestClient.connect(
            server.webSocketURL + "?access_token=\(server.token("bob", grants: Grants(room: "*", roomJoin: true)))"
                + "&resume_token=\(bob.resumeToken)&last_seq=0")
        let first = try await resumed.next()
        guard case .text(let text) = first else {
            Issue.record("the resume was answered with \(first), not a session")
            return
        }
        let hello = try JSONDecoder().decode(Envelope.self, from: Data(text.utf8))
        #expect(hello.type == MessageType.sessionWelcome)
        #expect(hello.data?["resume_failed"] == true)
        #expect(try await resumed.request(MessageType.ping).type == MessageType.ok, "the fresh session works")
    }

    // MARK: 2. Unknown API keys

    /// With the `apps` table locked in PostgreSQL (as a migration or `VACUUM FULL` does), one
    /// anonymous request naming an unknown API key used to freeze every WebSocket until the
    /// statement timeout. Now the key is looked up off the loop: a session's ping is answered
    /// while that lookup waits for the lock.
    @Test(.enabled(if: TestPostgres.runs, TestPostgres.skipReason))
    func anUnknownAPIKeyNeverMakesTheEventLoopWaitForTheStore() async throws {
        let server = try TestServer(engine: .postgres) { $0.limits.storeStatementTimeoutMillis = 30_000 }
        defer { server.stop() }
        let alice = try await Peer.connect(server, "alice")
        let other = try PostgresConnection(url: try #require(server.server.configuration.storeURL))
        defer { other.close() }
        try other.execute("BEGIN; LOCK TABLE apps IN ACCESS EXCLUSIVE MODE")
        let credentials = Data("sbk_\(RandomID.alphanumeric(16)):x".utf8).base64EncodedString()
        let anonymous = Task {
            try await HTTPClient.request(
                "GET", server.baseURL + "/v1/devices", headers: [("Authorization", "Basic " + credentials)], timeout: .seconds(60) * testSlowdown)
        }
        // Watched from a connection of its own: inside the locking transaction pg_stat_activity
        // is a snapshot taken at its first read, and would never show the lookup arrive.
        let watcher = try PostgresConnection(url: try #require(server.server.configuration.storeURL))
        defer { watcher.close() }
        try await within(.seconds(10), "the lookup to wait for the lock") {
            while try watcher.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM apps%'")
                .first?.first?.int64 ?? 0 == 0
            {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let pong = try await within(.seconds(5), "a ping while the lookup waits") { try await alice.client.request(MessageType.ping) }
        #expect(pong.type == MessageType.ok)
        try other.execute("ROLLBACK")
        let refused = try await anonymous.value
        #expect(refused.status == 401)
        // Remembered as unknown: the same key again is refused without asking the store.
        let again = try await HTTPClient.request("GET", server.baseURL + "/v1/devices", headers: [("Authorization", "Basic " + credentials)])
        #expect(again.status == 401)
    }

    /// An app another process creates (`switchboard app create` while the server runs) is found:
    /// REST answers once the key was looked up off the loop; a WebSocket upgrade is asked to
    /// retry in a second meanwhile, then opens. A key not shaped like one is refused at once.
    // Covers: limit:app_refresh_seconds
    @Test func anAppCreatedByAnotherProcessIsLookedUpOffTheLoop() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let other = try Store(directory: server.dataDirectory)
        let app = App.make(name: "Later", bundleID: "com.example.later")
        try other.insert(app)
        other.close()
        let claims = AccessTokenIssuer.claims(apiKey: app.apiKey, identity: "zoe", name: nil, grants: Grants(call: true), ttlSeconds: 600)
        let token = AccessTokenVerifier.sign(claims, secret: app.apiSecret)
        let upgrade = try RawSocket(port: server.server.port)
        defer { upgrade.close() }
        try upgrade.requestUpgrade(token: token)
        let head = try await upgrade.readHandshakeResponse()
        #expect(head.contains(" 503 ") && head.lowercased().contains("retry-after: 1"), "\(head.prefix(300))")
        let devices = try await HTTPClient.request("GET", server.baseURL + "/v1/devices", headers: [bearer(token)])
        #expect(devices.status == 200, "\(devices.text)")
        let session = try await TestClient.connect(server.webSocketURL + "?access_token=" + token)
        #expect(try await session.nextEnvelope().type == MessageType.sessionWelcome)
        let malformed = try await HTTPClient.request(
            "GET", server.baseURL + "/v1/devices", headers: [("Authorization", "Basic " + Data("nope:x".utf8).base64EncodedString())])
        #expect(malformed.status == 401)
    }

    // MARK: 3. One tenant's writes

    /// REST writes are counted per user: past `writes_per_user_per_minute` they are refused
    /// before the store is touched; another user is not affected.
    // Covers: limit:writes_per_user_per_minute
    @Test func restWritesPastTheUsersAllowanceAreRefusedBeforeTheStore() async throws {
        let server = try TestServer { $0.limits.writesPerUserPerMinute = 3 }
        defer { server.stop() }
        let body = Array(#"{"identities":["mallory"]}"#.utf8)
        var statuses: [Int] = []
        for _ in 0..<4 {
            statuses.append(
                try await HTTPClient.request("PUT", server.baseURL + "/v1/users/me/blocked", headers: [bearer(server.token("eve"))], body: body).status)
        }
        #expect(statuses == [204, 204, 204, 429])
        let device = Array(#"{"platform":"web"}"#.utf8)
        let refused = try await HTTPClient.request("PUT", server.baseURL + "/v1/devices/e-web", headers: [bearer(server.token("eve"))], body: device)
        #expect(refused.status == 429)
        #expect(errorCode(refused) == "rate_limited")
        let other = try await HTTPClient.request("PUT", server.baseURL + "/v1/devices/a-web", headers: [bearer(server.token("alice"))], body: device)
        #expect(other.status == 200)
    }

    /// The same block list again, and a device past `max_devices_per_user`, cost the single
    /// writer nothing: both used to take a write transaction each.
    @Test func refusedAndUnchangedWritesNeverReachTheWriter() async throws {
        let server = try TestServer { $0.limits.maxDevicesPerUser = 1 }
        defer { server.stop() }
        let list = Array(#"{"identities":["a","b","c"]}"#.utf8)
        let put = { try await HTTPClient.request("PUT", server.baseURL + "/v1/users/me/blocked", headers: [self.bearer(server.token("eve"))], body: list) }
        #expect(try await put().status == 204)
        let device = Array(#"{"platform":"web"}"#.utf8)
        let first = try await HTTPClient.request("PUT", server.baseURL + "/v1/devices/d1", headers: [bearer(server.token("eve"))], body: device)
        #expect(first.status == 200)
        let commits = server.server.metrics.counter("switchboard_store_commits_total")
        #expect(try await put().status == 204)
        let second = try await HTTPClient.request("PUT", server.baseURL + "/v1/devices/d2", headers: [bearer(server.token("eve"))], body: device)
        #expect(second.status == 409)
        server.server.store.flush()
        #expect(server.server.metrics.counter("switchboard_store_commits_total") == commits)
    }

    // MARK: 4. Claims that would overflow

    /// A validly signed token with `exp` 2^63-1 used to crash the whole server (an overflow
    /// trap). Now it is refused, over REST and at the upgrade, and the server serves on.
    @Test func aTokenWithAnExpiryAtTheEndOfInt64IsRefusedAndTheServerServesOn() async throws {
        let server = try TestServer()
        defer { server.stop() }
        for payload in [
            #"{"iss":"\#(server.app.apiKey)","sub":"alice","exp":9223372036854775807}"#,
            #"{"iss":"\#(server.app.apiKey)","sub":"alice","exp":1800000000,"nbf":-9223372036854775808}"#,
        ] {
            let input = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
            let token = input + "." + AccessTokenVerifier.signature(input: input, key: Array(server.app.apiSecret.utf8))
            let rest = try await HTTPClient.request("GET", server.baseURL + "/v1/devices", headers: [bearer(token)])
            #expect(rest.status == 401, "\(rest.text)")
            await #expect(throws: (any Error).self) { _ = try await TestClient.connect(server.webSocketURL + "?access_token=" + token) }
        }
        #expect(try await HTTPClient.request("GET", server.baseURL + "/healthz").status == 200)
    }

    // MARK: 6. Rooms

    /// A user with a prefix grant filled `max_rooms_per_app` with day-long rooms and every call
    /// of the app lost its media room. Now calls' rooms never count, a user token may keep an
    /// empty room `max_user_room_empty_timeout_seconds` at most, and room creation is counted
    /// per identity.
    // Covers: limit:max_user_room_empty_timeout_seconds, limit:rooms_per_identity_per_minute
    @Test func ordinaryRoomsCannotKeepACallFromItsRoom() async throws {
        let server = try TestServer { $0.limits.maxRoomsPerApp = 2 }
        defer { server.stop() }
        let eve = server.token("eve", grants: Grants(room: "team-*", roomJoin: true))
        let create = { (timeout: Int) in
            try await HTTPClient.request(
                "POST", server.baseURL + "/v1/rooms", headers: [self.bearer(eve)], body: Array(#"{"empty_timeout_seconds":\#(timeout)}"#.utf8))
        }
        let dayLong = try await create(86_400)
        #expect(dayLong.status == 400, "a user token may not keep an empty room a day: \(dayLong.text)")
        #expect(try await create(600).status == 201)
        #expect(try await create(600).status == 201)
        let full = try await create(600)
        #expect(full.status == 429, "the app's quota of ordinary rooms")
        // The quota is full: a call still gets its room.
        let alice = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("alice"))
        let bob = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("bob"))
        _ = try await alice.nextEnvelope()
        _ = try await bob.nextEnvelope()
        let call = try await alice.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        let callID = try #require(call.data?["call_id"]?.stringValue)
        #expect(try await bob.request(MessageType.callAnswer, encoding: CallActionRequest(callID: callID)).type == MessageType.ok)
        for client in [alice, bob] {
            let joined = try await client.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "call-" + callID))
            #expect(joined.type == MessageType.ok, "\(String(describing: joined.error))")
        }
    }

    /// Rooms are counted per identity (`rooms_per_identity_per_minute`), by REST and by a join
    /// that creates one; another identity is not affected.
    @Test func roomCreationIsCountedPerIdentity() async throws {
        let server = try TestServer { $0.limits.roomsPerIdentityPerMinute = 2 }
        defer { server.stop() }
        let eve = server.token("eve", grants: Grants(room: "team-*", roomJoin: true))
        let create = { (token: String) in
            try await HTTPClient.request("POST", server.baseURL + "/v1/rooms", headers: [self.bearer(token)], body: [])
        }
        #expect(try await create(eve).status == 201)
        let eveSession = try await TestClient.connect(server.webSocketURL + "?access_token=" + eve)
        _ = try await eveSession.nextEnvelope()
        #expect(try await eveSession.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "team-one")).type == MessageType.ok)
        let third = try await create(eve)
        #expect(third.status == 429 && third.text.contains("rooms_per_identity_per_minute"), "\(third.text)")
        let joined = try await eveSession.request(MessageType.roomJoin, id: "j2", encoding: RoomJoinRequest(room: "team-two"))
        #expect(joined.error?.code == .rateLimited && joined.error?.message.contains("rooms_per_identity_per_minute") == true, "\(joined)")
        #expect(try await eveSession.request(MessageType.roomJoin, id: "j3", encoding: RoomJoinRequest(room: "team-one")).type == MessageType.ok,
            "joining a room that exists creates nothing")
        #expect(try await create(server.token("zoe", grants: Grants(room: "team-*", roomJoin: true))).status == 201)
    }

    // MARK: 7 and 8. Call actions

    /// Without the `call` grant, REST actions on a call are refused (a token with no grants
    /// answered and held a call); free text past its limit is refused with the field's name.
    @Test func callActionsNeedTheGrantAndFreeTextHasItsLimits() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let alice = server.token("alice", grants: Grants(call: true))
        let created = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(alice)], body: Array(#"{"callees":["bob"]}"#.utf8))
        #expect(created.status == 201, "\(created.text)")
        let callID = try #require(try JSONDecoder().decode(JSONValue.self, from: Data(created.body))["call_id"]?.stringValue)
        let grantless = server.token("bob", grants: Grants())
        for action in ["answer", "decline", "end", "hold"] {
            let response = try await HTTPClient.request(
                "POST", server.baseURL + "/v1/calls/\(callID)/\(action)", headers: [bearer(grantless)], body: Array(#"{"on_hold":true}"#.utf8))
            #expect(response.status == 403, "\(action): \(response.text)")
        }
        let longReason = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls/\(callID)/end", headers: [bearer(alice)],
            body: Array(#"{"reason":"\#(String(repeating: "R", count: 129))"}"#.utf8))
        #expect(longReason.status == 400 && longReason.text.contains("reason"), "\(longReason.text)")
        let longKey = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(alice), ("Idempotency-Key", String(repeating: "k", count: 129))],
            body: Array(#"{"callees":["carol"]}"#.utf8))
        #expect(longKey.status == 400 && longKey.text.contains("idempotency_key"), "\(longKey.text)")
        let spoofed = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(alice)], body: Array(#"{"callees":["carol"],"caller_name":"Your Bank"}"#.utf8))
        #expect(spoofed.status == 403, "caller_name is the token's to say: \(spoofed.text)")
        let badFilter = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls/\(callID)/decline", headers: [bearer(server.token("bob"))],
            body: Array(#"{"reason":"filtered","filter":"nonsense"}"#.utf8))
        #expect(badFilter.status == 400, "\(badFilter.text)")
    }

    /// The longest idempotency key a call may carry is recorded on both engines (a 6,000-byte
    /// key used to fail PostgreSQL's index: the call rang and was never recorded).
    @Test(arguments: StoreEngine.available)
    func aCallWithTheLongestIdempotencyKeyIsRecorded(engine: StoreEngine) async throws {
        let server = try TestServer(engine: engine)
        defer { server.stop() }
        let key = String(repeating: "k", count: 128)
        let alice = server.token("alice")
        let created = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(alice), ("Idempotency-Key", key)], body: Array(#"{"callees":["bob"]}"#.utf8))
        #expect(created.status == 201, "\(created.text)")
        let callID = try #require(try JSONDecoder().decode(JSONValue.self, from: Data(created.body))["call_id"]?.stringValue)
        server.server.store.flush()
        let stored = try server.server.store.callSummary(id: callID, appID: server.app.id)
        #expect(stored != nil, "the call is recorded")
        let again = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/calls", headers: [bearer(alice), ("Idempotency-Key", key)], body: Array(#"{"callees":["bob"]}"#.utf8))
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(again.body))["call_id"]?.stringValue == callID)
    }

    // MARK: 11. Files

    /// The data directory and the store's files are the server's user's only: they hold every
    /// API secret and APNs key (they were created 0755 and 0644).
    @Test func theDataDirectoryAndTheStoreAreTheOwnersOnly() throws {
        let server = try TestServer()
        defer { server.stop() }
        server.server.store.flush()
        func mode(_ path: String) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
        }
        #expect(try mode(server.dataDirectory) == 0o700)
        for suffix in ["", "-wal", "-shm"] {
            let file = server.dataDirectory + "/switchboard.db" + suffix
            guard FileManager.default.fileExists(atPath: file) else { continue }
            #expect(try mode(file) == 0o600, "\(file)")
        }
    }

    // MARK: 15. What is public

    /// With `metrics_token`, `/metrics` answers only its bearer.
    @Test func metricsCanBeKeptBehindATokenOfTheirOwn() async throws {
        let secret = "metrics-" + RandomID.alphanumeric(24)
        let server = try TestServer { $0.metricsToken = secret }
        defer { server.stop() }
        #expect(try await HTTPClient.request("GET", server.baseURL + "/metrics").status == 401)
        #expect(try await HTTPClient.request("GET", server.baseURL + "/metrics", headers: [bearer("wrong-" + secret)]).status == 401)
        let page = try await HTTPClient.request("GET", server.baseURL + "/metrics", headers: [bearer(secret)])
        #expect(page.status == 200 && page.text.contains("switchboard_connections"))
    }

    /// Request bodies held before their credentials are checked are bounded across every
    /// connection: a body past `max_buffered_body_bytes` is refused at its head with 503.
    // Covers: limit:max_buffered_body_bytes
    @Test func bodiesArrivingAtOnceAreBoundedAcrossConnections() async throws {
        let server = try TestServer { $0.limits.maxBufferedBodyBytes = 1 << 20 }
        defer { server.stop() }
        // Two heads declaring 700,000 bytes each, bodies never sent: whichever the server reads
        // second is refused at once (503, closed); the other waits for its body.
        let sockets = try [RawSocket(port: server.server.port), RawSocket(port: server.server.port)]
        defer { sockets.forEach { $0.close() } }
        for socket in sockets { try socket.write("POST /v1/tokens HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 700000\r\n\r\n{") }
        let answers = await withTaskGroup(of: String.self) { group in
            for socket in sockets {
                group.addTask { (try? String(decoding: await socket.readUntilClosed(limit: .seconds(3)), as: UTF8.self)) ?? "(still waiting)" }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(answers.filter { $0.hasPrefix("HTTP/1.1 503") }.count == 1, "\(answers.map { $0.prefix(60) })")
        #expect(answers.contains("(still waiting)"), "the first body is still awaited")
        sockets.forEach { $0.close() }
        try await Task.sleep(for: .milliseconds(200))
        let small = try await HTTPClient.request("POST", server.baseURL + "/v1/tokens", body: Array(#"{"identity":"x"}"#.utf8))
        #expect(small.status == 401, "served again once the first body went: \(small.text)")
    }

    /// The caller learns from the trace that a callee's phone did not show the call, never why
    /// (Do Not Disturb, a block list): `filter` is the callee's own to read.
    @Test func aCalleesFilterIsNotShownToTheCaller() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let alice = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("alice") + "&device_id=a-web")
        let bob = try await TestClient.connect(server.webSocketURL + "?access_token=" + server.token("bob") + "&device_id=b-web")
        _ = try await alice.nextEnvelope()
        _ = try await bob.nextEnvelope()
        let call = try await alice.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        let callID = try #require(call.data?["call_id"]?.stringValue)
        let filtered = try await bob.request(MessageType.callDecline, encoding: CallActionRequest(callID: callID, reason: "filtered", filter: .blockList))
        #expect(filtered.type == MessageType.ok)
        func trace(_ identity: String) async throws -> [JSONValue] {
            let response = try await HTTPClient.request("GET", server.baseURL + "/v1/calls/\(callID)/trace", headers: [bearer(server.token(identity))])
            guard case .array(let entries)? = try JSONDecoder().decode(JSONValue.self, from: Data(response.body))["trace"] else { return [] }
            return entries
        }
        let callers = try await trace("alice").filter { $0["event"] == "filtered" }
        #expect(callers.count == 1)
        #expect(callers.first?["filter"] == nil, "\(callers)")
        let callees = try await trace("bob").filter { $0["event"] == "filtered" }
        #expect(callees.first?["filter"] == "block_list")
    }

    // MARK: 17. Long tokens

    /// A token of nearly `max_token_bytes` works in the WebSocket's query as in the header (one
    /// of 4 to 8 KB in the query used to be refused as "no access token").
    // Covers: limit:max_token_bytes
    @Test func aTokenNearTheLimitWorksInTheQueryAndTheHeader() async throws {
        let server = try TestServer()
        defer { server.stop() }
        func token(padding: Int) -> String {
            let payload = #"{"iss":"\#(server.app.apiKey)","sub":"alice","exp":\#(Int(Date().timeIntervalSince1970) + 600),"pad":"\#(String(repeating: "p", count: padding))"}"#
            let input = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
            return input + "." + AccessTokenVerifier.signature(input: input, key: Array(server.app.apiSecret.utf8))
        }
        var near = token(padding: 5_000)
        while near.utf8.count < 8_150 { near = token(padding: 5_000 + (8_170 - near.utf8.count) * 3 / 4) }
        #expect((8_100...8_192).contains(near.utf8.count), "\(near.utf8.count)")
        let query = try RawSocket(port: server.server.port)
        defer { query.close() }
        #expect(try await query.openSession(token: near)["type"] == "session.welcome")
        let header = try RawSocket(port: server.server.port)
        defer { header.close() }
        try header.write(
            "GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(near)\r\nConnection: Upgrade\r\n"
                + "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        let head = try await header.readHandshakeResponse()
        #expect(head.hasPrefix("HTTP/1.1 101"), "\(head.prefix(100))")
        #expect(try await header.readJSON()["type"] == "session.welcome")
        let over = token(padding: 7_000)
        #expect(over.utf8.count > 8_192)
        let refused = try await HTTPClient.request("GET", server.baseURL + "/v1/devices", headers: [bearer(over)])
        #expect(refused.status == 401 && refused.text.contains("longer than 8192"), "\(refused.text)")
    }
}

/// Request threads take apps in turn: a job of one app starts as soon as a thread frees up,
/// ahead of another app's backlog (one app's 12 block-list writers held every other app's
/// reads and call setups for seconds).
@Suite(.timeLimit(.minutes(3))) struct StoreFairnessTests {
    /// A job wakes one idle thread, not all of them: jobs handed over together still each
    /// find a thread of their own (no wakeup lost), and waiting for idleness takes none.
    @Test func jobsHandedOverTogetherEachWakeAThread() throws {
        let threads = WorkerThreads(count: 4, name: "wakeups")
        defer { threads.stop() }
        for _ in 0..<50 {
            let running = Locked(0)
            let together = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            for _ in 0..<4 {
                threads.submit(lane: "app") {
                    if running.withLock({ $0 += 1; return $0 }) == 4 { together.signal() }
                    release.wait()
                }
            }
            #expect(together.wait(timeout: .now() + 5) == .success, "four jobs running at once on four threads")
            for _ in 0..<4 { release.signal() }
            threads.waitUntilIdle()
            #expect(running.withLock { $0 } == 4)
        }
    }

    @Test func anotherAppsJobRunsAheadOfOneAppsBacklog() async throws {
        let threads = WorkerThreads(count: 2, name: "fairness")
        defer { threads.stop() }
        let started = Locked<[String]>([])
        let gate = DispatchSemaphore(value: 0)
        for index in 0..<6 {
            threads.submit(lane: "app-a") {
                started.withLock { $0.append("a\(index)") }
                gate.wait()
            }
        }
        let done = DispatchSemaphore(value: 0)
        threads.submit(lane: "app-b") {
            started.withLock { $0.append("b") }
            done.signal()
        }
        gate.signal()  // one of a's two running jobs finishes: b starts next, not a's third
        #expect(done.wait(timeout: .now() + 5) == .success)
        // Then one job at a time: a thread frees up only once the next job has noted its start,
        // so the starts are noted in the order the jobs were taken (two threads noting at once
        // could note them in either order, or one preempted in between, out of order).
        func waitForStarts(_ count: Int) {
            let deadline = Date().addingTimeInterval(5)
            while started.withLock({ $0.count }) < count && Date() < deadline { usleep(1000) }
        }
        waitForStarts(4)  // a2, taken by b's thread
        for count in 5...6 {
            gate.signal()
            waitForStarts(count)
        }
        for _ in 0..<3 { gate.signal() }  // a5 starts; then the last two finish
        threads.waitUntilIdle()
        let seen = started.withLock { $0 }
        #expect(seen.count == 7)
        #expect(seen.firstIndex(of: "b")! <= 2, "b started before a's third job: \(seen)")
        // Each app's jobs are taken in the order they came (a0 and a1, taken together at the
        // start, in either order).
        #expect(Array(seen.dropFirst(3)) == ["a2", "a3", "a4", "a5"], "each app's jobs start in the order they came: \(seen)")
    }
}
