import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

/// Everything `switchboard serve` can be told. Defaults are safe for a single node on loopback.
///
/// Each setting has one name used three ways: a JSON key in the `--config` file (`max_message_bytes`),
/// an environment variable (`SWITCHBOARD_MAX_MESSAGE_BYTES`) and a flag (`--max-message-bytes`).
/// `ServerConfiguration.settings` lists them; docs/configuration.md documents each.
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    /// Where the SQLite file lives.
    public var dataDirectory = "./data"
    /// The PostgreSQL database of the store (`postgres://user@host:port/db?…`); nil: SQLite
    /// in `dataDirectory`.
    public var storeURL: String?
    /// Redis of a cluster (`redis://[user:password@]host:port[/db]`); nil: one node.
    public var clusterRedisURL: String?
    /// This node's name in a cluster, unique among live nodes; nil: the host name and port.
    public var nodeID: String?
    /// The folder of the web client's static files.
    public var webRoot = "./web"
    public var logLevel = Logger.Level.info
    /// Lines one message may log per 10 s before the rest are counted and summarized.
    public var logRepeatLimit = RepeatLimiter.defaultLimit
    /// Serve the `/v1/echo` WebSocket endpoint (for conformance tests only).
    public var enableEcho = false
    /// The URL printed for people to open (defaults to http://host:port/).
    public var publicURL: String?
    /// Serve `POST /v1/dev/tokens`, which issues tokens without the app secret. Development only.
    public var devTokens = false
    /// When set, `GET /metrics` answers only `Authorization: Bearer <this>` (401 otherwise).
    /// Never logged.
    public var metricsToken: String?
    /// Web origins whose pages may call the REST API (CORS); `*` for any. Empty: none.
    public var corsOrigins: [String] = []
    /// TURN and STUN servers handed to clients.
    public var turnURLs: [String] = []
    public var stunURLs: [String] = []
    /// coturn's `static-auth-secret`. Never logged.
    public var turnSecret: String?
    public var turnTTLSeconds = 3600
    /// Send APNs requests here instead of Apple's hosts (the local sandbox).
    public var apnsURL: String?
    /// A CA file to trust for APNs (the sandbox's certificate).
    public var apnsCAFile: String?
    public var limits = Limits()

    /// Named limits; docs/configuration.md gives each one's meaning.
    public struct Limits: Sendable {
        public var maxHeaderBytes = 16 * 1024
        public var maxBodyBytes = 1024 * 1024
        public var maxMessageBytes = 64 * 1024
        public var echoMaxMessageBytes = 16 * 1024 * 1024 + 1024
        public var sendQueueBytes = 1024 * 1024
        public var pingIntervalSeconds = 20
        public var idleTimeoutSeconds = 45
        public var httpTimeoutSeconds = 10
        public var maxTokenBytes = 8 * 1024
        public var tokenLeewaySeconds = 30
        public var maxTokenTTLSeconds = 7 * 24 * 3600
        public var shutdownGraceSeconds = 5
        public var maxRoomParticipants = 8
        public var emptyRoomTimeoutSeconds = 300
        public var maxRoomsPerPeer = 16
        public var maxRoomsPerApp = 10_000
        public var maxDataBytes = 16 * 1024
        public var messagesPerSecond = 50
        public var messageBurst = 200
        public var resumeGraceSeconds = 20
        public var resumeBufferEvents = 256
        /// Bytes of recent events kept per session for replay (never more than a connection's
        /// send queue takes at once).
        public var resumeBufferBytes = 512 * 1024
        /// How long before a session's token expires the server sends `session.expiring`.
        public var tokenExpiryWarningSeconds = 60
        /// How often the apps are read again (other processes' changes), and how long an
        /// unknown API key is remembered as unknown.
        public var appRefreshSeconds = 10
        public var ringTimeoutSeconds = 45
        public var maxCallees = 16
        /// Devices one user may register (each is rung for every call to them).
        public var maxDevicesPerUser = 20
        public var apnsRequestTimeoutSeconds = 10
        public var storeBacklogWrites = 10_000
        /// Store connections: one writes, the others read.
        public var storePoolSize = 4
        public var storeStatementTimeoutMillis = 5_000
        public var storeCommitDelayMillis = 5
        public var maxReceiveBytesPerSecond = 1024 * 1024
        public var connectsPerIdentityPerMinute = 60
        /// Open connections (HTTP and WebSocket) past which new ones are refused at once.
        /// 0: derived from the descriptor limit (`DescriptorLimit.connections`).
        public var maxConnections = 0
        public var invitesPerMinute = 30
        public var invitesPerPairPerMinute = 10
        /// Calls being set up at once (their reads in the store's queue); past it new ones are
        /// refused at once instead of queueing without bound.
        public var maxPendingCallSetups = 256
        /// Ordinary rooms one identity may create per minute (REST, or a join that creates).
        public var roomsPerIdentityPerMinute = 30
        /// Longest empty timeout a user token without the admin grant may give a room.
        public var maxUserRoomEmptyTimeoutSeconds = 600
        /// REST writes (devices, block lists) one user may make per minute.
        public var writesPerUserPerMinute = 60
        /// An answered call none of whose participants has a session this long ends.
        public var callUnattendedSeconds = 60
        /// How long a server's claim on its live calls lasts unless renewed (every third of it):
        /// a call whose owner stopped renewing is ended by another server sharing the store.
        public var callLeaseSeconds = 4
        /// A node that stopped renewing its presence in the cluster (it renews every third of
        /// this) is gone after this long: its sessions' entries expire and its id is free.
        public var nodeTimeoutSeconds = 10
        /// How long a node waits for the node that owns a call to answer an action it passed on.
        public var clusterForwardTimeoutMillis = 2000
        public var clusterRedisTimeoutMillis = 3000
        /// How long Redis keeps the user events published (for a node that lost its subscription
        /// to catch up on), and a node the events it could not publish (for when Redis is back).
        public var clusterEventReplaySeconds = 30
        /// A phone without CallKit, rung by an alert push, gets the alert again this often while
        /// the call rings for it (0: once).
        public var alertRingRepeatSeconds = 20
        /// Any call ends this long after it started.
        public var maxCallDurationSeconds = 86_400
        /// Request bodies buffered at once across every connection.
        public var maxBufferedBodyBytes = 64 * 1024 * 1024
        public init() {}
    }

    public init() {}

    /// One setting: its name and how to apply a textual value.
    public struct Setting: Sendable {
        public let name: String
        public let summary: String
        /// A boolean: a bare `--flag` on the command line, true/false elsewhere.
        public var isFlag = false
        public let apply: @Sendable (inout ServerConfiguration, String) throws -> Void

        init(name: String, summary: String, isFlag: Bool = false,
             apply: @escaping @Sendable (inout ServerConfiguration, String) throws -> Void) {
            self.name = name
            self.summary = summary
            self.isFlag = isFlag
            self.apply = apply
        }

        /// `--max-message-bytes`
        public var flag: String { "--" + name.replacingOccurrences(of: "_", with: "-") }
        /// `SWITCHBOARD_MAX_MESSAGE_BYTES`
        public var environmentVariable: String { "SWITCHBOARD_" + name.uppercased() }
    }

    /// A setting's value could not be used.
    /// Settings that cannot go together, as a sentence.
    public struct SettingsConflict: Error, CustomStringConvertible {
        public var description: String
    }

    public struct InvalidSetting: Error, CustomStringConvertible {
        public var name: String
        public var value: String
        public var expected: String
        public var description: String { "invalid value '\(value)' for \(name): expected \(expected)" }
    }

    private static func int(
        _ name: String, _ summary: String, _ range: ClosedRange<Int>, _ path: WritableKeyPath<ServerConfiguration, Int> & Sendable
    ) -> Setting {
        Setting(name: name, summary: summary) { config, text in
            guard let value = Int(text), range.contains(value) else {
                throw InvalidSetting(name: name, value: text, expected: "an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            config[keyPath: path] = value
        }
    }

    private static func string(_ name: String, _ summary: String, _ path: WritableKeyPath<ServerConfiguration, String> & Sendable) -> Setting {
        Setting(name: name, summary: summary) { config, text in
            guard !text.isEmpty else { throw InvalidSetting(name: name, value: text, expected: "a non-empty string") }
            config[keyPath: path] = text
        }
    }

    /// Every setting, in documentation order.
    public static let settings: [Setting] = [
        string("host", "Address to listen on.", \.host),
        int("port", "TCP port to listen on (0 picks a free one).", 0...65535, \.port),
        string("data_dir", "Directory of the SQLite store.", \.dataDirectory),
        Setting(name: "store_url", summary: "The store's PostgreSQL database (postgres://user@host:port/db?...); none: SQLite in data_dir.") {
            config, text in
            guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") else {
                throw InvalidSetting(name: "store_url", value: Store.withoutPassword(text), expected: "a postgres:// URL")
            }
            config.storeURL = text
        },
        Setting(
            name: "cluster_redis_url", summary: "Redis of a cluster of nodes (redis://[user:password@]host:port[/db]); none: one node. Needs store_url."
        ) { config, text in
            guard !text.isEmpty else { return config.clusterRedisURL = nil }
            do throws(RedisError) { _ = try RedisURL(text) } catch {
                throw InvalidSetting(name: "cluster_redis_url", value: "…", expected: error.description)
            }
            config.clusterRedisURL = text
        },
        Setting(name: "node_id", summary: "This node's name in a cluster, unique among live nodes; default: host name and port.") { config, text in
            guard (1...64).contains(text.utf8.count), text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.:".contains($0)) }) else {
                throw InvalidSetting(name: "node_id", value: String(text.prefix(80)), expected: "1-64 letters, digits, '-', '_', '.' or ':'")
            }
            config.nodeID = text
        },
        string("web_root", "Directory of the web client's static files.", \.webRoot),
        Setting(name: "log_level", summary: "Lowest level logged: debug, info, warn, error.") { config, text in
            guard let level = Logger.Level(name: text) else {
                throw InvalidSetting(name: "log_level", value: text, expected: "debug, info, warn or error")
            }
            config.logLevel = level
        },
        Setting(name: "log_repeat_limit", summary: "Lines one message may log per 10 s; the rest are counted in one summary line (0: no limit).") {
            config, text in
            guard let value = Int(text), (0...1_000_000).contains(value) else {
                throw InvalidSetting(name: "log_repeat_limit", value: text, expected: "an integer in 0...1000000")
            }
            config.logRepeatLimit = value
        },
        Setting(name: "enable_echo", summary: "Serve the /v1/echo WebSocket endpoint (conformance tests).", isFlag: true) { config, text in
            config.enableEcho = try parseBool("enable_echo", text)
        },
        Setting(name: "public_url", summary: "URL printed for people to open; defaults to http://host:port/.") { config, text in
            config.publicURL = text
        },
        int("max_header_bytes", "Largest HTTP request head.", 1024...65535, \.limits.maxHeaderBytes),
        int("max_body_bytes", "Largest HTTP request body.", 1024...(64 << 20), \.limits.maxBodyBytes),
        int("max_message_bytes", "Largest WebSocket message on /v1/ws; larger closes with 1009.", 1024...(16 << 20), \.limits.maxMessageBytes),
        int("echo_max_message_bytes", "Largest WebSocket message on /v1/echo.", 1024...(64 << 20), \.limits.echoMaxMessageBytes),
        int("send_queue_bytes", "Outgoing bytes queued per WebSocket before it is dropped as a slow consumer.", 4096...(256 << 20), \.limits.sendQueueBytes),
        int("ping_interval_seconds", "Silence after which the server pings a WebSocket.", 1...3600, \.limits.pingIntervalSeconds),
        int("idle_timeout_seconds", "Silence (no frame, not even a pong) after which a WebSocket is closed.", 2...7200, \.limits.idleTimeoutSeconds),
        int("http_timeout_seconds", "Time allowed for an HTTP request to arrive in full.", 1...600, \.limits.httpTimeoutSeconds),
        int(
            "max_connections", "Open connections past which new ones get 503 and are closed at once; 0: the descriptor limit less headroom.",
            0...10_000_000, \.limits.maxConnections),
        int("max_token_bytes", "Longest access token accepted.", 256...65536, \.limits.maxTokenBytes),
        int("token_leeway_seconds", "Clock skew tolerated on a token's exp and nbf.", 0...600, \.limits.tokenLeewaySeconds),
        int("max_token_ttl_seconds", "Longest lifetime of a token issued by POST /v1/tokens.", 60...(30 * 86400), \.limits.maxTokenTTLSeconds),
        int("shutdown_grace_seconds", "Time given to WebSockets to close on shutdown.", 0...300, \.limits.shutdownGraceSeconds),
        int("max_room_participants", "Default participant limit of a room (mesh).", 2...256, \.limits.maxRoomParticipants),
        int("empty_room_timeout_seconds", "An empty room is closed after this long.", 1...86400, \.limits.emptyRoomTimeoutSeconds),
        int("max_rooms_per_peer", "Rooms one peer may be in at once.", 1...1024, \.limits.maxRoomsPerPeer),
        int("max_rooms_per_app", "Rooms an app may have at once.", 1...10_000_000, \.limits.maxRoomsPerApp),
        int("max_data_bytes", "Largest data message or metadata (encoded JSON).", 16...(1 << 20), \.limits.maxDataBytes),
        int("messages_per_second", "Sustained messages per second per connection.", 1...100_000, \.limits.messagesPerSecond),
        int("message_burst", "Messages a connection may send at once above the rate.", 1...1_000_000, \.limits.messageBurst),
        int("resume_grace_seconds", "A dropped session keeps its peer id and rooms this long.", 0...3600, \.limits.resumeGraceSeconds),
        int("resume_buffer_events", "Recent events kept per session for replay on resume.", 1...100_000, \.limits.resumeBufferEvents),
        int(
            "resume_buffer_bytes", "Bytes of recent events kept per session for replay (at most send_queue_bytes less 16 KiB).",
            1024...(256 << 20), \.limits.resumeBufferBytes),
        int(
            "token_expiry_warning_seconds", "How long before a session's token expires it gets session.expiring.", 0...86400,
            \.limits.tokenExpiryWarningSeconds),
        int(
            "app_refresh_seconds", "How often the apps are read again, and how long an unknown API key stays unknown.", 1...3600,
            \.limits.appRefreshSeconds),
        Setting(name: "dev_tokens", summary: "Serve POST /v1/dev/tokens (tokens without the secret; development only).", isFlag: true) { config, text in
            config.devTokens = try parseBool("dev_tokens", text)
        },
        Setting(name: "cors_origins", summary: "Comma-separated web origins whose pages may call the REST API (https://app.example.com; * for any).") {
            config, text in
            let origins = list(text)
            for origin in origins where origin != "*" && !(origin.hasPrefix("https://") || origin.hasPrefix("http://")) {
                throw InvalidSetting(name: "cors_origins", value: origin, expected: "origins like https://app.example.com, or *")
            }
            config.corsOrigins = origins
        },
        Setting(name: "turn_urls", summary: "Comma-separated TURN URLs (turn:127.0.0.1:3478?transport=udp).") { config, text in
            config.turnURLs = list(text)
        },
        Setting(name: "stun_urls", summary: "Comma-separated STUN URLs handed to clients.") { config, text in
            config.stunURLs = list(text)
        },
        Setting(name: "metrics_token", summary: "A secret /metrics asks for as Authorization: Bearer (none: /metrics is public; never logged).") {
            config, text in
            guard text.isEmpty || text.utf8.count >= 16 else {
                throw InvalidSetting(name: "metrics_token", value: "…", expected: "at least 16 characters")
            }
            config.metricsToken = text.isEmpty ? nil : text
        },
        Setting(name: "turn_secret", summary: "coturn's static-auth-secret for TURN credentials (never logged).") { config, text in
            config.turnSecret = text.isEmpty ? nil : text
        },
        int("turn_ttl_seconds", "Lifetime of TURN credentials.", 1...(7 * 86400), \.turnTTLSeconds),
        Setting(name: "apns_url", summary: "Send pushes to this APNs host instead of Apple's (the local sandbox).") { config, text in
            config.apnsURL = text.isEmpty ? nil : text
        },
        Setting(name: "apns_ca_file", summary: "A PEM certificate to trust for APNs (the sandbox's).") { config, text in
            config.apnsCAFile = text.isEmpty ? nil : text
        },
        int("ring_timeout_seconds", "How long a call rings before it is missed (5-180; per call too).", 5...180, \.limits.ringTimeoutSeconds),
        int("max_callees", "Most users one call may ring.", 1...256, \.limits.maxCallees),
        int("max_devices_per_user", "Devices one user may register.", 1...1000, \.limits.maxDevicesPerUser),
        int(
            "max_receive_bytes_per_second", "Bytes per second one WebSocket may send, control frames included (bursts of 4 s); 0: no limit.",
            0...(1 << 30), \.limits.maxReceiveBytesPerSecond),
        int(
            "connects_per_identity_per_minute", "WebSocket connects one identity may make per minute (bursts of a minute's worth).",
            1...1_000_000, \.limits.connectsPerIdentityPerMinute),
        int("store_backlog_writes", "Writes kept in memory while the disk is full or read-only.", 100...10_000_000, \.limits.storeBacklogWrites),
        int("store_pool_size", "Connections to the store: one writes, the others read.", 2...64, \.limits.storePoolSize),
        int(
            "store_statement_timeout_ms", "How long one store statement may run or wait for a lock before it fails.", 100...600_000,
            \.limits.storeStatementTimeoutMillis),
        int(
            "store_commit_delay_ms", "How long a write nobody waits for (a trace entry, a call's later state) may wait to join the next commit.",
            0...1_000, \.limits.storeCommitDelayMillis),
        int("apns_request_timeout_seconds", "Time APNs has to answer one push before it counts as failed.", 1...60, \.limits.apnsRequestTimeoutSeconds),
        int("invites_per_minute", "Calls one user may start per minute.", 1...10_000, \.limits.invitesPerMinute),
        int("invites_per_pair_per_minute", "Calls one user may make to the same user per minute.", 1...10_000, \.limits.invitesPerPairPerMinute),
        int("max_pending_call_setups", "Calls being set up at once, waiting for the store; past it 503.", 1...100_000, \.limits.maxPendingCallSetups),
        int(
            "rooms_per_identity_per_minute", "Ordinary rooms one identity may create per minute (POST /v1/rooms, or a join that creates one).",
            1...100_000, \.limits.roomsPerIdentityPerMinute),
        int(
            "max_user_room_empty_timeout_seconds", "Longest empty_timeout_seconds a user token without the admin grant may give a room.",
            1...86400, \.limits.maxUserRoomEmptyTimeoutSeconds),
        int(
            "writes_per_user_per_minute", "REST writes (device and block-list changes) one user may make per minute.", 1...100_000,
            \.limits.writesPerUserPerMinute),
        int(
            "call_unattended_seconds", "An answered call none of whose participants has a session (connected or resuming) this long ends.",
            5...86400, \.limits.callUnattendedSeconds),
        int(
            "call_lease_seconds", "How long a server's claim on its live calls lasts unless renewed (every third of it); then another server ends them.",
            3...300, \.limits.callLeaseSeconds),
        int(
            "node_timeout_seconds", "A cluster node that stopped renewing its presence (every third of this) is gone after this long.",
            3...300, \.limits.nodeTimeoutSeconds),
        int(
            "alert_ring_repeat_seconds", "A phone without CallKit, rung by an alert push, gets it again this often while the call rings (0: once).",
            0...300, \.limits.alertRingRepeatSeconds),
        int(
            "cluster_forward_timeout_ms", "How long a node waits for the node owning a call to answer an action passed on to it; then 503.",
            100...60_000, \.limits.clusterForwardTimeoutMillis),
        int(
            "cluster_redis_timeout_ms", "How long a node waits for Redis to answer before it takes the connection as lost and makes it again.",
            100...60_000, \.limits.clusterRedisTimeoutMillis),
        int(
            "cluster_event_replay_seconds",
            "How long Redis keeps user events for a node that lost its subscription, and a node those it could not publish.", 1...3600,
            \.limits.clusterEventReplaySeconds),
        int("max_call_duration_seconds", "Any call ends this long after it started.", 60...(7 * 86400), \.limits.maxCallDurationSeconds),
        int(
            "max_buffered_body_bytes", "Request bodies held at once across all connections, before credentials are checked; past it 503.",
            1 << 20...(4 << 30), \.limits.maxBufferedBodyBytes),
    ]

    private static func list(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    private static func parseBool(_ name: String, _ text: String) throws -> Bool {
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw InvalidSetting(name: name, value: text, expected: "true or false")
        }
    }

    /// Settings that each hold but do not fit together: a request head must be able to carry
    /// the longest token the server accepts (in the query of `/v1/ws`, or a header), and a
    /// session's replay must fit a connection's send queue.
    public func validate() throws {
        let head = limits.maxHeaderBytes, token = limits.maxTokenBytes
        guard head >= token + 1024 else {
            throw InvalidSetting(
                name: "max_header_bytes", value: String(head),
                expected: "at least max_token_bytes + 1024 (\(token + 1024)), so that a request head can carry the longest token accepted")
        }
        if clusterRedisURL != nil, storeURL == nil {
            throw SettingsConflict(
                description: "cluster_redis_url needs store_url too: the nodes of a cluster share one PostgreSQL store (an SQLite file is one node's)")
        }
    }

    /// This node's id: `node_id`, or the host name and port.
    var effectiveNodeID: String {
        nodeID ?? (ProcessInfo.processInfo.hostName.prefix(48) + ":" + String(port))
    }

    /// The TURN settings as a service.
    var turnService: TurnService {
        TurnService(turnURLs: turnURLs, stunURLs: stunURLs, secret: turnSecret, ttlSeconds: turnTTLSeconds)
    }

    /// Each setting's default, as text, by name (for help and docs).
    public static var defaultValues: [String: String] {
        let defaults = ServerConfiguration()
        let limits = defaults.limits
        return [
            "host": defaults.host, "port": String(defaults.port), "data_dir": defaults.dataDirectory, "store_url": "none",
            "web_root": defaults.webRoot, "log_level": defaults.logLevel.name, "log_repeat_limit": String(defaults.logRepeatLimit),
            "enable_echo": "false",
            "public_url": "http://host:port/",
            "max_header_bytes": String(limits.maxHeaderBytes), "max_body_bytes": String(limits.maxBodyBytes),
            "max_message_bytes": String(limits.maxMessageBytes),
            "echo_max_message_bytes": String(limits.echoMaxMessageBytes),
            "send_queue_bytes": String(limits.sendQueueBytes),
            "ping_interval_seconds": String(limits.pingIntervalSeconds),
            "idle_timeout_seconds": String(limits.idleTimeoutSeconds),
            "http_timeout_seconds": String(limits.httpTimeoutSeconds),
            "max_connections": "derived",
            "max_token_bytes": String(limits.maxTokenBytes),
            "token_leeway_seconds": String(limits.tokenLeewaySeconds),
            "max_token_ttl_seconds": String(limits.maxTokenTTLSeconds),
            "shutdown_grace_seconds": String(limits.shutdownGraceSeconds),
            "max_room_participants": String(limits.maxRoomParticipants),
            "empty_room_timeout_seconds": String(limits.emptyRoomTimeoutSeconds),
            "max_rooms_per_peer": String(limits.maxRoomsPerPeer),
            "max_rooms_per_app": String(limits.maxRoomsPerApp),
            "max_data_bytes": String(limits.maxDataBytes),
            "messages_per_second": String(limits.messagesPerSecond),
            "message_burst": String(limits.messageBurst),
            "resume_grace_seconds": String(limits.resumeGraceSeconds),
            "resume_buffer_events": String(limits.resumeBufferEvents),
            "resume_buffer_bytes": String(limits.resumeBufferBytes),
            "token_expiry_warning_seconds": String(limits.tokenExpiryWarningSeconds),
            "app_refresh_seconds": String(limits.appRefreshSeconds),
            "dev_tokens": "false", "cors_origins": "none", "metrics_token": "none", "turn_urls": "none", "stun_urls": "none", "turn_secret": "none",
            "turn_ttl_seconds": String(defaults.turnTTLSeconds),
            "apns_url": "Apple's hosts", "apns_ca_file": "none",
            "ring_timeout_seconds": String(limits.ringTimeoutSeconds), "max_callees": String(limits.maxCallees),
            "max_devices_per_user": String(limits.maxDevicesPerUser),
            "apns_request_timeout_seconds": String(limits.apnsRequestTimeoutSeconds),
            "store_backlog_writes": String(limits.storeBacklogWrites),
            "store_pool_size": String(limits.storePoolSize),
            "store_statement_timeout_ms": String(limits.storeStatementTimeoutMillis),
            "store_commit_delay_ms": String(limits.storeCommitDelayMillis),
            "max_receive_bytes_per_second": String(limits.maxReceiveBytesPerSecond),
            "connects_per_identity_per_minute": String(limits.connectsPerIdentityPerMinute),
            "invites_per_minute": String(limits.invitesPerMinute),
            "max_pending_call_setups": String(limits.maxPendingCallSetups),
            "invites_per_pair_per_minute": String(limits.invitesPerPairPerMinute),
            "rooms_per_identity_per_minute": String(limits.roomsPerIdentityPerMinute),
            "max_user_room_empty_timeout_seconds": String(limits.maxUserRoomEmptyTimeoutSeconds),
            "writes_per_user_per_minute": String(limits.writesPerUserPerMinute),
            "call_unattended_seconds": String(limits.callUnattendedSeconds),
            "max_call_duration_seconds": String(limits.maxCallDurationSeconds),
            "call_lease_seconds": String(limits.callLeaseSeconds),
            "cluster_redis_url": "none", "node_id": "host name and port",
            "node_timeout_seconds": String(limits.nodeTimeoutSeconds),
            "cluster_forward_timeout_ms": String(limits.clusterForwardTimeoutMillis),
            "cluster_redis_timeout_ms": String(limits.clusterRedisTimeoutMillis),
            "cluster_event_replay_seconds": String(limits.clusterEventReplaySeconds),
            "alert_ring_repeat_seconds": String(limits.alertRingRepeatSeconds),
            "max_buffered_body_bytes": String(limits.maxBufferedBodyBytes),
        ]
    }

    /// Why a `--config` file could not be used, as a sentence.
    public struct InvalidFile: Error, CustomStringConvertible {
        public var description: String
    }

    /// Applies a JSON object of settings (the `--config` file). Unknown keys are errors.
    public mutating func apply(json data: Data) throws {
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: data) else {
            throw InvalidFile(description: "it is not valid JSON")
        }
        guard let object = value.objectValue else {
            throw InvalidFile(description: "it must be one JSON object of settings, like {\"port\": 9000}")
        }
        for (key, value) in object.sorted(by: { $0.key < $1.key }) {
            guard let setting = Self.settings.first(where: { $0.name == key }) else {
                throw InvalidFile(description: "'\(key)' is not a setting (docs/configuration.md lists them)")
            }
            let text: String
            switch value {
            case .bool(let flag): text = flag ? "true" : "false"
            case .int(let number): text = String(number)
            case .string(let string): text = string
            default: throw InvalidFile(description: "the value of '\(key)' must be a string, an integer or true/false")
            }
            try setting.apply(&self, text)
        }
    }

    /// The transport options these settings imply.
    var serverOptions: HTTPServer.Options {
        var options = HTTPServer.Options(host: host, port: port)
        options.maxHeaderBytes = limits.maxHeaderBytes
        options.maxBodyBytes = limits.maxBodyBytes
        options.maxBufferedBodyBytes = limits.maxBufferedBodyBytes
        options.maxMessageBytes = limits.maxMessageBytes
        options.maxMessageBytesByTag = [Gateway.Endpoint.echo.rawValue: limits.echoMaxMessageBytes]
        options.maxReceiveBytesPerSecond = limits.maxReceiveBytesPerSecond
        options.maxReceiveBytesPerSecondByTag = [Gateway.Endpoint.echo.rawValue: 0]  // conformance tests send 16 MiB
        options.maxSendQueueBytes = limits.sendQueueBytes
        options.pingIntervalSeconds = limits.pingIntervalSeconds
        options.idleTimeoutSeconds = limits.idleTimeoutSeconds
        options.httpTimeoutSeconds = limits.httpTimeoutSeconds
        options.maxConnections = limits.maxConnections
        options.extraHeaders = ["idempotency-key", "x-request-id", "access-control-request-method"]
        return options
    }
}
