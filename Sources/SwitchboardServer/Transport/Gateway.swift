import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// The front door: routes HTTP requests, authenticates WebSocket upgrades and turns WebSocket
/// messages into requests and replies.
///
/// Safety of `@unchecked Sendable`: every method runs on the event loop thread. Other threads
/// reach the gateway only through `server.loop.execute`.
final class Gateway: HTTPServerHandler, @unchecked Sendable {
    /// Which WebSocket endpoint a connection was accepted on (the upgrade tag).
    enum Endpoint: Int {
        case signaling = 1
        case echo = 2
    }

    let configuration: ServerConfiguration
    let store: Store
    let metrics: Metrics
    let logger: Logger
    let verifier: AccessTokenVerifier
    private(set) weak var server: HTTPServer?
    private var sessions: [ConnectionID: Session] = [:]
    private var authenticated: [ConnectionID: (AccessTokenClaims, App)] = [:]
    private(set) var draining = false
    private let staticFiles: StaticFiles
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()
    private let decoder = JSONDecoder()

    init(configuration: ServerConfiguration, store: Store, metrics: Metrics, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.metrics = metrics
        self.logger = logger
        verifier = AccessTokenVerifier(
            maxTokenBytes: configuration.limits.maxTokenBytes,
            leewaySeconds: Int64(configuration.limits.tokenLeewaySeconds))
        staticFiles = StaticFiles(root: configuration.webRoot)
    }

    func attach(to server: HTTPServer) {
        self.server = server
    }

    // MARK: HTTP

    func handle(_ request: HTTPRequest, on connection: ConnectionID) {
        let started = DispatchTime.now().uptimeNanoseconds
        let (route, response) = route(request)
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
        metrics.observe("switchboard_http_request_duration_seconds", ["route": route], seconds: seconds)
        metrics.increment(
            "switchboard_http_requests_total",
            ["method": request.method.rawValue, "route": route, "status": String(response.status)])
        server?.respond(to: connection, with: response)
    }

    private func route(_ request: HTTPRequest) -> (String, HTTPResponse) {
        switch (request.method, request.path) {
        case (.get, "/healthz"), (.head, "/healthz"):
            return ("/healthz", json(200, ["status": "ok"]))
        case (.get, "/readyz"), (.head, "/readyz"):
            if draining { return ("/readyz", failure(503, ErrorBody(.unavailable, "server is shutting down"))) }
            return ("/readyz", json(200, ["status": "ready"]))
        case (.get, "/metrics"):
            metrics.set("switchboard_connections", to: Double(sessions.count))
            return (
                "/metrics",
                HTTPResponse(
                    status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8",
                    body: .bytes(Array(metrics.render().utf8)))
            )
        case (.post, "/v1/tokens"):
            return ("/v1/tokens", issueToken(request))
        case (_, "/v1/tokens"):
            return ("/v1/tokens", methodNotAllowed(allowed: "POST"))
        case (_, "/v1/ws"), (_, "/v1/echo"):
            return (request.path, failure(426, ErrorBody(.badRequest, "this endpoint needs a WebSocket upgrade"), headers: [("upgrade", "websocket")]))
        case (_, let path) where path == "/v1" || path.hasPrefix("/v1/"):
            return ("/v1/*", failure(404, ErrorBody(.notFound, "no such endpoint: \(path)")))
        case (.get, let path), (.head, let path):
            if let file = staticFiles.resolve(path) {
                return ("static", HTTPResponse(status: 200, contentType: file.contentType, body: .file(path: file.path)))
            }
            return ("static", failure(404, ErrorBody(.notFound, "no such file: \(path)")))
        default:
            return ("other", methodNotAllowed(allowed: "GET, HEAD"))
        }
    }

