// Redis through hiredis: asynchronous connections on the event loop's libev loop, and a
// blocking one for what must be settled before a server starts.

import Foundation
import SwitchboardSupport
internal import CHiredis

/// A Redis reply.
public enum RedisValue: Sendable, Equatable {
    case string([UInt8])
    case status(String)
    case integer(Int64)
    case array([RedisValue])
    case null
    /// An error reply (`ERR …`, `WRONGTYPE …`): the command ran and was refused.
    case error(String)

    public var text: String? {
        switch self {
        case .string(let bytes): String(decoding: bytes, as: UTF8.self)
        case .status(let text): text
        default: nil
        }
    }

    public var integer: Int64? { if case .integer(let value) = self { value } else { nil } }
    public var array: [RedisValue]? { if case .array(let items) = self { items } else { nil } }

    init(_ reply: UnsafePointer<redisReply>) {
        let reply = reply.pointee
        switch reply.type {
        case sb_redis_reply_string: self = .string(reply.str.map { Array(UnsafeRawBufferPointer(start: $0, count: reply.len)) } ?? [])
        case sb_redis_reply_status: self = .status(reply.str.map { String(cString: $0) } ?? "")
        case sb_redis_reply_error: self = .error(reply.str.map { String(cString: $0) } ?? "")
        case sb_redis_reply_integer: self = .integer(Int64(reply.integer))
        case sb_redis_reply_array:
            var items: [RedisValue] = []
            items.reserveCapacity(reply.elements)
            for index in 0..<reply.elements {
                if let element = reply.element[index] { items.append(RedisValue(element)) } else { items.append(.null) }
            }
            self = .array(items)
        default: self = .null
        }
    }
}

/// Why a Redis command got no reply.
public struct RedisError: Error, Sendable, CustomStringConvertible {
    public var description: String
}

/// Where Redis is: `redis://[user:password@]host:port[/db]`.
public struct RedisURL: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var user: String?
    public var password: String?
    public var database: Int

    /// Parses the URL; throws, saying what a Redis URL is, when it is not one.
    public init(_ text: String) throws(RedisError) {
        guard let components = URLComponents(string: text), components.scheme == "redis",
            let host = components.host, !host.isEmpty
        else { throw RedisError(description: "expected redis://[user:password@]host:port[/db]") }
        self.host = host == "localhost" ? "127.0.0.1" : host
        port = components.port ?? 6379
        user = components.user.flatMap { $0.isEmpty ? nil : $0.removingPercentEncoding }
        password = components.password.flatMap { $0.removingPercentEncoding }
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        guard path.isEmpty || Int(path) != nil, (Int(path) ?? 0) >= 0 else {
            throw RedisError(description: "the path of a Redis URL is a database number (/0)")
        }
        database = Int(path) ?? 0
    }

    /// The URL without its password (for logs and errors).
    public var description: String {
        "redis://" + (user.map { $0 + (password == nil ? "" : ":…") + "@" } ?? (password == nil ? "" : ":…@")) + "\(host):\(port)/\(database)"
    }

    /// The commands a new connection sends first: `AUTH` and `SELECT` as the URL asks.
    var greeting: [[String]] {
        var commands: [[String]] = []
        if let password { commands.append(["AUTH"] + (user.map { [$0] } ?? []) + [password]) }
        if database != 0 { commands.append(["SELECT", String(database)]) }
        return commands
    }
}

/// A Lua script for Redis, known by its SHA-1: a connection sends its body once (`EVAL`, which
/// leaves it in Redis's script cache) and its name after that (`EVALSHA`), so that Redis reads
/// and hashes 40 bytes for it instead of the whole script each time it runs.
public struct RedisScript: Sendable {
    public let body: [UInt8]
    /// The SHA-1 of `body`, in lowercase hex (as `SCRIPT LOAD` answers it).
    public let sha: [UInt8]

    public init(_ source: String) {
        body = Array(source.utf8)
        sha = Array(Crypto.sha1(body).map { String(format: "%02x", $0) }.joined().utf8)
    }
}

