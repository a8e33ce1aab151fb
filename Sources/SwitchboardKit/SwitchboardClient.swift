import Foundation
import SwitchboardProtocol
import SwitchboardSupport

/// Why a client command failed.
public enum SwitchboardError: Error, Sendable, Equatable {
    /// The server refused the request, with its stable code.
    case server(ErrorBody)
    /// The connection dropped before the reply came; the command may or may not have run.
    case connectionLost
    /// No reply within the timeout.
    case timeout
    /// `connect()` was not called, or `disconnect()` was.
    case notConnected
    /// The server's upgrade was refused or the answer made no sense.
    case invalidResponse(String)
}

/// What the client reports besides server events.
public enum ClientEvent: Sendable, Equatable {
    /// A session is open: `resumed` is true when an earlier one was taken over (no event lost).
    case connected(peerID: String, resumed: Bool)
    /// The session could not be resumed: rooms must be joined again.
    case sessionReplaced(peerID: String)
    /// The connection dropped; the client is reconnecting.
    case reconnecting(attempt: Int)
    /// A server event (`room.*`, `signal`, `call.*`), in order, each once.
    case event(type: String, data: JSONValue, seq: UInt64)
}

/// Fans events out to every subscriber (the client's, the call manager's).
final class Subscribers<Event: Sendable>: Sendable {
    private let continuations = Locked<[UUID: (continuation: AsyncStream<Event>.Continuation, lasting: Bool)]>([:])

    /// A new subscriber. `lasting`: it goes on across `finish()` (the client's disconnect()
    /// and a later connect(), for the call manager), instead of ending there.
    func add(lasting: Bool = false) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self)
        let id = UUID()
        continuations.withLock { $0[id] = (continuation, lasting) }
        continuation.onTermination = { [weak self] _ in _ = self?.continuations.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    func yield(_ event: Event) {
        for subscriber in continuations.withLock({ Array($0.values) }) { subscriber.continuation.yield(event) }
    }

    /// Ends every subscriber's stream but the lasting ones.
    func finish() {
        for subscriber in continuations.withLock({ Array($0.values) }) where !subscriber.lasting { subscriber.continuation.finish() }
    }
}

