// The WebSocket client on libwebsockets (the Linux SDK and the load generator use it).

import SwitchboardProtocol
import SwitchboardSupport
internal import CLibWebSockets
internal import CShims
import Foundation
import Synchronization

// MARK: - WebSocket client

/// Why a client connection failed or ended.
public struct WebSocketClientError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    /// The HTTP status of a refused upgrade, when the server answered one.
    public var httpStatus: Int?
    public var description: String { httpStatus.map { "\(message) (HTTP \($0))" } ?? message }
}

/// One outgoing WebSocket connection on an `EventLoop`.
public final class WebSocketClient: @unchecked Sendable {
    // Safety: `state` is confined to the loop thread; the continuations are Sendable.

    /// What the connection delivers.
    public enum Event: Sendable, Equatable {
        case text(String)
        case binary([UInt8])
        /// The connection ended; `code` is the close code the server sent, if any.
        case closed(code: UInt16?, reason: String)
    }

    public let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private let loop: EventLoop
    private var wsi: OpaquePointer?
    private var sendQueue = SendQueue()
    private var closeRequested: (UInt16, String)?
    /// `abort()` was called: the connection goes without a close frame, with a reset.
    private var abortRequested = false
    private var rx: [UInt8] = []
    private var peerClose: (UInt16, String)?
    private var connectContinuation: CheckedContinuation<Void, any Error>?
    private let headers: [(String, String)]
    private var finished = false
    private var eventHandler: ((Event) -> Void)?

    private init(loop: EventLoop, headers: [(String, String)]) {
        self.loop = loop
        self.headers = headers
        (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .unbounded)
    }