/// One asynchronous connection to Redis on an event loop: commands are sent and their replies
/// come back on the loop's thread, in order, without blocking it (hiredis' asynchronous API on
/// the loop's libev). A lost connection is made again by itself after `reconnectDelay`; the
/// commands it had in flight fail (their callers decide), and `onConnected` runs again on each
/// new connection (a subscriber subscribes again there). Loop thread only, init included.
///
/// Safety of `@unchecked Sendable`: every stored property is touched on the loop's thread only.
public final class RedisConnection: @unchecked Sendable {
    public let url: RedisURL
    private let loop: EventLoop
    private var context: UnsafeMutablePointer<redisAsyncContext>?
    private var closed = false
    private var reconnecting = false
    public private(set) var isConnected = false
    /// Whether commands sent this turn wait for `flush` at its end.
    private var flushQueued = false
    /// How long after a lost connection the next attempt starts.
    public var reconnectDelay = Duration.milliseconds(250)
    /// How long Redis may leave the oldest command waiting with no reply coming meanwhile, or a
    /// connection attempt unanswered, before the connection counts as lost: it is closed (what
    /// waited fails) and made again. A Redis that stops answering without closing the
    /// connection (its host gone, a partition, a failover behind an address) is noticed so.
    /// Nil: never (TCP's keepalive alone notices a dead peer, in about half a minute).
    public var replyTimeout: Duration? {
        didSet { watch() }
    }
    /// Commands sent whose reply has not come, and when the last reply came (or the first of
    /// them was sent, if none came since).
    private var awaiting = 0
    private var progressAt = ContinuousClock.now
    private var connectingSince: ContinuousClock.Instant?
    private var watching = false
    /// Runs on every new connection (after `AUTH`/`SELECT` were sent), and `false` on every loss.
    public var onStateChange: ((Bool) -> Void)?
    /// Each `message` a subscribed connection receives: its channel and payload.
    public var onMessage: ((String, [UInt8]) -> Void)?
    /// Each channel Redis confirms a `SUBSCRIBE` of (in the order they were asked for): from
    /// then on, whatever is published on it reaches `onMessage`.
    public var onSubscribed: ((String) -> Void)?

    public init(url: RedisURL, loop: EventLoop) {
        self.url = url
        self.loop = loop
        loop.assertOnLoop()
        connect()
    }

    private func connect() {
        guard !closed else { return }
        guard let context = redisAsyncConnect(url.host, Int32(url.port)) else { return scheduleReconnect() }
        if sb_redis_failed(context) != 0 {
            redisAsyncFree(context)
            return scheduleReconnect()
        }
        sb_redis_set_data(context, Unmanaged.passUnretained(self).toOpaque())
        _ = redisEnableKeepAlive(&context.pointee.c)
        connectingSince = .now
        _ = sb_redis_attach(context, loop.evLoop)
        redisAsyncSetConnectCallback(context, redisConnected)
        redisAsyncSetDisconnectCallback(context, redisDisconnected)
        self.context = context
        for command in url.greeting { send(command) { _ in } }
    }

    fileprivate func connected(_ status: Int32) {
        guard status == 0 else {
            // hiredis frees the context after a failed connect.
            context = nil
            loadedScripts.removeAll()
            return scheduleReconnect()
        }
        isConnected = true
        connectingSince = nil
        if leavesOutIgnoredReplies {
            send(["CLIENT", "REPLY", "ON"]) { [weak self] result in
                guard let self, isConnected else { return }
                skipsReplies = (try? result.get()) == .status("OK")
            }
        }
        onStateChange?(true)
    }

    fileprivate func disconnected() {
        // hiredis frees the context after this callback.
        context = nil
        connectingSince = nil
        awaiting = 0
        loadedScripts.removeAll()
        let was = isConnected
        isConnected = false
        skipsReplies = false
        if was { onStateChange?(false) }
        scheduleReconnect()
    }

    private func scheduleReconnect() {
        guard !closed, !reconnecting else { return }
        reconnecting = true
        loop.schedule(after: reconnectDelay) { [weak self] in
            guard let self else { return }
            reconnecting = false
            if context == nil { connect() }
        }
    }

    /// Sends one command; `reply` hears its reply, or why there is none (no connection, or
    /// it was lost before the reply came), on the loop, exactly once.
    public func send(_ arguments: [String], reply: @escaping (Result<RedisValue, RedisError>) -> Void) {
        send(arguments.map { Array($0.utf8) }, reply: reply)
    }

    public func send(_ arguments: [[UInt8]], reply: @escaping (Result<RedisValue, RedisError>) -> Void) {
        guard let context else { return reply(.failure(RedisError(description: "not connected to \(url)"))) }
        if awaiting == 0 { progressAt = .now }
        awaiting += 1
        let box = Unmanaged.passRetained(ReplyBox { [weak self] result in
            if let self, awaiting > 0 {
                awaiting -= 1
                progressAt = .now
            }
            reply(result)
        }).toOpaque()
        let status = Self.withArgv(arguments) { argc, argv, lengths in
            redisAsyncCommandArgv(context, redisReplied, box, argc, argv, lengths)
        }
        if status != REDIS_OK {
            Unmanaged<ReplyBox>.fromOpaque(box).release()
            awaiting = max(0, awaiting - 1)
            reply(.failure(RedisError(description: "Redis refused the command: \(String(cString: sb_redis_error(context)))")))
        } else {
            flushAtTurnEnd()
        }
    }

