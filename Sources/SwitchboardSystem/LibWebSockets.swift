// The only Swift file that imports libwebsockets. Everything above sees `EventLoop`,
// `HTTPServer`, `WebSocketClient` and plain Swift values, never an lws pointer.

import SwitchboardProtocol
import CLibWebSockets
import CShims
import Foundation
import Synchronization

// MARK: - Event loop

/// One libwebsockets context serviced by one thread of its own, on a libev loop (epoll).
///
/// libwebsockets' built-in loop calls poll() over every open connection on each wakeup, so its
/// cost per message grows with the number of idle connections (measured: 10,000 idle sockets
/// cut relay throughput by two thirds). With libev on epoll a wakeup costs what is ready.
///
/// Work from other threads reaches the loop through `execute(_:)`; timers run on it through
/// `schedule(after:_:)`. Everything marked "loop thread only" must be called from code that
/// already runs on the loop (a handler callback, an `execute` closure or a timer).
public final class EventLoop: @unchecked Sendable {
    // Safety: `context` is set once in init. `pending` is guarded by its lock. All other
    // stored state is touched only on the loop thread (checked by `assertOnLoop()`).
    fileprivate var context: OpaquePointer!
    private let pending = Locked<[@Sendable () -> Void]>([])
    private let stopRequested = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private var thread: Thread?
    private var threadName = ""
    private let loopThreadID = Locked<pthread_t?>(nil)
    private let protocols: UnsafeMutablePointer<lws_protocols>
    private let protocolNames: [UnsafeMutablePointer<CChar>]
    private var ownedStrings: [UnsafeMutablePointer<CChar>] = []
    private let retryPolicy: UnsafeMutablePointer<lws_retry_bo_t>
    private var timer: UnsafeMutableRawPointer?
    private let evLoop: UnsafeMutableRawPointer
    private let foreignLoops: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    private var timers = TimerHeap()
    private var timerArmedAt: UInt64 = .max

    fileprivate weak var server: HTTPServer?
    fileprivate var clients: [UInt: WebSocketClient] = [:]
    /// A server loop's listening sockets, its vhost (which adopts what they accept) and one
    /// readable watcher per socket.
    fileprivate let listening: ListeningSockets?
    fileprivate var vhost: OpaquePointer?
    private var acceptWatchers: [UnsafeMutableRawPointer] = []
    private var acceptPaused: Set<Int> = []

    /// The port the server listens on (useful with port 0), or nil for a client-only loop.
    public private(set) var port: Int?

    /// A loop for outgoing WebSocket connections only.
    public convenience init(name: String = "switchboard-client") throws {
        try self.init(listen: nil, server: nil, name: name)
    }

    fileprivate init(listen: HTTPServer.Options?, server: HTTPServer?, name: String) throws {
        protocolNames = [strdup("switchboard-server")!, strdup("switchboard-client")!]
        protocols = .allocate(capacity: 3)
        protocols.initialize(repeating: lws_protocols(), count: 3)
        protocols[0].name = UnsafePointer(protocolNames[0])
        protocols[0].callback = serverCallback
        protocols[0].rx_buffer_size = 16 * 1024
        protocols[1].name = UnsafePointer(protocolNames[1])
        protocols[1].callback = clientCallback
        protocols[1].rx_buffer_size = 16 * 1024
        retryPolicy = .allocate(capacity: 1)
        retryPolicy.initialize(to: lws_retry_bo_t())
        self.server = server
        // Listen first: an address that cannot be bound stops the server here, before
        // anything says it is running.
        listening = try listen.map { options throws(ListenError) in try ListeningSockets(host: options.host, port: options.port) }
        guard let evLoop = sb_ev_loop_new() else {
            throw SystemError.listenFailed(host: listen?.host ?? "-", port: listen?.port ?? 0)
        }
        self.evLoop = evLoop
        foreignLoops = .allocate(capacity: 1)
        foreignLoops.initialize(to: evLoop)

        lws_set_log_level(Int32(LLL_ERR), lwsLogEmitter)
        var info = lws_context_creation_info()
        info.protocols = UnsafePointer(protocols)
        info.user = Unmanaged.passUnretained(self).toOpaque()
        info.options = sb_lws_option_libev
        info.foreign_loops = foreignLoops
        if let listen {
            // The loop accepts on its own sockets (ListeningSockets) and hands each connection
            // to libwebsockets: libwebsockets 4.1 binds an IPv6 or unknown host to every IPv4
            // address or to none (silently), and spins on a listening socket it cannot accept
            // from once descriptors run out.
            info.port = sb_lws_context_port_no_listen_server
            info.max_http_header_data = UInt16(clamping: listen.maxHeaderBytes)
            info.options |= sb_lws_option_validate_utf8
            // Keepalive is the server's own (HTTPServer.sweepKeepalive): libwebsockets 4.1 keeps
            // each connection's validity timer in one sorted list and re-inserts it on every
            // frame, a walk over all connections (measured: 4 s of CPU per 10,000 pings).
            retryPolicy.pointee.secs_since_valid_ping = 0
            retryPolicy.pointee.secs_since_valid_hangup = 0
            info.retry_and_idle_policy = UnsafePointer(retryPolicy)
            info.timeout_secs = UInt32(clamping: listen.httpTimeoutSeconds)
            if let certificate = listen.tlsCertificatePath, let key = listen.tlsPrivateKeyPath {
                let cert = strdup(certificate)!, privateKey = strdup(key)!, alpn = strdup("h2,http/1.1")!
                ownedStrings += [cert, privateKey, alpn]
                info.options |= sb_lws_option_do_ssl_global_init
                info.ssl_cert_filepath = UnsafePointer(cert)
                info.ssl_private_key_filepath = UnsafePointer(privateKey)
                info.alpn = UnsafePointer(alpn)
            }
            if listen.http2MaxConcurrentStreams > 0 {
                info.http2_settings.0 = 1
                info.http2_settings.3 = listen.http2MaxConcurrentStreams
            }
        } else {
            info.options |= sb_lws_option_disable_ipv6
            info.port = sb_lws_context_port_no_listen
            retryPolicy.pointee.secs_since_valid_ping = 3600
            retryPolicy.pointee.secs_since_valid_hangup = 7200
        }
        guard let context = lws_create_context(&info) else {
            sb_ev_loop_destroy(evLoop)  // the rest is freed by deinit
            throw SystemError.listenFailed(host: listen?.host ?? "-", port: listen?.port ?? 0)
        }
        self.context = context
        timer = sb_ev_timer_new(timerFired, Unmanaged.passUnretained(self).toOpaque())
        if let listening {
            vhost = lws_get_vhost_by_name(context, "default")
            port = listening.port
            for index in listening.descriptors.indices {
                guard let watcher = sb_ev_io_new(listening.descriptors[index], acceptReady, Unmanaged.passUnretained(self).toOpaque(), Int32(index))
                else { throw SystemError.listenFailed(host: listen?.host ?? "-", port: port ?? 0) }
                acceptWatchers.append(watcher)
                sb_ev_io_start(evLoop, watcher)
            }
        }
        threadName = name
        if server == nil { start() }
    }

