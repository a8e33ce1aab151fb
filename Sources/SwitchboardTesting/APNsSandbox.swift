import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardPush
import SwitchboardHTTP2Server

/// A local stand-in for Apple's APNs provider API (`POST /3/device/{token}` over HTTP/2 and TLS)
/// that checks requests the way Apple documents it and answers with Apple's status codes and
/// reasons. It records every push, lets tests script outcomes and faults through a small admin
/// API, and hands accepted pushes to simulated devices over WebSocket.
public final class APNsSandbox: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// The HTTP/2 port (Apple uses 443 and 2197); 0 picks a free one.
        public var port = 2197
        /// The admin API's plain-HTTP port; 0 picks a free one.
        public var adminPort = 2198
        /// TLS certificate and key; generated (self-signed, for 127.0.0.1 and localhost) into
        /// `directory` when nil.
        public var certificatePath: String?
        public var privateKeyPath: String?
        public var directory: String = NSTemporaryDirectory() + "switchboard-apns-sandbox"
        /// Signing keys by key id (`kid`): provider tokens must verify against them.
        public var keys: [String: ECPublicKey] = [:]
        /// Accept any well-formed ES256 token whatever its key (signature not checked).
        public var acceptAnyKey = false
        /// Certificate-based authentication: a connection whose client certificate verifies
        /// against these authorities needs no provider token.
        public var clientCAPath: String?
        /// SETTINGS_MAX_CONCURRENT_STREAMS announced on each connection.
        public var maxConcurrentStreams: UInt32 = 1000
        /// The sandbox's clock (tests move it).
        public var clock: @Sendable () -> Date = { Date() }

        public init() {}
    }

    /// One push the sandbox accepted or refused.
    public struct Record: Sendable, Codable, Equatable {
        public var apnsID: String
        public var token: String
        public var pushType: String?
        public var topic: String?
        public var priority: Int?
        public var expiration: Int64?
        public var collapseID: String?
        /// The payload as sent.
        public var payloadBytes: [UInt8]
        /// The payload, parsed.
        public var payload: JSONValue? { try? JSONDecoder().decode(JSONValue.self, from: Data(payloadBytes)) }
        public var status: Int
        public var reason: String?
        /// Milliseconds since 1970, by the sandbox clock.
        public var receivedAt: Int64
        public var connection: Int
        public var stream: Int

        enum CodingKeys: String, CodingKey {
            case apnsID = "apns_id"
            case token
            case pushType = "push_type"
            case topic, priority, expiration
            case collapseID = "collapse_id"
            case payload, status, reason
            case receivedAt = "received_at"
            case connection, stream
        }

        public init(
            apnsID: String, token: String, pushType: String?, topic: String?, priority: Int?, expiration: Int64?,
            collapseID: String?, payloadBytes: [UInt8], status: Int, reason: String?, receivedAt: Int64, connection: Int,
            stream: Int
        ) {
            self.apnsID = apnsID
            self.token = token
            self.pushType = pushType
            self.topic = topic
            self.priority = priority
            self.expiration = expiration
            self.collapseID = collapseID
            self.payloadBytes = payloadBytes
            self.status = status
            self.reason = reason
            self.receivedAt = receivedAt
            self.connection = connection
            self.stream = stream
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            apnsID = try container.decode(String.self, forKey: .apnsID)
            token = try container.decode(String.self, forKey: .token)
            pushType = try container.decodeIfPresent(String.self, forKey: .pushType)
            topic = try container.decodeIfPresent(String.self, forKey: .topic)
            priority = try container.decodeIfPresent(Int.self, forKey: .priority)
            expiration = try container.decodeIfPresent(Int64.self, forKey: .expiration)
            collapseID = try container.decodeIfPresent(String.self, forKey: .collapseID)
            let payload = try container.decodeIfPresent(JSONValue.self, forKey: .payload)
            payloadBytes = try payload.map { Array(try JSONEncoder().encode($0)) } ?? []
            status = try container.decode(Int.self, forKey: .status)
            reason = try container.decodeIfPresent(String.self, forKey: .reason)
            receivedAt = try container.decode(Int64.self, forKey: .receivedAt)
            connection = try container.decode(Int.self, forKey: .connection)
            stream = try container.decode(Int.self, forKey: .stream)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(apnsID, forKey: .apnsID)
            try container.encode(token, forKey: .token)
            try container.encodeIfPresent(pushType, forKey: .pushType)
            try container.encodeIfPresent(topic, forKey: .topic)
            try container.encodeIfPresent(priority, forKey: .priority)
            try container.encodeIfPresent(expiration, forKey: .expiration)
            try container.encodeIfPresent(collapseID, forKey: .collapseID)
            try container.encodeIfPresent(payload, forKey: .payload)
            try container.encode(status, forKey: .status)
            try container.encodeIfPresent(reason, forKey: .reason)
            try container.encode(receivedAt, forKey: .receivedAt)
            try container.encode(connection, forKey: .connection)
            try container.encode(stream, forKey: .stream)
        }
    }

    /// What to do to upcoming requests (set through the admin API or directly by tests).
    public enum Fault: Sendable, Equatable {
        /// Answer the next `count` requests with `status` (429, 500 or 503) and its reason.
        case status(Int, count: Int)
        /// After `streams` requests on a connection, send GOAWAY on it.
        case goAway(afterStreams: Int)
        /// Delay every answer.
        case latency(Duration)
        /// Refuse the next `count` requests' tokens as expired.
        case expiredProviderToken(count: Int)
        /// Take the next `count` requests and never answer them (the push is delivered: the
        /// sender cannot know, so sending it again would ring twice).
        case stall(count: Int)
        /// Every `every`-th request from now on is delivered and then its connection is reset
        /// (TCP RST, no GOAWAY) before any answer; the other streams in flight get none either.
        /// `nil` stops it.
        case reset(every: Int?)
    }

    /// How the sandbox treats one device token.
    public enum TokenState: Sendable, Equatable {
        /// 410 Unregistered with this timestamp (ms since 1970).
        case unregistered(since: Int64)
        /// 400 BadDeviceToken.
        case bad
        /// Registered for this topic only (other topics get DeviceTokenNotForTopic).
        case topic(String)
    }

    struct State {
        var records: [Record] = []
        var tokens: [String: TokenState] = [:]
        var statusFault: (status: Int, remaining: Int)?
        var goAwayAfter: Int?
        var latency: Duration = .zero
        var expiredFaults = 0
        var stallsLeft = 0
        var resetEvery: Int?
        var sinceReset = 0
        /// Per key id: the current token's `iat` and whether it was refused as expired.
        var currentTokens: [String: (iat: Int64, jwt: String, refused: Bool)] = [:]
        var tokenUpdates = 0
        var requests = 0
        /// Provider tokens whose signature and claims were already checked: (key id, iat).
        var verifiedTokens: [String: (keyID: String, issuedAt: Int64)] = [:]
    }

    public let configuration: Configuration
    let state = Locked(State())
    private let http2: HTTP2Server
    private let admin: SandboxAdmin
    private let adminServer: HTTPServer
    /// The certificate clients must trust.
    public let certificatePath: String

    public init(configuration: Configuration, logger: Logger = Logger()) throws {
        self.configuration = configuration
        var certificate = configuration.certificatePath
        var key = configuration.privateKeyPath
        if certificate == nil || key == nil {
            try Files.createDirectory(configuration.directory)
            let generated = try ECPrivateKey.generate()
            certificate = configuration.directory + "/sandbox-cert.pem"
            key = configuration.directory + "/sandbox-key.pem"
            try generated.selfSignedCertificate(commonName: "Switchboard APNs sandbox", days: 825)
                .write(toFile: certificate!, atomically: true, encoding: .utf8)
            try generated.pem.write(toFile: key!, atomically: true, encoding: .utf8)
            chmod(key!, 0o600)
        }
        certificatePath = certificate!
        var options = HTTP2Server.Options(
            host: configuration.host, port: configuration.port, certificatePath: certificate!, privateKeyPath: key!)
        options.maxConcurrentStreams = configuration.maxConcurrentStreams
        options.clientCAPath = configuration.clientCAPath
        let admin = SandboxAdmin(logger: logger)
        self.admin = admin
        let validator = SandboxValidator(configuration: configuration)
        let holder = Locked<APNsSandbox?>(nil)
        http2 = try HTTP2Server(options: options) { request, responder in
            holder.withLock { $0 }?.handle(request, responder: responder, validator: validator)
        }
        var adminOptions = HTTPServer.Options(host: configuration.host, port: configuration.adminPort)
        adminOptions.maxMessageBytes = 64 * 1024
        do {
            adminServer = try HTTPServer(options: adminOptions, handler: admin, logger: logger)
        } catch {
            http2.stop()
            throw error
        }
        holder.withLock { $0 = self }
        admin.sandbox = self
    }

    /// The HTTP/2 port.
    public var port: Int { http2.port }
    /// The admin API's port.
    public var adminPort: Int { adminServer.port }
    /// `https://127.0.0.1:PORT`
    public var url: String { "https://\(SocketAddress.urlHost(configuration.host)):\(port)" }
    public var adminURL: String { "http://\(SocketAddress.urlHost(configuration.host)):\(adminPort)" }

    /// Connections open now (draining ones included), the most usable ones (not sent GOAWAY)
    /// open at once, and all accepted so far.
    public var connectionCount: Int { http2.connectionCount }
    public var peakConnectionCount: Int { http2.peakConnectionCount }
    public var connectionsAccepted: Int { http2.connectionsAccepted }
    /// Streams the clients reset (RST_STREAM).
    public var streamResets: Int { http2.streamResetsReceived }

    public func stop() {
        http2.stop()
        adminServer.stop()
    }

    // MARK: Scripting (also reachable through the admin API)

    public func inject(_ fault: Fault) {
        state.withLock { state in
            switch fault {
            case .status(let status, let count): state.statusFault = (status, count)
            case .goAway(let streams): state.goAwayAfter = streams
            case .latency(let delay): state.latency = delay
            case .expiredProviderToken(let count): state.expiredFaults = count
            case .stall(let count): state.stallsLeft = count
            case .reset(let every):
                state.resetEvery = every
                state.sinceReset = 0
            }
        }
    }

    public func setToken(_ token: String, _ tokenState: TokenState?) {
        state.withLock { $0.tokens[token.lowercased()] = tokenState }
    }

    public func reset() {
        state.withLock { $0 = State() }
    }

    /// Every push so far, oldest first.
    public var records: [Record] { state.withLock { $0.records } }

    /// Provider tokens that replaced an earlier one for the same key.
    public var tokenUpdates: Int { state.withLock { $0.tokenUpdates } }

    /// Requests received.
    public var requestCount: Int { state.withLock { $0.requests } }

    // MARK: Requests

    private func handle(_ request: HTTP2Server.Request, responder: HTTP2Server.Responder, validator: SandboxValidator) {
        let now = configuration.clock()
        let verdict = state.withLock { state -> SandboxValidator.Verdict in
            state.requests += 1
            return validator.check(request, now: now, state: &state)
        }
        let record = Record(
            apnsID: verdict.apnsID, token: verdict.token, pushType: request.header("apns-push-type"),
            topic: request.header("apns-topic"), priority: request.header("apns-priority").flatMap { Int($0) },
            expiration: request.header("apns-expiration").flatMap { Int64($0) }, collapseID: request.header("apns-collapse-id"),
            payloadBytes: request.body, status: verdict.status,
            reason: verdict.reason, receivedAt: Int64(now.timeIntervalSince1970 * 1000), connection: request.connection,
            stream: request.streamIndex)
        let (latency, goAwayAfter, stalled, reset) = state.withLock { state -> (Duration, Int?, Bool, Bool) in
            state.records.append(record)
            let stalled = verdict.status == 200 && state.stallsLeft > 0
            if stalled { state.stallsLeft -= 1 }
            var reset = false
            if let every = state.resetEvery {
                state.sinceReset += 1
                if state.sinceReset >= every {
                    state.sinceReset = 0
                    reset = true
                }
            }
            return (state.latency, state.goAwayAfter, stalled, reset)
        }
        var body: [UInt8] = []
        if let reason = verdict.reason {
            var object: [String: JSONValue] = ["reason": .string(reason)]
            if let timestamp = verdict.timestamp { object["timestamp"] = .int(timestamp) }
            body = (try? JSONEncoder().encode(JSONValue.object(object))).map(Array.init) ?? []
        }
        let response = HTTP2Server.Response(
            status: verdict.status, headers: [("apns-id", verdict.apnsID), ("content-type", "application/json")], body: body)
        if verdict.status == 200 { admin.deliver(record) }
        let server = http2
        if stalled { return }
        if reset {
            server.reset(connection: request.connection)
            return
        }
        if let goAwayAfter, request.streamIndex == goAwayAfter {
            server.goAway(connection: request.connection, lastStreamID: request.streamID)
        }
        if latency > .zero {
            server.schedule(after: latency) { responder.respond(response) }
        } else {
            responder.respond(response)
        }
    }
}