    /// Sends `commands` as one transaction (`MULTI`, the commands, `EXEC`): Redis runs them
    /// one after the other with no other client's command between them. `reply` hears
    /// `EXEC`'s reply, as `send`'s does: an array of the commands' replies, or the error that
    /// ran none of them (`EXECABORT` when Redis refused one as it was queued, as at `maxmemory`).
    /// The replies to `MULTI` and to each queued command are read past. Cheaper for Redis than
    /// a script running the same commands (no interpreter, no copy of the arguments into it).
    public func transaction(_ commands: [[[UInt8]]], reply: @escaping (Result<RedisValue, RedisError>) -> Void) {
        guard let context else { return reply(.failure(RedisError(description: "not connected to \(url)"))) }
        for command in [[Self.multi]] + commands {
            _ = Self.withArgv(command) { argc, argv, lengths in redisAsyncCommandArgv(context, nil, nil, argc, argv, lengths) }
        }
        // hiredis refuses a command only once the connection is going: `EXEC` then too, and
        // `reply` hears so.
        send([Self.exec], reply: reply)
    }

    private static let multi = Array("MULTI".utf8), exec = Array("EXEC".utf8)

    /// Runs `script` with `keys` and `arguments`; `reply` hears its reply as `send`'s does. Sent
    /// in full the first time on this connection, by its SHA-1 after that (`RedisScript`). A
    /// Redis that has lost its scripts while the connection held (`SCRIPT FLUSH`, or a replica
    /// promoted behind a proxy) answers `NOSCRIPT`: then every script goes in full again, this
    /// one at once; it then runs after what was sent behind it.
    public func run(_ script: RedisScript, keys: [[UInt8]], arguments: [[UInt8]], reply: @escaping (Result<RedisValue, RedisError>) -> Void) {
        let named = context != nil && loadedScripts.contains(script.sha)
        if context != nil { loadedScripts.insert(script.sha) }
        let head = named ? [Self.evalsha, script.sha] : [Self.eval, script.body]
        send(head + [Array(String(keys.count).utf8)] + keys + arguments) { [weak self] result in
            if named, case .success(.error(let message)) = result, message.hasPrefix("NOSCRIPT"), let self {
                loadedScripts.removeAll()
                return run(script, keys: keys, arguments: arguments, reply: reply)
            }
            reply(result)
        }
    }

    public func run(_ script: RedisScript, keys: [String], arguments: [String], reply: @escaping (Result<RedisValue, RedisError>) -> Void) {
        run(script, keys: keys.map { Array($0.utf8) }, arguments: arguments.map { Array($0.utf8) }, reply: reply)
    }

    /// Runs `script` with no callback for its reply: sent in full each time, since a `NOSCRIPT`
    /// nobody reads would lose it.
    @discardableResult
    public func runIgnoringReply(_ script: RedisScript, keys: [String], arguments: [String]) -> Bool {
        sendIgnoringReply([Self.eval, script.body, Array(String(keys.count).utf8)] + (keys + arguments).map { Array($0.utf8) })
    }

    /// The scripts Redis has from this connection (their SHA-1s): each was sent in full once.
    /// Emptied when the connection goes (a new one may reach a Redis that restarted).
    private var loadedScripts: Set<[UInt8]> = []
    private static let eval = Array("EVAL".utf8), evalsha = Array("EVALSHA".utf8)

    /// Writes what this turn's commands left in hiredis' buffer when the turn ends, in one
    /// system call, instead of waiting a turn for the socket to be reported writable (and
    /// asking epoll to watch it, then not to): a relayed signal's publish cost two `epoll_ctl`
    /// calls and a turn of the loop more. Before the connection is up, hiredis writes when it is.
    private func flushAtTurnEnd() {
        guard !flushQueued else { return }
        flushQueued = true
        loop.atTurnEnd { [weak self] in
            guard let self else { return }
            flushQueued = false
            if isConnected, let context { redisAsyncHandleWrite(context) }
        }
    }

    /// Whether Redis is to be asked to leave out the replies of what `sendIgnoringReply` sends
    /// (`CLIENT REPLY SKIP`, Redis 3.2 and later). Each new connection first checks that Redis
    /// takes `CLIENT REPLY` (a `CLIENT REPLY ON`, answered `OK` or refused, as by an ACL user
    /// without `CLIENT` or a proxy): until that answer, and for good where it is refused,
    /// ignored replies come and are read past. Checked again on every reconnect, since the
    /// Redis behind an address can change.
    public var leavesOutIgnoredReplies = false
    /// Whether this connection's Redis said it takes `CLIENT REPLY`.
    public private(set) var skipsReplies = false

