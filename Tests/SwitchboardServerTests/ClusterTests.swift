import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import SwitchboardKit
import Testing
import SwitchboardSupport

/// A cluster as an operator runs one: a Redis server of its own, a PostgreSQL database on the
/// run's server, the APNs sandbox, and `switchboard serve` nodes as separate processes on
/// loopback ports, each with its own data directory.
final class TestCluster: Sendable {
    let redis: RedisServer
    let databaseURL: String
    private let dropDatabase: @Sendable () -> Void
    let sandbox: APNsSandbox
    let app: App
    let directory: String
    let nodes: Locked<[Int: (process: ToolProcess, port: Int)]> = Locked([:])
    /// The Redis user and password the nodes started from now on give (`user:password`);
    /// none: Redis's default user.
    let redisUser: Locked<String?> = Locked(nil)
    /// Short leases so that deaths are noticed in seconds.
    let lease = 3

    /// `storeURL`: a PostgreSQL of the test's own (one it stops and starts); none: a schema on
    /// the run's server.
    init(storeURL: String? = nil) throws {
        redis = try RedisServer()
        if let storeURL {
            (databaseURL, dropDatabase) = (storeURL, {})
        } else {
            (databaseURL, dropDatabase) = try TestPostgres.database()
        }
        directory = try makeTemporaryDirectory()
        let key = try ECPrivateKey.generate()
        var configuration = APNsSandbox.Configuration()
        configuration.port = 0
        configuration.adminPort = 0
        configuration.directory = directory + "/apns"
        configuration.keys = ["KEY1234567": try ECPublicKey(pem: key.publicKeyPEM)]
        sandbox = try APNsSandbox(configuration: configuration, logger: Logger(minimumLevel: .error))
        let store = try Store(postgres: databaseURL)
        defer { store.close() }
        app = App.make(name: "Cluster", bundleID: "com.example.cluster")
        try store.insert(app)
        try store.setPushSettings(.key(pem: key.pem, keyID: "KEY1234567", teamID: "TEAM123456"), appID: app.id)
    }

    /// The arguments node `number` runs with.
    func arguments(_ number: Int, store: Bool = true) -> [String] {
        let redisURL = redisUser.withLock { $0 }.map { "redis://\($0)@127.0.0.1:\(redis.port)/0" } ?? redis.url
        var arguments = [
            "serve", "--port", "0", "--data-dir", directory + "/node-\(number)", "--web-root", repositoryRoot + "/web",
            "--cluster-redis-url", redisURL, "--node-id", "node-\(number)", "--apns-url", sandbox.url, "--apns-ca-file", sandbox.certificatePath,
            "--call-lease-seconds", String(lease), "--node-timeout-seconds", String(lease), "--cluster-forward-timeout-ms", "1000",
        ]
        if store { arguments += ["--store-url", databaseURL] }
        return arguments
    }

    /// Starts node `number` (again, after a kill) and returns its port.
    @discardableResult
    func start(_ number: Int, _ extra: [String] = []) async throws -> Int {
        let process = try ToolProcess(arguments(number) + extra)
        let port = try await process.waitForPort()
        nodes.withLock { $0[number] = (process, port) }
        // As a load balancer's health check would: in once it is ready (connected to Redis).
        try await within(.seconds(10), "node \(number) to be ready") {
            while try await HTTPClient.request("GET", "http://127.0.0.1:\(port)/readyz").status != 200 { try await Task.sleep(for: .milliseconds(20)) }
        }
        return port
    }

    func port(_ number: Int) -> Int { nodes.withLock { $0[number]?.port ?? 0 } }
    func node(_ number: Int) -> ToolProcess? { nodes.withLock { $0[number]?.process } }

    func stop() {
        // SIGKILL: a draining node would wait shutdown_grace_seconds for its sessions to resume.
        for (_, node) in nodes.withLock({ $0 }) { node.process.kill9() }
        sandbox.stop()
        redis.destroy()
        dropDatabase()
        try? FileManager.default.removeItem(atPath: directory)
    }

    func token(_ identity: String, admin: Bool = false) -> String {
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: identity, name: identity.capitalized, handle: identity + "@example.com",
            grants: Grants(room: "*", roomJoin: true, call: true, admin: admin ? true : nil), ttlSeconds: 3600, now: Date())
        return AccessTokenVerifier.sign(claims, secret: app.apiSecret)
    }

    /// A REST request to node `number` with the app's credentials.
    func rest(_ method: String, _ path: String, node number: Int, body: JSONValue? = nil) async throws -> HTTPClientResponse {
        let credentials = "Basic " + Data("\(app.apiKey):\(app.apiSecret)".utf8).base64EncodedString()
        return try await HTTPClient.request(
            method, "http://127.0.0.1:\(port(number))" + path, headers: [("Authorization", credentials), ("Content-Type", "application/json")],
            body: body.map { JSONText.serialize($0) })
    }

    /// A room made by `POST /v1/rooms` through node `number`: its name.
    func createRoom(node number: Int) async throws -> String {
        let created = try await rest("POST", "/v1/rooms", node: number, body: [:])
        #expect(created.status == 201, "\(created.text)")
        return try #require(try JSONDecoder().decode(JSONValue.self, from: Data(created.body))["name"]?.stringValue)
    }

    /// The resume token of a client's session, from the welcome `connect` kept.
    func welcomeToken(of client: TestClient) async throws -> String? {
        client.welcome.withLock { $0 }?["resume_token"]?.stringValue
    }

    /// A session of `identity` as `device` on node `number`. A node that has not seen the app
    /// yet looks its key up first (and asks the client to come back in a second meanwhile).
    func connect(_ identity: String, device: String, node number: Int, admin: Bool = false) async throws -> TestClient {
        try await connect(identity, device: device, port: port(number), admin: admin)
    }

    /// A session through whatever listens on `port` (a node, or the load balancer).
    func connect(_ identity: String, device: String, port: Int, admin: Bool = false) async throws -> TestClient {
        let url = "ws://127.0.0.1:\(port)/v1/ws?access_token=\(token(identity, admin: admin))&device_id=\(device)"
        let client = try await within(.seconds(10), "a session through port \(port)") {
            while true {
                if let client = try? await TestClient.connect(url) { return client }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        let welcome = try await client.nextEnvelope()
        #expect(welcome.type == MessageType.sessionWelcome)
        client.welcome.withLock { $0 = welcome.data }
        return client
    }

    /// Resumes a session on node `number` (`session.resumed` expected; its envelope returned).
    func resume(_ identity: String, device: String, node number: Int, token: String, lastSequence: UInt64) async throws -> (TestClient, Envelope) {
        try await resume(identity, device: device, port: port(number), token: token, lastSequence: lastSequence)
    }

    func resume(_ identity: String, device: String, port: Int, token: String, lastSequence: UInt64) async throws -> (TestClient, Envelope) {
        let url = "ws://127.0.0.1:\(port)/v1/ws?access_token=\(self.token(identity))&device_id=\(device)&resume_token=\(token)&last_seq=\(lastSequence)"
        let client = try await TestClient.connect(url)
        return (client, try await client.nextEnvelope())
    }

    /// Registers an iPhone (VoIP token) for `identity` through node `number`.
    func registerPhone(_ identity: String, device: String, seed: Int, node number: Int) async throws -> String {
        let voip = String(format: "%064x", seed)
        let body = DeviceRegistration(
            platform: "ios", voipToken: voip, apnsToken: nil, environment: "sandbox", bundleID: app.bundleID, callKitEnabled: true, appVersion: "1.0")
        let response = try await HTTPClient.request(
            "PUT", "http://127.0.0.1:\(port(number))/v1/devices/\(device)", headers: [("Authorization", "Bearer " + token(identity))],
            body: Array(try JSONEncoder().encode(body)))
        #expect(response.status == 200, "\(response.text)")
        return voip
    }

    /// Registers an iPhone without CallKit (rung by alert pushes) for `identity` through node
    /// `number`; returns its token.
    func registerAlertPhone(_ identity: String, device: String, seed: Int, node number: Int) async throws -> String {
        let token = String(format: "%064x", seed)
        let body = DeviceRegistration(platform: "ios", apnsToken: token, environment: "sandbox", bundleID: app.bundleID, callKitEnabled: false)
        let response = try await HTTPClient.request(
            "PUT", "http://127.0.0.1:\(port(number))/v1/devices/\(device)", headers: [("Authorization", "Bearer " + self.token(identity))],
            body: Array(try JSONEncoder().encode(body)))
        #expect(response.status == 200, "\(response.text)")
        return token
    }

    /// Invite alerts (not the missed-call notice) the sandbox accepted for a call.
    func alertInvites(callID: String) -> [APNsSandbox.Record] {
        sandbox.records.filter {
            $0.status == 200 && $0.pushType == "alert" && $0.payload?["call_id"]?.stringValue == callID && $0.payload?["missed"] == nil
        }
    }

    func get(_ path: String, as identity: String, node number: Int) async throws -> JSONValue {
        let response = try await HTTPClient.request(
            "GET", "http://127.0.0.1:\(port(number))" + path, headers: [("Authorization", "Bearer " + token(identity))])
        return try JSONDecoder().decode(JSONValue.self, from: Data(response.body))
    }

    /// VoIP pushes the sandbox accepted for a call.
    func voipPushes(callID: String) -> [APNsSandbox.Record] {
        sandbox.records.filter { $0.status == 200 && $0.pushType == "voip" && $0.payload?["call_id"]?.stringValue == callID }
    }

    /// Nodes 1 and 2 started, and alice on node 1 ringing bob on node 2 (who has the invite)
    /// for a minute.
    func aliceRingsBobAcrossTwoNodes() async throws -> (alice: TestClient, bob: TestClient, callID: String) {
        for node in 1...2 { try await start(node) }
        let alice = try await connect("alice", device: "a", node: 1)
        let bob = try await connect("bob", device: "b", node: 2)
        let callID = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: callID)
        return (alice, bob, callID)
    }

    /// Alice and bob join room "big", bob first (so that it runs on his node): their peer ids.
    func joinBig(_ alice: TestClient, _ bob: TestClient) async throws -> (alice: String, bob: String) {
        let bobJoined = try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "big"))
        let aliceJoined = try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "big"))
        return (try #require(aliceJoined.data?["peer_id"]?.stringValue), try #require(bobJoined.data?["peer_id"]?.stringValue))
    }

    /// Has Redis close node 2's subscription: with `client-output-buffer-limit pubsub` made
    /// 16 KB, alice sends bob's peer in room "big" a larger signal, and `meanwhile` runs right
    /// behind it, while node 2 does not listen; once node 2 says it lost its subscription (it
    /// subscribes again a quarter of a second later), the limit is Redis's default again.
    func cutNode2Subscription(_ alice: TestClient, bobPeer: String, meanwhile: () async throws -> Void) async throws {
        _ = try redis.command(["CONFIG", "SET", "client-output-buffer-limit", "pubsub 16kb 0 0"])
        let node2 = try #require(node(2))
        let losses = node2.standardError.ranges(of: "lost the Redis subscription").count
        let large: JSONValue = ["sdp": .string(String(repeating: "a", count: 48_000))]
        #expect(try await alice.request(MessageType.signal, encoding: SignalRequest(room: "big", to: bobPeer, signal: large)).type == MessageType.ok)
        try await meanwhile()
        try await within(.seconds(15), "node 2 to say it lost its subscription") {
            while node2.standardError.ranges(of: "lost the Redis subscription").count == losses { try await Task.sleep(for: .milliseconds(20)) }
        }
        _ = try redis.command(["CONFIG", "SET", "client-output-buffer-limit", "pubsub 32mb 8mb 60"])
    }

    /// The Redis commands docs/configuration.md says a node's ACL user needs (`client|reply`
    /// for `CLIENT REPLY`).
    static func documentedRedisCommands() throws -> [String] {
        let configuration = try String(contentsOfFile: repositoryRoot + "/docs/configuration.md", encoding: .utf8)
        let row = try #require(configuration.split(separator: "\n").first { $0.hasPrefix("| `cluster_redis_url`") })
        let listed = try #require(row.firstRange(of: "An ACL user needs").map { row[$0.upperBound...] })
        return listed.matches(of: #/`([A-Z]+(?: [A-Z]+)?)`/#).map { String($0.output.1).lowercased().replacingOccurrences(of: " ", with: "|") }
    }

    /// Nodes started from now on connect to Redis as a user that may run only `allowed` on the
    /// `sb:` keys and channels.
    func runAsRedisUser(allowed: [String]) throws {
        _ = try redis.command(["ACL", "SETUSER", "node", "on", ">node-secret", "~sb:*", "&sb:*", "-@all"] + allowed.map { "+" + $0 })
        redisUser.withLock { $0 = "node:node-secret" }
    }

    /// Waits for node `number`'s `/readyz` to answer 503 (`what`: why it should).
    func waitUntilUnready(_ number: Int, _ what: String, within limit: Duration = .seconds(5)) async throws {
        try await within(limit, "/readyz to say \(what)") {
            while try await HTTPClient.request("GET", "http://127.0.0.1:\(self.port(number))/readyz").status != 503 { try await Task.sleep(for: .milliseconds(50)) }
        }
    }
}

func call(_ from: TestClient, to callees: [String], timeout: Int? = nil) async throws -> String {
    let reply = try await from.request(MessageType.callCreate, id: "create", encoding: CallCreateRequest(callees: callees, ringTimeoutSeconds: timeout))
    #expect(reply.type == MessageType.ok, "\(String(describing: reply.error))")
    return try #require(reply.data?["call_id"]?.stringValue)
}

/// The next event of `type` about call `callID` (others of the type are passed over).
func event(_ client: TestClient, _ type: String, call callID: String, timeout: Duration = .seconds(15)) async throws -> Envelope {
    while true {
        let envelope = try await event(client, type, timeout: timeout)
        if envelope.data?["call_id"]?.stringValue == callID { return envelope }
    }
}

/// An action on a call, asked again while the cluster answers `unavailable` (the node running
/// the call drains or died, and another is taking it over), until it is taken.
func actUntilTaken(_ client: TestClient, _ type: String, _ callID: String, within limit: Duration = .seconds(20)) async throws -> Envelope {
    try await within(limit, "\(type) to be taken by the node running the call") {
        while true {
            let reply = try await act(client, type, callID)
            guard reply.error?.code == .unavailable else { return reply }
            try await Task.sleep(for: .milliseconds(200))
        }
    }
}

/// The items of a JSON array (none when it is not one).
func entries(_ value: JSONValue?) -> [JSONValue] {
    guard case .array(let items)? = value else { return [] }
    return items
}

