// The only Swift file that imports nghttp2: an HTTP/2-over-TLS server for the APNs sandbox.

import SwitchboardProtocol
internal import CNGHTTP2
import Foundation
import Glibc
import Synchronization
import SwitchboardSupport
import SwitchboardSystem

/// A small HTTP/2 server over TLS (ALPN "h2", or HTTP/2 with prior knowledge from a client that
/// offers no ALPN, as APNs takes it): one thread, non-blocking sockets and poll(),
/// nghttp2 for the framing, OpenSSL for TLS. It serves the APNs sandbox, where handlers may
/// answer later (added latency) and a connection may be sent GOAWAY on purpose.
public final class HTTP2Server: @unchecked Sendable {
    // Safety: connection state, timers and the handler are used on the server's thread only;
    // `pending` is guarded by its lock and the wake pipe is written from any thread.

    public struct Options: Sendable {
        public var host: String
        public var port: Int
        public var certificatePath: String
        public var privateKeyPath: String
        /// SETTINGS_MAX_CONCURRENT_STREAMS announced to clients.
        public var maxConcurrentStreams: UInt32 = 1000
        /// Trust client certificates from these authorities (certificate-based authentication).
        public var clientCAPath: String?

        public init(host: String, port: Int, certificatePath: String, privateKeyPath: String) {
            self.host = host
            self.port = port
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
        }
    }

    /// A complete request (headers and body).
    public struct Request: Sendable {
        public var method: String
        public var path: String
        /// Headers in arrival order, names lower case; repeated headers appear repeatedly.
        public var headers: [(String, String)]
        public var body: [UInt8]
        /// The connection it came on (1, 2, 3... in accept order).
        public var connection: Int
        public var streamID: Int32
        /// Its position among the requests of its connection, from 1.
        public var streamIndex: Int
        /// The subject of the client certificate the connection authenticated with, if any.
        public var clientCertificate: String?

        public func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
        public func headerCount(_ name: String) -> Int { headers.filter { $0.0 == name }.count }
    }

    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: [UInt8]