    /// Starts servicing on the loop's own thread. A server's loop starts once its owner has
    /// finished setting up, so callbacks never see a half-built server.
    fileprivate func start() {
        let thread = Thread { [self] in self.run() }
        thread.name = threadName
        self.thread = thread
        thread.start()
    }

    deinit {
        protocols.deallocate()
        protocolNames.forEach { free($0) }
        ownedStrings.forEach { free($0) }
        retryPolicy.deallocate()
        foreignLoops.deallocate()
    }

    private func run() {
        loopThreadID.withLock { $0 = pthread_self() }
        while !stopRequested.load(ordering: .acquiring) {
            sb_ev_run_once(evLoop)
        }
        drainPending()
        for watcher in acceptWatchers { sb_ev_io_free(evLoop, watcher) }
        acceptWatchers.removeAll()
        listening?.close()
        lws_context_destroy(context)
        sb_ev_run_nowait(evLoop)
        if let timer { sb_ev_timer_free(evLoop, timer) }
        sb_ev_loop_destroy(evLoop)
        clients.removeAll()
        finished.signal()
    }

    /// Runs `work` on the loop thread, soon. Callable from any thread.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        pending.withLock { $0.append(work) }
        lws_cancel_service(context)
    }

    fileprivate func drainPending() {
        let work = pending.withLock { queue -> [@Sendable () -> Void] in
            let taken = queue
            queue.removeAll(keepingCapacity: true)
            return taken
        }
        for item in work { item() }
    }

    /// Ends the loop: destroys the context (closing every connection) and joins the thread.
    /// Callable from any thread but the loop's own.
    public func stop() {
        if stopRequested.exchange(true, ordering: .acquiringAndReleasing) == false {
            lws_cancel_service(context)
            finished.wait()
        }
    }

    /// Whether the caller runs on the loop thread.
    public var isOnLoop: Bool {
        guard let id = loopThreadID.withLock({ $0 }) else { return false }
        return pthread_equal(id, pthread_self()) != 0
    }

    /// Traps when called off the loop thread.
    public func assertOnLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(isOnLoop, "called off the event loop thread", file: file, line: line)
    }

    // MARK: Accepting

    /// The addresses the server listens on.
    public var listeningAddresses: [SocketAddress] { listening?.addresses ?? [] }

    /// Stops watching listening socket `index` for `delay`, then watches it again. Loop thread only.
    fileprivate func pauseAccepting(_ index: Int, for delay: Duration) {
        guard acceptPaused.insert(index).inserted else { return }
        sb_ev_io_stop(evLoop, acceptWatchers[index])
        schedule(after: delay) { [self] in
            acceptPaused.remove(index)
            if !stopRequested.load(ordering: .acquiring) { sb_ev_io_start(evLoop, acceptWatchers[index]) }
        }
    }

    // MARK: Timers

    /// Runs `body` on the loop after `delay`. Loop thread only.
    @discardableResult
    public func schedule(after delay: Duration, _ body: @escaping () -> Void) -> TimerID {
        let deadline = Self.nowMicros() &+ UInt64(max(0, delay.microseconds))
        let id = timers.insert(deadline: deadline, body)
        armTimer()
        return id
    }

    /// Cancels a timer; harmless if it already ran. Loop thread only.
    public func cancel(_ timer: TimerID) {
        timers.cancel(timer)
    }

    private func armTimer() {
        guard let next = timers.nextDeadline() else { return }
        if next >= timerArmedAt { return }
        timerArmedAt = next
        let now = Self.nowMicros()
        let wait = next > now ? next - now : 0
        sb_ev_timer_arm(evLoop, timer, Double(wait) / 1e6)
    }

    fileprivate func fireTimers() {
        timerArmedAt = .max
        let now = Self.nowMicros()
        while let body = timers.popDue(now: now) { body() }
        armTimer()
        // On libev, libwebsockets re-arms its own timers (connection timeouts, kills set with
        // lws_set_timeout) only after servicing I/O; a timer body is not I/O, so wake it once.
        lws_cancel_service(context)
    }

    static func nowMicros() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }

    fileprivate static func from(context: OpaquePointer?) -> EventLoop? {
        guard let context, let user = lws_context_user(context) else { return nil }
        return Unmanaged<EventLoop>.fromOpaque(user).takeUnretainedValue()
    }

    fileprivate static func from(wsi: OpaquePointer?) -> EventLoop? {
        guard let wsi else { return nil }
        return from(context: lws_get_context(wsi))
    }
}

private func acceptReady(_ loop: UnsafeMutableRawPointer?, _ index: Int32) {
    guard let loop else { return }
    Unmanaged<EventLoop>.fromOpaque(loop).takeUnretainedValue().server?.acceptReady(Int(index))
}

private func timerFired(_ loop: UnsafeMutableRawPointer?) {
    guard let loop else { return }
    Unmanaged<EventLoop>.fromOpaque(loop).takeUnretainedValue().fireTimers()
}

private func lwsLogEmitter(_ level: Int32, _ line: UnsafePointer<CChar>?) {
    guard let line else { return }
    let text = String(cString: line).trimmingCharacters(in: .whitespacesAndNewlines)
    SystemLog.logger.log(.warning, "libwebsockets", ["detail": text])
}

extension Duration {
    var microseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    }
}

// MARK: - Outbound frames