    private func issueToken(_ request: HTTPRequest) -> HTTPResponse {
        guard let app = basicAuthApp(request.headers["authorization"]) else {
            return failure(
                401, ErrorBody(.unauthorized, "POST /v1/tokens needs HTTP Basic auth with the app's API key and secret"),
                headers: [("www-authenticate", "Basic realm=\"switchboard\"")])
        }
        let body: TokenRequest
        do {
            body = try decoder.decode(TokenRequest.self, from: Data(request.body))
        } catch {
            return decodeFailure(request.body, error)
        }
        guard !body.identity.isEmpty, body.identity.utf8.count <= 256 else {
            return failure(400, ErrorBody(.badRequest, "identity must be 1 to 256 bytes"))
        }
        if let name = body.name, name.utf8.count > 256 {
            return failure(400, ErrorBody(.badRequest, "name must be at most 256 bytes"))
        }
        let ttl = body.ttl ?? 3600
        guard (1...configuration.limits.maxTokenTTLSeconds).contains(ttl) else {
            return failure(400, ErrorBody(.badRequest, "ttl must be 1 to \(configuration.limits.maxTokenTTLSeconds) seconds"))
        }
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: body.identity, name: body.name, grants: body.grants ?? Grants(), ttlSeconds: ttl)
        let token = AccessTokenVerifier.sign(claims, secret: app.apiSecret)
        logger.info("token issued", ["app": app.id, "identity": body.identity, "ttl": String(ttl)])
        return encoded(201, TokenResponse(token: token, expiresAt: claims.exp, identity: claims.sub))
    }

    /// The app whose API key and secret are in an HTTP Basic `Authorization` header.
    private func basicAuthApp(_ header: String?) -> App? {
        guard let header, header.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        let key = String(text[..<colon])
        let secret = Array(text[text.index(after: colon)...].utf8)
        guard let app = store.app(apiKey: key), Crypto.constantTimeEquals(Array(app.apiSecret.utf8), secret) else {
            return nil
        }
        return app
    }

    // MARK: WebSocket

    func shouldAcceptConnection() -> Bool {
        !draining
    }

    func shouldUpgrade(_ request: HTTPRequest, on connection: ConnectionID) -> UpgradeDecision {
        if draining {
            return .reject(failure(503, ErrorBody(.unavailable, "server is shutting down")))
        }
        switch request.path {
        case "/v1/ws":
            let token = request.query["access_token"] ?? bearerToken(request.headers["authorization"]) ?? ""
            do throws(TokenError) {
                let claims = try verifier.verify(token) { store.app(apiKey: $0)?.apiSecret }
                guard let app = store.app(apiKey: claims.iss) else { throw TokenError.unknownIssuer }
                authenticated[connection] = (claims, app)
                return .accept(tag: Endpoint.signaling.rawValue)
            } catch {
                metrics.increment("switchboard_connections_refused_total", ["reason": error.code.rawValue])
                logger.info("websocket refused", ["conn": connection.description, "reason": error.description])
                return .reject(failure(401, ErrorBody(error.code, error.description)))
            }
        case "/v1/echo" where configuration.enableEcho:
            return .accept(tag: Endpoint.echo.rawValue)
        default:
            return .reject(failure(404, ErrorBody(.notFound, "no WebSocket endpoint at \(request.path)")))
        }
    }

    private func bearerToken(_ header: String?) -> String? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
    }

    func webSocketOpened(_ connection: ConnectionID, tag: Int) {
        guard Endpoint(rawValue: tag) == .signaling, let (claims, app) = authenticated.removeValue(forKey: connection) else {
            return
        }
        let session = Session(id: "s_" + RandomID.alphanumeric(16), connection: connection, claims: claims, app: app)
        sessions[connection] = session
        metrics.increment("switchboard_connections_total")
        metrics.add("switchboard_connections", 1)
        logger.info("session opened", ["session": session.id, "app": app.id, "identity": claims.sub])
        let limits = configuration.limits
        let welcome = SessionWelcome(
            sessionID: session.id, identity: claims.sub, serverTime: Self.nowMilliseconds(),
            limits: SessionLimits(
                maxMessageBytes: limits.maxMessageBytes, pingIntervalSeconds: limits.pingIntervalSeconds,
                idleTimeoutSeconds: limits.idleTimeoutSeconds))
        sendEvent(MessageType.sessionWelcome, data: welcome, to: session)
    }

    func webSocketReceived(_ connection: ConnectionID, message: [UInt8], binary: Bool) {
        if let session = sessions[connection] {
            metrics.increment("switchboard_messages_in_total")
            handleMessage(message, binary: binary, from: session)
        } else {
            // The echo endpoint: send the message back as it came.
            server?.send(OutboundFrame(message, binary: binary), to: connection)
        }
    }

    func webSocketClosed(_ connection: ConnectionID, reason: CloseReason) {
        authenticated.removeValue(forKey: connection)
        guard let session = sessions.removeValue(forKey: connection) else { return }
        metrics.add("switchboard_connections", -1)
        metrics.increment("switchboard_disconnects_total", ["reason": reason.label])
        logger.info("session closed", ["session": session.id, "reason": reason.label])
    }

    private func handleMessage(_ bytes: [UInt8], binary: Bool, from session: Session) {
        if binary {
            reply(.error(id: nil, ErrorBody(.badRequest, "binary messages are not part of the protocol")), to: session)
            return
        }
        guard let value = try? decoder.decode(JSONValue.self, from: Data(bytes)) else {
            reply(.error(id: nil, ErrorBody(.malformedJSON, "the message is not valid JSON")), to: session)
            return
        }
        guard case .object(let object) = value else {
            reply(.error(id: nil, ErrorBody(.badRequest, "a message must be a JSON object")), to: session)
            return
        }
        let id = object["id"]
        guard let id, id != .null, Self.isUsableID(id) else {
            reply(.error(id: nil, ErrorBody(.badRequest, "every request needs an id (a string or an integer)")), to: session)
            return
        }
        guard case .string(let type) = object["type"] else {
            reply(.error(id: id, ErrorBody(.badRequest, "every request needs a string type")), to: session)
            return
        }
        switch type {
        case MessageType.ping:
            reply(.ok(id: id, data: ["server_time": .int(Self.nowMilliseconds())]), to: session)
        case MessageType.sessionInfo:
            let grants = (try? encoder.encode(session.claims.grants)).flatMap { try? decoder.decode(JSONValue.self, from: $0) }
            reply(
                .ok(
                    id: id,
                    data: [
                        "session_id": .string(session.id), "identity": .string(session.claims.sub),
                        "name": session.claims.name.map(JSONValue.string) ?? .null, "app_id": .string(session.app.id),
                        "grants": grants ?? .null, "token_expires_at": .int(session.claims.exp),
                    ]), to: session)
        default:
            reply(.error(id: id, ErrorBody(.unknownType, "unknown message type '\(type.prefix(64))'")), to: session)
        }
    }

    private static func isUsableID(_ id: JSONValue) -> Bool {
        switch id {
        case .string(let text): !text.isEmpty && text.utf8.count <= 128
        case .int: true
        default: false
        }
    }

    private func reply(_ envelope: Envelope, to session: Session) {
        if let error = envelope.error {
            metrics.increment("switchboard_errors_total", ["code": error.code.rawValue])
        }
        send(envelope, to: session)
    }

    private func sendEvent(_ type: String, data: some Encodable, to session: Session) {
        session.lastSequence += 1
        let payload = (try? encoder.encode(data)).flatMap { try? decoder.decode(JSONValue.self, from: $0) }
        send(Envelope(type: type, seq: session.lastSequence, data: payload), to: session)
    }

    private func send(_ envelope: Envelope, to session: Session) {
        guard let bytes = try? encoder.encode(envelope) else {
            logger.error("cannot encode a message", ["type": envelope.type])
            return
        }
        if server?.send(OutboundFrame(bytes), to: session.connection) == true {
            metrics.increment("switchboard_messages_out_total")
        }
    }

    // MARK: Shutdown

    /// Refuses new connections, closes every WebSocket with 1001, and calls `completion` on the
    /// loop once they are gone or `grace` has passed.
    func drain(grace: Duration, completion: @escaping @Sendable () -> Void) {
        draining = true
        guard let server else {
            completion()
            return
        }
        for connection in server.webSocketConnections {
            server.close(connection, code: 1001, reason: "server shutting down")
        }
        let deadline = ContinuousClock.now + grace
        func check() {
            if server.webSocketCount == 0 || ContinuousClock.now >= deadline {
                completion()
            } else {
                server.loop.schedule(after: .milliseconds(20), check)
            }
        }
        check()
    }

    // MARK: Responses

    private func json(_ status: Int, _ object: [String: String]) -> HTTPResponse {
        encoded(status, object)
    }

    private func encoded(_ status: Int, _ value: some Encodable, headers: [(String, String)] = []) -> HTTPResponse {
        guard let body = try? encoder.encode(value) else {
            return failure(500, ErrorBody(.internal, "cannot encode the response"))
        }
        return HTTPResponse(status: status, headers: headers, body: .bytes(Array(body)))
    }

    private func failure(_ status: Int, _ error: ErrorBody, headers: [(String, String)] = []) -> HTTPResponse {
        metrics.increment("switchboard_errors_total", ["code": error.code.rawValue])
        let body = (try? encoder.encode(ErrorEnvelope(error: error))) ?? Data()
        return HTTPResponse(status: status, headers: headers, body: .bytes(Array(body)))
    }

    private func methodNotAllowed(allowed: String) -> HTTPResponse {
        failure(405, ErrorBody(.methodNotAllowed, "use \(allowed)"), headers: [("allow", allowed)])
    }

    private func decodeFailure(_ body: [UInt8], _ error: any Error) -> HTTPResponse {
        if (try? decoder.decode(JSONValue.self, from: Data(body))) == nil {
            return failure(400, ErrorBody(.malformedJSON, "the body is not valid JSON"))
        }
        return failure(400, ErrorBody(.badRequest, "the body does not match the expected fields: \(Self.describe(error))"))
    }

    /// A short, safe description of a decoding error (no input echoed back).
    static func describe(_ error: any Error) -> String {
        guard let decoding = error as? DecodingError else { return "invalid" }
        switch decoding {
        case .keyNotFound(let key, _): return "missing field '\(key.stringValue)'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "wrong type at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        case .dataCorrupted(let context):
            return "invalid value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        @unknown default: return "invalid"
        }
    }

    static func nowMilliseconds() -> Int64 {
        Int64(Date().timeIntervalSince1970 * 1000)
    }
}

/// One authenticated WebSocket connection on `/v1/ws`.
final class Session {
    let id: String
    let connection: ConnectionID
    let claims: AccessTokenClaims
    let app: App
    /// The `seq` of the last event sent; events count from 1.
    var lastSequence: UInt64 = 0

    init(id: String, connection: ConnectionID, claims: AccessTokenClaims, app: App) {
        self.id = id
        self.connection = connection
        self.claims = claims
        self.app = app
    }
}