        public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
            self.status = status
            self.headers = headers
            self.body = body
        }
    }

    /// Answers one request, once, from any thread.
    public struct Responder: Sendable {
        fileprivate let server: HTTP2Server
        fileprivate let connection: Int
        fileprivate let streamID: Int32

        public func respond(_ response: Response) {
            server.execute { server in server.submit(response, connection: connection, streamID: streamID) }
        }
    }

    /// Called on the server thread for every complete request.
    public typealias Handler = @Sendable (Request, Responder) -> Void

    public let options: Options
    public private(set) var port = 0
    private let handler: Handler
    private let tls: TLSServerContext
    private let listening: ListeningSockets
    /// Until when accepting waits after the process ran out of descriptors (monotonic µs).
    private var acceptPausedUntil: UInt64 = 0
    private var wakeRead: Int32 = -1
    private var wakeWrite: Int32 = -1
    private var connections: [Int: Connection] = [:]
    private var nextConnection = 0
    private var timers = TimerHeap()
    private let pending = Locked<[@Sendable (HTTP2Server) -> Void]>([])
    private let stopRequested = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let open = Atomic<Int>(0)
    private let usable = Atomic<Int>(0)
    private let peak = Atomic<Int>(0)
    private let accepted = Atomic<Int>(0)

    public init(options: Options, handler: @escaping Handler) throws {
        self.options = options
        self.handler = handler
        tls = try TLSServerContext(
            certificatePath: options.certificatePath, privateKeyPath: options.privateKeyPath, clientCAPath: options.clientCAPath)
        listening = try ListeningSockets(host: options.host, port: options.port)
        port = listening.port
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw SystemError.listenFailed(host: options.host, port: options.port) }
        wakeRead = pipeEnds[0]
        wakeWrite = pipeEnds[1]
        Self.setNonBlocking(wakeRead)
        Self.setNonBlocking(wakeWrite)
        let thread = Thread { [self] in run() }
        thread.name = "switchboard-h2"
        started.store(true, ordering: .releasing)
        thread.start()
    }

    /// Open connections now, including ones draining after a GOAWAY.
    public var connectionCount: Int { open.load(ordering: .relaxed) }
    /// The most usable connections (open and not sent GOAWAY) at once so far.
    public var peakConnectionCount: Int { peak.load(ordering: .relaxed) }
    /// RST_STREAM frames clients sent.
    public var streamResetsReceived: Int { resetsReceived.load(ordering: .relaxed) }
    fileprivate let resetsReceived = Atomic<Int>(0)
    /// Connections accepted so far.
    public var connectionsAccepted: Int { accepted.load(ordering: .relaxed) }

    /// Runs `work` on the server thread.
    public func execute(_ work: @escaping @Sendable (HTTP2Server) -> Void) {
        pending.withLock { $0.append(work) }
        var byte: UInt8 = 1
        _ = Glibc.write(wakeWrite, &byte, 1)
    }

    /// Runs `body` on the server thread after `delay`. Server thread only.
    public func schedule(after delay: Duration, _ body: @escaping () -> Void) {
        _ = timers.insert(deadline: EventLoop.nowMicros() &+ UInt64(max(0, delay.microseconds)), body)
    }

    /// Sends GOAWAY on `connection` naming `lastStreamID` (or a later stream already handed to
    /// the handler) as the last stream it will process; later streams are refused unprocessed,
    /// and the connection closes once the rest are answered. Server thread only.
    public func goAway(connection: Int, lastStreamID requested: Int32) {
        guard let conn = connections[connection], conn.goAwayAfter == nil else { return }
        let lastStreamID = max(requested, conn.highestDispatched)
        conn.goAwayAfter = lastStreamID
        usable.subtract(1, ordering: .relaxed)
        nghttp2_submit_goaway(conn.session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID, UInt32(NGHTTP2_NO_ERROR.rawValue), nil, 0)
        for (streamID, _) in conn.streams where streamID > lastStreamID {
            nghttp2_submit_rst_stream(conn.session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, UInt32(NGHTTP2_REFUSED_STREAM.rawValue))
        }
        flush(conn)
    }

    /// Drops `connection` at once with a TCP reset (no close_notify, no GOAWAY): what a client
    /// sees when a middlebox or the peer's host fails. Streams in flight get no answer. Server
    /// thread only.
    public func reset(connection: Int) {
        guard let conn = connections[connection] else { return }
        var hard = Glibc.linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(conn.socket, SOL_SOCKET, SO_LINGER, &hard, socklen_t(MemoryLayout<Glibc.linger>.size))
        conn.closing = true
        drop(conn)
    }

    /// Closes every connection and stops the thread. Callable once from any thread but the
    /// server's own; later calls return at once.
    public func stop() {
        guard !stopRequested.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var byte: UInt8 = 1
        _ = Glibc.write(wakeWrite, &byte, 1)
        finished.wait()
    }

    deinit {
        // The thread holds the server until `run` returns, so a server that started is only
        // freed after it stopped; one whose init failed never started a thread.
        if !started.load(ordering: .acquiring) {
            listening.close()
            if wakeRead >= 0 { close(wakeRead) }
            if wakeWrite >= 0 { close(wakeWrite) }
        }
    }

    // MARK: Sockets

    private static func setNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while !stopRequested.load(ordering: .acquiring) {
            // Listening sockets first (not watched while accepting is paused), then the wake pipe.
            let accepting = EventLoop.nowMicros() >= acceptPausedUntil
            var fds = listening.descriptors.map { pollfd(fd: accepting ? $0 : -1, events: Int16(POLLIN), revents: 0) }
            fds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
            let first = fds.count
            let order = Array(connections.keys)
            for id in order {
                let conn = connections[id]!
                var events = Int16(POLLIN)
                if conn.wantsWrite { events |= Int16(POLLOUT) }
                fds.append(pollfd(fd: conn.socket, events: events, revents: 0))
            }
            var timeout: Int32 = accepting ? 1000 : 100
            if let next = timers.nextDeadline() {
                let now = EventLoop.nowMicros()
                timeout = next <= now ? 0 : Int32(min(1000, (next - now + 999) / 1000))
            }
            _ = poll(&fds, nfds_t(fds.count), timeout)

            if fds[first - 1].revents != 0 {
                var drain = [UInt8](repeating: 0, count: 256)
                while read(wakeRead, &drain, drain.count) > 0 {}
                let work = pending.withLock { queue -> [@Sendable (HTTP2Server) -> Void] in
                    let taken = queue
                    queue.removeAll()
                    return taken
                }
                for item in work { item(self) }
            }
            let now = EventLoop.nowMicros()
            while let body = timers.popDue(now: now) { body() }
            for index in listening.descriptors.indices where fds[index].revents & Int16(POLLIN) != 0 { acceptAll(index) }
            for (index, id) in order.enumerated() {
                guard let conn = connections[id] else { continue }
                let revents = fds[index + first].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 || (revents & Int16(POLLOUT) != 0) {
                    service(conn, buffer: &buffer)
                }
            }
        }
        for conn in connections.values { drop(conn) }
        listening.close()
        close(wakeRead)
        close(wakeWrite)
        finished.signal()
    }

    private func acceptAll(_ index: Int) {
        while true {
            let fd: Int32
            switch listening.accept(index) {
            case .accepted(let accepted): fd = accepted
            case .none: return
            case .outOfDescriptors:
                // Shed what waits and stop watching the sockets for a while, instead of spinning.
                _ = listening.shed(index, limit: 64)
                acceptPausedUntil = EventLoop.nowMicros() + 100_000
                return
            }
            var yes: Int32 = 1
            setsockopt(fd, SOL_TCP, TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            guard let tlsConnection = try? TLSConnection(context: tls, socket: fd) else {
                close(fd)
                continue
            }
            nextConnection += 1
            let conn = Connection(id: nextConnection, socket: fd, tls: tlsConnection)
            guard conn.startSession(server: self, maxConcurrentStreams: options.maxConcurrentStreams) else {
                close(fd)
                continue
            }
            connections[conn.id] = conn
            open.add(1, ordering: .relaxed)
            accepted.add(1, ordering: .relaxed)
            let count = usable.add(1, ordering: .relaxed).newValue
            var seen = peak.load(ordering: .relaxed)
            while count > seen {
                let (exchanged, original) = peak.compareExchange(expected: seen, desired: count, ordering: .relaxed)
                if exchanged { break }
                seen = original
            }
        }
    }

    private func service(_ conn: Connection, buffer: inout [UInt8]) {
        if !conn.tls.handshakeDone {
            switch conn.tls.handshake() {
            case .done:
                // APNs needs no ALPN: a client that offers none (stock aioapns) speaks HTTP/2 with
                // prior knowledge. One that offers protocols without h2 was refused by the
                // handshake (a no_application_protocol alert).
                if let chosen = conn.tls.negotiatedProtocol, chosen != "h2" {
                    drop(conn)
                    return
                }
                conn.clientCertificate = conn.tls.verifiedPeerSubject
            case .wantRead, .wantWrite:
                return
            case .closed, .failed:
                drop(conn)
                return
            }
        }
        if conn.closing {
            // Discard what the client still sends until it closes.
            while true {
                switch buffer.withUnsafeMutableBytes({ conn.tls.read(into: $0) }) {
                case .done: continue
                case .wantRead, .wantWrite: return
                case .closed, .failed:
                    drop(conn)
                    return
                }
            }
        }
        // Read everything available into nghttp2.
        readLoop: while true {
            let outcome = buffer.withUnsafeMutableBytes { conn.tls.read(into: $0) }
            switch outcome {
            case .done(let count):
                let consumed = buffer.withUnsafeBufferPointer { nghttp2_session_mem_recv(conn.session, $0.baseAddress, count) }
                if consumed < 0 {
                    drop(conn)
                    return
                }
            case .wantRead, .wantWrite:
                break readLoop
            case .closed, .failed:
                drop(conn)
                return
            }
        }
        flush(conn)
    }

    /// Writes what nghttp2 has to send; closes the connection when neither side wants more.
    fileprivate func flush(_ conn: Connection) {
        guard !conn.closing else { return }
        while true {
            if conn.outbox.isEmpty {
                var data: UnsafePointer<UInt8>?
                let length = nghttp2_session_mem_send(conn.session, &data)
                if length < 0 {
                    drop(conn)
                    return
                }
                if length == 0 { break }
                conn.outbox.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
            }
            let outcome = conn.outbox.withUnsafeBytes { conn.tls.write($0) }
            switch outcome {
            case .done(let count):
                conn.outbox.removeFirst(count)
            case .wantRead, .wantWrite:
                conn.wantsWrite = true
                return
            case .closed, .failed:
                drop(conn)
                return
            }
        }
        conn.wantsWrite = false
        // Done when nghttp2 has nothing left to read or write and every request handed to the
        // handler has been answered (an answer may still be on its way, e.g. delayed).
        if conn.awaitingAnswers == 0 && nghttp2_session_want_read(conn.session) == 0
            && nghttp2_session_want_write(conn.session) == 0
        {
            linger(conn)
        }
    }

    /// Closes gracefully: close_notify and a half-close, then reads (and discards) until the
    /// client closes or two seconds pass. Closing at once with the client's frames still unread
    /// would make the kernel reset the connection, and the client could lose our last frames
    /// (the GOAWAY among them).
    private func linger(_ conn: Connection) {
        guard !conn.closing else { return }
        conn.closing = true
        conn.tls.shutdown()
        Glibc.shutdown(conn.socket, Int32(SHUT_WR))
        schedule(after: .seconds(2)) { [weak self, weak conn] in
            guard let self, let conn else { return }
            self.drop(conn)
        }
    }

    private func drop(_ conn: Connection) {
        guard connections.removeValue(forKey: conn.id) != nil else { return }
        if !conn.closing { conn.tls.shutdown() }
        close(conn.socket)
        open.subtract(1, ordering: .relaxed)
        if conn.goAwayAfter == nil { usable.subtract(1, ordering: .relaxed) }
    }

    fileprivate func submit(_ response: Response, connection: Int, streamID: Int32) {
        guard let conn = connections[connection] else { return }
        conn.awaitingAnswers -= 1
        guard let stream = conn.streams[streamID], !stream.answered else {
            flush(conn)
            return
        }
        stream.answered = true
        stream.responseBody = response.body
        var fields: [(String, String)] = [(":status", String(response.status))]
        fields += response.headers.map { ($0.0.lowercased(), $0.1) }
        // An empty body goes without content-length: the stream's END_STREAM ends it. (With
        // "content-length: 0" libcurl finishes the transfer on the headers alone and resets each
        // stream, which nghttp2's rapid-reset guard punishes by closing the connection.)
        if !response.body.isEmpty { fields.append(("content-length", String(response.body.count))) }
        var names = fields.map { Array($0.0.utf8) }
        var values = fields.map { Array($0.1.utf8) }
        var nva: [nghttp2_nv] = []
        for index in fields.indices {
            nva.append(names[index].withUnsafeMutableBufferPointer { name in
                values[index].withUnsafeMutableBufferPointer { value in
                    nghttp2_nv(name: name.baseAddress, value: value.baseAddress, namelen: name.count, valuelen: value.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
                }
            })
        }
        // nghttp2 copies names and values during submit; the arrays stay alive across the call.
        withExtendedLifetime((names, values)) {
            if response.body.isEmpty {
                nghttp2_submit_response(conn.session, streamID, nva, nva.count, nil)
            } else {
                var provider = nghttp2_data_provider()
                provider.read_callback = dataSourceRead
                nghttp2_submit_response(conn.session, streamID, nva, nva.count, &provider)
            }
        }
        names.removeAll()
        values.removeAll()
        flush(conn)
    }

    fileprivate func dispatch(_ conn: Connection, _ stream: Stream) {
        if let last = conn.goAwayAfter, stream.id > last { return }  // refused by GOAWAY: never processed
        conn.highestDispatched = max(conn.highestDispatched, stream.id)
        conn.awaitingAnswers += 1
        let request = Request(
            method: stream.header(":method") ?? "", path: stream.header(":path") ?? "",
            headers: stream.headers.filter { !$0.0.hasPrefix(":") }, body: stream.body, connection: conn.id,
            streamID: stream.id, streamIndex: stream.index, clientCertificate: conn.clientCertificate)
        handler(request, Responder(server: self, connection: conn.id, streamID: stream.id))
    }

    // MARK: Per-connection state

    fileprivate final class Stream {
        let id: Int32
        let index: Int
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var answered = false
        var responseBody: [UInt8] = []
        var responseOffset = 0

        init(id: Int32, index: Int) {
            self.id = id
            self.index = index
        }

        func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
    }

    fileprivate final class Connection {
        let id: Int
        let socket: Int32
        let tls: TLSConnection
        var session: OpaquePointer!
        var streams: [Int32: Stream] = [:]
        var streamsSeen = 0
        var outbox: [UInt8] = []
        var wantsWrite = false
        var goAwayAfter: Int32?
        var highestDispatched: Int32 = 0
        var clientCertificate: String?
        /// Requests handed to the handler and not answered yet.
        var awaitingAnswers = 0
        /// Half-closed after the last answer; waiting for the client to close.
        var closing = false
        weak var server: HTTP2Server?

        init(id: Int, socket: Int32, tls: TLSConnection) {
            self.id = id
            self.socket = socket
            self.tls = tls
        }

        deinit {
            if let session { nghttp2_session_del(session) }
        }

        func startSession(server: HTTP2Server, maxConcurrentStreams: UInt32) -> Bool {
            self.server = server
            var callbacks: OpaquePointer?
            guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
            defer { nghttp2_session_callbacks_del(callbacks) }
            nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
            nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
            nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
            nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrameReceived)
            nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
            var option: OpaquePointer?
            guard nghttp2_option_new(&option) == 0, let option else { return false }
            defer { nghttp2_option_del(option) }
            // libcurl 7.88 sends RST_STREAM(STREAM_CLOSED) for every finished stream; nghttp2's
            // rapid-reset guard would take that for an attack and end the connection with
            // INTERNAL_ERROR. Those resets are harmless here: lift the guard.
            nghttp2_option_set_stream_reset_rate_limit(option, UInt64(Int64.max), UInt64(Int64.max))
            var created: OpaquePointer?
            guard nghttp2_session_server_new2(&created, callbacks, Unmanaged.passUnretained(self).toOpaque(), option) == 0 else {
                return false
            }
            session = created
            var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: maxConcurrentStreams)]
            return nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, 1) == 0
        }
    }
}

