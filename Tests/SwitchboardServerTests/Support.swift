import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing
import SwitchboardSupport

/// A real server on 127.0.0.1 with a free port and a fresh data directory, and one app.
/// How much slower than usual the tests run (`SWITCHBOARD_TEST_SLOWDOWN`, set by
/// `make test-sanitize`): tests that check a deadline stretch it by this much.
let testSlowdown = Int(ProcessInfo.processInfo.environment["SWITCHBOARD_TEST_SLOWDOWN"] ?? "") ?? 1

final class TestServer: Sendable {
    let server: SwitchboardServer
    let app: App
    let dataDirectory: String
    /// Drops the PostgreSQL database of a server whose store is there.
    private let dropDatabase: @Sendable () -> Void

    /// `engine`: where the store is, SQLite in the data directory or a PostgreSQL database of
    /// its own on the run's server (`StoreEngine`).
    init(engine: StoreEngine = .sqlite, _ configure: (inout ServerConfiguration) -> Void = { _ in }) throws {
        dataDirectory = try makeTemporaryDirectory()
        var configuration = ServerConfiguration()
        if engine == .postgres {
            let database = try TestPostgres.database()
            configuration.storeURL = database.url
            dropDatabase = database.drop
        } else {
            dropDatabase = {}
        }
        configuration.port = 0
        configuration.dataDirectory = dataDirectory
        configuration.webRoot = repositoryRoot + "/web"
        configuration.logLevel = .warning
        configure(&configuration)
        server = try SwitchboardServer.start(configuration, logger: Logger(minimumLevel: .warning))
        if engine == .postgres { try TestPostgres.expectOnPostgres(server.store, url: configuration.storeURL ?? "") }
        app = App.make(name: "Test", bundleID: "com.example.test")
        try server.store.insert(app)
    }

    var baseURL: String { server.baseURL }
    var webSocketURL: String { "ws://127.0.0.1:\(server.port)/v1/ws" }

    func token(
        _ identity: String = "alice", grants: Grants = Grants(call: true), ttl: Int = 3600, now: Date = Date(), handle: String? = nil
    ) -> String {
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: identity, name: identity.capitalized, handle: handle, grants: grants, ttlSeconds: ttl, now: now)
        return AccessTokenVerifier.sign(claims, secret: app.apiSecret)
    }

    func stop() {
        server.shutdown()
        try? FileManager.default.removeItem(atPath: dataDirectory)
        dropDatabase()
    }
}

/// The client loop shared by the tests.
let clientLoop: EventLoop = {
    do { return try EventLoop(name: "test-client") } catch { fatalError("cannot start the client loop: \(error)") }
}()

func makeTemporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "switchboard-test-" + RandomID.alphanumeric(10)
    // The owner's only, as the server makes a data directory (it would warn and close it).
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    return path
}

struct Timeout: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Runs `body`, failing with `Timeout` if it takes longer than `limit` (stretched by
/// `SWITCHBOARD_TEST_SLOWDOWN`, as every deadline in the tests is).
func within<T: Sendable>(
    _ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit * testSlowdown)
            throw Timeout(what: what)
        }
        let result = try await group.next()!
        group.cancelAll()
        return result
    }
}

/// A WebSocket test client that reads JSON envelopes.
final class TestClient: Sendable {
    let socket: WebSocketClient
    private let inbox = Inbox()

    /// Events received and not read yet.
    final class Inbox: Sendable {
        private let events = Locked<[WebSocketClient.Event]>([])
        func withLock<T>(_ body: (inout [WebSocketClient.Event]) -> T) -> T { events.withLock { body(&$0) } }
    }

    /// The `session.welcome` data, where a test keeps it.
    let welcome = Locked<JSONValue?>(nil)

    /// Envelopes read while waiting for a reply, handed out first by `nextEnvelope`.
    private let stash = Locked<[Envelope]>([])

    init(_ socket: WebSocketClient) {
        self.socket = socket
        let inbox = self.inbox
        Task {
            for await event in socket.events { inbox.withLock { $0.append(event) } }
        }
    }

    static func connect(_ url: String, headers: [(String, String)] = []) async throws -> TestClient {
        TestClient(try await WebSocketClient.connect(to: URL(string: url)!, headers: headers, on: clientLoop))
    }

    /// The next event, or a timeout (stretched by `SWITCHBOARD_TEST_SLOWDOWN`).
    func next(timeout: Duration = .seconds(15)) async throws -> WebSocketClient.Event {
        let deadline = ContinuousClock.now + timeout * testSlowdown
        while ContinuousClock.now < deadline {
            let event = inbox.withLock { $0.isEmpty ? nil : $0.removeFirst() }
            if let event { return event }
            try await Task.sleep(for: .milliseconds(2))
        }
        throw Timeout(what: "a WebSocket event")
    }

    /// The next message, decoded as an envelope.
    func nextEnvelope(timeout: Duration = .seconds(15)) async throws -> Envelope {
        if let stashed = stash.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return stashed }
        let event = try await next(timeout: timeout)
        guard case .text(let text) = event else {
            throw Timeout(what: "a text message, got \(event)")
        }
        return try JSONDecoder().decode(Envelope.self, from: Data(text.utf8))
    }

/// Sends a request and returns its reply.
    func request(_ type: String, id: JSONValue = "r1", data: JSONValue? = nil) async throws -> Envelope {
        let envelope = Envelope(type: type, id: id, data: data)
        socket.send(text: String(decoding: try JSONEncoder().encode(envelope), as: UTF8.self))
        var others: [Envelope] = []
        defer { if !others.isEmpty { stash.withLock { $0.insert(contentsOf: others, at: 0) } } }
        while true {
            let next = try await nextEnvelope()
            if next.id == id && (next.type == MessageType.ok || next.type == MessageType.error) { return next }
            others.append(next)
        }
    }

    /// Sends a request with `data` built from an encodable value.
    func request(_ type: String, id: JSONValue = "r1", encoding data: some Encodable) async throws -> Envelope {
        let value = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(data))
        return try await request(type, id: id, data: value)
    }

    /// Fails if anything arrives within `window`.
    func expectSilence(for window: Duration = .milliseconds(300)) async throws {
        if let stashed = stash.withLock({ $0.first }) { throw UnexpectedMessage(description: "\(stashed)") }
        let event: WebSocketClient.Event
        do { event = try await next(timeout: window) } catch is Timeout { return }
        throw UnexpectedMessage(description: "\(event)")
    }

    func sendRaw(_ text: String) {
        socket.send(text: text)
    }

    /// Waits for the connection to end and returns the close code the server sent.
    func closeCode(timeout: Duration = .seconds(15)) async throws -> UInt16? {
        while true {
            if case .closed(let code, _) = try await next(timeout: timeout) { return code }
        }
    }
}


struct UnexpectedMessage: Error, CustomStringConvertible {
    var description: String
}
