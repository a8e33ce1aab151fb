// The HTTP/1.1 and WebSocket server on libwebsockets, with its own keepalive and deadlines.

import SwitchboardProtocol
import SwitchboardSupport
internal import CLibWebSockets
internal import CShims
import Foundation
import Synchronization

/// An HTTP/1.1 and WebSocket server on libwebsockets, serviced by its own event loop.
public final class HTTPServer: @unchecked Sendable {
    // Safety: all mutable state is confined to the loop thread; see `EventLoop`.

    /// Transport limits; each is documented in docs/configuration.md.
    public struct Options: Sendable {
        public var host: String
        public var port: Int
        /// Largest request head (request line and headers) accepted.
        public var maxHeaderBytes: Int = 16 * 1024
        /// Largest request body accepted.
        public var maxBodyBytes: Int = 1024 * 1024
        /// Request bodies (as their `Content-Length` declares them) held at once across every
        /// connection while they arrive: a body past it is refused with `503` at its head,
        /// before credentials are checked or a byte of it is buffered.
        public var maxBufferedBodyBytes: Int = 64 * 1024 * 1024
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
    /// Bytes of request bodies reserved by the connections receiving one (`maxBufferedBodyBytes`).
    private var bufferedBodyBytes = 0

    /// Starts listening. The server keeps `handler` for its life; the handler should hold the
    /// server it is given in `attach(to:)` weakly.
    public init(options: Options, handler: any HTTPServerHandler, logger: Logger = Logger()) throws {
        self.options = options
        self.logger = logger
        self.handler = handler
        maxConnections = options.maxConnections > 0 ? options.maxConnections : DescriptorLimit.connections(under: DescriptorLimit.current)
        loop = try EventLoop(listen: options, server: self, name: "switchboard-loop")
        // Before the loop runs: the handler has the server, and its loop, when the first
        // connection arrives.
        handler.attach(to: self)
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
        if !conn.awaitingFlush {
            conn.awaitingFlush = true
            unflushed.append(conn)
        }
        return true
    }

