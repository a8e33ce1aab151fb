import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardSupport
import Testing

/// A server, scripted: it hands each connection what the test says and remembers the URLs.
private final class ScriptedTransport: WebSocketTransport, @unchecked Sendable {
    // Safety: every property is behind `state`.
    struct Connection: WebSocketConnection {
        let messages: AsyncStream<WebSocketMessage>
        let sent: Locked<[String]>
        func send(_ text: String) { sent.withLock { $0.append(text) } }
        func close(code: UInt16) {}
        func abort() {}
    }

    private let state = Locked<(urls: [URL], open: [AsyncStream<WebSocketMessage>.Continuation], sent: [Locked<[String]>])>(([], [], []))
    /// What a connection gets, by its place in line and its URL.
    let script: @Sendable (Int, URL) -> [WebSocketMessage]

    init(script: @escaping @Sendable (Int, URL) -> [WebSocketMessage]) { self.script = script }

    func connect(to url: URL) async throws -> any WebSocketConnection {
        let (stream, continuation) = AsyncStream.makeStream(of: WebSocketMessage.self)
        let sent = Locked<[String]>([])
        let index = state.withLock { state -> Int in
            state.urls.append(url)
            state.open.append(continuation)
            state.sent.append(sent)
            return state.urls.count - 1
        }
        let messages = script(index, url)
        for message in messages { continuation.yield(message) }
        if case .closed? = messages.last { continuation.finish() }
        return Connection(messages: stream, sent: sent)
    }

    var urls: [URL] { state.withLock { $0.urls } }

    /// What the client sent on connection `index`.
    func sent(on index: Int) -> [String] { state.withLock { $0.sent[index].withLock { $0 } } }

    /// Ends connection `index` as a network failure does.
    func drop(_ index: Int) {
        let continuation = state.withLock { $0.open[index] }
        continuation.yield(.closed(code: nil))
        continuation.finish()
    }

    /// Sends `text` on connection `index`.
    func push(_ text: String, on index: Int) {
        state.withLock { $0.open[index] }.yield(.text(text))
    }
}

private func welcome(_ peer: String) -> WebSocketMessage {
    .text(
        #"{"type":"session.welcome","data":{"peer_id":"\#(peer)","identity":"bob","resume_token":"r-\#(peer)","server_time":1,"# +
        #""resume_failed":false,"limits":{"max_message_bytes":65536,"max_data_bytes":16384,"messages_per_second":50,"# +
        #""ping_interval_seconds":20,"idle_timeout_seconds":45,"resume_grace_seconds":20}}}"#)
}

@Suite(.timeLimit(.minutes(3))) struct ClientResumeTests {
    /// A resume the server takes and answers with no session (it used to close a resume whose
    /// replay overflowed its send queue with 1008, at every try) is tried `maxFailedResumes`
    /// times; then the client opens a fresh session and says its rooms must be joined again.
    @Test func theClientGivesUpAResumeTheServerCannotServeInsteadOfLoopingOnIt() async throws {
        let transport = ScriptedTransport { index, url in
            if index == 0 { return [welcome("p1")] }
            if url.query?.contains("resume_token=") == true { return [.closed(code: 1008)] }
            return [welcome("p2")]
        }
        var options = SwitchboardClient.Options()
        options.initialBackoff = .milliseconds(5)
        options.maxBackoff = .milliseconds(20)
        let client = try SwitchboardClient(
            serverURL: URL(string: "http://127.0.0.1:1")!, deviceID: "b-phone", options: options, transport: transport) { "token" }
        let events = client.events()
        try await client.connect()
        transport.drop(0)
        var seen: [ClientEvent] = []
        for await event in events {
            seen.append(event)
            if case .sessionReplaced = event { break }
        }
        #expect(seen.first == .connected(peerID: "p1", resumed: false))
        #expect(seen.last == .sessionReplaced(peerID: "p2"))
        let resumes = transport.urls.filter { $0.query?.contains("resume_token=r-p1") == true }
        #expect(resumes.count == 2, "\(transport.urls)")
        #expect(transport.urls.last?.query?.contains("resume_token") == false)
        await client.disconnect()
    }

    /// `session.expiring` is answered with `session.refresh` and a fresh token from the app.
    @Test func theClientAnswersATokenExpiryWarningWithAFreshToken() async throws {
        let transport = ScriptedTransport { _, _ in [welcome("p1")] }
        let issued = Locked(0)
        let client = try SwitchboardClient(serverURL: URL(string: "http://127.0.0.1:1")!, deviceID: nil, transport: transport) {
            "token-\(issued.withLock { $0 += 1; return $0 })"
        }
        try await client.connect()
        transport.push(#"{"type":"session.expiring","data":{"expires_at":1,"closes_at":2000}}"#, on: 0)
        let refresh = try await waitFor { transport.sent(on: 0).first { $0.contains("session.refresh") } }
        #expect(refresh.contains(#""access_token":"token-2""#), "\(refresh)")
        await client.disconnect()
    }

    private func waitFor<T>(_ condition: () -> T?) async throws -> T {
        for _ in 0..<500 {
            if let value = condition() { return value }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw CancellationError()
    }
}