/// A WebSocket message ready to send, with libwebsockets' header room in front. On the server
/// one frame can be queued on many connections (fan-out) without copying. A client connection
/// masks the payload in place as it sends it (RFC 6455 5.3), so a frame goes out on a client
/// connection once.
public final class OutboundFrame: @unchecked Sendable {
    // Safety: the bytes are written once in init; libwebsockets writes the frame header into
    // the reserved room in front only on the loop thread, one connection at a time.
    fileprivate let storage: UnsafeMutableRawPointer
    public let count: Int
    public let isBinary: Bool

    public init(_ payload: some Collection<UInt8>, binary: Bool = false) {
        count = payload.count
        isBinary = binary
        storage = .allocate(byteCount: Int(sb_lws_pre) + max(count, 1), alignment: 16)
        let body = storage.advanced(by: Int(sb_lws_pre)).assumingMemoryBound(to: UInt8.self)
        _ = UnsafeMutableBufferPointer(start: body, count: count).initialize(from: payload)
    }

    public convenience init(text: String) {
        self.init(Array(text.utf8))
    }

    deinit { storage.deallocate() }

    /// The payload bytes.
    public var bytes: [UInt8] {
        Array(UnsafeRawBufferPointer(start: storage.advanced(by: Int(sb_lws_pre)), count: count))
    }
}

/// A bounded queue of outgoing frames for one connection.
struct SendQueue {
    private var frames: [OutboundFrame] = []
    private var head = 0
    private(set) var bytes = 0

    var isEmpty: Bool { head == frames.count }
    var count: Int { frames.count - head }

    mutating func append(_ frame: OutboundFrame) {
        frames.append(frame)
        bytes += frame.count
    }

    var first: OutboundFrame? { head < frames.count ? frames[head] : nil }

    mutating func popFirst() -> OutboundFrame? {
        guard head < frames.count else { return nil }
        let frame = frames[head]
        head += 1
        bytes -= frame.count
        if head == frames.count {
            frames.removeAll(keepingCapacity: frames.count < 64)
            head = 0
        }
        return frame
    }
}

/// Writes the queued frames, up to `coalesceLimit` bytes of them, with one system call: each
/// gets its (unmasked, final) server frame header here and the whole run goes out as raw bytes
/// (libwebsockets passes raw writes through on a WebSocket, buffering what the socket does
/// not take). One `send()` per frame was a third of the relay's CPU. False if the write failed.
private func writeFrames(_ wsi: OpaquePointer, _ queue: inout SendQueue) -> Bool {
    guard queue.count > 1 else { return queue.popFirst().map { writeFrame(wsi, $0) } ?? true }
    var batch: [OutboundFrame] = []
    var total = 0
    while let frame = queue.first, batch.isEmpty || total + frame.count + 10 <= coalesceLimit {
        batch.append(queue.popFirst()!)
        total += frame.count + (frame.count < 126 ? 2 : frame.count < 65_536 ? 4 : 10)
    }
    if batch.count == 1 { return writeFrame(wsi, batch[0]) }
    let pre = Int(sb_lws_pre)
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: pre + total, alignment: 16)
    defer { buffer.deallocate() }
    var offset = pre
    for frame in batch {
        let bytes = buffer.assumingMemoryBound(to: UInt8.self)
        bytes[offset] = frame.isBinary ? 0x82 : 0x81
        if frame.count < 126 {
            bytes[offset + 1] = UInt8(frame.count)
            offset += 2
        } else if frame.count < 65_536 {
            bytes[offset + 1] = 126
            bytes[offset + 2] = UInt8(frame.count >> 8)
            bytes[offset + 3] = UInt8(frame.count & 0xff)
            offset += 4
        } else {
            bytes[offset + 1] = 127
            for index in 0..<8 { bytes[offset + 2 + index] = UInt8((UInt64(frame.count) >> (56 - 8 * UInt64(index))) & 0xff) }
            offset += 10
        }
        (buffer + offset).copyMemory(from: frame.storage.advanced(by: pre), byteCount: frame.count)
        offset += frame.count
    }
    let written = lws_write(wsi, buffer.assumingMemoryBound(to: UInt8.self) + pre, total, LWS_WRITE_HTTP)  // LWS_WRITE_RAW
    return written >= total
}

/// How many bytes of queued frames one coalesced write carries at most.
private let coalesceLimit = 64 * 1024

private func writeFrame(_ wsi: OpaquePointer, _ frame: OutboundFrame) -> Bool {
    let body = frame.storage.advanced(by: Int(sb_lws_pre)).assumingMemoryBound(to: UInt8.self)
    let kind = frame.isBinary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT
    let written = lws_write(wsi, body, frame.count, kind)
    return written >= frame.count
}

private func closeWith(_ wsi: OpaquePointer, code: UInt16, reason: String) {
    var bytes = Array(reason.utf8.prefix(120))
    bytes.withUnsafeMutableBufferPointer { buffer in
        lws_close_reason(wsi, lws_close_status(rawValue: UInt32(code)), buffer.baseAddress, buffer.count)
    }
}

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

/// An HTTP/1.1 and WebSocket server on libwebsockets, serviced by its own event loop.
public final class HTTPServer: @unchecked Sendable {
    // Safety: all mutable state is confined to the loop thread; see `EventLoop`.

    /// Transport limits; each is documented in docs/configuration.md.
    public struct Options: Sendable {
        public var host: String
        public var port: Int
        /// Largest request head (request line and headers) accepted.
        public var maxHeaderBytes: Int = 8 * 1024
        /// Largest request body accepted.
        public var maxBodyBytes: Int = 1024 * 1024
        /// Largest WebSocket message accepted, per endpoint tag; the default applies otherwise.
        public var maxMessageBytes: Int = 64 * 1024
        public var maxMessageBytesByTag: [Int: Int] = [:]
        /// Queued outgoing bytes per WebSocket before the connection is dropped as too slow.
        public var maxSendQueueBytes: Int = 1024 * 1024
        /// Silence after which the server pings a WebSocket.
        public var pingIntervalSeconds: Int = 20
        /// Silence (no frame, not even a pong) after which a WebSocket is closed.
        public var idleTimeoutSeconds: Int = 45
        /// Time allowed for an HTTP request to arrive in full.
        public var httpTimeoutSeconds: Int = 10
        /// Bytes per second a WebSocket may send us, control frames included (libwebsockets
        /// answers pings itself, so only the kernel's count sees a ping flood), with bursts of
        /// four seconds' worth; checked on each keepalive visit. 0: no limit. Per endpoint tag,
        /// the default otherwise.
        public var maxReceiveBytesPerSecond: Int = 0
        public var maxReceiveBytesPerSecondByTag: [Int: Int] = [:]
        /// Extra request headers to read besides the common ones (lower case).
        public var extraHeaders: [String] = []
        /// TLS: a PEM certificate chain and private key. With them the server speaks HTTPS and
        /// offers HTTP/2 by ALPN ("h2", then "http/1.1").
        public var tlsCertificatePath: String?
        public var tlsPrivateKeyPath: String?
        /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS announced to clients (0: libwebsockets' default).
        public var http2MaxConcurrentStreams: UInt32 = 0
        /// Open connections (HTTP and WebSocket) past which a new one is answered `503` and
        /// closed at once. 0: the descriptor limit's share (`DescriptorLimit.connections`).
        public var maxConnections: Int = 0
        /// How long accepting pauses after the process ran out of descriptors.
        public var acceptPause: Duration = .milliseconds(100)

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
    }