private func connection(_ user: UnsafeMutableRawPointer?) -> HTTP2Server.Connection {
    Unmanaged<HTTP2Server.Connection>.fromOpaque(user!).takeUnretainedValue()
}

private func onBeginHeaders(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ user: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
        frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST
    else { return 0 }
    let conn = connection(user)
    conn.streamsSeen += 1
    conn.streams[frame.pointee.hd.stream_id] = HTTP2Server.Stream(id: frame.pointee.hd.stream_id, index: conn.streamsSeen)
    return 0
}

private func onHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ name: UnsafePointer<UInt8>?, _ nameLength: Int,
    _ value: UnsafePointer<UInt8>?, _ valueLength: Int, _ flags: UInt8, _ user: UnsafeMutableRawPointer?
) -> Int32 {
    guard let frame, let stream = connection(user).streams[frame.pointee.hd.stream_id] else { return 0 }
    let headerName = String(decoding: UnsafeBufferPointer(start: name, count: nameLength), as: UTF8.self).lowercased()
    let headerValue = String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self)
    stream.headers.append((headerName, headerValue))
    return 0
}

private func onDataChunk(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ user: UnsafeMutableRawPointer?
) -> Int32 {
    guard let stream = connection(user).streams[streamID], let data else { return 0 }
    stream.body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private func onFrameReceived(_ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ user: UnsafeMutableRawPointer?) -> Int32 {
    guard let frame else { return 0 }
    let type = frame.pointee.hd.type
    if type == UInt8(NGHTTP2_RST_STREAM.rawValue) { connection(user).server?.resetsReceived.add(1, ordering: .relaxed) }
    guard type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue),
        frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    else { return 0 }
    let conn = connection(user)
    guard let stream = conn.streams[frame.pointee.hd.stream_id], let server = conn.server else { return 0 }
    server.dispatch(conn, stream)
    return 0
}

private func onStreamClose(_ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ user: UnsafeMutableRawPointer?) -> Int32 {
    connection(user).streams.removeValue(forKey: streamID)
    return 0
}

private func dataSourceRead(
    _ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int,
    _ flags: UnsafeMutablePointer<UInt32>?, _ source: UnsafeMutablePointer<nghttp2_data_source>?, _ user: UnsafeMutableRawPointer?
) -> Int {
    guard let stream = connection(user).streams[streamID], let buffer else {
        flags?.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue)
        return 0
    }
    let count = min(length, stream.responseBody.count - stream.responseOffset)
    stream.responseBody.withUnsafeBufferPointer { body in
        buffer.update(from: body.baseAddress! + stream.responseOffset, count: count)
    }
    stream.responseOffset += count
    if stream.responseOffset == stream.responseBody.count { flags?.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue) }
    return count
}