/// Apple's checks, in Apple's order, as documented in "Handling notification responses from APNs".
struct SandboxValidator: Sendable {
    let configuration: APNsSandbox.Configuration

    struct Verdict {
        var status: Int
        var reason: String?
        var timestamp: Int64?
        var apnsID: String
        var token: String
    }

    static let pushTypes: Set<String> = [
        "alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk",
    ]

    func check(_ request: HTTP2Server.Request, now: Date, state: inout APNsSandbox.State) -> Verdict {
        var apnsID = Crypto.randomUUID().uuidString.lowercased()
        // `/3/device/{token}`; `/3/device` and `/3/device/` name no token.
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: false)
        let token = parts.count == 4 ? String(parts[3]).lowercased() : ""
        let givenID = request.header("apns-id")
        if let givenID, UUID(uuidString: givenID) != nil { apnsID = givenID.lowercased() }
        func refuse(_ status: Int, _ reason: String, timestamp: Int64? = nil) -> Verdict {
            Verdict(status: status, reason: reason, timestamp: timestamp, apnsID: apnsID, token: token)
        }
        guard request.method == "POST" else { return refuse(405, "MethodNotAllowed") }
        guard (3...4).contains(parts.count), parts[0].isEmpty, parts[1] == "3", parts[2] == "device" else { return refuse(404, "BadPath") }
        guard !token.isEmpty else { return refuse(400, "MissingDeviceToken") }
        if let givenID, UUID(uuidString: givenID) == nil { return refuse(400, "BadMessageId") }
        for name in ["apns-id", "apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-collapse-id", "authorization"]
        where request.headerCount(name) > 1 {
            return refuse(400, "DuplicateHeaders")
        }