    /// Sends one command whose reply nobody reads (a `PUBLISH` on the relay's path): no callback
    /// is kept for it, and a command that cannot be sent is dropped. When `skipsReplies`, Redis
    /// is asked not to answer it (`CLIENT REPLY SKIP` before it, the two written together):
    /// no reply for Redis to write nor for this node to read, a system call fewer on each side
    /// for a signal passed on. Returns whether it went out to hiredis.
    @discardableResult
    public func sendIgnoringReply(_ arguments: [[UInt8]]) -> Bool {
        guard let context else { return false }
        let skips = skipsReplies
        let sent = Self.withArgv(arguments) { argc, argv, lengths in
            skips ? sb_redis_append_skipping_reply(context, argc, argv, lengths) : redisAsyncCommandArgv(context, nil, nil, argc, argv, lengths)
        } == REDIS_OK
        if sent { flushAtTurnEnd() }
        return sent
    }

    /// `SUBSCRIBE channel` on this connection (which then takes no other command but
    /// subscriptions); messages reach `onMessage`.
    public func subscribe(_ channels: [String]) {
        guard let context, !channels.isEmpty else { return }
        let self_ = Unmanaged.passUnretained(self).toOpaque()
        _ = Self.withArgv([Array("SUBSCRIBE".utf8)] + channels.map { Array($0.utf8) }) { argc, argv, lengths in
            redisAsyncCommandArgv(context, redisSubscribed, self_, argc, argv, lengths)
        }
    }

    public func unsubscribe(_ channels: [String]) {
        guard let context, !channels.isEmpty else { return }
        _ = Self.withArgv([Array("UNSUBSCRIBE".utf8)] + channels.map { Array($0.utf8) }) { argc, argv, lengths in
            redisAsyncCommandArgv(context, nil, nil, argc, argv, lengths)
        }
    }

    /// A reply on a subscribed connection: a `message` (kind, channel, payload) goes to
    /// `onMessage`, read in place (no `RedisValue` tree: this is every relayed signal's path
    /// into a node); a `SUBSCRIBE`'s confirmation goes to `onSubscribed`; an `UNSUBSCRIBE`'s is
    /// dropped.
    fileprivate func subscriptionReply(_ reply: UnsafePointer<redisReply>) {
        let reply = reply.pointee
        guard reply.type == sb_redis_reply_array, reply.elements == 3, let kind = reply.element[0]?.pointee,
            let channel = reply.element[1]?.pointee, let payload = reply.element[2]?.pointee,
            kind.type == sb_redis_reply_string, channel.type == sb_redis_reply_string, let kindText = kind.str
        else { return }
        let channelName = { String(decoding: UnsafeRawBufferPointer(start: channel.str, count: channel.len), as: UTF8.self) }
        if kind.len == 7, memcmp(kindText, "message", 7) == 0, payload.type == sb_redis_reply_string {
            onMessage?(channelName(), Array(UnsafeRawBufferPointer(start: payload.str, count: payload.len)))
        } else if kind.len == 9, memcmp(kindText, "subscribe", 9) == 0, let onSubscribed {
            onSubscribed(channelName())
        }
    }

    /// Checks, a few times per `replyTimeout`, that Redis answers (`replyTimeout`).
    private func watch() {
        guard let timeout = replyTimeout, !watching, !closed else { return }
        watching = true
        loop.schedule(after: max(timeout / 4, .milliseconds(20))) { [weak self] in
            guard let self else { return }
            watching = false
            guard let timeout = replyTimeout, !closed else { return }
            if let context {
                let now = ContinuousClock.now
                let silent = awaiting > 0 && now - progressAt > timeout
                let stuck = connectingSince.map { now - $0 > timeout } ?? false
                if silent || stuck { abandon(context) }
            }
            watch()
        }
    }

    /// Gives up on a connection Redis does not answer on: closed at once, what waited failing,
    /// and made again, as if Redis had closed it.
    private func abandon(_ context: UnsafeMutablePointer<redisAsyncContext>) {
        self.context = nil
        sb_redis_set_data(context, nil)  // its disconnect is this one's, below
        redisAsyncFree(context)
        disconnected()
    }