    public let options: Options
    public let logger: Logger
    public private(set) var loop: EventLoop!
    private let handler: (any HTTPServerHandler)?
    private var connectionsByWSI: [UInt: Connection] = [:]
    private var connections: [ConnectionID: Connection] = [:]
    private var nextID: UInt64 = 0
    /// The network connections accepted and not yet destroyed (by wsi), for `maxConnections`.
    private var accepted: Set<UInt> = []
    /// HTTP connections waiting for a request (since they were accepted, since the head when a
    /// body is to follow, or since their last answer), by wsi, with when it must have arrived
    /// (monotonic µs): `httpTimeoutSeconds`. None while a request is answered, none for
    /// WebSockets. libwebsockets 4.1's own timeouts cannot do it: on a libev loop they fire only
    /// when an earlier timer of its own does (measured: a stalled head dropped after 28 s, not 2).
    private var httpDeadlines: [UInt: UInt64] = [:]
    private var httpDeadlineSweepScheduled = false
    /// `options.maxConnections`, or the descriptor limit's share when that is 0.
    public let maxConnections: Int

    /// Starts listening. The server keeps `handler` for its life; the handler should hold the
    /// server it is given in `attach(to:)` weakly.
    public init(options: Options, handler: any HTTPServerHandler, logger: Logger = Logger()) throws {
        self.options = options
        self.logger = logger
        self.handler = handler
        maxConnections = options.maxConnections > 0 ? options.maxConnections : DescriptorLimit.connections(under: DescriptorLimit.current)
        handler.attach(to: self)
        loop = try EventLoop(listen: options, server: self, name: "switchboard-loop")
        loop.start()
    }

    /// The port the server listens on.
    public var port: Int { loop.port ?? options.port }

    /// Stops the loop and closes every connection at once. Call from outside the loop.
    public func stop() {
        loop.stop()
    }

    /// The addresses the server listens on.
    public var addresses: [SocketAddress] { loop.listeningAddresses }

    /// Open connections, HTTP and WebSocket. Loop thread only.
    public var openConnections: Int { accepted.count }

    /// The number of open WebSocket connections. Loop thread only.
    public var webSocketCount: Int {
        connections.values.reduce(0) { $0 + ($1.isWebSocket ? 1 : 0) }
    }

    // MARK: Loop-thread API

    /// Sends a response to the request that is waiting on `connection`. A connection that has
    /// gone away is ignored. Loop thread only.
    public func respond(to connection: ConnectionID, with response: HTTPResponse) {
        guard let conn = connections[connection], conn.pendingResponse == nil, !conn.isWebSocket else { return }
        conn.pendingResponse = response
        conn.responsePhase = .headers
        lws_callback_on_writable(conn.wsi)
    }

    /// Queues a WebSocket message. Returns false (and drops the connection) when the queued bytes
    /// would pass the limit: what is queued is discarded, and a close with 1008 follows what the
    /// kernel already holds; a peer that does not take even that within the idle timeout is
    /// reset. Loop thread only.
    @discardableResult
    public func send(_ frame: OutboundFrame, to connection: ConnectionID) -> Bool {
        guard let conn = connections[connection], conn.isWebSocket, conn.closeRequested == nil else { return false }
        // A single message larger than the limit still goes through an empty queue.
        if !conn.sendQueue.isEmpty && conn.sendQueue.bytes + frame.count > options.maxSendQueueBytes {
            logger.warning(
                "dropping slow consumer",
                ["conn": connection.description, "queued_bytes": String(conn.sendQueue.bytes)])
            conn.sendQueue = SendQueue()
            close(connection, code: 1008, reason: "send queue full")
            conn.closeReason = .slowConsumer
            let wsi = conn.wsi
            loop.schedule(after: .seconds(max(1, options.idleTimeoutSeconds))) { [weak self] in
                guard let self, self.connections[connection]?.wsi == wsi else { return }
                lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, -1)  // LWS_TO_KILL_ASYNC
            }
            return false
        }
        conn.sendQueue.append(frame)
        lws_callback_on_writable(conn.wsi)
        return true
    }

    /// Closes a WebSocket with a close code once its queued messages are sent. Loop thread only.
    public func close(_ connection: ConnectionID, code: UInt16, reason: String) {
        guard let conn = connections[connection], conn.isWebSocket, conn.closeRequested == nil else { return }
        conn.closeRequested = (code, reason)
        conn.closeReason = .server(code: code)
        lws_callback_on_writable(conn.wsi)
    }

    /// The open WebSocket connections. Loop thread only.
    public var webSocketConnections: [ConnectionID] {
        connections.values.filter(\.isWebSocket).map(\.id)
    }

    // MARK: Callback plumbing