func act(_ client: TestClient, _ type: String, _ callID: String) async throws -> Envelope {
    try await client.request(type, id: .string(type), encoding: CallActionRequest(callID: callID))
}

/// One test at a time: each runs three or four processes and a Redis of its own, and their
/// timings (leases of 3 s) are about what users see, not about two cores shared eight ways.
@Suite(
    .serialized, .enabled(if: TestPostgres.runs, TestPostgres.skipReason),
    .enabled(if: RedisServer.installed, "needs redis-server (make test installs it)"), .timeLimit(.minutes(3)))
struct ClusterTests {
    /// A caller on node 1 rings a callee whose phone (through the APNs sandbox) and two
    /// sessions are on nodes 2 and 3: every device rings, the caller hears it ring, the answer
    /// on node 3 reaches the caller on node 1 and the callee's other session on node 2, the
    /// end reaches everyone; the trace says where the invite went, the history holds the call
    /// once per participant, and the phone got one VoIP push.
    @Test func aCallAcrossThreeNodesRingsEveryDeviceAndItsAnswerReachesEveryone() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...3 { try await cluster.start(node) }
        let voip = try await cluster.registerPhone("bob", device: "b-phone", seed: 7001, node: 2)
        let alice = try await cluster.connect("alice", device: "a-web", node: 1)
        let bobTablet = try await cluster.connect("bob", device: "b-tablet", node: 2)
        let bobWeb = try await cluster.connect("bob", device: "b-web", node: 3)