/// The connection to a Switchboard server: requests with replies, ordered events, and
/// reconnection that resumes the session so no event is lost or repeated.
///
/// ```swift
/// let client = SwitchboardClient(serverURL: URL(string: "https://calls.example.com")!, deviceID: "iphone-1") {
///     try await myBackend.switchboardToken()
/// }
/// try await client.connect()
/// for await event in client.events() { … }
/// ```
public actor SwitchboardClient {
    /// Timing of the client; the defaults suit phones.
    public struct Options: Sendable {
        /// How often the client pings when idle.
        public var pingInterval: Duration = .seconds(5)
        /// A connection that does not answer a ping this long is dead (the server closes idle
        /// connections after 45 s; the client notices sooner).
        public var pingTimeout: Duration = .seconds(10)
        /// Time allowed for one request's reply.
        public var requestTimeout: Duration = .seconds(10)
        /// First reconnection delay; doubles up to `maxBackoff`.
        public var initialBackoff: Duration = .milliseconds(250)
        /// The longest reconnection delay.
        public var maxBackoff: Duration = .seconds(5)
        /// Attempts in a row to resume a session that reached the server but got no session:
        /// past them the client stops asking for that session and opens a fresh one (its rooms
        /// are then joined again: `ClientEvent.sessionReplaced`), so that it never loops on a
        /// resume the server cannot serve.
        public var maxFailedResumes = 2

        public init() {}
    }

    /// The server's base URL (`http(s)://host:port`).
    public nonisolated let serverURL: URL
    /// This install's device id, as registered with `PUT /v1/devices/{id}`.
    public nonisolated let deviceID: String?
    /// Timing of the client.
    public nonisolated let options: Options
    private nonisolated let subscribers = Subscribers<ClientEvent>()
    private nonisolated let clockOffset = Locked<TimeInterval?>(nil)

    /// The server's clock less this device's, in seconds, from the last `session.welcome`
    /// (nil before the first): what a time the server wrote (a push's `ring_expires_at`) is on
    /// this device's clock, whichever way the device's clock is off.
    public nonisolated var serverClockOffset: TimeInterval? { clockOffset.withLock { $0 } }
    private let tokenProvider: @Sendable () async throws -> String
    private let transport: any WebSocketTransport
    private var connection: (any WebSocketConnection)?
    private var connectionNumber = 0
    private var pending: [Int: CheckedContinuation<JSONValue?, any Error>] = [:]
    private var nextRequestID = 1
    private var resumeToken: String?
    private var lastSequence: UInt64 = 0
    /// Resumes in a row that reached the server and got no session (`Options.maxFailedResumes`).
    private var failedResumes = 0
    private var wanted = false
    private var reconnecting = false
    private var tasks: [Task<Void, Never>] = []
    /// The connection attempt in progress, which concurrent `connect()` calls wait for.
    private var connecting: Task<Void, any Error>?
    private var lastReceived = ContinuousClock.now
    /// The peer id of the current session.
    public private(set) var peerID: String?
    /// The user this session is for (the token's identity).
    public private(set) var identity: String?
    /// The latest access token (for REST calls).
    public private(set) var token: String?

    /// `tokenProvider` is asked for a fresh access token before every connection, so a token
    /// never goes stale across reconnects.
    public init(
        serverURL: URL, deviceID: String?, options: Options = Options(), transport: (any WebSocketTransport)? = nil,
        tokenProvider: @escaping @Sendable () async throws -> String
    ) throws {
        self.serverURL = serverURL
        self.deviceID = deviceID
        self.options = options
        self.transport = try transport ?? DefaultTransports.webSocket()
        self.tokenProvider = tokenProvider
    }

    /// Server events and connection changes, from now on. Each call gives a stream of its own
    /// (the call manager, rooms and the app each follow theirs).
    public nonisolated func events() -> AsyncStream<ClientEvent> {
        subscribers.add()
    }

    /// The client's events across `disconnect()` and `connect()` (a logout then a login with
    /// one client): the stream ends only when its reader stops. The call manager follows this.
    nonisolated func lastingEvents() -> AsyncStream<ClientEvent> {
        subscribers.add(lasting: true)
    }

    private var eventSink: Subscribers<ClientEvent> { subscribers }

    /// Whether a session is open now.
    public var isConnected: Bool { connection != nil }

    /// Opens the session; from then on the client keeps it open until `disconnect()`.
    /// Calling it while connected does nothing.
    public func connect() async throws {
        guard connection == nil, !reconnecting else { return }
        // Callers racing to connect (a push's reconciliation and the user's answer) share one
        // attempt: the actor lets a second caller in while the first awaits the network.
        if let connecting { return try await connecting.value }
        wanted = true
        let attempt = Task {
            try await open(resume: false)
            startPinging()
        }
        connecting = attempt
        defer { connecting = nil }
        try await attempt.value
    }

    /// Closes the session cleanly (the server ends it at once).
    public func disconnect() {
        wanted = false
        tasks.forEach { $0.cancel() }
        tasks.removeAll()
        connection?.close(code: 1000)
        connection = nil
        failPending(.notConnected)
        subscribers.finish()
    }

    /// Drops the connection as a network failure does (for tests): the TCP connection is reset
    /// with no close frame; the client reconnects and resumes.
    public func simulateNetworkDrop() {
        connection?.abort()
    }

    /// Sends a request and waits for its reply's data, at most `timeout` (default:
    /// `Options.requestTimeout`); then it throws `SwitchboardError.timeout`.
    @discardableResult
    public func request(_ type: String, _ data: JSONValue? = nil, timeout: Duration? = nil) async throws -> JSONValue? {
        guard let connection else { throw SwitchboardError.notConnected }
        let id = nextRequestID
        nextRequestID += 1
        let envelope = Envelope(type: type, id: .int(Int64(id)), data: data)
        let text = String(decoding: try JSONEncoder().encode(envelope), as: UTF8.self)
        let timeout = timeout ?? options.requestTimeout
        return try await withCheckedThrowingContinuation { continuation in
            pending[id] = continuation
            connection.send(text)
            tasks.append(Task { [weak self] in
                // Cancelled means disconnected, which fails every pending request itself.
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                await self?.expire(id)
            })
        }
    }

    /// Sends a request with `data` built from an encodable value.
    @discardableResult
    public func request(_ type: String, encoding value: some Encodable & Sendable, timeout: Duration? = nil) async throws -> JSONValue? {
        let data = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(value))
        return try await request(type, data, timeout: timeout)
    }

    private func expire(_ id: Int) {
        pending.removeValue(forKey: id)?.resume(throwing: SwitchboardError.timeout)
    }

    private func failPending(_ error: SwitchboardError) {
        let waiting = pending
        pending.removeAll()
        for continuation in waiting.values { continuation.resume(throwing: error) }
    }

    // MARK: Connection

    /// Opens a connection: resuming the session when `resume`; `replacing`: a fresh session
    /// that takes the place of one the client gave up resuming.
    private func open(resume: Bool, replacing: Bool = false) async throws {
        let token = try await tokenProvider()
        self.token = token
        var components = URLComponents(url: serverURL, resolvingAgainstBaseURL: false)!
        components.scheme = serverURL.scheme == "https" ? "wss" : "ws"
        components.path = "/v1/ws"
        var query = [URLQueryItem(name: "access_token", value: token)]
        if let deviceID { query.append(URLQueryItem(name: "device_id", value: deviceID)) }
        if resume, let resumeToken {
            query += [URLQueryItem(name: "resume_token", value: resumeToken), URLQueryItem(name: "last_seq", value: String(lastSequence))]
        }
        components.queryItems = query
        let connection = try await transport.connect(to: components.url!)
        var iterator = connection.messages.makeAsyncIterator()
        guard case .text(let first)? = await iterator.next(),
            let hello = try? JSONDecoder().decode(Envelope.self, from: Data(first.utf8))
        else {
            // The server took the connection and gave no session: a resume it could not serve
            // (it used to drop one whose replay overflowed its send queue) counts towards
            // giving that session up.
            if resume && resumeToken != nil { failedResumes += 1 }
            throw SwitchboardError.invalidResponse("no session.welcome")
        }
        failedResumes = 0
        switch hello.type {
        case MessageType.sessionWelcome:
            let welcome = try JSONDecoder().decode(SessionWelcome.self, from: JSONEncoder().encode(hello.data))
            // A fresh session where one was resumed or given up: the rooms are to be joined again.
            let replaced = (resume || replacing) && resumeToken != nil
            peerID = welcome.peerID
            identity = welcome.identity
            resumeToken = welcome.resumeToken
            clockOffset.withLock { $0 = Double(welcome.serverTime) / 1000 - Date().timeIntervalSince1970 }
            lastSequence = 0
            eventSink.yield(replaced ? .sessionReplaced(peerID: welcome.peerID) : .connected(peerID: welcome.peerID, resumed: false))
        case MessageType.sessionResumed:
            // A session that moved to another node of a cluster resumes with a new token.
            if let resumed = try? JSONDecoder().decode(SessionResumed.self, from: JSONEncoder().encode(hello.data)), let fresh = resumed.resumeToken {
                resumeToken = fresh
            }
            eventSink.yield(.connected(peerID: peerID ?? "", resumed: true))
        default:
            throw SwitchboardError.invalidResponse("unexpected \(hello.type)")
        }
        self.connection = connection
        connectionNumber += 1
        lastReceived = .now
        let number = connectionNumber
        let messages = connection.messages
        _ = messages
        tasks.append(Task { [weak self] in
            while let message = await iterator.next() {
                guard let self else { return }
                if await !self.receive(message, on: number) { return }
            }
            await self?.connectionEnded(number)
        })
    }

    /// Handles one message; false when the connection is over.
    private func receive(_ message: WebSocketMessage, on number: Int) -> Bool {
        guard number == connectionNumber else { return false }
        lastReceived = .now
        switch message {
        case .closed:
            connectionEnded(number)
            return false
        case .text(let text):
            guard let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)) else { return true }
            if envelope.type == MessageType.sessionExpiring {
                // The token runs out: a fresh one from the app keeps the session open (without
                // it the server closes with 4003, and the reconnect asks for a fresh one anyway).
                tasks.append(Task { [weak self] in await self?.refreshToken() })
                return true
            }
            if envelope.type == MessageType.ok || envelope.type == MessageType.error {
                guard case .int(let id)? = envelope.id, let continuation = pending.removeValue(forKey: Int(id)) else { return true }
                if let error = envelope.error {
                    continuation.resume(throwing: SwitchboardError.server(error))
                } else {
                    continuation.resume(returning: envelope.data)
                }
            } else if let seq = envelope.seq {
                guard seq > lastSequence else { return true }  // already seen (a replay overlap)
                lastSequence = seq
                eventSink.yield(.event(type: envelope.type, data: envelope.data ?? .null, seq: seq))
            }
            return true
        }
    }

    /// Hands the server a fresh token for the open session (`session.refresh`).
    private func refreshToken() async {
        guard let fresh = try? await tokenProvider() else { return }
        token = fresh
        _ = try? await request(MessageType.sessionRefresh, ["access_token": .string(fresh)])
    }

    private func connectionEnded(_ number: Int) {
        guard number == connectionNumber, connection != nil else { return }
        connection = nil
        failPending(.connectionLost)
        guard wanted, !reconnecting else { return }
        reconnecting = true
        tasks.append(Task { [weak self] in await self?.reconnect() })
    }

    private func reconnect() async {
        var delay = options.initialBackoff
        var attempt = 0
        while wanted {
            attempt += 1
            eventSink.yield(.reconnecting(attempt: attempt))
            do {
                let resuming = failedResumes < options.maxFailedResumes
                try await open(resume: resuming, replacing: !resuming)
                reconnecting = false
                return
            } catch {
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, options.maxBackoff)
            }
        }
        reconnecting = false
    }

    /// Pings when idle; a connection silent past the timeout is dropped and resumed.
    private func startPinging() {
        let interval = options.pingInterval
        tasks.append(Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                await self?.pingIfIdle()
            }
        })
    }

    private func pingIfIdle() async {
        guard let connection else { return }
        if ContinuousClock.now - lastReceived > options.pingTimeout {
            connection.close(code: CloseCode.clientDropped)  // dead: drop it, the reader reconnects
            connectionEnded(connectionNumber)
            return
        }
        if ContinuousClock.now - lastReceived >= options.pingInterval {
            _ = try? await request(MessageType.ping)
        }
    }

    // MARK: REST

    /// `GET /v1/calls/{id}` with the current token.
    public func callState(_ callID: String, http: any HTTPTransport) async throws -> JSONValue {
        guard let token else { throw SwitchboardError.notConnected }
        let (status, body) = try await http.get(serverURL.appendingPathComponent("v1/calls/\(callID)"), bearer: token)
        // The status first: a proxy's error page is no answer about the call (retried), and
        // only the server's own errors say something about it.
        guard status == 200 else {
            if let error = try? JSONDecoder().decode(ErrorEnvelope.self, from: body) { throw SwitchboardError.server(error.error) }
            throw SwitchboardError.invalidResponse("HTTP \(status)")
        }
        return try JSONDecoder().decode(JSONValue.self, from: body)
    }
}