    fileprivate final class Connection {
        enum ResponsePhase { case headers, body }
        let id: ConnectionID
        let wsi: OpaquePointer
        var isWebSocket = false
        var tag = 0
        var request: HTTPRequest?
        var bodyLimitExceeded = false
        var pendingResponse: HTTPResponse?
        var responsePhase = ResponsePhase.headers
        var responseOffset = 0
        var rx: [UInt8] = []
        var rxOverflow = false
        var sendQueue = SendQueue()
        var closeRequested: (UInt16, String)?
        var closeReason: CloseReason?
        /// Keepalive: when the peer last sent a frame (monotonic µs), whether a ping waits for
        /// the next writeable callback, and whether one is out unanswered.
        var lastHeard: UInt64 = 0
        var pingDue = false
        var pingOutstanding = false
        /// Its place in `HTTPServer.sweepList` while it is a WebSocket, else nil.
        var sweepIndex: Int?
        /// The receive allowance: the kernel's byte count and the time at the last keepalive
        /// visit, and the bytes it may still send at once.
        var receivedAtVisit: Int64 = -1
        var visitedAt: UInt64 = 0
        var receiveCredit: Double = 0

        init(id: ConnectionID, wsi: OpaquePointer) {
            self.id = id
            self.wsi = wsi
        }

        func heard() {
            lastHeard = EventLoop.nowMicros()
            pingOutstanding = false
        }
    }

    private var keepaliveSweepStarted = false
    /// The WebSocket connections in the order the sweep visits them.
    private var sweepList: [Connection] = []
    private var sweepCursor = 0

    /// Sweeps per keepalive period: each visits its share of the connections, so pings to a
    /// crowd that connected together go out spread over the period, not in one burst that
    /// delays every other frame (measured at 10,000 connections: p99 relay latency 8.9 ms with
    /// one pass per second; the pings of one slice cost about 2 ms of writes at 500 connections).
    private static let sweepSlices = 100

    /// A quarter of the ping interval, at most a second: a ping goes out at most that late.
    private var keepaliveSweepPeriod: Duration {
        .milliseconds(min(1000, max(50, options.pingIntervalSeconds * 250)))
    }

    private func startKeepaliveSweep() {
        guard !keepaliveSweepStarted else { return }
        keepaliveSweepStarted = true
        loop.schedule(after: keepaliveSweepPeriod / Self.sweepSlices) { [weak self] in self?.sweepKeepalive() }
    }

    private func addToSweep(_ conn: Connection) {
        guard conn.sweepIndex == nil else { return }
        conn.sweepIndex = sweepList.count
        sweepList.append(conn)
    }

    private func removeFromSweep(_ conn: Connection) {
        guard let index = conn.sweepIndex else { return }
        conn.sweepIndex = nil
        let last = sweepList.removeLast()
        if index < sweepList.count {
            sweepList[index] = last
            last.sweepIndex = index
        }
    }

    /// Every sweep period, in `sweepSlices` steps: pings each WebSocket silent for
    /// `pingIntervalSeconds` (one ping until it hears back) and drops each that stayed silent
    /// for `idleTimeoutSeconds` with a ping unanswered. One visit per connection per period.
    private func sweepKeepalive() {
        let now = EventLoop.nowMicros()
        let pingAfter = UInt64(max(1, options.pingIntervalSeconds)) * 1_000_000
        let dropAfter = UInt64(max(1, options.idleTimeoutSeconds)) * 1_000_000
        let slice = (sweepList.count + Self.sweepSlices - 1) / Self.sweepSlices
        var visited = 0
        while visited < slice && !sweepList.isEmpty {
            if sweepCursor >= sweepList.count { sweepCursor = 0 }
            let conn = sweepList[sweepCursor]
            sweepCursor += 1
            visited += 1
            let silence = now &- conn.lastHeard
            if receivingTooFast(conn, now: now) {
                // Dropped at once with a reset: a graceful close would wait for a peer that
                // keeps sending.
                conn.closeReason = .receiveRateExceeded
                var hard = linger(l_onoff: 1, l_linger: 0)
                setsockopt(lws_get_socket_fd(conn.wsi), SOL_SOCKET, SO_LINGER, &hard, socklen_t(MemoryLayout<linger>.size))
                lws_set_timeout(conn.wsi, PENDING_TIMEOUT_CLOSE_ACK, -2)  // LWS_TO_KILL_SYNC
            } else if silence >= dropAfter && conn.pingOutstanding {
                conn.closeReason = .lost
                lws_set_timeout(conn.wsi, PENDING_TIMEOUT_CLOSE_ACK, -1)  // LWS_TO_KILL_ASYNC
            } else if silence >= pingAfter && !conn.pingOutstanding {
                conn.pingOutstanding = true
                conn.pingDue = true
                lws_callback_on_writable(conn.wsi)
            }
        }
        loop.schedule(after: keepaliveSweepPeriod / Self.sweepSlices) { [weak self] in self?.sweepKeepalive() }
    }

    /// Whether `conn` sent more than its receive allowance since the last visit.
    private func receivingTooFast(_ conn: Connection, now: UInt64) -> Bool {
        let rate = Double(options.maxReceiveBytesPerSecondByTag[conn.tag] ?? options.maxReceiveBytesPerSecond)
        guard rate > 0 else { return false }
        let received = sb_tcp_bytes_received(lws_get_socket_fd(conn.wsi))
        guard received >= 0 else { return false }
        defer {
            conn.receivedAtVisit = received
            conn.visitedAt = now
        }
        guard conn.receivedAtVisit >= 0 else {
            conn.receiveCredit = rate * 4
            return false
        }
        let elapsed = Double(now &- conn.visitedAt) / 1_000_000
        conn.receiveCredit = min(rate * 4, conn.receiveCredit + rate * elapsed) - Double(received - conn.receivedAtVisit)
        return conn.receiveCredit < 0
    }

    // MARK: Accepting

