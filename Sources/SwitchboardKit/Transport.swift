import Foundation
import SwitchboardSystem

/// What a WebSocket connection delivers to the client.
public enum WebSocketMessage: Sendable, Equatable {
    case text(String)
    /// The connection ended; `code` is the close code the server sent, if any.
    case closed(code: UInt16?)
}

/// One open WebSocket connection.
public protocol WebSocketConnection: Sendable {
    var messages: AsyncStream<WebSocketMessage> { get }
    func send(_ text: String)
    func close(code: UInt16)
}

/// Opens WebSocket connections. libwebsockets' client on Linux (`LibWebSocketsTransport`);
/// an app on Apple platforms may pass its own (for example on `URLSessionWebSocketTask`).
public protocol WebSocketTransport: Sendable {
    func connect(to url: URL) async throws -> any WebSocketConnection
}

/// The WebSocket transport on libwebsockets' client, with its own event loop thread.
public final class LibWebSocketsTransport: WebSocketTransport {
    private let loop: EventLoop

    public init() throws {
        loop = try EventLoop(name: "switchboard-kit")
    }

    public func connect(to url: URL) async throws -> any WebSocketConnection {
        Connection(client: try await WebSocketClient.connect(to: url, on: loop))
    }

    private struct Connection: WebSocketConnection {
        let client: WebSocketClient
        let messages: AsyncStream<WebSocketMessage>

        init(client: WebSocketClient) {
            self.client = client
            let (stream, continuation) = AsyncStream.makeStream(of: WebSocketMessage.self)
            messages = stream
            Task {
                for await event in client.events {
                    switch event {
                    case .text(let text): continuation.yield(.text(text))
                    case .binary: continue
                    case .closed(let code, _):
                        continuation.yield(.closed(code: code))
                        continuation.finish()
                    }
                }
                continuation.finish()
            }
        }

        func send(_ text: String) { client.send(text: text) }
        func close(code: UInt16) { client.close(code: code) }
    }
}

/// Speaks the server's REST API (reconciling a call after a push, registering the device).
/// libcurl on Linux; an app may pass its own (for example on `URLSession`).
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

/// `HTTPTransport` on libcurl.
public struct CurlHTTPTransport: HTTPTransport {
    public init() {}

    public func send(_ method: String, _ url: URL, bearer: String, json: Data?) async throws -> (status: Int, body: Data) {
        var headers = [("Authorization", "Bearer " + bearer)]
        if json != nil { headers.append(("Content-Type", "application/json")) }
        let response = try await HTTPClient.request(method, url.absoluteString, headers: headers, body: json.map(Array.init))
        return (response.status, Data(response.body))
    }
}