    /// Connects to `ws://host:port/path?query`; throws when the upgrade is refused.
    public static func connect(
        to url: URL, headers: [(String, String)] = [], on loop: EventLoop
    ) async throws -> WebSocketClient {
        guard let host = url.host, url.scheme == "ws" || url.scheme == "wss" else {
            throw WebSocketClientError(message: "unsupported URL \(url)")
        }
        let port = url.port ?? (url.scheme == "wss" ? 443 : 80)
        var target = url.path.isEmpty ? "/" : url.path
        if let query = url.query { target += "?" + query }
        let path = target
        let client = WebSocketClient(loop: loop, headers: headers)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            loop.execute {
                client.connectContinuation = continuation
                client.start(host: host, port: port, path: path, tls: url.scheme == "wss")
            }
        }
        return client
    }

    private func start(host: String, port: Int, path: String, tls: Bool) {
        var info = lws_client_connect_info()
        let cHost = strdup(host)!
        let cPath = strdup(path)!
        let cProtocol = strdup("switchboard-client")!
        defer {
            free(cHost)
            free(cPath)
            free(cProtocol)
        }
        info.context = loop.context
        info.address = UnsafePointer(cHost)
        info.port = Int32(port)
        info.path = UnsafePointer(cPath)
        info.host = UnsafePointer(cHost)
        info.origin = UnsafePointer(cHost)
        info.local_protocol_name = UnsafePointer(cProtocol)
        info.ssl_connection = tls ? Int32(LCCSCF_USE_SSL.rawValue) : 0
        info.opaque_user_data = Unmanaged.passUnretained(self).toOpaque()
        var created: OpaquePointer?
        withUnsafeMutablePointer(to: &created) { slot in
            info.pwsi = slot
            _ = lws_client_connect_via_info(&info)
        }
        guard let created else {
            failConnect(WebSocketClientError(message: "could not start connecting to \(host):\(port)"))
            return
        }
        wsi = created
        loop.clients[key(created)] = self
    }

    private func key(_ wsi: OpaquePointer) -> UInt {
        UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(wsi)))
    }

    private func failConnect(_ error: WebSocketClientError) {
        if let connectContinuation {
            self.connectContinuation = nil
            connectContinuation.resume(throwing: error)
        }
        finish(code: nil, reason: error.message)
    }

    private func finish(code: UInt16?, reason: String) {
        guard !finished else { return }
        finished = true
        if let wsi { loop.clients.removeValue(forKey: key(wsi)) }
        wsi = nil
        deliver(.closed(code: code, reason: reason))
        continuation.finish()
    }

    /// Sends a text message. Callable from any thread.
    public func send(text: String) {
        send(OutboundFrame(text: text))
    }

    /// Sends a frame. Callable from any thread; on the loop thread it is queued at once.
    public func send(_ frame: OutboundFrame) {
        if loop.isOnLoop {
            enqueue(frame)
        } else {
            loop.execute { [self] in enqueue(frame) }
        }
    }

    private func enqueue(_ frame: OutboundFrame) {
        guard let wsi, closeRequested == nil else { return }
        sendQueue.append(frame)
        lws_callback_on_writable(wsi)
    }

    /// From now on, delivers events by calling `handler` on the loop thread instead of through
    /// `events` (which then only ends): for load generators, where a hop to a task per message
    /// costs more than the message. Call it on the loop thread.
    public func handleEventsOnLoop(_ handler: @escaping (Event) -> Void) {
        loop.assertOnLoop()
        eventHandler = handler
    }

    private func deliver(_ event: Event) {
        if let eventHandler { eventHandler(event) } else { continuation.yield(event) }
    }

    /// Starts the closing handshake with `code`. Callable from any thread.
    public func close(code: UInt16 = 1000, reason: String = "") {
        loop.execute { [self] in
            guard let wsi, closeRequested == nil else { return }
            closeRequested = (code, reason)
            lws_callback_on_writable(wsi)
        }
    }

    /// Drops the connection as a network failure does: no close frame, and a TCP reset (RST)
    /// to the peer instead of an orderly FIN. The peer sees the connection die, not close.
    /// Callable from any thread.
    public func abort() {
        loop.execute { [self] in
            guard let wsi, !abortRequested else { return }
            abortRequested = true
            var noLinger = linger(l_onoff: 1, l_linger: 0)
            _ = setsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_LINGER, &noLinger, socklen_t(MemoryLayout<linger>.size))
            lws_callback_on_writable(wsi)
        }
    }

    func callback(
        _ wsi: OpaquePointer, _ reason: lws_callback_reasons, _ input: UnsafeMutableRawPointer?, _ length: Int
    ) -> Int32 {
        switch reason {
        case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
            guard let input else { return 0 }
            let cursorPointer = input.assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
            let end = cursorPointer.pointee! + length
            for (name, value) in headers {
                let headerName = name.lowercased() + ":"
                let bytes = Array(value.utf8)
                let failed = bytes.withUnsafeBufferPointer { valuePointer in
                    lws_add_http_header_by_name(
                        wsi, headerName, valuePointer.baseAddress, Int32(valuePointer.count), cursorPointer, end) != 0
                }
                if failed { return -1 }
            }
            return 0

        case LWS_CALLBACK_CLIENT_ESTABLISHED:
            if let connectContinuation {
                self.connectContinuation = nil
                connectContinuation.resume()
            }
            return 0

        case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
            let message = input.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) } ?? "connection failed"
            let status = Int(lws_http_client_http_response(wsi))
            failConnect(WebSocketClientError(message: message, httpStatus: status > 0 ? status : nil))
            return 0

        case LWS_CALLBACK_CLIENT_RECEIVE:
            if let input, length > 0 {
                rx.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
            }
            if lws_is_final_fragment(wsi) != 0 && lws_remaining_packet_payload(wsi) == 0 {
                if lws_frame_is_binary(wsi) != 0 {
                    deliver(.binary(rx))
                } else {
                    deliver(.text(String(decoding: rx, as: UTF8.self)))
                }
                rx.removeAll(keepingCapacity: true)
            }
            return 0

        case LWS_CALLBACK_CLIENT_WRITEABLE:
            // Closing from here without a close reason sends no close frame; with no linger the
            // kernel resets the connection.
            if abortRequested { return -1 }
            if let frame = sendQueue.popFirst() {
                if !writeFrame(wsi, frame) { return -1 }
                if !sendQueue.isEmpty || closeRequested != nil { lws_callback_on_writable(wsi) }
                return 0
            }
            if let (code, reason) = closeRequested {
                closeWith(wsi, code: code, reason: reason)
                return -1
            }
            return 0

        case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
            if let input, length >= 2 {
                let bytes = input.assumingMemoryBound(to: UInt8.self)
                let code = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
                let reason = String(decoding: UnsafeRawBufferPointer(start: bytes + 2, count: length - 2), as: UTF8.self)
                peerClose = (code, reason)
            }
            return 0

        case LWS_CALLBACK_CLIENT_CLOSED, LWS_CALLBACK_WSI_DESTROY:
            if connectContinuation != nil {
                failConnect(WebSocketClientError(message: "closed before the upgrade"))
            } else {
                finish(code: peerClose?.0, reason: peerClose?.1 ?? "")
            }
            return 0

        default:
            return 0
        }
    }
}

func clientCallback(
    _ wsi: OpaquePointer?, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
    _ input: UnsafeMutableRawPointer?, _ length: Int
) -> Int32 {
    guard let wsi, let loop = EventLoop.from(wsi: wsi) else { return 0 }
    if reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED {
        if loop.server == nil { loop.drainPending() }
        return 0
    }
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(wsi)))
    let client =
        loop.clients[key] ?? lws_get_opaque_user_data(wsi).map { Unmanaged<WebSocketClient>.fromOpaque($0).takeUnretainedValue() }
    guard let client else { return 0 }
    return client.callback(wsi, reason, input, length)
}