        // The provider token, unless the connection authenticated with a client certificate.
        if request.clientCertificate != nil, request.header("authorization") == nil {
            return checkHeadersAndPayload(request, token: token, apnsID: apnsID, state: &state)
        }
        guard let authorization = request.header("authorization") else { return refuse(403, "MissingProviderToken") }
        guard authorization.lowercased().hasPrefix("bearer ") else { return refuse(403, "InvalidProviderToken") }
        switch checkProviderToken(String(authorization.dropFirst(7)), now: now, state: &state) {
        case .some(let failure): return refuse(failure.status, failure.reason)
        case .none: break
        }
        return checkHeadersAndPayload(request, token: token, apnsID: apnsID, state: &state)
    }

    private func checkHeadersAndPayload(
        _ request: HTTP2Server.Request, token: String, apnsID: String, state: inout APNsSandbox.State
    ) -> Verdict {
        func refuse(_ status: Int, _ reason: String, timestamp: Int64? = nil) -> Verdict {
            Verdict(status: status, reason: reason, timestamp: timestamp, apnsID: apnsID, token: token)
        }
        // Headers. Apple requires `apns-push-type` on watchOS only and recommends it elsewhere
        // ("Sending notification requests to APNs"): a request without it is taken, as a VoIP
        // push on a `.voip` topic and an alert otherwise (the sandbox cannot know the device's
        // OS). A VoIP push on a topic without `.voip` is a token for another topic
        // (`DeviceTokenNotForTopic`, as APNs answers it); another type on a `.voip` topic,
        // `InvalidPushType`.
        let declared = request.header("apns-push-type")
        if let declared, !Self.pushTypes.contains(declared) { return refuse(400, "InvalidPushType") }
        guard let topic = request.header("apns-topic"), !topic.isEmpty else { return refuse(400, "MissingTopic") }
        let pushType = declared ?? (topic.hasSuffix(".voip") ? "voip" : "alert")
        if declared == "voip" && !topic.hasSuffix(".voip") { return refuse(400, "DeviceTokenNotForTopic") }
        if declared != nil && declared != "voip" && topic.hasSuffix(".voip") { return refuse(400, "InvalidPushType") }
        if let priority = request.header("apns-priority") {
            guard let value = Int(priority), [1, 5, 10].contains(value) else { return refuse(400, "BadPriority") }
            if pushType == "background" && value == 10 { return refuse(400, "BadPriority") }
        }
        if let expiration = request.header("apns-expiration"), Int64(expiration).map({ $0 < 0 }) ?? true {
            return refuse(400, "BadExpirationDate")
        }
        if let collapse = request.header("apns-collapse-id"), collapse.utf8.count > 64 { return refuse(400, "BadCollapseId") }

        // The device token and what the tests said about it.
        guard PushNotification.isDeviceToken(token) else { return refuse(400, "BadDeviceToken") }
        switch state.tokens[token] {
        case .unregistered(let since): return refuse(410, "Unregistered", timestamp: since)
        case .bad: return refuse(400, "BadDeviceToken")
        case .topic(let registered) where registered != topic: return refuse(400, "DeviceTokenNotForTopic")
        default: break
        }

        // The payload.
        guard !request.body.isEmpty else { return refuse(400, "PayloadEmpty") }
        let limit = pushType == "voip" ? 5120 : 4096
        guard request.body.count <= limit else { return refuse(413, "PayloadTooLarge") }
        guard JSONText.holdsObject(request.body) ?? ((try? JSONSerialization.jsonObject(with: Data(request.body))) is [String: Any]) else {
            // Apple documents no reason for a payload that is not a JSON object; the sandbox
            // names the mistake.
            return refuse(400, "BadPayload")
        }

        // Scripted faults come last, like trouble on Apple's side.
        if let fault = state.statusFault, fault.remaining > 0 {
            state.statusFault = fault.remaining > 1 ? (fault.status, fault.remaining - 1) : nil
            let reason = fault.status == 429 ? "TooManyRequests" : fault.status == 503 ? "ServiceUnavailable" : "InternalServerError"
            return refuse(fault.status, reason)
        }
        return Verdict(status: 200, reason: nil, timestamp: nil, apnsID: apnsID, token: token)
    }

    struct TokenFailure {
        var status: Int
        var reason: String
    }

    /// ES256 JWT with `kid` and `iss`/`iat`: signature, age (an hour), and update rate (no more
    /// than one new token per key every 20 minutes).
    func checkProviderToken(_ jwt: String, now: Date, state: inout APNsSandbox.State) -> TokenFailure? {
        // A token seen before needs no parsing or signature check again, only the time rules.
        if let known = state.verifiedTokens[jwt] {
            return checkTokenTimes(jwt, keyID: known.keyID, issuedAt: known.issuedAt, now: now, state: &state)
        }
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let claimsBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2]),
            case .object(let header)? = try? JSONDecoder().decode(JSONValue.self, from: Data(headerBytes)),
            case .object(let claims)? = try? JSONDecoder().decode(JSONValue.self, from: Data(claimsBytes)),
            header["alg"] == "ES256", let keyID = header["kid"]?.stringValue, claims["iss"]?.stringValue?.isEmpty == false,
            case .int(let issuedAt)? = claims["iat"]
        else { return TokenFailure(status: 403, reason: "InvalidProviderToken") }
        if !configuration.acceptAnyKey {
            guard let key = configuration.keys[keyID] else { return TokenFailure(status: 403, reason: "InvalidProviderToken") }
            guard key.verify(signature, of: Array("\(parts[0]).\(parts[1])".utf8)) else {
                return TokenFailure(status: 403, reason: "InvalidProviderToken")
            }
        } else if signature.count != 64 {
            return TokenFailure(status: 403, reason: "InvalidProviderToken")
        }
        if state.verifiedTokens.count > 10_000 { state.verifiedTokens.removeAll() }
        state.verifiedTokens[jwt] = (keyID, issuedAt)
        return checkTokenTimes(jwt, keyID: keyID, issuedAt: issuedAt, now: now, state: &state)
    }

    /// Age (an hour), clock (not from the future) and update rate (one new token per key per 20 minutes).
    private func checkTokenTimes(_ jwt: String, keyID: String, issuedAt: Int64, now: Date, state: inout APNsSandbox.State) -> TokenFailure? {
        let nowSeconds = Int64(now.timeIntervalSince1970)
        if issuedAt > nowSeconds + 60 { return TokenFailure(status: 403, reason: "InvalidProviderToken") }
        if state.expiredFaults > 0 {
            state.expiredFaults -= 1
            state.currentTokens[keyID] = (issuedAt, jwt, true)
            return TokenFailure(status: 403, reason: "ExpiredProviderToken")
        }
        if nowSeconds - issuedAt > 3600 {
            state.currentTokens[keyID] = (issuedAt, jwt, true)
            return TokenFailure(status: 403, reason: "ExpiredProviderToken")
        }
        if let current = state.currentTokens[keyID], current.jwt != jwt {
            if issuedAt < current.iat { return TokenFailure(status: 403, reason: "InvalidProviderToken") }
            if !current.refused && nowSeconds - current.iat < 20 * 60 {
                return TokenFailure(status: 429, reason: "TooManyProviderTokenUpdates")
            }
            state.tokenUpdates += 1
        }
        state.currentTokens[keyID] = (issuedAt, jwt, false)
        return nil
    }
}