        let callID = try await call(alice, to: ["bob"])
        for session in [bobTablet, bobWeb] { #expect(try await event(session, "call.incoming").data?["call_id"]?.stringValue == callID) }
        _ = try await event(alice, "call.ringing")
        try await within(.seconds(10), "the VoIP push") { while cluster.voipPushes(callID: callID).isEmpty { try await Task.sleep(for: .milliseconds(50)) } }

        let answered = try await act(bobWeb, MessageType.callAnswer, callID)
        #expect(answered.type == MessageType.ok, "\(String(describing: answered.error))")
        #expect(answered.data?["state"] == "accepted")
        _ = try await event(alice, "call.accepted")
        #expect(try await event(bobTablet, "call.answered_elsewhere").data?["call_id"]?.stringValue == callID)
        // Read where the call does not run: its record says it was answered.
        #expect(try await cluster.get("/v1/calls/\(callID)", as: "alice", node: 2)["state"] == "accepted")

        // The call's room runs where the call does (node 1): the callee joins it from node 3
        // and both signal through it; bob's tablet, which did not answer, is refused.
        let room = "call-" + callID
        let aliceJoined = try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room))
        let alicePeer = try #require(aliceJoined.data?["peer_id"]?.stringValue)
        let bobJoined = try await bobWeb.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room))
        #expect(bobJoined.type == MessageType.ok, "\(bobJoined)")
        #expect(entries(bobJoined.data?["peers"]).compactMap { $0["identity"]?.stringValue } == ["alice"])
        let bobPeer = try #require(bobJoined.data?["peer_id"]?.stringValue)
        #expect(try await event(alice, "room.peer_joined").data?["peer"]?["peer_id"]?.stringValue == bobPeer)
        #expect(try await alice.request(MessageType.signal, encoding: SignalRequest(room: room, to: bobPeer, signal: ["sdp": "offer"])).type == MessageType.ok)
        #expect(try await event(bobWeb, MessageType.signal).data?["signal"] == ["sdp": "offer"])
        #expect(try await bobWeb.request(MessageType.signal, encoding: SignalRequest(room: room, to: alicePeer, signal: ["sdp": "answer"])).type == MessageType.ok)
        #expect(try await event(alice, MessageType.signal).data?["signal"] == ["sdp": "answer"])
        #expect(try await bobTablet.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room)).error?.code == .forbidden)

        let ended = try await act(alice, MessageType.callEnd, callID)
        #expect(ended.data?["outcome"] == "completed")
        for session in [bobWeb, bobTablet] { _ = try await event(session, "call.ended") }
        #expect(try await event(bobWeb, "room.closed").data?["reason"] == "call_ended", "the call's room closes for its member on node 3")

        #expect(cluster.voipPushes(callID: callID).map(\.token) == [voip], "one VoIP push, to bob's phone")
        let trace = try await cluster.get("/v1/calls/\(callID)/trace", as: "alice", node: 3)
        let delivered = Set(entries(trace["trace"]).filter { $0["event"] == "delivered" }.compactMap { $0["device"]?.stringValue })
        #expect(delivered == ["b-tablet", "b-web"], "\(trace)")
        for user in ["alice", "bob"] {
            let history = try await cluster.get("/v1/calls", as: user, node: 2)
            #expect(entries(history["calls"]).compactMap { $0["call_id"]?.stringValue } == [callID], "\(user): \(history)")
        }
    }

    /// Declined on another node: a decline on node 2 ends the 1:1 call the caller made on node
    /// 1, and the callee's session on node 3 hears it was declined elsewhere. A group call
    /// across the three nodes goes on after one callee declines and another answers.
    @Test func declinedElsewhereAndAGroupCallAcrossThreeNodes() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...3 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a-web", node: 1)
        let bobTablet = try await cluster.connect("bob", device: "b-tablet", node: 2)
        let bobWeb = try await cluster.connect("bob", device: "b-web", node: 3)
        let carol = try await cluster.connect("carol", device: "c-web", node: 3)

        let declined = try await call(alice, to: ["bob"])
        _ = try await event(bobWeb, "call.incoming")
        _ = try await event(bobTablet, "call.incoming")
        #expect(try await act(bobTablet, MessageType.callDecline, declined).type == MessageType.ok)
        _ = try await event(alice, "call.declined")
        #expect(try await event(alice, "call.ended").data?["outcome"] == "declined")
        _ = try await event(bobWeb, "call.declined_elsewhere")

        let group = try await call(alice, to: ["bob", "carol"])
        _ = try await event(carol, "call.incoming")
        _ = try await event(bobWeb, "call.incoming")
        #expect(try await act(bobWeb, MessageType.callDecline, group).type == MessageType.ok)
        let answered = try await act(carol, MessageType.callAnswer, group)
        #expect(answered.data?["state"] == "accepted", "\(answered)")
        _ = try await event(alice, "call.accepted")
        // Carol is busy now, wherever she is asked for: bob calls her from node 2.
        let busy = try await call(bobTablet, to: ["carol"])
        let busyEnd = try await event(bobTablet, "call.ended", call: busy)
        #expect(busyEnd.data?["outcome"] == "busy", "carol is in alice's call, run by node 1: \(busyEnd)")
        #expect(try await act(carol, MessageType.callEnd, group).type == MessageType.ok)
        #expect(try await event(alice, "call.ended", call: group).data?["outcome"] == "completed")
    }

    /// Nothing in Redis is renewed per call: a call's key names its node and lasts past the
    /// call's longest life, and the node's one lease in `sb:leases` says whether it still holds
    /// its calls. So a busy mark counts while its call's node is live: one whose call ended (its
    /// key gone) is removed, one whose node's lease ran out does not count (the node taking the
    /// call over writes it again); and an action is passed on to a call's node only while its
    /// lease runs, which the node renews (writing its keys again if it had run out).
    @Test func oneLeasePerNodeSaysWhoHoldsACallAndWhoIsBusy() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let bob = try await cluster.connect("bob", device: "b-web", node: 1)
        let carol = try await cluster.connect("carol", device: "c-web", node: 2)
        let marks = "sb:busy:\(cluster.app.id):carol"
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let lease = try #require(try cluster.redis.command(["HGET", "sb:leases", "node-1"])?.text.flatMap { Int64($0) })
        #expect(lease > now && lease <= now + Int64(cluster.lease) * 1000 + 1000, "node 1's lease: \(lease), now \(now)")

        // A mark of a call that ended (no key) and one of a call whose node's lease ran out.
        _ = try cluster.redis.command(["SET", "sb:call:c_dead_node", "node-9"])
        _ = try cluster.redis.command(["HSET", "sb:leases", "node-9", "1"])
        for ghost in ["c_ended", "c_dead_node"] { _ = try cluster.redis.command(["ZADD", marks, String(now + 3_600_000), ghost]) }
        let rings = try await call(bob, to: ["carol"])
        _ = try await event(carol, "call.incoming", call: rings)
        #expect(try cluster.redis.command(["ZSCORE", marks, "c_ended"]) == RedisValue.null, "the mark of an ended call was removed")
        #expect(try cluster.redis.command(["ZSCORE", marks, "c_dead_node"]) != RedisValue.null, "the call of a dead node may yet be taken over")
        let key = try #require(try cluster.redis.command(["PTTL", "sb:call:" + rings])?.integer)
        #expect(key > 86_000_000, "the call's key outlasts its longest life (max_call_duration_seconds): \(key) ms")
        #expect(try await act(bob, MessageType.callCancel, rings).type == MessageType.ok)

        // A mark of a call node 2 holds, live: carol is busy.
        _ = try cluster.redis.command(["SET", "sb:call:c_live", "node-2"])
        _ = try cluster.redis.command(["ZADD", marks, String(now + 3_600_000), "c_live"])
        let refused = try await call(bob, to: ["carol"])
        #expect(try await event(bob, "call.ended", call: refused).data?["outcome"] == "busy")
        _ = try cluster.redis.command(["ZREM", marks, "c_live"])

        // Node 1's lease run out (as if it stalled): an action on its call from node 2 is not
        // passed on to it (503: retry), and node 1, at its next renewal, finds its lease had
        // lapsed and writes its calls' keys again; then the call goes on.
        let ringing = try await call(bob, to: ["carol"])
        _ = try await event(carol, "call.incoming", call: ringing)
        var refusals = 0
        for _ in 0..<3 where refusals == 0 {
            _ = try cluster.redis.command(["HSET", "sb:leases", "node-1", "1"])
            let held = try await carol.request(MessageType.callHold, id: "hold", encoding: CallHoldRequest(callID: ringing, onHold: true))
            if held.error?.code == .unavailable { refusals += 1 } else { #expect(held.error?.code == .conflict, "\(held)") }
        }
        #expect(refusals == 1, "an action on a call whose node's lease ran out is not passed on to it")
        try await within(.seconds(5), "node 1 to renew its lease") {
            while cluster.node(1)?.standardError.contains("lease in Redis had run out") != true { try await Task.sleep(for: .milliseconds(50)) }
        }
        let answered = try await actUntilTaken(carol, MessageType.callAnswer, ringing)
        #expect(answered.data?["state"] == "accepted", "\(answered)")
        #expect(try cluster.redis.command(["GET", "sb:call:" + ringing])?.text == "node-1")
    }

    /// `kill -9` of the node that runs a ringing call: another node takes it over within the
    /// lease; the callee, on a node still up, answers it (an answer passed on to the dead node
    /// meanwhile is refused with 503 and retried), the caller hears it on the node it
    /// reconnected to, the invite rang once and its VoIP push went once, and the history holds
    /// the call once per participant. Then the owner of the answered call is killed too: the
    /// call goes on under a third node and is ended from there.
    // Covers: limit:node_timeout_seconds
    // Covers: limit:cluster_forward_timeout_ms
    @Test func aCallGoesOnWhenTheNodeRunningItIsKilled() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...3 { try await cluster.start(node, node == 2 ? ["--cluster-forward-timeout-ms", "10000"] : []) }
        let voip = try await cluster.registerPhone("bob", device: "b-phone", seed: 7101, node: 2)
        let alice = try await cluster.connect("alice", device: "a-web", node: 1)
        let bobWeb = try await cluster.connect("bob", device: "b-web", node: 2)
        let callID = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bobWeb, "call.incoming", call: callID)
        try await within(.seconds(10), "the VoIP push") { while cluster.voipPushes(callID: callID).isEmpty { try await Task.sleep(for: .milliseconds(50)) } }

        let killedAt = ContinuousClock.now
        cluster.node(1)?.kill9()
        // Nobody listens on node 1's channel now: node 2 says so at once, not after its
        // forward timeout (10 s here).
        try await Task.sleep(for: .milliseconds(300))
        let asked = ContinuousClock.now
        let early = try await act(bobWeb, MessageType.callAnswer, callID)
        let heard = ContinuousClock.now - asked
        #expect(early.error?.code == .unavailable && heard < .seconds(3), "\(early) after \(heard)")
        let aliceAgain = try await cluster.connect("alice", device: "a-web", node: 3)
        let answered = try await actUntilTaken(bobWeb, MessageType.callAnswer, callID)
        #expect(answered.type == MessageType.ok, "\(answered)")
        let tookOver = ContinuousClock.now - killedAt
        #expect(answered.data?["state"] == "accepted")
        _ = try await event(aliceAgain, "call.accepted", call: callID)
        #expect(tookOver < .seconds(cluster.lease * 3), "taken over in \(tookOver)")
        #expect(cluster.voipPushes(callID: callID).map(\.token) == [voip], "the VoIP push went once")
        // Nodes 2 and 3 both swept for it: one of them took it.
        let takers = [2, 3].filter { cluster.node($0)?.standardError.contains("call taken over") == true }
        #expect(takers.count == 1, "taken over by \(takers)")

        // Which node runs it now? Kill that one too: the third takes it over, and it ends.
        let owner = try #require(try cluster.redis.command(["GET", "sb:call:" + callID])?.text)
        let survivor = owner == "node-2" ? 3 : 2
        cluster.node(owner == "node-2" ? 2 : 3)?.kill9()
        let caller = owner == "node-2" ? aliceAgain : try await cluster.connect("alice", device: "a-web", node: 2)
        let ended = try await actUntilTaken(caller, MessageType.callEnd, callID)
        #expect(ended.data?["outcome"] == "completed", "\(ended)")
        #expect(try cluster.redis.command(["GET", "sb:call:" + callID]) == RedisValue.null, "the call's key went with it")
        for user in ["alice", "bob"] {
            let history = try await cluster.get("/v1/calls", as: user, node: survivor)
            let calls = entries(history["calls"])
            #expect(calls.compactMap { $0["call_id"]?.stringValue } == [callID], "\(user): \(history)")
            #expect(calls.first?["outcome"] == "completed")
        }
        // The invite reached bob's session once: a node taking a call over sends nothing again.
        let trace = entries(try await cluster.get("/v1/calls/\(callID)/trace", as: "alice", node: survivor)["trace"])
        #expect(trace.filter { $0["event"] == "delivered" }.compactMap { $0["device"]?.stringValue } == ["b-web"], "\(trace)")
        #expect(trace.filter { $0["event"] == "push_sent" }.count == 1, "\(trace)")
    }

    /// A phone without CallKit rings by alert pushes repeated while the call rings: when the
    /// node running the call dies, the node that takes it over goes on repeating them (to the
    /// same token, under the call's collapse id), and stops when the call is cancelled.
    // Covers: limit:alert_ring_repeat_seconds
    @Test func alertRepeatsGoOnAfterATakeover() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--alert-ring-repeat-seconds", "1"]) }
        let phone = try await cluster.registerAlertPhone("bob", device: "b-china", seed: 7301, node: 2)
        let alice = try await cluster.connect("alice", device: "a-web", node: 1)
        let callID = try await call(alice, to: ["bob"], timeout: 60)
        try await within(.seconds(10), "the first alert") { while cluster.alertInvites(callID: callID).isEmpty { try await Task.sleep(for: .milliseconds(50)) } }
        cluster.node(1)?.kill9()
        try await within(.seconds(15), "node 2 to take the call over") {
            while cluster.node(2)?.standardError.contains("call taken over") != true { try await Task.sleep(for: .milliseconds(50)) }
        }
        let atTakeover = cluster.alertInvites(callID: callID).count
        try await within(.seconds(5), "alerts repeated by the node that took the call over") {
            while cluster.alertInvites(callID: callID).count < atTakeover + 2 { try await Task.sleep(for: .milliseconds(50)) }
        }
        let alerts = cluster.alertInvites(callID: callID)
        #expect(Set(alerts.map(\.token)) == [phone])
        #expect(Set(alerts.compactMap(\.collapseID)) == [callID], "one alert on the lock screen")
        #expect(cluster.voipPushes(callID: callID).isEmpty)
        let caller = try await cluster.connect("alice", device: "a-web", node: 2)
        #expect(try await actUntilTaken(caller, MessageType.callCancel, callID).type == MessageType.ok)
        let sent = cluster.alertInvites(callID: callID).count
        try await Task.sleep(for: .seconds(2))
        #expect(cluster.alertInvites(callID: callID).count == sent, "no ring after the call ended")
    }

    /// A ringing call whose node dies rings out on time: its ring timer, re-armed by the node
    /// that took it over, fires when the call's own deadline comes (counted from its start),
    /// and the call ends `missed`.
    @Test func theRingTimerOfACallTakenOverFiresOnTime() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a-web", node: 1)
        let bob = try await cluster.connect("bob", device: "b-web", node: 2)
        let callID = try await call(alice, to: ["bob"], timeout: 8)
        let invite = try await event(bob, "call.incoming", call: callID)
        cluster.node(1)?.kill9()
        _ = try await event(bob, "call.missed", call: callID, timeout: .seconds(20))
        let state = try await cluster.get("/v1/calls/\(callID)", as: "bob", node: 2)
        #expect(state["outcome"] == "missed", "\(state)")
        let created = try #require(invite.data?["created_at"]?.intValue), endedAt = try #require(state["ended_at"]?.intValue)
        #expect((8000...9500).contains(endedAt - created), "rang out \(endedAt - created) ms after its start")
    }

    /// A node that stalls longer than its lease (SIGSTOP) has its ringing call taken over by
    /// another node, which rings it out on time. Woken, the stalled node learns the call is no
    /// longer its own before it does anything with it: its overdue ring timer sends nothing,
    /// bob hears the call missed once, his phone gets one missed-call notice, and the history
    /// holds the call once.
    @Test func aNodeWokenAfterItsLeaseRanOutLeavesItsCallsToTheNodeThatTookThemOver() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        _ = try await cluster.registerPhone("bob", device: "b-phone", seed: 7401, node: 2)
        let alice = try await cluster.connect("alice", device: "a-web", node: 1)
        let bob = try await cluster.connect("bob", device: "b-web", node: 2)
        let callID = try await call(alice, to: ["bob"], timeout: 6)
        _ = try await event(bob, "call.incoming", call: callID)
        let node1 = try #require(cluster.node(1))
        kill(node1.pid, SIGSTOP)
        _ = try await event(bob, "call.missed", call: callID, timeout: .seconds(20))
        _ = try await event(bob, "call.ended", call: callID)
        #expect(cluster.node(2)?.standardError.contains("call taken over") == true)
        let pushesBefore = cluster.sandbox.records.filter { $0.payload?["call_id"]?.stringValue == callID }.count
        kill(node1.pid, SIGCONT)
        try await Task.sleep(for: .seconds(2))

        var seen: [String] = []
        while let late = try? await bob.nextEnvelope(timeout: .milliseconds(300)) {
            if late.data?["call_id"]?.stringValue == callID { seen.append(late.type) }
        }
        #expect(seen.isEmpty, "nothing more of the call after node 1 woke: \(seen)")
        let pushes = cluster.sandbox.records.filter { $0.payload?["call_id"]?.stringValue == callID }
        #expect(pushes.count == pushesBefore, "no push from node 1 once woken: \(pushes.map { "\($0.pushType ?? "") \($0.payload ?? .null)" })")
        let history = entries(try await cluster.get("/v1/calls", as: "bob", node: 2)["calls"])
        #expect(history.compactMap { $0["call_id"]?.stringValue } == [callID], "\(history)")
        #expect(node1.standardError.contains("this node no longer runs the call"), "node 1 let the call go")
        #expect(node1.standardError.contains("this node holds its calls again"))
        #expect(try cluster.redis.command(["EXISTS", "sb:call:\(callID)"])?.integer == 0, "the ended call's key is not written again")
    }

    /// Members on three nodes see one room: each joins and hears the others join, in one
    /// order; signals go both ways between nodes and data to everyone; the participant limit
    /// holds across nodes; a leave reaches the others. When a member's node dies the others
    /// hear it left (`disconnected`); when the room's own node dies its members elsewhere get
    /// `room.closed` (`node_lost`) and join again, on a live node.
    @Test func aRoomAcrossThreeNodesIsOneRoom() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...3 { try await cluster.start(node, ["--max-room-participants", "3"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let carol = try await cluster.connect("carol", device: "c", node: 3)
        func join(_ client: TestClient) async throws -> Envelope { try await client.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "team")) }
        let aliceJoined = try await join(alice)
        let alicePeer = try #require(aliceJoined.data?["peer_id"]?.stringValue)
        let bobJoined = try await join(bob)
        #expect(entries(bobJoined.data?["peers"]).compactMap { $0["peer_id"]?.stringValue } == [alicePeer])
        let bobPeer = try #require(bobJoined.data?["peer_id"]?.stringValue)
        let carolJoined = try await join(carol)
        #expect(Set(entries(carolJoined.data?["peers"]).compactMap { $0["peer_id"]?.stringValue }) == [alicePeer, bobPeer])
        let carolPeer = try #require(carolJoined.data?["peer_id"]?.stringValue)
        #expect(try await event(alice, "room.peer_joined").data?["peer"]?["peer_id"]?.stringValue == bobPeer)
        #expect(try await event(alice, "room.peer_joined").data?["peer"]?["peer_id"]?.stringValue == carolPeer)
        #expect(try await event(bob, "room.peer_joined").data?["peer"]?["peer_id"]?.stringValue == carolPeer)

        // Signals both ways between the two nodes that do not run the room, and from the one that does.
        #expect(try await bob.request(MessageType.signal, encoding: SignalRequest(room: "team", to: carolPeer, signal: ["n": 1])).type == MessageType.ok)
        let fromBob = try await event(carol, MessageType.signal)
        #expect(fromBob.data?["from"]?.stringValue == bobPeer && fromBob.data?["signal"] == ["n": 1])
        #expect(try await carol.request(MessageType.signal, encoding: SignalRequest(room: "team", to: bobPeer, signal: ["n": 2])).type == MessageType.ok)
        #expect(try await event(bob, MessageType.signal).data?["signal"] == ["n": 2])
        #expect(try await alice.request(MessageType.signal, encoding: SignalRequest(room: "team", to: carolPeer, signal: ["n": 3])).type == MessageType.ok)
        #expect(try await event(carol, MessageType.signal).data?["signal"] == ["n": 3])
        #expect(try await carol.request(MessageType.data, data: ["room": "team", "data": ["text": "hi"]]).type == MessageType.ok)
        for client in [alice, bob] { #expect(try await event(client, "room.data").data?["data"] == ["text": "hi"]) }

        // Three is the limit, whichever node the fourth asks.
        let dave = try await cluster.connect("dave", device: "d", node: 2)
        #expect(try await join(dave).error?.code == .roomFull)

        // bob leaves; then carol's node dies: the others hear each.
        #expect(try await bob.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: "team")).type == MessageType.ok)
        for client in [alice, carol] {
            let left = try await event(client, "room.peer_left")
            #expect(left.data?["peer_id"]?.stringValue == bobPeer && left.data?["reason"] == "left", "\(left)")
        }
        cluster.node(3)?.kill9()
        let gone = try await event(alice, "room.peer_left", timeout: .seconds(cluster.lease * 4))
        #expect(gone.data?["peer_id"]?.stringValue == carolPeer && gone.data?["reason"] == "disconnected", "\(gone)")

        // bob joins again; then the room's node dies: bob hears the room closed, joins again,
        // and the room runs on a live node.
        _ = try await join(bob)
        cluster.node(1)?.kill9()
        let closed = try await event(bob, "room.closed", timeout: .seconds(cluster.lease * 4))
        #expect(closed.data?["reason"] == "node_lost", "\(closed)")
        try await Task.sleep(for: .seconds(cluster.lease + 1))  // the dead node's key on the room runs out
        let again = try await join(bob)
        #expect(again.type == MessageType.ok, "\(again)")
        #expect(entries(again.data?["peers"]).count == 0)
        #expect(try cluster.redis.command(["GET", "sb:room:\(cluster.app.id):team"])?.text == "node-2")
    }

    /// SIGTERM on a node: it leaves the balancer at once (`/readyz` 503), its call moves to
    /// another node and goes on, its session is closed with 1012 and resumes on another node
    /// with the same peer id, its room and no call event lost, and the node exits.
    // Covers: limit:shutdown_grace_seconds
    // Covers: close:1012
    @Test func aDrainingNodeHandsItsSessionsAndCallsToTheOthers() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...3 { try await cluster.start(node, ["--shutdown-grace-seconds", "4"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let callID = try await call(alice, to: ["bob"])
        _ = try await event(bob, "call.incoming", call: callID)
        #expect(try await act(bob, MessageType.callAnswer, callID).type == MessageType.ok)
        let accepted = try await event(alice, "call.accepted", call: callID)
        #expect(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "chat")).type == MessageType.ok)
        let joined = try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "chat"))
        #expect(joined.type == MessageType.ok, "\(joined)")
        let peer = try #require(joined.data?["peer_id"]?.stringValue)
        let resumeToken = try #require(try await cluster.welcomeToken(of: alice))
        #expect(resumeToken.hasSuffix(".node-1"), "a session's resume token names its node: \(resumeToken)")
        let lastSeen = accepted.seq ?? 0

        let watcher = try RawSocket(port: cluster.port(1))
        _ = try await watcher.openSession(token: cluster.token("carol"))
        let node1 = try #require(cluster.node(1))
        let stopping = Task { try await node1.stop(timeout: .seconds(30)) }
        // The close frame as it is on the wire (libwebsockets 4.1's client reports 1012, a code
        // registered after RFC 6455, as a protocol error; it reconnects all the same).
        var closeFrame: (opcode: UInt8, payload: [UInt8]) = (0, [])
        repeat { closeFrame = try await watcher.readFrame(limit: .seconds(10)) } while closeFrame.opcode != 0x8
        #expect(closeFrame.payload.prefix(2) == [0x03, 0xF4], "closed with 1012: \(closeFrame.payload)")
        _ = try await alice.closeCode()
        let ready = try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(1))/readyz")
        #expect(ready.status == 503, "a draining node is out of the balancer")

        let (moved, resumed) = try await cluster.resume("alice", device: "a", node: 3, token: resumeToken, lastSequence: lastSeen)
        #expect(resumed.type == MessageType.sessionResumed, "\(resumed)")
        #expect(resumed.data?["peer_id"]?.stringValue == peer, "the same peer id on the new node")
        #expect(resumed.data?["resume_token"]?.stringValue?.hasSuffix(".node-3") == true, "\(resumed)")
        #expect(try await stopping.value == 0, "the drained node exits cleanly")

        // Still in the room (run on node 2): bob's signal reaches alice on node 3.
        #expect(try await bob.request(MessageType.signal, encoding: SignalRequest(room: "chat", to: peer, signal: ["n": 1])).type == MessageType.ok)
        #expect(try await event(moved, MessageType.signal).data?["signal"] == ["n": 1])
        // The call moved to a live node and goes on: bob ends it, alice hears it on node 3.
        let ended = try await actUntilTaken(bob, MessageType.callEnd, callID)
        #expect(ended.data?["outcome"] == "completed", "\(ended)")
        _ = try await event(moved, "call.ended", call: callID)
        let history = try await cluster.get("/v1/calls", as: "alice", node: 2)
        #expect(entries(history["calls"]).compactMap { $0["call_id"]?.stringValue } == [callID])
    }

    /// A call event the new node makes for a session while that session moves to it: bob's
    /// session goes from node 1 to node 2, which runs alice's call to him; node 1 answers the
    /// hand-over late (stopped for half a second), and alice cancels meanwhile. Node 1 hands the
    /// session over before the cancel reaches it there; node 2 delivers it to the moved session.
    @Test func aCallEventMadeWhileASessionMovesToItsNodeReachesIt() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let bob = try await cluster.connect("bob", device: "b", node: 1)
        let token = try #require(try await cluster.welcomeToken(of: bob))
        let alice = try await cluster.connect("alice", device: "a", node: 2)
        let callID = try await call(alice, to: ["bob"], timeout: 60)
        let incoming = try await event(bob, "call.incoming", call: callID)

        let node1 = try #require(cluster.node(1))
        kill(node1.pid, SIGSTOP)
        let moving = Task { try await cluster.resume("bob", device: "b", node: 2, token: token, lastSequence: incoming.seq ?? 0) }
        try await Task.sleep(for: .milliseconds(200))  // node 2 has asked node 1 for the session
        #expect(try await act(alice, MessageType.callCancel, callID).type == MessageType.ok)
        try await Task.sleep(for: .milliseconds(300))
        kill(node1.pid, SIGCONT)
        let (moved, resumed) = try await moving.value
        #expect(resumed.type == MessageType.sessionResumed, "\(resumed)")
        _ = try await event(moved, "call.cancelled", call: callID)
    }

    /// A session asked for by a node that has given up waiting (the node holding it was
    /// stopped longer than `cluster_forward_timeout_ms`) is not handed over: the client got a
    /// fresh session on the asking node, and the old one ends where it was when its grace runs
    /// out, so that alice, in a room with it, hears it left (handed over late, it belonged to
    /// nobody and stayed in the room).
    @Test func aSessionAskedForTooLateStaysAndEndsWhereItWas() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--resume-grace-seconds", "3"]) }
        let bob = try await cluster.connect("bob", device: "b", node: 1)
        let alice = try await cluster.connect("alice", device: "a", node: 2)
        let peers = try await cluster.joinBig(alice, bob)
        let token = try #require(try await cluster.welcomeToken(of: bob))
        bob.socket.abort()
        try await Task.sleep(for: .milliseconds(300))  // node 1 holds bob's session for its grace
        let node1 = try #require(cluster.node(1))
        kill(node1.pid, SIGSTOP)
        let (fresh, welcome) = try await cluster.resume("bob", device: "b", node: 2, token: token, lastSequence: 0)
        #expect(welcome.type == MessageType.sessionWelcome && welcome.data?["resume_failed"] == true, "\(welcome)")
        kill(node1.pid, SIGCONT)
        _ = fresh
        while true {
            let left = try await event(alice, "room.peer_left", timeout: .seconds(10))
            if left.data?["peer_id"]?.stringValue == peers.bob { break }
        }
        #expect(node1.standardError.contains("came after it gave up on it"))
    }

    /// A Redis that stops answering with its connections open (its process stopped here, as a
    /// host gone or a partition would): after `cluster_redis_timeout_ms` each node takes its
    /// connections as lost (its `/readyz` says 503), and a call started meanwhile is answered
    /// from what the node knows, not held until Redis answers. Once Redis answers again the
    /// nodes are back and a call across them rings.
    // Covers: limit:cluster_redis_timeout_ms
    @Test func aRedisThatStopsAnsweringIsGivenUpOnAfterTheTimeout() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--cluster-redis-timeout-ms", "1000"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        _ = try await cluster.connect("bob", device: "b", node: 2)
        let redis = try #require(cluster.redis.pid)
        kill(redis, SIGSTOP)
        let started = ContinuousClock.now
        let answered: Result<Envelope, any Error>
        do {
            answered = .success(try await alice.request(MessageType.callCreate, id: "during", encoding: CallCreateRequest(callees: ["bob"])))
        } catch { answered = .failure(error) }
        let took = ContinuousClock.now - started
        kill(redis, SIGCONT)  // whatever came: a Redis left stopped would not stop with the test
        let reply = try answered.get()
        #expect(took < .seconds(4), "answered after \(took): \(reply)")
        _ = try await cluster.node(1)?.waitFor(#/(lost Redis)/#, what: "node 1 to give up on Redis")
        try await within(.seconds(10), "the nodes to be ready again") {
            for node in 1...2 {
                while try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(node))/readyz").status != 200 {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
        }
        let bob = try await cluster.connect("bob", device: "b2", node: 2)
        let callID = try await call(alice, to: ["bob"])
        _ = try await event(bob, "call.incoming", call: callID)
    }

    /// A call that ends while its node cannot reach Redis leaves nothing there once it can: its
    /// key and the busy marks of its participants, which the node could not remove then, are
    /// removed when Redis answers again, so that carol, who was in it, is not busy for the
    /// next caller (she stayed busy until the call's key expired, a day later).
    @Test func whatACallEndedWhileRedisWasAwayLeftThereIsRemovedOnceItIsBack() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--cluster-redis-timeout-ms", "500"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let carol = try await cluster.connect("carol", device: "c", node: 2)
        let callID = try await call(alice, to: ["carol"])
        _ = try await event(carol, "call.incoming", call: callID)
        #expect(try await act(carol, MessageType.callAnswer, callID).type == MessageType.ok)
        _ = try await event(alice, "call.accepted", call: callID)
        let busyKey = "sb:busy:\(cluster.app.id):carol"
        #expect(try cluster.redis.command(["ZCARD", busyKey])?.integer == 1)

        let redis = try #require(cluster.redis.pid)
        kill(redis, SIGSTOP)
        let ended: Result<Envelope, any Error>
        do {
            _ = try await cluster.node(1)?.waitFor(#/(lost Redis)/#, what: "node 1 to give up on Redis")
            ended = .success(try await act(alice, MessageType.callEnd, callID))
        } catch { ended = .failure(error) }
        kill(redis, SIGCONT)  // whatever came: a Redis left stopped would not stop with the test
        #expect(try ended.get().type == MessageType.ok)
        try await within(.seconds(10), "Redis to forget the ended call") {
            while try cluster.redis.command(["ZCARD", busyKey])?.integer != 0 || cluster.redis.command(["EXISTS", "sb:call:\(callID)"])?.integer != 0 {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let bob = try await cluster.connect("bob", device: "b", node: 1)
        let next = try await call(bob, to: ["carol"])
        _ = try await event(carol, "call.incoming", call: next)
    }

    /// A resume on another node whose `last_seq` is beyond any number (2^63 and 2^64 - 1) fails
    /// as a resume past the session's last event does, and both nodes go on.
    @Test func aResumeOnAnotherNodeWithALastSeqBeyondAnySessionsFails() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let token = try #require(try await cluster.welcomeToken(of: alice))
        for lastSeq in ["9223372036854775808", "18446744073709551615"] {
            let url = "ws://127.0.0.1:\(cluster.port(2))/v1/ws?access_token=\(cluster.token("alice"))&device_id=a&resume_token=\(token)&last_seq=\(lastSeq)"
            let client = try await TestClient.connect(url)
            let welcome = try await client.nextEnvelope()
            #expect(welcome.type == MessageType.sessionWelcome, "\(welcome)")
            #expect(welcome.data?["resume_failed"] == true, "\(welcome)")
        }
        for node in 1...2 {
            #expect(cluster.node(node)?.isRunning == true, "node \(node) runs")
            #expect(try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(node))/readyz").status == 200)
        }
    }

    /// A rolling restart of every node during an answered call: each node in turn drains
    /// (SIGTERM) and starts again; the participants on it resume on another node; the call
    /// fails at no point and ends normally after, once in each history.
    @Test func aRollingRestartOfEveryNodeFailsNoCall() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...3 { try await cluster.start(node, ["--shutdown-grace-seconds", "4"]) }
        struct Participant {
            var identity: String
            var node: Int
            var client: TestClient
            var token: String
            var lastSequence: UInt64 = 0
        }
        var people: [Participant] = []
        for (identity, node) in [("alice", 1), ("bob", 2)] {
            let client = try await cluster.connect(identity, device: identity, node: node)
            people.append(Participant(identity: identity, node: node, client: client, token: try #require(try await cluster.welcomeToken(of: client))))
        }
        let callID = try await call(people[0].client, to: ["bob"])
        _ = try await event(people[1].client, "call.incoming", call: callID)
        #expect(try await act(people[1].client, MessageType.callAnswer, callID).type == MessageType.ok)
        people[0].lastSequence = try await event(people[0].client, "call.accepted", call: callID).seq ?? 0

        for restarting in 1...3 {
            let node = try #require(cluster.node(restarting))
            let stopping = Task { try await node.stop(timeout: .seconds(30)) }
            for index in people.indices where people[index].node == restarting {
                _ = try await people[index].client.closeCode()
                let target = restarting % 3 + 1
                let (client, resumed) = try await cluster.resume(
                    people[index].identity, device: people[index].identity, node: target, token: people[index].token,
                    lastSequence: people[index].lastSequence)
                #expect(resumed.type == MessageType.sessionResumed, "\(people[index].identity) on node \(target): \(resumed)")
                people[index].client = client
                people[index].node = target
                people[index].token = resumed.data?["resume_token"]?.stringValue ?? people[index].token
            }
            #expect(try await stopping.value == 0)
            try await cluster.start(restarting, ["--shutdown-grace-seconds", "4"])
            let state = try await cluster.get("/v1/calls/\(callID)", as: "alice", node: restarting)
            #expect(state["state"] == "accepted", "after node \(restarting) restarted: \(state)")
        }
        let ended = try await actUntilTaken(people[0].client, MessageType.callEnd, callID)
        #expect(ended.data?["outcome"] == "completed", "\(ended)")
        _ = try await event(people[1].client, "call.ended", call: callID)
        for user in ["alice", "bob"] {
            let calls = entries(try await cluster.get("/v1/calls", as: user, node: 1)["calls"])
            #expect(calls.compactMap { $0["call_id"]?.stringValue } == [callID], "\(user): \(calls)")
            #expect(calls.first?["outcome"] == "completed")
        }
    }

    /// Through HAProxy, configured as docs/scaling.md says: sessions reach the nodes through it,
    /// a call rings and is answered through it; when the node holding a session drains, the
    /// balancer takes it out (its `/readyz` says 503) and the session resumes through the
    /// balancer on another node, its call going on.
    @Test(.enabled(if: LoadBalancer.installed, "needs haproxy (make test installs it)"))
    func throughHAProxyACallRingsAndASessionResumesWhenItsNodeDrains() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...3 { try await cluster.start(node, ["--shutdown-grace-seconds", "4"]) }
        let balancer = try LoadBalancer(backends: (1...3).map(cluster.port))
        defer { balancer.stop() }
        let alice = try await cluster.connect("alice", device: "a", port: balancer.port)
        let bob = try await cluster.connect("bob", device: "b", port: balancer.port)
        let callID = try await call(alice, to: ["bob"])
        _ = try await event(bob, "call.incoming", call: callID)
        #expect(try await act(bob, MessageType.callAnswer, callID).type == MessageType.ok)
        let accepted = try await event(alice, "call.accepted", call: callID)

        // Drain the node alice's session is on (its resume token names it).
        let token = try #require(try await cluster.welcomeToken(of: alice))
        let node = try #require(Int(token.split(separator: "-").last ?? ""))
        let stopping = Task { try await cluster.node(node)?.stop(timeout: .seconds(30)) }
        _ = try await alice.closeCode()
        let (moved, resumed) = try await within(.seconds(10), "alice to resume through the balancer") {
            while true {
                // Until the balancer's next check, it may still send a connection to the draining
                // node, which refuses it (503): the client tries again, as the SDK does.
                if let attempt = try? await cluster.resume("alice", device: "a", port: balancer.port, token: token, lastSequence: accepted.seq ?? 0),
                    attempt.1.type == MessageType.sessionResumed
                { return attempt }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        let newToken = try #require(resumed.data?["resume_token"]?.stringValue)
        #expect(!newToken.hasSuffix("node-\(node)"), "resumed on another node: \(newToken)")
        #expect(try await stopping.value == 0)
        let ended = try await actUntilTaken(bob, MessageType.callEnd, callID)
        #expect(ended.data?["outcome"] == "completed", "\(ended)")
        _ = try await event(moved, "call.ended", call: callID)
    }

    /// Redis restarted (empty) during a call: meanwhile `/readyz` says 503 and an action passed
    /// between nodes is refused with 503 (the call itself is safe in the store); the nodes
    /// reconnect by themselves, write their keys again, and the call goes on: the answer
    /// retried is taken, the end reaches everyone, the history holds it once.
    @Test func aCallGoesOnWhenRedisRestarts() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        let (alice, bob, callID) = try await cluster.aliceRingsBobAcrossTwoNodes()

        cluster.redis.stop()
        try await cluster.waitUntilUnready(2, "Redis is gone")
        #expect(try await act(bob, MessageType.callAnswer, callID).error?.code == .unavailable)
        try await offThePool { try cluster.redis.start() }
        // Whom the call rings is written again as soon as its owner is back on Redis (a device
        // of bob's connecting anywhere gets the invite).
        try await within(.seconds(5), "the call's ringing mark to be written again") {
            while try await offThePool({ try cluster.redis.command(["KEYS", "sb:ringing:*:bob"]) })?.array?.isEmpty ?? true {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let answered = try await actUntilTaken(bob, MessageType.callAnswer, callID)
        #expect(answered.data?["state"] == "accepted", "\(answered)")
        _ = try await event(alice, "call.accepted", call: callID)
        #expect(try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(1))/readyz").status == 200)
        #expect(try cluster.redis.command(["GET", "sb:call:" + callID])?.text == "node-1", "the owner wrote its key again")
        let ended = try await act(bob, MessageType.callEnd, callID)
        #expect(ended.data?["outcome"] == "completed", "\(ended)")
        _ = try await event(alice, "call.ended", call: callID)
        let calls = entries(try await cluster.get("/v1/calls", as: "alice", node: 2)["calls"])
        #expect(calls.compactMap { $0["call_id"]?.stringValue } == [callID])
    }

    /// Redis closes a subscriber that falls behind (`client-output-buffer-limit pubsub`, here
    /// made small enough for one large signal): what was published to the node then is lost,
    /// as docs/scaling.md says, and the node says so (a warning,
    /// `switchboard_cluster_redis_disconnects_total`), listens again by itself, and what is
    /// published afterwards reaches its sessions.
    @Test func aNodeWhoseSubscriptionRedisClosedSaysSoAndListensAgain() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        // The room runs on bob's node: alice's signals cross to node 2 through its channel.
        let bobJoined = try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "big"))
        let bobPeer = try #require(bobJoined.data?["peer_id"]?.stringValue)
        #expect(try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "big")).type == MessageType.ok)
        let large: JSONValue = ["sdp": .string(String(repeating: "a", count: 48_000))]
        #expect(try await alice.request(MessageType.signal, encoding: SignalRequest(room: "big", to: bobPeer, signal: large)).type == MessageType.ok)
        #expect(try await event(bob, MessageType.signal).data?["signal"] == large, "within Redis' default limit it crosses")

        _ = try cluster.redis.command(["CONFIG", "SET", "client-output-buffer-limit", "pubsub 16kb 0 0"])
        #expect(try await alice.request(MessageType.signal, encoding: SignalRequest(room: "big", to: bobPeer, signal: large)).type == MessageType.ok)
        _ = try await cluster.node(2)?.waitFor(#/(lost the Redis subscription)/#, what: "node 2 to say it lost its subscription")
        let metrics = try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(2))/metrics").text
        #expect(metrics.contains(#"switchboard_cluster_redis_disconnects_total{connection="subscriber"} 1"#), "\(metrics)")
        #expect(metrics.contains(#"switchboard_cluster_redis_disconnects_total{connection="commands"} 0"#))

        _ = try cluster.redis.command(["CONFIG", "SET", "client-output-buffer-limit", "pubsub 32mb 8mb 60"])
        try await within(.seconds(5), "node 2 to listen on its channel and bob's again") {
            while try await offThePool({ try cluster.redis.command(["PUBSUB", "NUMSUB", "sb:n:node-2", "sb:u:\(cluster.app.id):bob"]) })?
                .array?.compactMap(\.integer) != [1, 1]
            {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(try await alice.request(MessageType.signal, encoding: SignalRequest(room: "big", to: bobPeer, signal: ["n": 2])).type == MessageType.ok)
        #expect(try await event(bob, MessageType.signal).data?["signal"] == ["n": 2], "the next signal, not the lost one")
    }

    /// A call event published while a node's subscription is down (Redis closed it, as above,
    /// on a signal too large for its limit, and the caller cancelled right behind it) is read
    /// back from `sb:events` once the node listens again: the callee on that node hears the
    /// call was cancelled, once, and the node counts it; a device that connected meanwhile
    /// hears nothing of a call it never saw.
    @Test func aCallEventPublishedWhileANodeDidNotListenReachesItOnceItListensAgain() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        let (alice, bob, callID) = try await cluster.aliceRingsBobAcrossTwoNodes()
        let peers = try await cluster.joinBig(alice, bob)
        try await cluster.cutNode2Subscription(alice, bobPeer: peers.bob) { () async throws in
            #expect(try await act(alice, MessageType.callCancel, callID).type == MessageType.ok)
        }
        // A device of bob's that connects now (before node 2 subscribes again) never saw the
        // call: what is read back is not for it.
        let bobTwo = try await cluster.connect("bob", device: "b2", node: 2)

        _ = try await event(bob, "call.cancelled", call: callID)
        let caughtUp = try await cluster.node(2)?.waitFor(
            #/caught up on the events published while the subscription was down.*count=(\d+)/#, what: "node 2 to catch up")
        #expect(try await Self.nextEvent(bob, "call.cancelled", call: callID) == nil, "delivered once")
        try await bobTwo.expectSilence(for: .milliseconds(200))
        let metrics = try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(2))/metrics").text
        #expect(caughtUp.map { Int($0) ?? 0 } ?? 0 > 0)
        #expect(metrics.contains(#"switchboard_cluster_late_events_total{outcome="caught_up"} "# + (caughtUp ?? "")), "\(metrics)")
    }

    /// Reading back goes from the newest entry of `sb:events` to the last event the node had
    /// received, and delivers what it missed oldest first: two calls cancelled one after the
    /// other while node 2 did not listen reach bob in that order (with their `call.missed`),
    /// and the 1,500 events of another user kept before the last one node 2 received are not
    /// read (one page, where reading them would take four).
    @Test func readingBackStopsAtTheLastEventReceivedAndDeliversOldestFirst() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        _ = try cluster.redis.command([
            "EVAL", "for i = 1, 1500 do redis.call('xadd', 'sb:events', '*', 'c', 'sb:u:other:carol', 'm', '{\"eid\":\"x/' .. i .. '\"}') end return 0", "0",
        ])
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let first = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: first)
        let second = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: second)
        let peers = try await cluster.joinBig(alice, bob)
        try await cluster.cutNode2Subscription(alice, bobPeer: peers.bob) { () async throws in
            #expect(try await act(alice, MessageType.callCancel, first).type == MessageType.ok)
            #expect(try await act(alice, MessageType.callCancel, second).type == MessageType.ok)
        }

        let caughtUp = try await cluster.node(2)?.waitFor(
            #/caught up on the events published while the subscription was down.*count=(\d+)/#, what: "node 2 to catch up")
        #expect(caughtUp == "4", "each call's call.cancelled and call.missed")
        var cancelled: [String?] = []
        for _ in 0..<2 { cancelled.append(try await event(bob, "call.cancelled").data?["call_id"]?.stringValue) }
        #expect(cancelled == [first, second])
        let stats = try #require(try cluster.redis.command(["INFO", "commandstats"])?.text)
        #expect(stats.contains("cmdstat_xrevrange:calls=1,"), "\(stats)")
    }

    /// The subscription lost again while a node reads back: the page asked for before is not
    /// used, reading starts again from the newest entry, and a live event that came while it
    /// read waits for the events published before it. Here 400,000 entries of another user
    /// keep node 2 reading for many pages; bob's first call is cancelled while node 2 does not
    /// listen, his second (live) while it reads, then node 2's subscription is closed again: bob
    /// hears the two cancellations in the order they were made.
    @Test func readingBackStartsAgainWhenTheSubscriptionIsLostWhileItReads() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let first = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: first)
        let second = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: second)
        let peers = try await cluster.joinBig(alice, bob)
        _ = try cluster.redis.command([
            "EVAL", "for i = 1, 400000 do redis.call('xadd', 'sb:events', '*', 'c', 'sb:u:other:carol', 'm', '{\"eid\":\"x/' .. i .. '\"}') end return 0", "0",
        ])
        _ = try cluster.redis.command(["CONFIG", "RESETSTAT"])
        let redis = cluster.redis
        @Sendable func pagesRead() throws -> Int {
            let stats = try redis.command(["INFO", "commandstats"])?.text ?? ""
            return stats.firstMatch(of: #/cmdstat_xrevrange:calls=(\d+),/#).flatMap { Int($0.output.1) } ?? 0
        }
        try await cluster.cutNode2Subscription(alice, bobPeer: peers.bob) { () async throws in
            #expect(try await act(alice, MessageType.callCancel, first).type == MessageType.ok)
        }
        try await within(.seconds(10), "node 2 to read its second page") {
            while try pagesRead() < 2 { try await Task.sleep(for: .milliseconds(2)) }
        }
        #expect(try await act(alice, MessageType.callCancel, second).type == MessageType.ok)
        try await Task.sleep(for: .milliseconds(50))  // the live call.cancelled reaches node 2, which holds it
        let node2 = try #require(cluster.node(2))
        #expect(!node2.standardError.contains("caught up"), "node 2 still reads back as its subscription is closed again")
        let pagesBefore = try pagesRead()
        try await cluster.cutNode2Subscription(alice, bobPeer: peers.bob) {}

        _ = try await node2.waitFor(#/(caught up on the events published while the subscription was down)/#, timeout: .seconds(30), what: "node 2 to catch up")
        var cancelled: [String?] = []
        for _ in 0..<2 { cancelled.append(try await event(bob, "call.cancelled").data?["call_id"]?.stringValue) }
        #expect(cancelled == [first, second])
        let oneReading = 400_000 / 512
        #expect(try pagesRead() > pagesBefore + oneReading / 2, "reading started again from the newest entry")
    }

    /// Reading back that Redis refuses (here the nodes' user may not run `XREVRANGE`) is tried
    /// again at the node's heartbeats, then given up: the call event published while node 2
    /// did not listen is lost, the live one that came meanwhile, held until then, reaches bob,
    /// and the events after it reach him as they come.
    @Test func readingBackRedisRefusesIsGivenUpAndTheLiveEventsHeldGoOut() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        try cluster.runAsRedisUser(allowed: try TestCluster.documentedRedisCommands().filter { $0 != "xrevrange" })
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let first = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: first)
        let second = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: second)
        let peers = try await cluster.joinBig(alice, bob)
        try await cluster.cutNode2Subscription(alice, bobPeer: peers.bob) { () async throws in
            #expect(try await act(alice, MessageType.callCancel, first).type == MessageType.ok)
        }
        let node2 = try #require(cluster.node(2))
        _ = try await node2.waitFor(#/(Redis refused to read back the events)/#, what: "node 2 to be refused")
        #expect(try await act(alice, MessageType.callCancel, second).type == MessageType.ok)

        _ = try await node2.waitFor(
            #/(gave up reading back the events published while the subscription was down)/#, timeout: .seconds(20), what: "node 2 to give up")
        #expect(try await event(bob, "call.cancelled").data?["call_id"]?.stringValue == second, "the first call's cancel was lost")
        let third = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: third)
        #expect(try await act(alice, MessageType.callCancel, third).type == MessageType.ok)
        _ = try await event(bob, "call.cancelled", call: third)
        let denied = try #require(try cluster.redis.command(["ACL", "LOG"])?.array)
        #expect(!denied.isEmpty, "Redis refused XREVRANGE")
    }

    /// `sb:events` keeps `cluster_event_replay_seconds` of events: the nodes'
    /// heartbeats trim what is older (here 300 entries stamped a minute ago, by whole blocks of
    /// 100) and keep what is newer (5 entries of now).
    @Test func theEventStreamKeepsTheReplayTimeOfEvents() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        let time = try #require(try cluster.redis.command(["TIME"])?.array?.compactMap(\.text).compactMap { Int64($0) })
        let minuteAgo = time[0] * 1000 - 60_000
        for index in 0..<300 {
            _ = try cluster.redis.command(["XADD", "sb:events", "\(minuteAgo)-\(index)", "c", "sb:u:other:carol", "m", "{}"])
        }
        for _ in 0..<5 { _ = try cluster.redis.command(["XADD", "sb:events", "*", "c", "sb:u:other:carol", "m", "{}"]) }
        try await cluster.start(1, ["--cluster-event-replay-seconds", "30"])
        try await within(.seconds(10), "node 1's heartbeat to trim sb:events") {
            while try cluster.redis.command(["XLEN", "sb:events"])?.integer != 5 { try await Task.sleep(for: .milliseconds(100)) }
        }
        try await Task.sleep(for: .seconds(cluster.lease))  // another heartbeat or two
        #expect(try cluster.redis.command(["XLEN", "sb:events"])?.integer == 5, "what is newer stays")
    }

    /// Nodes whose Redis user may run only the commands docs/configuration.md lists for one
    /// (and the `sb:` keys and channels) run a call across two nodes (its limits, presence and
    /// busy, its events, one read back after the subscription was lost) and a room with a
    /// signal each way, and Redis denied them nothing (`ACL LOG`).
    @Test func nodesNeedNoRedisCommandButThoseTheDocsList() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        let commands = try TestCluster.documentedRedisCommands()
        #expect(commands.count > 20, "\(commands)")
        try cluster.runAsRedisUser(allowed: commands)

        let (alice, bob, callID) = try await cluster.aliceRingsBobAcrossTwoNodes()
        let peers = try await cluster.joinBig(alice, bob)
        #expect(try await bob.request(MessageType.signal, encoding: SignalRequest(room: "big", to: peers.alice, signal: ["n": 1])).type == MessageType.ok)
        #expect(try await event(alice, MessageType.signal).data?["signal"] == ["n": 1])
        try await cluster.cutNode2Subscription(alice, bobPeer: peers.bob) { () async throws in
            #expect(try await act(alice, MessageType.callCancel, callID).type == MessageType.ok)
        }
        _ = try await event(bob, "call.cancelled", call: callID)
        _ = try await cluster.node(2)?.waitFor(#/(caught up on the events published while the subscription was down)/#, what: "node 2 to catch up")
        let second = try await call(bob, to: ["alice"], timeout: 60)
        #expect(try await act(alice, MessageType.callAnswer, second).data?["state"] == "accepted")
        _ = try await event(bob, "call.accepted", call: second)
        #expect(try await act(bob, MessageType.callEnd, second).type == MessageType.ok)
        _ = try await event(alice, "call.ended", call: second)

        let denied = try #require(try cluster.redis.command(["ACL", "LOG"])?.array)
        #expect(denied.isEmpty, "\(denied)")
        let stats = try #require(try cluster.redis.command(["INFO", "commandstats"])?.text)
        #expect(stats.contains("cmdstat_client|reply:"), "the nodes had Redis leave out replies: \(stats)")
    }

    /// The next event of `type` about `callID` within half a second, or nil.
    static func nextEvent(_ client: TestClient, _ type: String, call callID: String) async throws -> Envelope? {
        do { return try await event(client, type, call: callID, timeout: .milliseconds(500)) } catch is Timeout { return nil }
    }

    /// Redis at `maxmemory` (here a byte, `noeviction`) refuses the transaction that keeps a call
    /// event: the event is published all the same, not kept, and the node says so.
    @Test func aCallEventRedisWillNotKeepIsPublishedAllTheSame() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        let (alice, bob, callID) = try await cluster.aliceRingsBobAcrossTwoNodes()
        _ = try cluster.redis.command(["CONFIG", "SET", "maxmemory", "1"])
        #expect(try await act(alice, MessageType.callCancel, callID).type == MessageType.ok)
        _ = try await event(bob, "call.cancelled", call: callID)
        _ = try cluster.redis.command(["CONFIG", "SET", "maxmemory", "0"])
        _ = try await cluster.node(1)?.waitFor(#/(Redis refused to keep an event for other nodes)/#, what: "node 1 to say Redis refused")
        #expect(try await Self.nextEvent(bob, "call.cancelled", call: callID) == nil, "delivered once")
    }

    /// Call events a node could not publish while Redis was down wait on the node and go out,
    /// in order, once Redis is back; one held longer than `cluster_event_replay_seconds` is
    /// dropped and counted (its callee learns the call's end from `GET /v1/calls/{id}`).
    // Covers: limit:cluster_event_replay_seconds
    @Test func callEventsHeldWhileRedisWasDownGoOutWhenItIsBack() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--cluster-event-replay-seconds", "3"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let carol = try await cluster.connect("carol", device: "c", node: 2)
        let toBob = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: toBob)
        let toCarol = try await call(alice, to: ["carol"], timeout: 60)
        _ = try await event(carol, "call.incoming", call: toCarol)

        cluster.redis.stop()
        try await cluster.waitUntilUnready(1, "Redis is gone")
        // Both calls run on alice's node: their cancels are taken there, and their events for
        // node 2 wait. Bob's waits past the replay time, carol's does not.
        #expect(try await act(alice, MessageType.callCancel, toBob).type == MessageType.ok)
        _ = try await cluster.node(1)?.waitFor(#/(events for other nodes wait for Redis)/#, what: "node 1 to hold the event")
        try await Task.sleep(for: .seconds(4))
        #expect(try await act(alice, MessageType.callCancel, toCarol).type == MessageType.ok)
        try await offThePool { try cluster.redis.start() }

        _ = try await event(carol, "call.cancelled", call: toCarol)
        #expect(try await Self.nextEvent(carol, "call.cancelled", call: toCarol) == nil, "delivered once")
        #expect(try await Self.nextEvent(bob, "call.cancelled", call: toBob) == nil, "held too long: dropped")
        // A cancel publishes the same events for each call (to the callee, and to the caller's
        // sessions elsewhere): as many dropped for bob's as published late for carol's.
        let dropped = try await cluster.node(1)?.waitFor(#/events for other nodes dropped.*count=(\d+)/#, what: "node 1 to drop the stale events")
        let republished = try await cluster.node(1)?.waitFor(#/events held while Redis was away published.*count=(\d+)/#, what: "node 1 to publish")
        #expect(dropped != nil && dropped == republished && Int(dropped ?? "") ?? 0 > 0, "\(String(describing: dropped)), \(String(describing: republished))")
        let metrics = try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(1))/metrics").text
        #expect(metrics.contains(#"switchboard_cluster_late_events_total{outcome="republished"} "# + (republished ?? "")), "\(metrics)")
        #expect(metrics.contains(#"switchboard_cluster_late_events_total{outcome="dropped"} "# + (dropped ?? "")), "\(metrics)")
        let record = try await cluster.get("/v1/calls/\(toBob)", as: "bob", node: 2)
        #expect(record["state"] == "ended", "\(record)")
    }

    /// PostgreSQL stopped during an answered call: `/readyz` says 503, the end of the call waits
    /// for its write (nobody hears of a state a node taking the call over would not know), no
    /// node takes the call over from its owner; once the database is back the end reaches
    /// everyone, and the history and the call's record hold it once.
    @Test func aCallGoesOnWhenPostgreSQLRestarts() async throws {
        let postgres = try await offThePool { try PostgresInstance() }
        defer { postgres.destroy() }
        let cluster = try TestCluster(storeURL: postgres.url)
        defer { cluster.stop() }
        let (alice, bob, callID) = try await cluster.aliceRingsBobAcrossTwoNodes()
        #expect(try await act(bob, MessageType.callAnswer, callID).type == MessageType.ok)
        _ = try await event(alice, "call.accepted", call: callID)

        try await offThePool { try postgres.stop() }
        try await cluster.waitUntilUnready(1, "the store is down", within: .seconds(10))
        let ending = Task { try await act(alice, MessageType.callEnd, callID) }
        // Longer than the lease: the owner still holds the call in Redis, nobody takes it.
        try await Task.sleep(for: .seconds(cluster.lease + 1))
        try await bob.expectSilence(for: .milliseconds(200))
        try await offThePool { try postgres.start() }
        let ended = try await ending.value
        #expect(ended.data?["outcome"] == "completed", "\(ended)")
        _ = try await event(bob, "call.ended", call: callID)
        try await within(.seconds(10), "the history to be written") {
            while entries(try await cluster.get("/v1/calls", as: "bob", node: 2)["calls"]).isEmpty { try await Task.sleep(for: .milliseconds(100)) }
        }
        for user in ["alice", "bob"] {
            let calls = entries(try await cluster.get("/v1/calls", as: user, node: 2)["calls"])
            #expect(calls.compactMap { $0["call_id"]?.stringValue } == [callID], "\(user): \(calls)")
            #expect(calls.first?["outcome"] == "completed")
        }
        let logs = (cluster.node(1)?.standardError ?? "") + (cluster.node(2)?.standardError ?? "")
        #expect(!logs.contains("call taken over"), "no node took the call from its living owner")
    }

    /// SIGTERM on a node while PostgreSQL is down: the hand-over of its calls, which the store
    /// cannot take, is waited for `shutdown_grace_seconds` at most; meanwhile the node starts no
    /// call and makes no room for the sessions it still has (`unavailable`: they retry on
    /// another node); then its sessions are closed and it exits. Once the database is back,
    /// another node takes the ringing call over after its lease and the callee answers it.
    @Test func aNodeDrainsAndExitsWhilePostgreSQLIsDown() async throws {
        let postgres = try await offThePool { try PostgresInstance() }
        defer { postgres.destroy() }
        let cluster = try TestCluster(storeURL: postgres.url)
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--shutdown-grace-seconds", "2"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let callID = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: callID)

        try await offThePool { try postgres.stop() }
        try await cluster.waitUntilUnready(1, "the store is down", within: .seconds(10))
        let node1 = try #require(cluster.node(1))
        let started = ContinuousClock.now
        let stopping = Task { try await node1.stop(timeout: .seconds(20)) }
        _ = try await node1.waitFor(#/(shutting down)/#, what: "node 1 to begin draining")
        let late = try await alice.request(MessageType.callCreate, id: "late", encoding: CallCreateRequest(callees: ["bob"]))
        #expect(late.error?.code == .unavailable && late.error?.message.contains("shutting down") == true, "\(late)")
        let join = try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "late"))
        #expect(join.error?.code == .unavailable && join.error?.message.contains("shutting down") == true, "\(join)")
        #expect(try await stopping.value == 0, "the node exits")
        let took = ContinuousClock.now - started
        #expect(took < .seconds(8), "the store waited for 2 s, the sessions 2 s at most: \(took)")
        #expect(node1.standardError.contains("the store did not take the calls' hand-over in time"))
        _ = try await alice.closeCode(timeout: .seconds(5))

        try await offThePool { try postgres.start() }
        let answered = try await actUntilTaken(bob, MessageType.callAnswer, callID, within: .seconds(30))
        #expect(answered.data?["state"] == "accepted", "\(answered)")
    }

    /// The invite limits and idempotency keys are the cluster's: a retried create with the
    /// same key on another node gets the same call, and a caller who rang a callee as often as
    /// `invites_per_pair_per_minute` allows through one node is refused through another.
    // Covers: limit:invites_per_pair_per_minute
    @Test func inviteLimitsAndIdempotencyKeysHoldAcrossNodes() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--invites-per-pair-per-minute", "2"]) }
        let aliceOne = try await cluster.connect("alice", device: "a1", node: 1)
        let aliceTwo = try await cluster.connect("alice", device: "a2", node: 2)
        _ = try await cluster.connect("bob", device: "b", node: 2)
        let keyed = CallCreateRequest(callees: ["bob"], idempotencyKey: "retry-1")
        let made = try await aliceOne.request(MessageType.callCreate, id: "k1", encoding: keyed)
        let callID = try #require(made.data?["call_id"]?.stringValue, "\(made)")
        let again = try await aliceTwo.request(MessageType.callCreate, id: "k2", encoding: keyed)
        #expect(again.data?["call_id"]?.stringValue == callID, "the same call through the other node: \(again)")
        #expect(try await act(aliceOne, MessageType.callCancel, callID).type == MessageType.ok)
        let second = try await call(aliceOne, to: ["bob"])
        #expect(try await act(aliceOne, MessageType.callCancel, second).type == MessageType.ok)
        let third = try await aliceTwo.request(MessageType.callCreate, id: "c3", encoding: CallCreateRequest(callees: ["bob"]))
        #expect(third.error?.code == .rateLimited, "the third call to bob this minute, through the other node: \(third)")
        // A refused call is taken out of the counts again: it counts for nothing. A group call
        // with one pair over its limit is refused, and counts in none of its sets either.
        _ = try await cluster.connect("dave", device: "d", node: 1)
        let group = try await aliceOne.request(MessageType.callCreate, id: "g1", encoding: CallCreateRequest(callees: ["dave", "bob"]))
        #expect(group.error?.code == .rateLimited, "bob's pair is full: \(group)")
        let counts = { @Sendable () async throws -> [Int64?] in
            try await offThePool {
                try ["sb:inv:\(cluster.app.id):alice", "sb:invp:\(cluster.app.id):5:alice:bob", "sb:invp:\(cluster.app.id):5:alice:dave"].map {
                    try cluster.redis.command(["ZCARD", $0])?.integer
                }
            }
        }
        try await within(.seconds(5), "the refused invites to be uncounted") {
            while try await counts() != [2, 2, 0] { try await Task.sleep(for: .milliseconds(20)) }
        }

        // A call a block list refuses counts no invite (the node asks Redis and the store at
        // once, and takes the count back): carol blocks alice, is called twice, unblocks her,
        // and still gets the two calls a minute allows.
        let block = { (identities: [String]) in
            try await HTTPClient.request(
                "PUT", "http://127.0.0.1:\(cluster.port(2))/v1/users/me/blocked", headers: [("Authorization", "Bearer " + cluster.token("carol"))],
                body: JSONText.serialize(.object(["identities": .array(identities.map(JSONValue.string))])))
        }
        _ = try await cluster.connect("carol", device: "c", node: 1)
        let blocked = try await block(["alice"])
        #expect(blocked.status == 204, "\(blocked.status) \(blocked.text)")
        for (index, client) in [aliceOne, aliceTwo].enumerated() {
            let refused = try await client.request(MessageType.callCreate, id: .string("b\(index)"), encoding: CallCreateRequest(callees: ["carol"]))
            #expect(refused.error?.code == .forbidden, "\(refused)")
        }
        #expect(try await block([]).status == 204)
        for (index, client) in [aliceOne, aliceTwo].enumerated() {
            let made = try await call(client, to: ["carol"])
            #expect(try await act(client, MessageType.callCancel, made).type == MessageType.ok, "call \(index + 1) to carol")
        }
        // Another caller whose identity and key make the same text ("alice" + "x:k", "alice:x" +
        // "k") has keys of its own: each gets a call of its own.
        _ = try await cluster.connect("erin", device: "e", node: 1)
        let one = try await aliceOne.request(MessageType.callCreate, id: "x1", encoding: CallCreateRequest(callees: ["erin"], idempotencyKey: "x:k"))
        let other = try await cluster.connect("alice:x", device: "ax", node: 2)
        let two = try await other.request(MessageType.callCreate, id: "x2", encoding: CallCreateRequest(callees: ["erin"], idempotencyKey: "k"))
        let (firstX, secondX) = (try #require(one.data?["call_id"]?.stringValue, "\(one)"), try #require(two.data?["call_id"]?.stringValue, "\(two)"))
        #expect(firstX != secondX, "two callers, two calls")
        for (client, id) in [(aliceOne, firstX), (other, secondX)] { #expect(try await act(client, MessageType.callCancel, id).type == MessageType.ok) }
    }

    /// `max_devices_per_user` holds across nodes: two devices of a user with room for one,
    /// registered at once through two nodes, give one registration and one refusal (each node
    /// counted before the other wrote, until registrations of one user went one at a time).
    @Test func theDeviceLimitHoldsForRegistrationsRacingThroughTwoNodes() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--max-devices-per-user", "1"]) }
        for round in 0..<15 {
            let user = "racer-\(round)"
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (node, device) in [(1, "a"), (2, "b")] {
                    group.addTask {
                        let body = DeviceRegistration(
                            platform: "ios", voipToken: String(format: "%064x", round * 2 + node), apnsToken: nil, environment: "sandbox",
                            bundleID: cluster.app.bundleID, callKitEnabled: true, appVersion: "1.0")
                        return try await HTTPClient.request(
                            "PUT", "http://127.0.0.1:\(cluster.port(node))/v1/devices/\(device)",
                            headers: [("Authorization", "Bearer " + cluster.token(user))], body: Array(try JSONEncoder().encode(body))
                        ).status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }.sorted()
            }
            #expect(statuses == [200, 409], "\(user): \(statuses)")
        }
    }

    /// A call setup whose busy lookup Redis refuses (here carol's busy set is a key of another
    /// type) goes on with what the node knows, and takes back what Redis did count for it: a
    /// call her block list then refuses leaves no idempotency key naming it (a retry with the
    /// key was answered "being set up" for a day) and no invite counted.
    @Test func aCallSetupRedisAnsweredInPartCountsNothing() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        _ = try await cluster.connect("carol", device: "c", node: 2)
        let blocked = try await HTTPClient.request(
            "PUT", "http://127.0.0.1:\(cluster.port(2))/v1/users/me/blocked", headers: [("Authorization", "Bearer " + cluster.token("carol"))],
            body: JSONText.serialize(.object(["identities": ["alice"]])))
        #expect(blocked.status == 204)
        _ = try cluster.redis.command(["SET", "sb:busy:\(cluster.app.id):carol", "not a set"])
        for attempt in 1...2 {
            let refused = try await alice.request(MessageType.callCreate, id: .string("k\(attempt)"), encoding: CallCreateRequest(callees: ["carol"], idempotencyKey: "k1"))
            #expect(refused.error?.code == .forbidden, "attempt \(attempt): \(refused)")
        }
        #expect(try cluster.redis.command(["EXISTS", "sb:idem:\(cluster.app.id):5:alice:k1"])?.integer == 0)
        #expect(try cluster.redis.command(["ZCARD", "sb:inv:\(cluster.app.id):alice"])?.integer == 0)
    }

    /// `connects_per_identity_per_minute` counts an identity's connects across the nodes: the
    /// third connect in a minute with a limit of 2 is closed (1008) before it gets a session,
    /// though the node it reached had seen only one.
    // Covers: limit:connects_per_identity_per_minute
    @Test func theConnectLimitHoldsAcrossNodes() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--connects-per-identity-per-minute", "2"]) }
        _ = try await cluster.connect("bob", device: "b1", node: 1)
        _ = try await cluster.connect("bob", device: "b2", node: 2)
        let third = try await TestClient.connect("ws://127.0.0.1:\(cluster.port(1))/v1/ws?access_token=\(cluster.token("bob"))&device_id=b3")
        #expect(try await third.closeCode() == 1008)
        _ = try await cluster.connect("carol", device: "c1", node: 1)
    }

    /// A device that connects to another node while a call rings for its user gets the invite
    /// from the node running the call, and can answer it.
    @Test func aSessionOpenedElsewhereWhileACallRingsGetsItsInvite() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        _ = try await cluster.registerPhone("bob", device: "b-phone", seed: 7301, node: 1)
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let callID = try await call(alice, to: ["bob"], timeout: 60)
        let bob = try await cluster.connect("bob", device: "b-web", node: 2)
        #expect(try await event(bob, "call.incoming", call: callID).data?["call_id"]?.stringValue == callID)
        #expect(try await act(bob, MessageType.callAnswer, callID).data?["state"] == "accepted")
        _ = try await event(alice, "call.accepted", call: callID)
        let trace = entries(try await cluster.get("/v1/calls/\(callID)/trace", as: "alice", node: 2)["trace"])
        #expect(trace.contains { $0["event"] == "delivered_on_connect" && $0["device"] == "b-web" }, "\(trace)")
    }

    /// The rooms' REST API answers for every node's rooms, through any node: a room made
    /// through node 1 is joined through node 2, shown, sent data, its member removed, listed and
    /// deleted through node 2.
    @Test func roomsByRESTThroughAnyNode() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let name = try await cluster.createRoom(node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let joined = try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: name))
        let peer = try #require(joined.data?["peer_id"]?.stringValue, "\(joined)")
        #expect(try cluster.redis.command(["GET", "sb:room:\(cluster.app.id):\(name)"])?.text == "node-1")

        let shown = try JSONDecoder().decode(JSONValue.self, from: Data(try await cluster.rest("GET", "/v1/rooms/\(name)", node: 2).body))
        #expect(entries(shown["peers"]).compactMap { $0["peer_id"]?.stringValue } == [peer], "\(shown)")
        #expect(try await cluster.rest("POST", "/v1/rooms/\(name)/data", node: 2, body: ["data": ["text": "from the server"]]).status == 204)
        #expect(try await event(bob, "room.data").data?["data"] == ["text": "from the server"])
        let listed = try JSONDecoder().decode(JSONValue.self, from: Data(try await cluster.rest("GET", "/v1/rooms", node: 2).body))
        #expect(entries(listed["rooms"]).compactMap { $0["name"]?.stringValue } == [name], "\(listed)")
        #expect(try await cluster.rest("DELETE", "/v1/rooms/\(name)/peers/\(peer)", node: 2).status == 204)
        #expect(try await event(bob, "room.closed").data?["reason"] == "kicked")
        #expect(try await cluster.rest("DELETE", "/v1/rooms/\(name)", node: 2).status == 204)
        #expect(try await cluster.rest("GET", "/v1/rooms/\(name)", node: 1).status == 404)
    }

    /// Nothing in Redis is renewed per room: a room's key names its node and is written when
    /// the room is made (it lasts a day, and its node writes it again twice a day), and the
    /// node's lease says whether the room runs. A key naming a node whose lease ran out names
    /// no room: a join makes the room again where it arrives, and the REST API finds no room
    /// there. A node whose lease ran out writes its rooms' keys again.
    @Test func aRoomsKeyIsWrittenOnceAndItsNodesLeaseSaysItRuns() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let name = try await cluster.createRoom(node: 1)
        let key = "sb:room:\(cluster.app.id):\(name)"
        let written = try #require(try cluster.redis.command(["PTTL", key])?.integer)
        #expect(written > 86_000_000, "a room's key lasts a day, not a lease: \(written) ms")
        try await Task.sleep(for: .seconds(cluster.lease + 1))
        let later = try #require(try cluster.redis.command(["PTTL", key])?.integer)
        #expect(later > 0 && later <= written - Int64(cluster.lease) * 1000, "nothing renewed it: \(written) ms, then \(later) ms")

        // A room whose node's lease ran out: a join through node 2 makes it there, and the REST
        // API through node 2 does not pass requests on to the dead node.
        let ghost = "sb:room:\(cluster.app.id):ghost"
        _ = try cluster.redis.command(["SET", ghost, "node-9"])
        _ = try cluster.redis.command(["HSET", "sb:leases", "node-9", "1"])
        #expect(try await cluster.rest("GET", "/v1/rooms/ghost", node: 2).status == 404)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let joined = try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "ghost"))
        #expect(joined.type == MessageType.ok && entries(joined.data?["peers"]).isEmpty, "\(joined)")
        #expect(try cluster.redis.command(["GET", ghost])?.text == "node-2")

        // Redis lost node 1's room key and its lease (as in a restart): node 1 writes it again.
        _ = try cluster.redis.command(["DEL", key])
        _ = try cluster.redis.command(["HSET", "sb:leases", "node-1", "1"])
        try await within(.seconds(5), "node 1 to write its room's key again") {
            while try cluster.redis.command(["GET", key])?.text != "node-1" { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(try cluster.redis.command(["PTTL", key])?.integer ?? 0 > 86_000_000)
        #expect(try await cluster.rest("GET", "/v1/rooms/\(name)", node: 2).status == 200)
    }

    /// `max_rooms_per_app` counts the app's rooms on every node: rooms made on two nodes count
    /// together, whether a join or a REST request makes them, and a room that closes no longer
    /// counts; nor do the rooms of a node that died, once its lease ran out, nor, once it
    /// starts again under the same id, those it ran before (one made again under a name it ran
    /// counts as a new one).
    /// Covers: limit:max_rooms_per_app
    @Test func theRoomLimitHoldsAcrossNodes() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--max-rooms-per-app", "2"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        func join(_ client: TestClient, _ room: String) async throws -> Envelope {
            try await client.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room))
        }
        #expect(try await join(alice, "one").type == MessageType.ok)
        #expect(try await join(bob, "two").type == MessageType.ok)
        // One room on each node, two for the app: no third on either node, by join or by REST.
        #expect(try await join(alice, "three").error?.code == .rateLimited)
        #expect(try await join(bob, "three").error?.code == .rateLimited)
        let created = try await cluster.rest("POST", "/v1/rooms", node: 2, body: [:])
        #expect(created.status == 429, "\(created.text)")
        // A room that exists is joined through any node.
        #expect(try await join(bob, "one").type == MessageType.ok)
        // "two" closes (deleted through the other node): a new room may be made.
        #expect(try await cluster.rest("DELETE", "/v1/rooms/two", node: 1).status == 204)
        #expect(try await join(alice, "three").type == MessageType.ok)
        @Sendable func counted(_ node: Int) throws -> Set<String> {
            guard case .array(let names)? = try cluster.redis.command(["SMEMBERS", "sb:rooms:\(cluster.app.id):node-\(node)"]) else { return [] }
            return Set(names.compactMap(\.text))
        }
        #expect(try counted(1) == ["one", "three"] && counted(2).isEmpty)
        // Past a lease, the rooms still count: their node's lease runs.
        try await Task.sleep(for: .seconds(cluster.lease + 1))
        #expect(try await join(bob, "four").error?.code == .rateLimited)

        // Node 1 dies: once its lease ran out, its rooms no longer count ("four" is made on
        // node 2). Started again under its id, it counts none of the rooms it ran before.
        cluster.node(1)?.kill9()
        try await Task.sleep(for: .seconds(cluster.lease + 1))
        #expect(try await join(bob, "four").type == MessageType.ok)
        try await cluster.start(1, ["--max-rooms-per-app", "2"])
        try await within(.seconds(5), "node 1 to forget the rooms it ran before") {
            while try !counted(1).isEmpty { try await Task.sleep(for: .milliseconds(50)) }
        }
        let carol = try await cluster.connect("carol", device: "c", node: 1)
        // "one" is made again under the key node 1's previous process left naming node 1: it
        // counts as any new room does.
        #expect(try await join(carol, "one").type == MessageType.ok, "node 2's room and this one: two")
        #expect(try counted(1) == ["one"])
        #expect(try await join(carol, "five").error?.code == .rateLimited)
        #expect(try await join(bob, "six").error?.code == .rateLimited)
    }

    /// A member on another node who leaves one room of a node stays a member of its other
    /// rooms there: bob's signal in "b" reaches alice after she left "a" (her node was no
    /// longer sent anything from node 2 once she left one room), and an empty room closed by
    /// its timeout no longer counts against `max_rooms_per_app`.
    @Test func leavingOneRoomOfANodeKeepsTheOthersAndAnEmptyRoomStopsCounting() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--max-rooms-per-app", "3", "--empty-room-timeout-seconds", "1"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        func join(_ client: TestClient, _ room: String) async throws -> String {
            let joined = try await client.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room))
            return try #require(joined.data?["peer_id"]?.stringValue, "\(joined)")
        }
        for room in ["a", "b"] { _ = try await join(bob, room) }
        var alicePeer = ""
        for room in ["a", "b"] { alicePeer = try await join(alice, room) }
        #expect(try await alice.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: "a")).type == MessageType.ok)
        #expect(try await bob.request(MessageType.signal, encoding: SignalRequest(room: "b", to: alicePeer, signal: ["n": 1])).type == MessageType.ok)
        #expect(try await event(alice, MessageType.signal).data?["signal"] == ["n": 1])

        // "a" is left by bob too and closes empty a second later: a third and a fourth room
        // may be made ("b" and "c", "d"), as many as the limit of 3 allows.
        #expect(try await bob.request(MessageType.roomLeave, encoding: RoomLeaveRequest(room: "a")).type == MessageType.ok)
        try await within(.seconds(10), "room a to close and stop counting") {
            while try cluster.redis.command(["SISMEMBER", "sb:rooms:\(cluster.app.id):node-2", "a"])?.integer != 0 {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(try cluster.redis.command(["EXISTS", "sb:room:\(cluster.app.id):a"])?.integer == 0, "its key went")
        for room in ["c", "d"] { _ = try await join(bob, room) }
    }

    /// A session that ends while its join of a room on another node is under way is not left
    /// in the room: node 1, which runs the room, is stopped while bob's join waits for it and
    /// bob closes; node 1 carries the join out once it runs again, and node 2, finding bob
    /// gone, takes him out (alice hears him join and leave; the room shows her alone).
    @Test func aSessionThatEndsWhileItsJoinIsUnderWayIsNotLeftInTheRoom() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let alicePeer = try #require(try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "r")).data?["peer_id"]?.stringValue)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let node1 = try #require(cluster.node(1))
        kill(node1.pid, SIGSTOP)
        bob.sendRaw(#"{"type":"room.join","id":"j","data":{"room":"r"}}"#)
        try? await Task.sleep(for: .milliseconds(200))
        bob.socket.close()  // a clean close: the session ends at once
        try? await Task.sleep(for: .milliseconds(300))
        kill(node1.pid, SIGCONT)
        let joined = try await event(alice, "room.peer_joined")
        let bobPeer = try #require(joined.data?["peer"]?["peer_id"]?.stringValue)
        let left = try await event(alice, "room.peer_left")
        #expect(left.data?["peer_id"]?.stringValue == bobPeer)
        let shown = try JSONDecoder().decode(JSONValue.self, from: Data(try await cluster.rest("GET", "/v1/rooms/r", node: 1).body))
        #expect(entries(shown["peers"]).compactMap { $0["peer_id"]?.stringValue } == [alicePeer], "\(shown)")
    }

    /// Joins of rooms on another node that wait for their answer count against
    /// `max_rooms_per_peer`: of three sent at once with a limit of 2, one is refused (each
    /// passed the check before, the rooms counted only once joined). A second join of a room
    /// one is joining or in is not refused.
    @Test func joinsUnderWayCountAgainstTheRoomsOfAPeer() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--max-rooms-per-peer", "2"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let carol = try await cluster.connect("carol", device: "c", node: 1)
        for (client, room) in [(alice, "a"), (alice, "b"), (carol, "c")] {
            #expect(try await client.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room)).type == MessageType.ok)
        }
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        for (id, room) in [("j1", "a"), ("j2", "b"), ("j3", "a"), ("j4", "c")] {
            bob.sendRaw(#"{"type":"room.join","id":"\#(id)","data":{"room":"\#(room)"}}"#)
        }
        var answers: [String: Envelope] = [:]
        while answers.count < 4 {
            let next = try await bob.nextEnvelope()
            if let id = next.id?.stringValue, next.type == MessageType.ok || next.type == MessageType.error { answers[id] = next }
        }
        #expect(answers["j1"]?.type == MessageType.ok && answers["j2"]?.type == MessageType.ok && answers["j3"]?.type == MessageType.ok, "\(answers)")
        #expect(answers["j4"]?.error?.code == .rateLimited, "\(answers)")
        #expect(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "c")).error?.code == .rateLimited)
    }

    /// A join refused after Redis made its room this node's (its creator is over
    /// `rooms_per_identity_per_minute`) gives the room back: it does not count against
    /// `max_rooms_per_app` (it counted while its node ran, and an identity refused again and
    /// again could fill the app's rooms for everyone).
    @Test func aJoinRefusedAfterItsRoomWasClaimedDoesNotCountIt() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node, ["--rooms-per-identity-per-minute", "1", "--max-rooms-per-app", "2"]) }
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        #expect(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "x")).type == MessageType.ok)
        let refused = try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "y"))
        #expect(refused.error?.code == .rateLimited && refused.error?.message.contains("rooms_per_identity_per_minute") == true, "\(refused)")
        try await within(.seconds(5), "the claim of y to be given back") {
            while try cluster.redis.command(["SISMEMBER", "sb:rooms:\(cluster.app.id):node-2", "y"])?.integer != 0
                || cluster.redis.command(["EXISTS", "sb:room:\(cluster.app.id):y"])?.integer != 0
            {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let carol = try await cluster.connect("carol", device: "c", node: 1)
        #expect(try await carol.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "z")).type == MessageType.ok)
    }

    /// A node started again under its id (killed, and its key gone before the next check of
    /// its peers: a supervisor restarts it at once) has lost its sessions and its rooms: the
    /// other node sees another process behind the id, and bob, whose session was there, leaves
    /// alice's room on node 1 (`disconnected`), while carol on node 1 hears the room that ran
    /// on node 2 closed (`node_lost`). Checked by the node's key alone, the new process looked
    /// like the old one and bob stayed in the room for good.
    @Test func aNodeStartedAgainUnderItsIdHasLostItsMembersAndRooms() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        // Nodes check each other every third of the lease: 10 s here, time enough for node 2 to
        // be started again between two checks.
        for node in 1...2 { try await cluster.start(node, ["--call-lease-seconds", "30"]) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        #expect(try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "on-1")).type == MessageType.ok)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let bobPeer = try #require(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "on-1")).data?["peer_id"]?.stringValue)
        #expect(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "on-2")).type == MessageType.ok)
        let carol = try await cluster.connect("carol", device: "c", node: 1)
        #expect(try await carol.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "on-2")).type == MessageType.ok)
        #expect(try cluster.redis.command(["GET", "sb:room:\(cluster.app.id):on-2"])?.text == "node-2")
        _ = try await event(alice, "room.peer_joined")

        cluster.node(2)?.kill9()
        _ = try cluster.redis.command(["DEL", "sb:node:node-2"])
        try await cluster.start(2, ["--call-lease-seconds", "30"])
        let left = try await event(alice, "room.peer_left", timeout: .seconds(15))
        #expect(left.data?["peer_id"]?.stringValue == bobPeer && left.data?["reason"] == "disconnected", "\(left)")
        let closed = try await event(carol, "room.closed", timeout: .seconds(15))
        #expect(closed.data?["room"] == "on-2" && closed.data?["reason"] == "node_lost", "\(closed)")
    }

    /// A node stalled past its lease and its key (SIGSTOP) finds, once it runs again, what
    /// the others did meanwhile with its rooms: bob, on node 2, heard both rooms of node 1
    /// closed (`node_lost`) and joined "taken" again, now made on node 2. Node 1 closes its
    /// own "taken" for alice (she joins again and is in bob's room: one room, not two; bob
    /// hears nothing of the room node 1 closed). Node 1's subscription was cut while it was
    /// stopped, so node 2's word that bob left its rooms was lost: in "kept", where node 1
    /// still counts bob, its first event for him makes node 2 answer that he left (alice hears
    /// `room.peer_left`).
    @Test func aNodeStalledPastItsLeaseLetsGoOfRoomsTheOthersRemade() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        var bobPeer = ""
        for room in ["kept", "taken"] {
            #expect(try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room)).type == MessageType.ok)
            bobPeer = try #require(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room)).data?["peer_id"]?.stringValue)
        }
        let node1 = try #require(cluster.node(1))
        kill(node1.pid, SIGSTOP)
        // Its subscription goes too (as in a cut): what node 2 tells it meanwhile is lost.
        _ = try? cluster.redis.command(["CLIENT", "KILL", "TYPE", "pubsub"])
        do {
            var closed: Set<String> = []
            while closed.count < 2 {
                let event = try await event(bob, "room.closed", timeout: .seconds(15))
                #expect(event.data?["reason"] == "node_lost", "\(event)")
                if let room = event.data?["room"]?.stringValue { closed.insert(room) }
            }
            #expect(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "taken")).type == MessageType.ok)
            #expect(try cluster.redis.command(["GET", "sb:room:\(cluster.app.id):taken"])?.text == "node-2")
        } catch {
            kill(node1.pid, SIGCONT)
            throw error
        }
        kill(node1.pid, SIGCONT)
        while true {
            let closed = try await event(alice, "room.closed", timeout: .seconds(15))
            if closed.data?["room"] == "taken" {
                #expect(closed.data?["reason"] == "node_lost", "\(closed)")
                break
            }
        }
        // Node 1 still counts bob in "kept": its first event for him is answered with a leave
        // (once node 1 listens again: its subscription is back when it is ready).
        try await within(.seconds(10), "node 1 to be ready again") {
            while try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(1))/readyz").status != 200 { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(try await alice.request(MessageType.data, id: "d", data: ["room": "kept", "data": ["text": "anyone?"]]).type == MessageType.ok)
        let left = try await event(alice, "room.peer_left")
        #expect(left.data?["room"] == "kept" && left.data?["peer_id"]?.stringValue == bobPeer && left.data?["reason"] == "disconnected", "\(left)")
        let alicePeer = try #require(try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "taken")).data?["peer_id"]?.stringValue)
        // Bob hears alice join, and nothing of node 1's "taken" closing: it is not his room.
        while true {
            let next = try await bob.nextEnvelope()
            #expect(next.type != "room.closed", "\(next)")
            if next.type == "room.peer_joined" {
                #expect(next.data?["room"] == "taken" && next.data?["peer"]?["peer_id"]?.stringValue == alicePeer, "\(next)")
                break
            }
        }
        let info = try await bob.request(MessageType.sessionInfo)
        #expect(entries(info.data?["rooms"]).compactMap(\.stringValue) == ["taken"], "\(info)")
    }

    /// A call's room goes with its call: node 1, stalled past its lease while it ran alice's
    /// answered call with bob, has it taken over by node 2 and lets it go; the call's room it
    /// ran closes for alice (`node_lost`), who joins it again where the call now runs, with
    /// bob (it ran on, a second room of the call beside node 2's).
    @Test func aCallsRoomClosesOnTheNodeThatLetTheCallGo() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let bob = try await cluster.connect("bob", device: "b", node: 2)
        let callID = try await call(alice, to: ["bob"], timeout: 60)
        _ = try await event(bob, "call.incoming", call: callID)
        #expect(try await act(bob, MessageType.callAnswer, callID).type == MessageType.ok)
        let room = "call-\(callID)"
        #expect(try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room)).type == MessageType.ok, "the call runs on node 1")
        let node1 = try #require(cluster.node(1))
        kill(node1.pid, SIGSTOP)
        do {
            try await within(.seconds(20), "node 2 to take the call over") {
                while try cluster.redis.command(["GET", "sb:call:\(callID)"])?.text != "node-2" { try await Task.sleep(for: .milliseconds(100)) }
            }
        } catch {
            kill(node1.pid, SIGCONT)
            throw error
        }
        kill(node1.pid, SIGCONT)
        while true {
            let closed = try await event(alice, "room.closed", timeout: .seconds(15))
            if closed.data?["room"]?.stringValue == room {
                #expect(closed.data?["reason"] == "node_lost", "\(closed)")
                break
            }
        }
        #expect(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room)).type == MessageType.ok)
        let joined = try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: room))
        #expect(joined.type == MessageType.ok && entries(joined.data?["peers"]).count == 1, "\(joined)")
    }

    /// Metadata and data in a room another node runs are answered as on one node: an admin
    /// who is not a member sets the room's metadata through another node (it was `not_found`
    /// there: that node did not know where the room ran), and data to a peer not in the room
    /// is refused with `not_found` (it was `ok`, and dropped by the room's node).
    @Test func metadataAndDataInARoomElsewhereAreAnsweredAsOnOneNode() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        let alicePeer = try #require(try await alice.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "r")).data?["peer_id"]?.stringValue)
        let admin = try await cluster.connect("operator", device: "o", node: 2, admin: true)
        let set = try await admin.request(MessageType.roomSetMetadata, encoding: RoomMetadataRequest(room: "r", metadata: ["topic": "launch"]))
        #expect(set.type == MessageType.ok, "\(set)")
        #expect(try await event(alice, "room.metadata").data?["metadata"] == ["topic": "launch"])
        let none = try await admin.request(MessageType.roomSetMetadata, encoding: RoomMetadataRequest(room: "nowhere", metadata: ["x": 1]))
        #expect(none.error?.code == .notFound, "\(none)")

        let bob = try await cluster.connect("bob", device: "b", node: 2)
        #expect(try await bob.request(MessageType.roomJoin, encoding: RoomJoinRequest(room: "r")).type == MessageType.ok)
        let astray = try await bob.request(MessageType.data, data: ["room": "r", "to": "no-such-peer", "data": ["n": 1]])
        #expect(astray.error?.code == .notFound, "\(astray)")
        #expect(try await bob.request(MessageType.data, data: ["room": "r", "to": .string(alicePeer), "data": ["n": 2]]).type == MessageType.ok)
        #expect(try await event(alice, "room.data").data?["data"] == ["n": 2])
    }

    /// Presence stays right when a node dies: a callee whose only session was on a node
    /// killed with SIGKILL (Redis drops the node's subscriptions with its connection) is no
    /// longer seen as connected, and a call to it ends `failed` (unreachable) at once instead
    /// of ringing nobody.
    @Test func presenceForgetsTheSessionsOfANodeThatDied() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        let alice = try await cluster.connect("alice", device: "a", node: 1)
        _ = try await cluster.connect("bob", device: "b", node: 2)
        let rung = try await call(alice, to: ["bob"])
        #expect(try await act(alice, MessageType.callCancel, rung).type == MessageType.ok, "bob's session on node 2 is seen from node 1")
        cluster.node(2)?.kill9()
        let started = ContinuousClock.now
        let ended = try await within(.seconds(10), "a call to bob to be refused as unreachable") {
            while true {
                let id = try await call(alice, to: ["bob"])
                let end = try await event(alice, "call.ended", call: id, timeout: .seconds(2))
                if end.data?["reason"] == "unreachable" { return end }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(ended.data?["outcome"] == "failed")
        #expect(ContinuousClock.now - started < .seconds(2), "the dead node's sessions are gone with its connection to Redis")
    }

    /// The SDK's client through HAProxy in front of three nodes, in an answered call (the
    /// callee on a fourth node, outside the balancer): the node holding the client's session
    /// drains, the client reconnects through the balancer and resumes on another node (the
    /// same peer id, no fresh session); that node drains too and it resumes again, with the
    /// token the first move gave it; the call's end then reaches it.
    @Test(.enabled(if: LoadBalancer.installed, "needs haproxy (make test installs it)"))
    func theSDKFollowsItsSessionThroughTwoDrains() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...4 { try await cluster.start(node, ["--shutdown-grace-seconds", "6"]) }
        let balancer = try LoadBalancer(backends: (1...3).map(cluster.port))
        defer { balancer.stop() }
        let token = cluster.token("alice")
        let client = try SwitchboardClient(serverURL: URL(string: balancer.url)!, deviceID: "a-sdk") { token }
        let seen = Locked<[ClientEvent]>([])
        let listening = Task { for await event in client.events() { seen.withLock { $0.append(event) } } }
        defer { listening.cancel() }
        try await client.connect()
        // The events reach the listening task a moment after connect() returns.
        let peer = try await within(.seconds(5), "the client's session") {
            while true {
                if let peer = seen.withLock({ $0 }).compactMap({ if case .connected(let peer, false) = $0 { peer } else { nil } }).first { return peer }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let bob = try await cluster.connect("bob", device: "b", node: 4)
        let created = try await client.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        let callID = try #require(created?["call_id"]?.stringValue)
        _ = try await event(bob, "call.incoming", call: callID)
        #expect(try await act(bob, MessageType.callAnswer, callID).type == MessageType.ok)

        for drain in 1...2 {
            // The node behind the balancer that holds the client's session.
            var holding: Int?
            for node in 1...3 where cluster.node(node)?.isRunning == true {
                let metrics = try await HTTPClient.request("GET", "http://127.0.0.1:\(cluster.port(node))/metrics").text
                if metrics.contains("switchboard_sessions 1\n") { holding = node }
            }
            let target = try #require(holding, "drain \(drain): no node holds the session")
            let before = seen.withLock { $0.count }
            let stopping = Task { try await cluster.node(target)?.stop(timeout: .seconds(30)) }
            try await within(.seconds(15), "the client to resume after drain \(drain)") {
                while !seen.withLock({ $0.dropFirst(before).contains { if case .connected(peer, true) = $0 { true } else { false } } }) {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            #expect(!seen.withLock { $0.dropFirst(before).contains { if case .sessionReplaced = $0 { true } else { false } } }, "drain \(drain)")
            #expect(try await stopping.value == 0)
            try await cluster.start(target, ["--shutdown-grace-seconds", "6"])
        }
        _ = try await actUntilTaken(bob, MessageType.callEnd, callID)
        try await within(.seconds(10), "the end to reach the client") {
            while !seen.withLock({ $0.contains { if case .event("call.ended", let data, _) = $0 { data["call_id"]?.stringValue == callID } else { false } } }) {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        await client.disconnect()
    }

    /// One live node per node id; a cluster needs the shared store.
    /// A node of a cluster counts a connect across the nodes, or fetches a resumed session from
    /// another node, before the session opens: requests sent meanwhile, right after the
    /// WebSocket opened, are answered after the welcome (or the resume), in order.
    @Test func requestsSentBeforeTheSessionOpensAreAnswered() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        for node in 1...2 { try await cluster.start(node) }
        _ = try await cluster.connect("warm", device: "w", node: 1)  // the node knows the app
        let url = "ws://127.0.0.1:\(cluster.port(1))/v1/ws?access_token=\(cluster.token("alice"))&device_id=a"
        let alice = try await TestClient.connect(url)
        alice.sendRaw(#"{"type":"room.join","id":1,"data":{"room":"early"}}"#)
        alice.sendRaw(#"{"type":"ping","id":2}"#)
        #expect(try await alice.nextEnvelope().type == MessageType.sessionWelcome)
        let joined = try await alice.nextEnvelope()
        #expect(joined.type == MessageType.ok && joined.id == 1 && joined.data?["peer_id"] != nil, "\(joined)")
        let pong = try await alice.nextEnvelope()
        #expect(pong.type == MessageType.ok && pong.id == 2, "\(pong)")

        // The session moves to node 2; a request sent with the resume is answered there.
        let welcome = try await cluster.connect("bob", device: "b", node: 1)
        let token = try #require(try await cluster.welcomeToken(of: welcome))
        _ = try await cluster.connect("warm", device: "w2", node: 2)
        let resumeURL = "ws://127.0.0.1:\(cluster.port(2))/v1/ws?access_token=\(cluster.token("bob"))&device_id=b&resume_token=\(token)&last_seq=0"
        let moved = try await TestClient.connect(resumeURL)
        moved.sendRaw(#"{"type":"room.join","id":"j","data":{"room":"early"}}"#)
        let resumed = try await moved.nextEnvelope()
        #expect(resumed.type == MessageType.sessionResumed, "\(resumed)")
        let bobJoined = try await moved.nextEnvelope()
        #expect(bobJoined.type == MessageType.ok && bobJoined.id == "j", "\(bobJoined)")
        #expect(entries(bobJoined.data?["peers"]).count == 1)
    }

    @Test func aSecondNodeWithTheSameIdOrWithoutTheStoreIsRefused() async throws {
        let cluster = try TestCluster()
        defer { cluster.stop() }
        try await cluster.start(1)
        let twin = try ToolProcess(cluster.arguments(1).map { $0.hasSuffix("/node-1") ? $0 + "-twin" : $0 })
        #expect(try await twin.waitForExit() != 0)
        #expect(twin.standardError.contains("another live node uses node_id 'node-1'"), "\(twin.standardError)")
        let alone = try ToolProcess(cluster.arguments(2, store: false))
        #expect(try await alone.waitForExit() != 0)
        #expect(alone.standardError.contains("cluster_redis_url needs store_url"), "\(alone.standardError)")
    }
}

/// The relay's cross-node message is read without parsing the signal's payload: whatever the
/// client's strings hold (quotes, backslashes, the member's own name), the fields and the
/// payload come back as they went.
@Test func aSignalPassedToAnotherNodeIsSplitBackExactly() throws {
    let reader = SignalReader()
    let payload = Array(#"{"type":"offer","sdp":"v=0\r\n a=\"signal\":x ,\"signal\":"}"#.utf8)
    for to in ["p_abc", #"x","signal":"y"#, #"\"#, "\u{0}\n\u{2028}", #",\"signal\":"#] {
        let message = Cluster.signalMessage(from: "node-1", appID: "app_1", room: "room-1", peer: "p_from", to: to, signal: payload[...])
        let (fields, signal) = try #require(Cluster.splitSignal(message, reader: reader), "\(to)")
        #expect(fields == PassedSignalFields(from: "node-1", appID: "app_1", room: "room-1", peer: "p_from", to: to))
        #expect(Array(signal) == payload, "\(to)")
        #expect(JSONText.parse(message) != nil, "the message is JSON as a whole")
    }
    #expect(Cluster.splitSignal(Array(#"{"k":"tell","op":"leave"}"#.utf8), reader: reader) == nil)
    // Not JSON after all (a payload cut short): no signal, whatever the scan found.
    let cut = Cluster.signalMessage(from: "node-1", appID: "app_1", room: "room-1", peer: "p_from", to: "p_to", signal: Array(#"{"type":"off"#.utf8)[...])
    #expect(Cluster.splitSignal(cut, reader: reader) == nil)
}
