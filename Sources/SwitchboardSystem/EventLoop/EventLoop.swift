// The event loop: one libwebsockets context on a libev loop, serviced by its own thread.

import SwitchboardProtocol
import SwitchboardSupport
internal import CLibWebSockets
internal import CShims
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
    var context: OpaquePointer!
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
    /// The libev loop under the context (Redis connections attach to it). Loop thread only.
    let evLoop: UnsafeMutableRawPointer
    private let foreignLoops: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    private var timers = TimerHeap()
    /// What runs when the current turn of the loop ends (`atTurnEnd`).
    private var turnEnd: [() -> Void] = []
    private var timerArmedAt: UInt64 = .max

    weak var server: HTTPServer?
    var clients: [UInt: WebSocketClient] = [:]
    /// A server loop's listening sockets, its vhost (which adopts what they accept) and one
    /// readable watcher per socket.
    let listening: ListeningSockets?
    var vhost: OpaquePointer?
    private var acceptWatchers: [UnsafeMutableRawPointer] = []
    private var acceptPaused: Set<Int> = []

    /// The port the server listens on (useful with port 0), or nil for a client-only loop.
    public private(set) var port: Int?

    /// A loop for outgoing WebSocket connections only.
    public convenience init(name: String = "switchboard-client") throws {
        try self.init(listen: nil, server: nil, name: name)
    }

    init(listen: HTTPServer.Options?, server: HTTPServer?, name: String) throws {
        protocolNames = [strdup("switchboard-server")!, strdup("switchboard-client")!]
        protocols = .allocate(capacity: 3)
        protocols.initialize(repeating: lws_protocols(), count: 3)
        protocols[0].name = UnsafePointer(protocolNames[0])
        protocols[0].callback = serverCallback
        // Each WebSocket gets a receive buffer of this size from libwebsockets for as long as it
        // is open (a larger message arrives in pieces, joined in `HTTPServer`). 4 KiB is what
        // libwebsockets reads at once anyway; 16 KiB made it 13 KB of an idle connection's
        // 21 KB (BENCHMARKS.md, idle section). Sends are capped separately, as before.
        protocols[0].rx_buffer_size = 4096
        protocols[0].tx_packet_size = 16 * 1024
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
    func start() {
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
            server?.flushQueuedFrames()
            runTurnEnd()
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

    /// Runs `body` once the events of the loop's current turn are handled (frames the turn
    /// queued are written first): what the turn wrote many times is sent in one system call.
    /// Loop thread only.
    public func atTurnEnd(_ body: @escaping () -> Void) {
        turnEnd.append(body)
    }

    private func runTurnEnd() {
        while !turnEnd.isEmpty {
            let work = turnEnd
            turnEnd.removeAll(keepingCapacity: true)
            for item in work { item() }
        }
    }

    /// Runs `work` on the loop thread, soon. Callable from any thread.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        pending.withLock { $0.append(work) }
        lws_cancel_service(context)
    }

    func drainPending() {
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
    func pauseAccepting(_ index: Int, for delay: Duration) {
        guard acceptPaused.insert(index).inserted else { return }
        sb_ev_io_stop(evLoop, acceptWatchers[index])
        schedule(after: delay) { [self] in
            acceptPaused.remove(index)
            if !stopRequested.load(ordering: .acquiring) { sb_ev_io_start(evLoop, acceptWatchers[index]) }
        }
    }

    // MARK: Timers

    /// Runs `body` on the loop after `delay`. Loop thread only. After the timers that fall due
    /// together have run, libwebsockets is woken to service what they changed (see
    /// `fireTimers`), unless each of them was scheduled `quiet`: a body that changes nothing of
    /// libwebsockets but writes (the keepalive wheel's ticks, up to twenty a second) saves that
    /// wakeup, and calls `serviceAfterTimers()` the times it does.
    @discardableResult
    public func schedule(after delay: Duration, _ body: @escaping () -> Void) -> TimerID {
        schedule(after: delay, quiet: false, body)
    }

    @discardableResult
    public func schedule(after delay: Duration, quiet: Bool, _ body: @escaping () -> Void) -> TimerID {
        let deadline = Self.nowMicros() &+ UInt64(max(0, delay.microseconds))
        let id = timers.insert(deadline: deadline, quiet ? body : { [unowned self] in
            servicesAfterTimers = true
            body()
        })
        armTimer()
        return id
    }

    /// From a `quiet` timer's body: libwebsockets is to be woken once the due timers have run
    /// (the body set a libwebsockets timeout, closed a connection). Loop thread only.
    public func serviceAfterTimers() {
        servicesAfterTimers = true
    }
    private var servicesAfterTimers = false

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

    func fireTimers() {
        timerArmedAt = .max
        servicesAfterTimers = false
        let now = Self.nowMicros()
        while let body = timers.popDue(now: now) { body() }
        armTimer()
        // On libev, libwebsockets re-arms its own timers (connection timeouts, kills set with
        // lws_set_timeout) only after servicing I/O; a timer body is not I/O, so wake it once
        // (a write to its pipe and another turn of the loop) unless the bodies were quiet.
        if servicesAfterTimers { lws_cancel_service(context) }
    }

    package static func nowMicros() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }

    static func from(context: OpaquePointer?) -> EventLoop? {
        guard let context, let user = lws_context_user(context) else { return nil }
        return Unmanaged<EventLoop>.fromOpaque(user).takeUnretainedValue()
    }

    static func from(wsi: OpaquePointer?) -> EventLoop? {
        guard let wsi else { return nil }
        return from(context: lws_get_context(wsi))
    }
}

func acceptReady(_ loop: UnsafeMutableRawPointer?, _ index: Int32) {
    guard let loop else { return }
    Unmanaged<EventLoop>.fromOpaque(loop).takeUnretainedValue().server?.acceptReady(Int(index))
}

func timerFired(_ loop: UnsafeMutableRawPointer?) {
    guard let loop else { return }
    Unmanaged<EventLoop>.fromOpaque(loop).takeUnretainedValue().fireTimers()
}

func lwsLogEmitter(_ level: Int32, _ line: UnsafePointer<CChar>?) {
    guard let line else { return }
    let text = String(cString: line).trimmingCharacters(in: .whitespacesAndNewlines)
    SystemLog.logger.log(.warning, "libwebsockets", ["detail": text])
}