    /// What a connection refused at accept reads before it is closed: a whole `503` response.
    private static func refusal(_ message: String) -> [UInt8] {
        let body = #"{"error":{"code":"unavailable","message":"\#(message)"}}"#
        return Array(
            ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
                + "Content-Length: \(body.utf8.count)\r\n\r\n" + body).utf8)
    }
    private static let refusals: [ConnectionRefusal: [UInt8]] = [
        .maxConnections: refusal("too many connections; retry later"), .shuttingDown: refusal("server is shutting down"),
    ]

    /// A listening socket is readable: accepts what waits (a bounded batch, so other I/O gets
    /// its turn) and hands each connection to libwebsockets, or refuses it at once. Out of
    /// descriptors, it sheds what waits and pauses that socket instead of spinning on it.
    fileprivate func acceptReady(_ index: Int) {
        guard let sockets = loop.listening, let vhost = loop.vhost else { return }
        for _ in 0..<64 {
            switch sockets.accept(index) {
            case .none:
                return
            case .accepted(let fd):
                let refusal: ConnectionRefusal? =
                    handler?.shouldAcceptConnection() == false ? .shuttingDown : accepted.count >= maxConnections ? .maxConnections : nil
                if let refusal {
                    _ = Self.refusals[refusal]?.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
                    Glibc.close(fd)
                    handler?.connectionsRefused(1, reason: refusal)
                    if refusal == .maxConnections {
                        logger.warning("connection refused: max_connections open", ["limit": String(maxConnections)])
                    }
                    continue
                }
                var yes: Int32 = 1
                setsockopt(fd, SOL_TCP, TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
                // On failure libwebsockets closes the descriptor itself.
                guard let wsi = lws_adopt_socket_vhost(vhost, fd) else { continue }
                accepted.insert(Self.key(wsi))
                awaitRequest(wsi)
            case .outOfDescriptors:
                let shed = sockets.shed(index, limit: 64)
                if shed > 0 { handler?.connectionsRefused(shed, reason: .outOfDescriptors) }
                handler?.acceptingPaused()
                logger.warning(
                    "accept failed: out of file descriptors; accepting paused",
                    ["open_connections": String(accepted.count), "descriptor_limit": String(DescriptorLimit.current),
                     "shed": String(shed), "pause_ms": String(options.acceptPause.microseconds / 1000)])
                loop.pauseAccepting(index, for: options.acceptPause)
                return
            }
        }
    }

    private static func key(_ wsi: OpaquePointer) -> UInt {
        UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(wsi)))
    }

    /// The connection is to send a (next) request, or the rest of one, within the time allowed.
    private func awaitRequest(_ wsi: OpaquePointer) {
        httpDeadlines[Self.key(wsi)] = EventLoop.nowMicros() + UInt64(max(1, options.httpTimeoutSeconds)) * 1_000_000
        guard !httpDeadlineSweepScheduled else { return }
        httpDeadlineSweepScheduled = true
        loop.schedule(after: .milliseconds(250)) { [weak self] in self?.sweepHTTPDeadlines() }
    }

    /// A whole request arrived (or the connection became a WebSocket): no deadline until answered.
    private func requestArrived(_ wsi: OpaquePointer) {
        httpDeadlines.removeValue(forKey: Self.key(wsi))
    }

    /// Drops the connections whose request did not arrive in time, without an answer.
    private func sweepHTTPDeadlines() {
        httpDeadlineSweepScheduled = false
        let now = EventLoop.nowMicros()
        for (key, deadline) in httpDeadlines where deadline <= now {
            httpDeadlines.removeValue(forKey: key)
            guard let wsi = OpaquePointer(bitPattern: key) else { continue }
            lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, -1)  // LWS_TO_KILL_ASYNC
        }
        guard !httpDeadlines.isEmpty else { return }
        httpDeadlineSweepScheduled = true
        loop.schedule(after: .milliseconds(250)) { [weak self] in self?.sweepHTTPDeadlines() }
    }

    private func connection(for wsi: OpaquePointer) -> Connection {
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(wsi)))
        if let existing = connectionsByWSI[key] { return existing }
        nextID += 1
        let conn = Connection(id: ConnectionID(rawValue: nextID), wsi: wsi)
        connectionsByWSI[key] = conn
        connections[conn.id] = conn
        return conn
    }

    private func existingConnection(for wsi: OpaquePointer) -> Connection? {
        connectionsByWSI[UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(wsi)))]
    }

    private func forget(_ wsi: OpaquePointer) {
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(wsi)))
        guard let conn = connectionsByWSI.removeValue(forKey: key) else { return }
        connections.removeValue(forKey: conn.id)
        removeFromSweep(conn)
        if conn.isWebSocket {
            conn.isWebSocket = false
            handler?.webSocketClosed(conn.id, reason: conn.closeReason ?? .lost)
        }
    }

    fileprivate func callback(
        _ wsi: OpaquePointer, _ reason: lws_callback_reasons, _ input: UnsafeMutableRawPointer?, _ length: Int
    ) -> Int32 {
        switch reason {
        case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
            loop.drainPending()
            return 0

        case LWS_CALLBACK_HTTP:
            requestArrived(wsi)
            let conn = connection(for: wsi)
            conn.pendingResponse = nil
            conn.responseOffset = 0
            conn.bodyLimitExceeded = false
            guard let request = readRequestHead(wsi) else {
                respond(to: conn.id, with: Self.plainError(400, "bad_request", "unsupported request"))
                return 0
            }
            let declaredLength = Int(header(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) ?? "") ?? 0
            if declaredLength > options.maxBodyBytes {
                var refusal = Self.plainError(413, "payload_too_large", "request body is larger than \(options.maxBodyBytes) bytes")
                refusal.closeConnection = true
                respond(to: conn.id, with: refusal)
                conn.bodyLimitExceeded = true
                return 0
            }
            conn.request = request
            if declaredLength > 0 {
                awaitRequest(wsi)  // the body, in the time allowed
                return 0
            }
            conn.request = nil
            handler?.handle(request, on: conn.id)
            return 0

        case LWS_CALLBACK_HTTP_BODY:
            guard let conn = existingConnection(for: wsi), !conn.bodyLimitExceeded, let input else { return 0 }
            if (conn.request?.body.count ?? 0) + length > options.maxBodyBytes {
                conn.bodyLimitExceeded = true
                conn.request = nil
                var refusal = Self.plainError(413, "payload_too_large", "request body is larger than \(options.maxBodyBytes) bytes")
                refusal.closeConnection = true
                respond(to: conn.id, with: refusal)
                return 0
            }
            conn.request?.body.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
            return 0

        case LWS_CALLBACK_HTTP_BODY_COMPLETION:
            requestArrived(wsi)
            guard let conn = existingConnection(for: wsi), let request = conn.request else { return 0 }
            conn.request = nil
            handler?.handle(request, on: conn.id)
            return 0

        case LWS_CALLBACK_HTTP_WRITEABLE:
            guard let conn = existingConnection(for: wsi) else { return 0 }
            return writeResponse(conn)

        case LWS_CALLBACK_HTTP_FILE_COMPLETION:
            return transactionCompleted(wsi)

        case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
            requestArrived(wsi)
            let conn = connection(for: wsi)
            guard let upgrade = input.map({ String(cString: $0.assumingMemoryBound(to: CChar.self)) }),
                upgrade.lowercased() == "websocket", var request = readRequestHead(wsi)
            else {
                return -1
            }
            request.body = []
            switch handler?.shouldUpgrade(request, on: conn.id) ?? .reject(Self.plainError(503, "unavailable", "shutting down")) {
            case .accept(let tag):
                conn.tag = tag
                return 0
            case .reject(let response):
                return writeImmediately(wsi, response) ? 1 : -1
            }

        case LWS_CALLBACK_ESTABLISHED:
            let conn = connection(for: wsi)
            conn.isWebSocket = true
            conn.lastHeard = EventLoop.nowMicros()
            addToSweep(conn)
            startKeepaliveSweep()
            handler?.webSocketOpened(conn.id, tag: conn.tag)
            return 0

        case LWS_CALLBACK_RECEIVE:
            guard let conn = existingConnection(for: wsi) else { return -1 }
            conn.heard()
            let limit = options.maxMessageBytesByTag[conn.tag] ?? options.maxMessageBytes
            if conn.rx.count + length > limit {
                conn.closeReason = .messageTooLarge
                closeWith(wsi, code: 1009, reason: "message larger than \(limit) bytes")
                return -1
            }
            if let input, length > 0 {
                conn.rx.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
            }
            if lws_is_final_fragment(wsi) != 0 && lws_remaining_packet_payload(wsi) == 0 {
                let message = conn.rx
                conn.rx.removeAll(keepingCapacity: conn.rx.capacity <= 64 * 1024)
                handler?.webSocketReceived(conn.id, message: message, binary: lws_frame_is_binary(wsi) != 0)
            }
            return 0

        case LWS_CALLBACK_RECEIVE_PONG:
            existingConnection(for: wsi)?.heard()
            return 0

        case LWS_CALLBACK_SERVER_WRITEABLE:
            guard let conn = existingConnection(for: wsi) else { return -1 }
            if conn.pingDue {
                conn.pingDue = false
                // A payload, so that the pong carries one too: libwebsockets does not report an
                // empty pong to the protocol.
                var ping = [UInt8](repeating: 0, count: Int(sb_lws_pre)) + Array("sb".utf8)
                let failed = ping.withUnsafeMutableBufferPointer { buffer in
                    lws_write(wsi, buffer.baseAddress! + Int(sb_lws_pre), 2, LWS_WRITE_PING) < 0
                }
                if failed { return -1 }
                if !conn.sendQueue.isEmpty || conn.closeRequested != nil { lws_callback_on_writable(wsi) }
                return 0
            }
            if !conn.sendQueue.isEmpty {
                if !writeFrames(wsi, &conn.sendQueue) { return -1 }
                if !conn.sendQueue.isEmpty || conn.closeRequested != nil { lws_callback_on_writable(wsi) }
                return 0
            }
            if let (code, reason) = conn.closeRequested {
                closeWith(wsi, code: code, reason: reason)
                return -1
            }
            return 0

        case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
            if let conn = existingConnection(for: wsi), let input, length >= 2 {
                let bytes = input.assumingMemoryBound(to: UInt8.self)
                conn.closeReason = .peer(code: UInt16(bytes[0]) << 8 | UInt16(bytes[1]))
            } else if let conn = existingConnection(for: wsi) {
                conn.closeReason = .peer(code: nil)
            }
            return 0

        case LWS_CALLBACK_CLOSED, LWS_CALLBACK_CLOSED_HTTP:
            forget(wsi)
            return 0

        case LWS_CALLBACK_WSI_DESTROY:
            forget(wsi)
            accepted.remove(Self.key(wsi))
            requestArrived(wsi)
            return 0

        default:
            return lws_callback_http_dummy(wsi, reason, nil, input, length)
        }
    }

    private func writeResponse(_ conn: Connection) -> Int32 {
        guard let response = conn.pendingResponse else { return 0 }
        let wsi = conn.wsi
        if case .file(let path) = response.body {
            conn.pendingResponse = nil
            let status = lws_serve_http_file(wsi, path, response.contentType, nil, 0)
            if status < 0 { return -1 }
            if status > 0 { return transactionCompleted(wsi) }
            return 0
        }
        guard case .bytes(let body) = response.body else { return 0 }
        switch conn.responsePhase {
        case .headers:
            guard writeHead(wsi, response, contentLength: body.count) else { return -1 }
            if body.isEmpty {
                conn.pendingResponse = nil
                return finishTransaction(wsi, response)
            }
            conn.responsePhase = .body
            conn.responseOffset = 0
            lws_callback_on_writable(wsi)
            return 0
        case .body:
            let chunk = min(body.count - conn.responseOffset, 16 * 1024)
            let isLast = conn.responseOffset + chunk == body.count
            var buffer = [UInt8](repeating: 0, count: Int(sb_lws_pre) + chunk)
            buffer.replaceSubrange(
                Int(sb_lws_pre)..<(Int(sb_lws_pre) + chunk),
                with: body[conn.responseOffset..<(conn.responseOffset + chunk)])
            let written = buffer.withUnsafeMutableBufferPointer { raw in
                lws_write(wsi, raw.baseAddress! + Int(sb_lws_pre), chunk, isLast ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP)
            }
            if written < chunk { return -1 }
            conn.responseOffset += chunk
            if isLast {
                conn.pendingResponse = nil
                return finishTransaction(wsi, response)
            }
            lws_callback_on_writable(wsi)
            return 0
        }
    }

    private func finishTransaction(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Int32 {
        if response.closeConnection { return -1 }
        return transactionCompleted(wsi)
    }

    /// An answer went out in full: the connection is kept for the next request, which must come
    /// in the time allowed (an idle keep-alive connection is closed then).
    private func transactionCompleted(_ wsi: OpaquePointer) -> Int32 {
        guard lws_http_transaction_completed(wsi) == 0 else { return -1 }
        awaitRequest(wsi)
        return 0
    }

    /// Writes the status line and headers.
    private func writeHead(_ wsi: OpaquePointer, _ response: HTTPResponse, contentLength: Int) -> Bool {
        var buffer = [UInt8](repeating: 0, count: Int(sb_lws_pre) + 4096)
        return buffer.withUnsafeMutableBufferPointer { raw -> Bool in
            let start = raw.baseAddress! + Int(sb_lws_pre)
            let end = raw.baseAddress! + raw.count - 1
            var cursor: UnsafeMutablePointer<UInt8>? = start
            if lws_add_http_common_headers(
                wsi, UInt32(response.status), response.contentType, lws_filepos_t(contentLength), &cursor, end) != 0
            {
                return false
            }
            var extra = response.headers
            extra.append(("cache-control", "no-store"))
            if response.closeConnection { extra.append(("connection", "close")) }
            for (name, value) in extra {
                let headerName = name.lowercased() + ":"
                let bytes = Array(value.utf8)
                let failed = bytes.withUnsafeBufferPointer { valuePointer in
                    lws_add_http_header_by_name(
                        wsi, headerName, valuePointer.baseAddress, Int32(valuePointer.count), &cursor, end) != 0
                }
                if failed { return false }
            }
            return lws_finalize_write_http_header(wsi, start, &cursor, end) == 0
        }
    }

    /// Writes a whole small response at once (used to refuse an upgrade).
    private func writeImmediately(_ wsi: OpaquePointer, _ response: HTTPResponse) -> Bool {
        guard case .bytes(let body) = response.body, writeHead(wsi, response, contentLength: body.count) else {
            return false
        }
        if body.isEmpty { return true }
        var buffer = [UInt8](repeating: 0, count: Int(sb_lws_pre)) + body
        let written = buffer.withUnsafeMutableBufferPointer { raw in
            lws_write(wsi, raw.baseAddress! + Int(sb_lws_pre), body.count, LWS_WRITE_HTTP_FINAL)
        }
        return written >= body.count
    }

    private func readRequestHead(_ wsi: OpaquePointer) -> HTTPRequest? {
        var uriPointer: UnsafeMutablePointer<CChar>?
        var uriLength: Int32 = 0
        let methodIndex = lws_http_get_uri_and_method(wsi, &uriPointer, &uriLength)
        guard methodIndex >= 0, let uriPointer else { return nil }
        let methods: [HTTPMethod?] = [.get, .post, .options, .put, .patch, .delete, nil, .head]
        let method: HTTPMethod
        if Int(methodIndex) < methods.count, let known = methods[Int(methodIndex)] {
            method = known
        } else if let colonMethod = header(wsi, WSI_TOKEN_HTTP_COLON_METHOD), let known = HTTPMethod(rawValue: colonMethod) {
            method = known  // HTTP/2: the method is the :method pseudo-header
        } else {
            return nil
        }
        let path = String(
            decoding: UnsafeRawBufferPointer(start: uriPointer, count: Int(uriLength)), as: UTF8.self)

        var query: [String: String] = [:]
        var fragment = [CChar](repeating: 0, count: 4096)
        var index: Int32 = 0
        while true {
            let n = lws_hdr_copy_fragment(wsi, &fragment, Int32(fragment.count), WSI_TOKEN_HTTP_URI_ARGS, index)
            if n < 0 { break }
            let pair = cString(fragment)
            if let equals = pair.firstIndex(of: "=") {
                query[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
            } else if !pair.isEmpty {
                query[pair] = ""
            }
            index += 1
        }

        var headers: [String: String] = [:]
        let known: [(String, lws_token_indexes)] = [
            ("authorization", WSI_TOKEN_HTTP_AUTHORIZATION),
            ("content-type", WSI_TOKEN_HTTP_CONTENT_TYPE),
            ("content-length", WSI_TOKEN_HTTP_CONTENT_LENGTH),
            ("user-agent", WSI_TOKEN_HTTP_USER_AGENT),
            ("origin", WSI_TOKEN_ORIGIN),
            ("host", WSI_TOKEN_HOST),
            ("accept", WSI_TOKEN_HTTP_ACCEPT),
            ("x-forwarded-for", WSI_TOKEN_X_FORWARDED_FOR),
            ("sec-websocket-protocol", WSI_TOKEN_PROTOCOL),
            ("access-control-request-headers", WSI_TOKEN_HTTP_AC_REQUEST_HEADERS),
        ]
        for (name, token) in known {
            if let value = header(wsi, token) { headers[name] = value }
        }
        for name in options.extraHeaders {
            let key = name + ":"
            let length = lws_hdr_custom_length(wsi, key, Int32(key.utf8.count))
            guard length > 0 else { continue }
            var value = [CChar](repeating: 0, count: Int(length) + 1)
            if lws_hdr_custom_copy(wsi, &value, Int32(value.count), key, Int32(key.utf8.count)) >= 0 {
                headers[name] = cString(value)
            }
        }

        var peer = [CChar](repeating: 0, count: 64)
        let remote = lws_get_peer_simple(wsi, &peer, peer.count).map { String(cString: $0) } ?? ""
        return HTTPRequest(method: method, path: path, query: query, headers: headers, remoteAddress: remote)
    }

    private func header(_ wsi: OpaquePointer, _ token: lws_token_indexes) -> String? {
        let length = lws_hdr_total_length(wsi, token)
        guard length > 0 else { return nil }
        var value = [CChar](repeating: 0, count: Int(length) + 1)
        guard lws_hdr_copy(wsi, &value, Int32(value.count), token) >= 0 else { return nil }
        return cString(value)
    }

    static func plainError(_ status: Int, _ code: String, _ message: String) -> HTTPResponse {
        let body = #"{"error":{"code":"\#(code)","message":"\#(message)"}}"#
        return HTTPResponse(status: status, body: .bytes(Array(body.utf8)))
    }
}

/// The string in a NUL-terminated buffer.
private func cString(_ buffer: [CChar]) -> String {
    buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

private func serverCallback(
    _ wsi: OpaquePointer?, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
    _ input: UnsafeMutableRawPointer?, _ length: Int
) -> Int32 {
    guard let wsi, let loop = EventLoop.from(wsi: wsi) else { return 0 }
    if reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED && loop.server == nil {
        loop.drainPending()
        return 0
    }
    guard let server = loop.server else {
        return lws_callback_http_dummy(wsi, reason, user, input, length)
    }
    return server.callback(wsi, reason, input, length)
}

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

    fileprivate func callback(
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

private func clientCallback(
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
