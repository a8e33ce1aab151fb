import Foundation

#if canImport(SwitchboardSystem)
import SwitchboardSystem
#endif
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a WebSocket connection delivers to the client.
public enum WebSocketMessage: Sendable, Equatable {
    case text(String)
    /// The connection ended; `code` is the close code the server sent, if any.
    case closed(code: UInt16?)
}

/// One open WebSocket connection.
public protocol WebSocketConnection: Sendable {
    /// Messages in arrival order, then `.closed`.
    var messages: AsyncStream<WebSocketMessage> { get }
    /// Sends a text message.
    func send(_ text: String)
    /// Starts the closing handshake with `code`.
    func close(code: UInt16)
    /// Drops the connection at once, with no closing handshake (as a network failure would).
    func abort()
}

/// Opens WebSocket connections: libwebsockets' client on Linux (`LibWebSocketsTransport`),
/// `URLSessionWebSocketTask` on Apple platforms (`URLSessionWebSocketTransport`).
public protocol WebSocketTransport: Sendable {
    /// Connects to `url` (ws:// or wss://).
    func connect(to url: URL) async throws -> any WebSocketConnection
}

/// Speaks the server's REST API (reconciling a call after a push, registering the device):
/// libcurl on Linux, URLSession on Apple platforms; an app may pass its own.
public protocol HTTPTransport: Sendable {
    /// Sends `method url` with a bearer token and an optional JSON body; returns status and body.
    func send(_ method: String, _ url: URL, bearer: String, json: Data?) async throws -> (status: Int, body: Data)
}

extension HTTPTransport {
    /// `GET url` with a bearer token.
    public func get(_ url: URL, bearer: String) async throws -> (status: Int, body: Data) {
        try await send("GET", url, bearer: bearer, json: nil)
    }
}

/// The platform's transports.
enum DefaultTransports {
    static func webSocket() throws -> any WebSocketTransport {
        #if canImport(SwitchboardSystem)
        try LibWebSocketsTransport()
        #else
        URLSessionWebSocketTransport()
        #endif
    }

    static func http() -> any HTTPTransport {
        #if canImport(SwitchboardSystem)
        CurlHTTPTransport()
        #else
        URLSessionHTTPTransport()
        #endif
    }
}

#if canImport(SwitchboardSystem)
/// The WebSocket transport on libwebsockets' client, with its own event loop thread.
public final class LibWebSocketsTransport: WebSocketTransport {
    private let loop: EventLoop

    /// Starts the client's event loop thread.
    public init() throws {
        loop = try EventLoop(name: "switchboard-kit")
    }

    /// Connects (see `WebSocketTransport`).
    public func connect(to url: URL) async throws -> any WebSocketConnection {
        Connection(client: try await WebSocketClient.connect(to: url, on: loop))
    }

    private struct Connection: WebSocketConnection {
        let client: WebSocketClient
        let messages: AsyncStream<WebSocketMessage>

        init(client: WebSocketClient) {
            self.client = client
            // Read as the consumer asks: no task of its own to outlive or to fail unseen.
            let reader = EventReader(client.events)
            messages = AsyncStream(unfolding: { await reader.next() })
        }

        func send(_ text: String) { client.send(text: text) }
        func close(code: UInt16) { client.close(code: code) }
        func abort() { client.abort() }
    }

    /// The client's events as the transport's messages: text, then `.closed`, then the end.
    ///
    /// Safety of `@unchecked Sendable`: `AsyncStream(unfolding:)` calls `next` for its one
    /// consumer, one call at a time, so the iterator is never used concurrently.
    private final class EventReader: @unchecked Sendable {
        private var events: AsyncStream<WebSocketClient.Event>.Iterator
        private var closed = false

        init(_ events: AsyncStream<WebSocketClient.Event>) { self.events = events.makeAsyncIterator() }