    /// Writes the frames queued in this turn of the loop, once the turn has handled its events.
    /// A connection given one frame (a signal, a reply: how paced traffic comes) or a
    /// keepalive ping is serviced
    /// at once as writeable, without asking epoll: libwebsockets writes what it owes first (a
    /// pong, buffered bytes, a close: then the frame waits for a real writeable event, as it
    /// would have) and then calls the writeable callback, which writes the frame. Asking epoll
    /// costs two `epoll_ctl` calls and a wakeup per write: four calls per relayed signal. One
    /// given several (a burst) waits for that real writeable event: written a turn later, they
    /// go out coalesced with what joins them by then, and under a pipelined load that batching
    /// is worth more than the calls (writing bursts at once too cost the pipelined relay 7%: both
    /// ends then sent and read fewer frames per system call). Called by the loop after each
    /// turn; loop thread only.
    func flushQueuedFrames() {
        guard !unflushed.isEmpty, let context = loop.context else { return }
        // By index: a connection closed while it is serviced can queue frames for others.
        var index = 0
        while index < unflushed.count {
            let conn = unflushed[index]
            index += 1
            conn.awaitingFlush = false
            // `isWebSocket` is false once libwebsockets has closed it (its wsi is gone).
            guard conn.isWebSocket, !conn.sendQueue.isEmpty || conn.pingDue else { continue }
            if conn.sendQueue.count <= 1 {
                sb_lws_service_writeable(context, conn.wsi)
            } else {
                lws_callback_on_writable(conn.wsi)
            }
        }
        unflushed.removeAll(keepingCapacity: true)
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

    final class Connection {
        enum ResponsePhase { case headers, body }
        let id: ConnectionID
        let wsi: OpaquePointer
        var isWebSocket = false
        var tag = 0
        var request: HTTPRequest?
        var bodyLimitExceeded = false
        /// What its body in progress holds of `bufferedBodyBytes`.
        var reservedBodyBytes = 0
        var pendingResponse: HTTPResponse?
        var responsePhase = ResponsePhase.headers
        var responseOffset = 0
        var rx: [UInt8] = []
        var rxOverflow = false
        var sendQueue = SendQueue()
        /// Whether it is in `HTTPServer.unflushed`, to be written when the loop's turn ends.
        var awaitingFlush = false
        var closeRequested: (UInt16, String)?
        var closeReason: CloseReason?
        /// Keepalive: when the peer last sent a frame (monotonic µs), whether a ping waits for
        /// the next writeable callback, and whether one is out unanswered.
        var lastHeard: UInt64 = 0
        var pingDue = false
        var pingOutstanding = false
        /// How much later than a ping interval of silence its first ping comes: a random part of
        /// half the interval (less if the idle timeout comes sooner), so that connections opened
        /// together (every client of a node that restarted reconnects within seconds) are not
        /// pinged, nor read their pongs, together ever after: 10,000 connections opened in 4 s
        /// and pinged in step put 125 pings and their pongs in each keepalive tick, and in that
        /// first round the relay's p99 at 10,000 signals/s was about three times what it is
        /// with them spread (BENCHMARKS.md, latency). Later, not
        /// sooner: a client is never pinged before a ping interval of silence. 0 once the first
        /// ping is out.
        var firstPingLater: UInt64 = 0
        /// Whether it is a WebSocket the keepalive visits; it sits in one slot of
        /// `HTTPServer.keepaliveWheel` while this holds.
        var inKeepalive = false
        /// The receive allowance: the kernel's byte count and the time at the last keepalive
        /// visit, and the bytes it may still send at once.
        var receivedAtVisit: Int64 = 0
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

    /// WebSocket connections given frames in this turn of the loop (`flushQueuedFrames`).
    private var unflushed: [Connection] = []

    /// The keepalive's timing wheel: each WebSocket sits in the slot of its next visit, the time
    /// its ping or its drop falls due, so an idle connection costs one visit per ping interval
    /// and nothing in the seconds between (a sweep of every connection each second cost 3.4% of
    /// a core at 10,000 idle). A visit puts the connection back where its next visit falls, at
    /// most a turn of the wheel ahead (a later one is visited and put back again). Closed
    /// connections leave their slot when it is next emptied. The wheel's timer wakes the loop
    /// for the next slot that holds a connection, not every tick: with few connections most
    /// slots are empty (a wakeup every 5 ms cost a server with 100 connections 1% of a core).
    private var keepaliveWheel: [[Connection]] = []
    private var wheelCursor = 0
    private var wheelCursorTime: UInt64 = 0
    /// The connections in the wheel's slots (closed ones until their slot is emptied).
    private var wheelEntries = 0
    /// The wheel's timer and the time it is set for; nil while the wheel is empty or turning.
    private var wheelTimer: (id: TimerID, at: UInt64)?
    private var wheelTurning = false
    private static let wheelSlots = 1024

    /// A quarter of the ping interval, at most a second: how often a connection sending more
    /// than a quarter of its receive allowance is visited.
    private var keepalivePeriod: UInt64 {
        UInt64(min(1000, max(50, options.pingIntervalSeconds * 250))) * 1000
    }
    /// One slot's time: a ping goes out at most that late (50 ms at the default ping interval).
    /// Each slot that holds a connection is a wakeup, and pings batched fewer to a wakeup cost
    /// more each: slots of 10 ms cost 1.4 times the CPU per ping for no p99 measurably lower
    /// once the pings are spread (2026-12-06; BENCHMARKS.md, latency and idle sections).
    private var wheelTick: UInt64 { keepalivePeriod / 20 }

    private func startKeepalive(_ conn: Connection) {
        if keepaliveWheel.isEmpty {
            keepaliveWheel = Array(repeating: [], count: Self.wheelSlots)
        }
        let now = EventLoop.nowMicros()
        if wheelEntries == 0 { wheelCursorTime = now }
        conn.lastHeard = now
        conn.inKeepalive = true
        conn.visitedAt = now
        conn.receivedAtVisit = 0
        conn.receiveCredit = Self.receiveBurstSeconds * receiveRate(conn)
        let pingAfter = UInt64(max(1, options.pingIntervalSeconds)) * 1_000_000
        let dropAfter = UInt64(max(1, options.idleTimeoutSeconds)) * 1_000_000
        let spread = dropAfter > pingAfter ? min(pingAfter / 2, dropAfter - pingAfter) : 0
        conn.firstPingLater = spread > 0 ? UInt64.random(in: 0..<spread) : 0
        place(conn, at: now + pingAfter + conn.firstPingLater)
    }

    /// Puts `conn` in the slot for `time` (at the latest a turn of the wheel ahead), and sets
    /// the wheel's timer for it if it falls before the timer (a turn of the wheel sets the
    /// timer once it is done).
    private func place(_ conn: Connection, at time: UInt64) {
        let ahead = time > wheelCursorTime ? (time - wheelCursorTime + wheelTick - 1) / wheelTick : 1
        let slots = Int(min(UInt64(Self.wheelSlots - 1), max(1, ahead)))
        keepaliveWheel[(wheelCursor + slots) % Self.wheelSlots].append(conn)
        wheelEntries += 1
        guard !wheelTurning else { return }
        let slotTime = wheelCursorTime + UInt64(slots) * wheelTick
        if let timer = wheelTimer {
            guard slotTime < timer.at else { return }
            loop.cancel(timer.id)
        }
        setWheelTimer(at: slotTime)
    }

    private func setWheelTimer(at time: UInt64) {
        let now = EventLoop.nowMicros()
        let id = loop.schedule(after: .microseconds(Int64(time > now ? time - now : 0)), quiet: true) { [weak self] in
            self?.turnKeepaliveWheel()
        }
        wheelTimer = (id, time)
    }

    /// Visits the connections of the slots now due, then sets the timer for the next slot that
    /// holds any.
    private func turnKeepaliveWheel() {
        wheelTimer = nil
        wheelTurning = true
        let now = EventLoop.nowMicros()
        while wheelCursorTime + wheelTick <= now {
            wheelCursor = (wheelCursor + 1) % Self.wheelSlots
            wheelCursorTime += wheelTick
            let due = keepaliveWheel[wheelCursor]
            guard !due.isEmpty else { continue }
            keepaliveWheel[wheelCursor] = []
            wheelEntries -= due.count
            for conn in due where conn.inKeepalive { visit(conn, now: now) }
        }
        wheelTurning = false
        guard wheelEntries > 0 else { return }
        var slots = 1
        while slots < Self.wheelSlots - 1, keepaliveWheel[(wheelCursor + slots) % Self.wheelSlots].isEmpty { slots += 1 }
        setWheelTimer(at: wheelCursorTime + UInt64(slots) * wheelTick)
    }

    /// Pings `conn` once it was silent for `pingIntervalSeconds` (one ping until it hears
    /// back), drops it once it stayed silent for `idleTimeoutSeconds` with a ping unanswered or
    /// sent more than its receive allowance, and places its next visit.
    private func visit(_ conn: Connection, now: UInt64) {
        let pingAfter = UInt64(max(1, options.pingIntervalSeconds)) * 1_000_000
        let dropAfter = UInt64(max(1, options.idleTimeoutSeconds)) * 1_000_000
        let (tooFast, busy) = receiveAllowance(conn, now: now)
        let silence = now &- conn.lastHeard
        var next: UInt64
        if tooFast {
            // Dropped at once with a reset: a graceful close would wait for a peer that keeps
            // sending.
            conn.closeReason = .receiveRateExceeded
            var hard = linger(l_onoff: 1, l_linger: 0)
            setsockopt(lws_get_socket_fd(conn.wsi), SOL_SOCKET, SO_LINGER, &hard, socklen_t(MemoryLayout<linger>.size))
            lws_set_timeout(conn.wsi, PENDING_TIMEOUT_CLOSE_ACK, -2)  // LWS_TO_KILL_SYNC
            loop.serviceAfterTimers()
            next = now + keepalivePeriod
        } else if conn.pingOutstanding {
            if silence >= dropAfter {
                conn.closeReason = .lost
                lws_set_timeout(conn.wsi, PENDING_TIMEOUT_CLOSE_ACK, -1)  // LWS_TO_KILL_ASYNC
                loop.serviceAfterTimers()
                next = now + keepalivePeriod
            } else {
                // Back a ping interval later (or at the drop, if sooner): a pong that comes
                // late still gets the next ping a ping interval after it, not only at the drop.
                next = min(conn.lastHeard + dropAfter, now + pingAfter)
            }
        } else if silence >= pingAfter + conn.firstPingLater {
            conn.firstPingLater = 0
            conn.pingOutstanding = true
            conn.pingDue = true
            // Written when the turn ends, as a frame is (`flushQueuedFrames`): asking epoll for
            // a writeable event would cost every ping two `epoll_ctl` calls and a wakeup.
            if !conn.awaitingFlush {
                conn.awaitingFlush = true
                unflushed.append(conn)
            }
            // Back when the pong has had time to come (then the next ping falls due a ping
            // interval after it), or when the drop falls due, whichever comes first.
            next = max(min(conn.lastHeard + dropAfter, now + pingAfter), now + keepalivePeriod)
        } else {
            next = conn.lastHeard + pingAfter + conn.firstPingLater
        }
        if busy { next = min(next, now + keepalivePeriod) }
        place(conn, at: next)
    }

    /// Bursts of this many seconds' worth of `maxReceiveBytesPerSecond` pass.
    private static let receiveBurstSeconds = 4.0

    private func receiveRate(_ conn: Connection) -> Double {
        Double(options.maxReceiveBytesPerSecondByTag[conn.tag] ?? options.maxReceiveBytesPerSecond)
    }

    /// Whether `conn` sent more than its receive allowance since the last visit, and whether
    /// it used more than a quarter of what that time allowed (then it is visited again within a
    /// keepalive period, so that a flood is cut within about a second of showing).
    private func receiveAllowance(_ conn: Connection, now: UInt64) -> (tooFast: Bool, busy: Bool) {
        let rate = receiveRate(conn)
        guard rate > 0 else { return (false, false) }
        let received = sb_tcp_bytes_received(lws_get_socket_fd(conn.wsi))
        guard received >= 0 else { return (false, false) }
        let allowed = rate * Double(now &- conn.visitedAt) / 1_000_000
        let sent = Double(received - conn.receivedAtVisit)
        conn.receivedAtVisit = received
        conn.visitedAt = now
        conn.receiveCredit = min(rate * Self.receiveBurstSeconds, conn.receiveCredit + allowed - sent)
        return (conn.receiveCredit < 0, sent * 4 > allowed)
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
    func acceptReady(_ index: Int) {
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

    /// A body arrived or was given up: its reservation is free for others.
    private func releaseBody(_ conn: Connection) {
        bufferedBodyBytes -= conn.reservedBodyBytes
        conn.reservedBodyBytes = 0
    }

    private func forget(_ wsi: OpaquePointer) {
        let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(wsi)))
        guard let conn = connectionsByWSI.removeValue(forKey: key) else { return }
        releaseBody(conn)
        connections.removeValue(forKey: conn.id)
        conn.inKeepalive = false
        if conn.isWebSocket {
            conn.isWebSocket = false
            handler?.webSocketClosed(conn.id, reason: conn.closeReason ?? .lost)
        }
    }

    func callback(
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
            if declaredLength > 0 && bufferedBodyBytes + declaredLength > options.maxBufferedBodyBytes {
                var refusal = Self.plainError(503, "unavailable", "too many request bodies are arriving at once; retry in a second")
                refusal.headers.append(("Retry-After", "1"))
                refusal.closeConnection = true
                respond(to: conn.id, with: refusal)
                conn.bodyLimitExceeded = true
                return 0
            }
            conn.request = request
            if declaredLength > 0 {
                conn.reservedBodyBytes = declaredLength
                bufferedBodyBytes += declaredLength
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
                releaseBody(conn)
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
            releaseBody(conn)
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
            startKeepalive(conn)
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
            guard lws_is_final_fragment(wsi) != 0 && lws_remaining_packet_payload(wsi) == 0 else { return 0 }
            // The message goes to the handler with its buffer: a connection keeps no buffer
            // between messages (keeping one kept each its largest message's worth).
            let message = conn.rx
            conn.rx = []
            handler?.webSocketReceived(conn.id, message: message, binary: lws_frame_is_binary(wsi) != 0)
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
        // As large as the whole head may be: a query argument (a token in `access_token`) is
        // never cut short of what the head limit lets arrive.
        var fragment = [CChar](repeating: 0, count: max(4096, options.maxHeaderBytes + 1))
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
func cString(_ buffer: [CChar]) -> String {
    buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

func serverCallback(
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