    /// Closes the connection for good (no reconnect). `graceful`: once the commands sent have
    /// their replies (while the loop runs); else at once, commands in flight failing. Not from
    /// inside one of its own callbacks.
    public func close(graceful: Bool = false) {
        closed = true
        guard let context else { return }
        self.context = nil
        loadedScripts.removeAll()
        isConnected = false
        sb_redis_set_data(context, nil)
        if graceful { redisAsyncDisconnect(context) } else { redisAsyncFree(context) }
    }

    static func withArgv<T>(_ arguments: [[UInt8]], _ body: (Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>, UnsafePointer<Int>) -> T) -> T {
        var pointers: [UnsafePointer<CChar>?] = []
        var buffers: [UnsafeMutablePointer<CChar>] = []
        var lengths: [Int] = []
        for argument in arguments {
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, argument.count))
            argument.withUnsafeBufferPointer { bytes in
                if let base = bytes.baseAddress {
                    UnsafeMutableRawPointer(buffer).copyMemory(from: base, byteCount: bytes.count)
                }
            }
            buffers.append(buffer)
            pointers.append(UnsafePointer(buffer))
            lengths.append(argument.count)
        }
        defer { buffers.forEach { $0.deallocate() } }
        return pointers.withUnsafeMutableBufferPointer { argv in
            lengths.withUnsafeBufferPointer { body(Int32(arguments.count), argv.baseAddress!, $0.baseAddress!) }
        }
    }

    // MARK: Blocking

    /// Runs `commands` in order on a connection of its own and returns their replies, blocking
    /// the caller up to `timeout` per step: for what must be known before a server starts.
    public static func blocking(_ url: RedisURL, _ commands: [[String]], timeout: Duration = .seconds(3)) throws(RedisError) -> [RedisValue] {
        guard let context = sb_redis_connect_blocking(url.host, Int32(url.port), Int(timeout.milliseconds)) else {
            throw RedisError(description: "cannot reach Redis at \(url)")
        }
        defer { redisFree(context) }
        if sb_redis_blocking_failed(context) != 0 {
            throw RedisError(description: "cannot reach Redis at \(url): \(String(cString: sb_redis_blocking_error(context)))")
        }
        var replies: [RedisValue] = []
        for command in url.greeting + commands {
            let raw = withArgv(command.map { Array($0.utf8) }) { argc, argv, lengths in redisCommandArgv(context, argc, argv, lengths) }
            guard let raw else {
                throw RedisError(description: "Redis at \(url) did not answer: \(String(cString: sb_redis_blocking_error(context)))")
            }
            let value = RedisValue(raw.assumingMemoryBound(to: redisReply.self))
            freeReplyObject(raw)
            if case .error(let message) = value, command.first == "AUTH" || command.first == "SELECT" {
                throw RedisError(description: "Redis at \(url) refused \(command[0]): \(message)")
            }
            replies.append(value)
        }
        return Array(replies.suffix(commands.count))
    }
}

/// A command's reply callback, carried through hiredis' private data.
private final class ReplyBox {
    let reply: (Result<RedisValue, RedisError>) -> Void
    init(_ reply: @escaping (Result<RedisValue, RedisError>) -> Void) { self.reply = reply }
}

private func redisReplied(_ context: UnsafeMutablePointer<redisAsyncContext>?, _ reply: UnsafeMutableRawPointer?, _ data: UnsafeMutableRawPointer?) {
    guard let data else { return }
    let box = Unmanaged<ReplyBox>.fromOpaque(data).takeRetainedValue()
    if let reply {
        box.reply(.success(RedisValue(reply.assumingMemoryBound(to: redisReply.self))))
    } else {
        box.reply(.failure(RedisError(description: "the connection to Redis was lost before the reply")))
    }
}

private func redisSubscribed(_ context: UnsafeMutablePointer<redisAsyncContext>?, _ reply: UnsafeMutableRawPointer?, _ data: UnsafeMutableRawPointer?) {
    guard let reply, let context, sb_redis_data(context) != nil, let data else { return }
    Unmanaged<RedisConnection>.fromOpaque(data).takeUnretainedValue().subscriptionReply(reply.assumingMemoryBound(to: redisReply.self))
}

private func redisConnected(_ context: UnsafePointer<redisAsyncContext>?, _ status: Int32) {
    guard let context, let data = sb_redis_data(context) else { return }
    Unmanaged<RedisConnection>.fromOpaque(data).takeUnretainedValue().connected(status)
}

private func redisDisconnected(_ context: UnsafePointer<redisAsyncContext>?, _ status: Int32) {
    guard let context, let data = sb_redis_data(context) else { return }
    Unmanaged<RedisConnection>.fromOpaque(data).takeUnretainedValue().disconnected()
}
