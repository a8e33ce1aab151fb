// The HTTP and WebSocket values the server hands its handler: no libwebsockets type here.

import SwitchboardProtocol
import SwitchboardSupport
internal import CLibWebSockets
internal import CShims
import Foundation
import Synchronization

// MARK: - HTTP server

/// An HTTP method the server understands.
public enum HTTPMethod: String, Sendable {
    case get = "GET", post = "POST", put = "PUT", patch = "PATCH", delete = "DELETE"
    case options = "OPTIONS", head = "HEAD"
}

/// A request as the handler sees it: the head, with the whole body read.
public struct HTTPRequest: Sendable {
    public var method: HTTPMethod
    /// The path, percent-decoded, without the query.
    public var path: String
    public var query: [String: String]
    /// Header values by lower-case name, for the headers the server reads.
    public var headers: [String: String]
    public var body: [UInt8]
    public var remoteAddress: String

    public init(
        method: HTTPMethod, path: String, query: [String: String] = [:], headers: [String: String] = [:],
        body: [UInt8] = [], remoteAddress: String = "127.0.0.1"
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
    }
}

/// A response to send.
public struct HTTPResponse: Sendable {
    public enum Body: Sendable {
        case bytes([UInt8])
        /// A file on disk, streamed by libwebsockets.
        case file(path: String)
    }

    public var status: Int
    public var contentType: String
    public var headers: [(String, String)]
    public var body: Body
    /// Close the connection after this response (used when a request body is refused unread).
    public var closeConnection: Bool

    public init(
        status: Int, contentType: String = "application/json", headers: [(String, String)] = [],
        body: Body = .bytes([]), closeConnection: Bool = false
    ) {
        self.status = status
        self.contentType = contentType
        self.headers = headers
        self.body = body
        self.closeConnection = closeConnection
    }
}

/// Identifies one accepted connection for its whole life; never reused.
public struct ConnectionID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public var description: String { "c\(rawValue)" }

    package init(rawValue: UInt64) { self.rawValue = rawValue }
}

/// Why a WebSocket connection ended.
public enum CloseReason: Sendable, Equatable {
    /// The peer sent a close frame with this code (nil: no code).
    case peer(code: UInt16?)
    /// The server closed it with this code (shutdown, policy).
    case server(code: UInt16)
    /// The server dropped it because its send queue was full.
    case slowConsumer
    /// A message was larger than the limit (closed with 1009).
    case messageTooLarge
    /// The connection went silent past the idle timeout, or the network failed.
    case lost
    /// The peer sent more than `maxReceiveBytesPerSecond` allows (a flood).
    case receiveRateExceeded

    /// A short label for metrics and logs.
    public var label: String {
        switch self {
        case .peer: "peer"
        case .server(let code): "server_\(code)"
        case .slowConsumer: "slow_consumer"
        case .messageTooLarge: "message_too_large"
        case .lost: "lost"
        case .receiveRateExceeded: "receive_rate"
        }
    }
}

/// What to do with a WebSocket upgrade request.
public enum UpgradeDecision {
    /// Accept; `tag` comes back in `webSocketOpened` so the handler knows which endpoint it was.
    case accept(tag: Int)
    /// Refuse with an HTTP response (for example 401) before the upgrade.
    case reject(HTTPResponse)
}

/// The server's side of HTTP and WebSocket events. Every method runs on the loop thread.
public protocol HTTPServerHandler: AnyObject {
    /// Called once, before the server accepts anything, with the server that will call back.
    func attach(to server: HTTPServer)
    /// A complete request. Answer with `HTTPServer.respond(to:with:)`, now or later.
    func handle(_ request: HTTPRequest, on connection: ConnectionID)
    /// A request to upgrade to WebSocket (its body is empty).
    func shouldUpgrade(_ request: HTTPRequest, on connection: ConnectionID) -> UpgradeDecision
    func webSocketOpened(_ connection: ConnectionID, tag: Int)
    func webSocketReceived(_ connection: ConnectionID, message: [UInt8], binary: Bool)
    /// The connection is gone, whoever closed it, and why.
    func webSocketClosed(_ connection: ConnectionID, reason: CloseReason)
    /// A new TCP connection is about to be accepted; returning false refuses it.
    func shouldAcceptConnection() -> Bool
    /// `count` connections were closed as soon as accepted, for `reason`.
    func connectionsRefused(_ count: Int, reason: ConnectionRefusal)
    /// The process ran out of descriptors: accepting pauses for `HTTPServer.Options.acceptPause`.
    func acceptingPaused()
}

extension HTTPServerHandler {
    public func connectionsRefused(_ count: Int, reason: ConnectionRefusal) {}
    public func acceptingPaused() {}
}

/// Why the server closed a connection as soon as it accepted it.
public enum ConnectionRefusal: String, Sendable, CaseIterable {
    /// `maxConnections` were open (answered `503` first).
    case maxConnections = "max_connections"
    /// The process had no descriptor left; the connection was shed with the spare one.
    case outOfDescriptors = "out_of_descriptors"
    /// The server is shutting down (answered `503` first).
    case shuttingDown = "shutting_down"
}
