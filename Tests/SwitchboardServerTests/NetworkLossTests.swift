import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import Testing

/// Sessions whose TCP connection dies without a closing handshake, as networks lose them: a
/// reset, a FIN with no close frame (a process killed mid-session), a peer that goes silent.
/// Each time the server keeps the session for `resume_grace_seconds` and the client resumes it
/// with everything it missed, under the same peer id.
@Suite(.timeLimit(.minutes(3))) struct NetworkLossTests {
    enum Loss: String, CaseIterable, Sendable {
        case reset, finWithoutCloseFrame, silence
    }

    @Test(arguments: Loss.allCases)
    func aSessionWhoseConnectionDiesResumesWithWhatItMissed(loss: Loss) async throws {
        let server = try TestServer {
            $0.limits.resumeGraceSeconds = 60
            $0.limits.pingIntervalSeconds = 1
            // A raw socket answers pings only while the test reads: with every suite running at
            // once (the cluster's processes included) it could stay silent past 2 s, so 4 s,
            // stretched further under the sanitizers; the silent case is found well within 10 s.
            $0.limits.idleTimeoutSeconds = 4 * testSlowdown
        }
        defer { server.stop() }
        let grants = Grants(room: "*", roomJoin: true)
        let alice = try await Peer.connect(server, "alice")
        try await alice.join("r")

        // Bob on a bare socket: it can die in ways a WebSocket library would not allow.
        let bob = try RawSocket(port: server.server.port)
        defer { bob.close() }
        let welcome = try await bob.openSession(token: server.token("bob", grants: grants))
        let peerID = try #require(welcome["data"]?["peer_id"]?.stringValue)
        let resumeToken = try #require(welcome["data"]?["resume_token"]?.stringValue)
        try bob.writeTextFrame(#"{"type":"room.join","id":"j","data":{"room":"r"}}"#)
        #expect(try await bob.readJSON()["type"] == "ok")
        #expect(try await alice.event().type == "room.peer_joined")
        let metrics = server.server.metrics
        #expect(metrics.gauge("switchboard_connections") == 2)

        switch loss {
        case .reset: bob.reset()
        case .finWithoutCloseFrame: bob.shutdownWithoutClosing()
        case .silence: break  // no reads, no pongs: the idle timeout finds it
        }
        try await within(.seconds(10) * testSlowdown, "the server to notice bob's connection is gone") {
            while metrics.gauge("switchboard_connections") != 1 { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(metrics.counter("switchboard_disconnects_total", ["reason": "lost"]) == 1, "not a clean close")

        // What bob misses meanwhile waits for him; the room still has him.
        for n in 1...2 {
            _ = try await alice.client.request(MessageType.data, id: .string("d\(n)"), encoding: DataRequest(room: "r", to: peerID, data: ["n": .int(Int64(n))]))
        }
        let resumed = try await TestClient.connect(
            server.webSocketURL + "?access_token=\(server.token("bob", grants: grants))&resume_token=\(resumeToken)&last_seq=0")
        let hello = try await resumed.nextEnvelope()
        #expect(hello.type == MessageType.sessionResumed, "\(hello)")
        #expect(hello.data?["peer_id"]?.stringValue == peerID)
        #expect(hello.data?["replay_count"] == 2)
        #expect(try await resumed.nextEnvelope().data?["data"] == ["n": 1])
        #expect(try await resumed.nextEnvelope().data?["data"] == ["n": 2])
        #expect(metrics.counter("switchboard_resumes_total", ["outcome": "resumed"]) == 1)
        // Nobody heard bob leave, and he is reachable again under the same peer id.
        _ = try await alice.client.request(MessageType.signal, encoding: SignalRequest(room: "r", to: peerID, signal: ["type": "ping"]))
        #expect(try await resumed.nextEnvelope().type == "signal")
        try await alice.client.expectSilence()
        resumed.socket.close()
    }

    /// The SDK's client after a reset of its connection (not a close frame): it reconnects on
    /// its own and resumes, losing no event.
    @Test func theSDKClientResumesAfterItsConnectionIsReset() async throws {
        let server = try TestServer { $0.limits.resumeGraceSeconds = 60 }
        defer { server.stop() }
        let grants = Grants(room: "*", roomJoin: true)
        let alice = try await Peer.connect(server, "alice")
        try await alice.join("r")
        let bob = try await Peer.connect(server, "bob")
        try await bob.join("r")
        _ = try await alice.event()
        // The library's own abort: no close frame, a reset on the wire.
        bob.client.socket.abort()
        let metrics = server.server.metrics
        try await within(.seconds(10) * testSlowdown, "the server to see the reset") {
            while metrics.counter("switchboard_disconnects_total", ["reason": "lost"]) < 1 { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(try await bob.client.closeCode() == nil, "no close frame either way")
        _ = try await alice.client.request(MessageType.data, encoding: DataRequest(room: "r", to: bob.peerID, data: "missed"))
        let resumed = try await TestClient.connect(
            server.webSocketURL + "?access_token=\(server.token("bob", grants: grants))&resume_token=\(bob.resumeToken)&last_seq=0")
        #expect(try await resumed.nextEnvelope().data?["replay_count"] == 1)
        #expect(try await resumed.nextEnvelope().data?["data"] == "missed")
        resumed.socket.close()
    }
}