        func next() async -> WebSocketMessage? {
            while !closed, let event = await events.next() {
                switch event {
                case .text(let text): return .text(text)
                case .binary: continue
                case .closed(let code, _):
                    closed = true
                    return .closed(code: code)
                }
            }
            return nil
        }
    }
}

/// `HTTPTransport` on libcurl.
public struct CurlHTTPTransport: HTTPTransport {
    public init() {}

    /// Sends a request (see `HTTPTransport`).
    public func send(_ method: String, _ url: URL, bearer: String, json: Data?) async throws -> (status: Int, body: Data) {
        var headers = [("Authorization", "Bearer " + bearer)]
        if json != nil { headers.append(("Content-Type", "application/json")) }
        let response = try await HTTPClient.request(method, url.absoluteString, headers: headers, body: json.map(Array.init))
        return (response.status, Data(response.body))
    }
}
#endif

// Apple platforms. `make test` also type-checks this part on Linux (FoundationNetworking has
// the same API) with -DSWITCHBOARD_TYPECHECK_URLSESSION.
#if canImport(Darwin) || SWITCHBOARD_TYPECHECK_URLSESSION
/// The WebSocket transport on `URLSessionWebSocketTask` (Apple platforms).
public final class URLSessionWebSocketTransport: WebSocketTransport {
    private let session: URLSession

    /// Uses `session` (the shared one by default).
    public init(session: URLSession = .shared) {
        self.session = session
    }

    /// Connects (see `WebSocketTransport`).
    public func connect(to url: URL) async throws -> any WebSocketConnection {
        let task = session.webSocketTask(with: url)
        task.resume()
        // The server speaks first (session.welcome); a refused upgrade ends the stream.
        return Connection(task: task)
    }

    private final class Connection: WebSocketConnection, @unchecked Sendable {
        // Safety: URLSessionWebSocketTask is thread-safe; `task` and `messages` are immutable.
        let task: URLSessionWebSocketTask
        let messages: AsyncStream<WebSocketMessage>

        init(task: URLSessionWebSocketTask) {
            self.task = task
            // Received as the consumer asks: no task of its own to outlive or to fail unseen.
            let receiver = Receiver(task: task)
            messages = AsyncStream(unfolding: { await receiver.next() })
        }

        func send(_ text: String) {
            task.send(.string(text)) { _ in }
        }

        func close(code: UInt16) {
            task.cancel(with: URLSessionWebSocketTask.CloseCode(rawValue: Int(code)) ?? .normalClosure, reason: nil)
        }

        func abort() {
            task.cancel()  // no close frame: the task's connection is torn down
        }
    }

    /// The task's messages as the transport's: text, then `.closed` once receiving fails (the
    /// connection ended), then the end.
    ///
    /// Safety of `@unchecked Sendable`: `AsyncStream(unfolding:)` calls `next` for its one
    /// consumer, one call at a time; the task is thread-safe.
    private final class Receiver: @unchecked Sendable {
        let task: URLSessionWebSocketTask
        private var closed = false

        init(task: URLSessionWebSocketTask) { self.task = task }

        func next() async -> WebSocketMessage? {
            while !closed {
                do {
                    switch try await task.receive() {
                    case .string(let text): return .text(text)
                    case .data: continue
                    @unknown default: continue
                    }
                } catch {
                    closed = true
                    return .closed(code: task.closeCode == .invalid ? nil : UInt16(task.closeCode.rawValue))
                }
            }
            return nil
        }
    }
}

/// `HTTPTransport` on URLSession (Apple platforms).
public struct URLSessionHTTPTransport: HTTPTransport {
    private let session: URLSession

    /// Uses `session` (the shared one by default).
    public init(session: URLSession = .shared) {
        self.session = session
    }

    /// Sends a request (see `HTTPTransport`).
    public func send(_ method: String, _ url: URL, bearer: String, json: Data?) async throws -> (status: Int, body: Data) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.setValue("Bearer " + bearer, forHTTPHeaderField: "Authorization")
        if let json {
            request.httpBody = json
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await session.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }
}
#endif
