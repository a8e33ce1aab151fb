import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore

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
    let hub: Hub
    private var authenticated: [ConnectionID: (AccessTokenClaims, App, Hub.ResumeRequest?, String?)] = [:]
    /// WebSocket connects per app and identity (`connects_per_identity_per_minute`). Loop thread only.
    private var connectBuckets: [String: TokenBucket] = [:]
    private var connectBucketsPruned = ContinuousClock.now
    private var echoConnections: Set<ConnectionID> = []
    private(set) var draining = false
    private let staticFiles: StaticFiles
    private let crossOrigin: CrossOriginPolicy
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()
    let decoder = JSONDecoder()

    init(configuration: ServerConfiguration, hub: Hub, metrics: Metrics, logger: Logger) {
        self.configuration = configuration
        self.hub = hub
        store = hub.store
        self.metrics = metrics
        self.logger = logger
        verifier = AccessTokenVerifier(
            maxTokenBytes: configuration.limits.maxTokenBytes,
            leewaySeconds: Int64(configuration.limits.tokenLeewaySeconds))
        staticFiles = StaticFiles(root: configuration.webRoot)
        crossOrigin = CrossOriginPolicy(origins: configuration.corsOrigins)
    }

    func attach(to server: HTTPServer) {
        self.server = server
        hub.attach(output: server, scheduler: server.loop)
    }

    // MARK: HTTP

    func handle(_ request: HTTPRequest, on connection: ConnectionID) {
        let started = DispatchTime.now().uptimeNanoseconds
        let route: String, answer: RESTAnswer
        let preflight = CrossOriginPolicy.isPreflight(request)
        if preflight {
            route = "preflight"
            if let headers = crossOrigin.preflight(request) {
                answer = .now(HTTPResponse(status: 204, headers: headers))
            } else {
                answer = .now(failure(ErrorBody(.forbidden, "this origin, method or header is not allowed (cors_origins)")))
            }
        } else {
            (route, answer) = self.route(request)
        }
        let origin = request.headers["origin"]
        answer.whenReady { [weak self] response in
            guard let self else { return }
            var response = response
            if !preflight { response.headers += crossOrigin.responseHeaders(origin: origin) }
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
            metrics.observe("switchboard_http_request_duration_seconds", ["route": route], seconds: seconds)
            metrics.increment(
                "switchboard_http_requests_total",
                ["method": request.method.rawValue, "route": route, "status": String(response.status)])
            server?.respond(to: connection, with: response)
        }
    }

    /// Routes through `restRoutes` first (404, 405 and the metrics label come from it), then to
    /// the route's handler.
    private func route(_ request: HTTPRequest) -> (String, RESTAnswer) {
        guard let known = Self.restRoute(for: request.path), known.template != "/v1/dev/tokens" || configuration.devTokens else {
            if request.path.hasPrefix("/v1/") && !["/v1/ws", "/v1/echo", "/v1/openapi.json"].contains(request.path) {
                return ("/v1/*", .now(failure(ErrorBody(.notFound, "no such endpoint: \(request.path)"))))
            }
            return dispatch(request)
        }
        guard known.methods.contains(request.method) else { return (known.template, .now(methodNotAllowed(allowed: known.allow))) }
        return (known.template, dispatch(request).1)
    }

    private func dispatch(_ request: HTTPRequest) -> (String, RESTAnswer) {
        switch (request.method, request.path) {
        case (_, let path) where path == "/v1/devices" || path.hasPrefix("/v1/devices/"):
            return routeDevices(request)
        case (_, "/v1/users/me/blocked"):
            return routeBlocked(request)
        case (_, let path) where path == "/v1/calls" || path.hasPrefix("/v1/calls/"):
            return routeCalls(request)
        default:
            let (route, response) = answerNow(request)
            return (route, .now(response))
        }
    }

    /// The routes that never wait for the store.
    private func answerNow(_ request: HTTPRequest) -> (String, HTTPResponse) {
        switch (request.method, request.path) {
        case (.get, "/healthz"), (.head, "/healthz"):
            return ("/healthz", json(200, ["status": "ok"]))
        case (.get, "/readyz"), (.head, "/readyz"):
            if draining { return ("/readyz", failure(ErrorBody(.unavailable, "server is shutting down"))) }
            if let problem = hub.store.storageProblem {
                return ("/readyz", failure(ErrorBody(.unavailable, "storage refuses writes (\(problem)); calls are refused until it recovers")))
            }
            return ("/readyz", json(200, ["status": "ready"]))
        case (.get, "/metrics"):
            metrics.set("switchboard_sessions", to: Double(hub.sessionCount))
            metrics.set("switchboard_open_connections", to: Double(server?.openConnections ?? 0))
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
        case (.post, "/v1/dev/tokens") where configuration.devTokens:
            return ("/v1/dev/tokens", issueDevelopmentToken(request))
        case (.get, "/v1/turn"):
            return ("/v1/turn", turnCredentials(request))
        case (_, "/v1/turn"):
            return ("/v1/turn", methodNotAllowed(allowed: "GET"))
        case (_, let path) where path == "/v1/rooms" || path.hasPrefix("/v1/rooms/"):
            return routeRooms(request)
        case (.get, "/v1/openapi.json"), (.head, "/v1/openapi.json"):
            // The REST API's description, also at /openapi.json with the web client.
            if let file = staticFiles.resolve("/openapi.json") {
                return ("/v1/openapi.json", HTTPResponse(status: 200, contentType: file.contentType, body: .file(path: file.path)))
            }
            return ("/v1/openapi.json", failure(ErrorBody(.notFound, "no OpenAPI document in the web root")))
        case (_, "/v1/ws"), (_, "/v1/echo"):
            return (request.path, failure(ErrorBody(.badRequest, "this endpoint needs a WebSocket upgrade"), status: 426, headers: [("upgrade", "websocket")]))
        case (_, let path) where path == "/v1" || path.hasPrefix("/v1/"):
            return ("/v1/*", failure(ErrorBody(.notFound, "no such endpoint: \(path)")))
        case (.get, let path), (.head, let path):
            if let file = staticFiles.resolve(path) {
                return ("static", HTTPResponse(status: 200, contentType: file.contentType, body: .file(path: file.path)))
            }
            return ("static", failure(ErrorBody(.notFound, "no such file: \(path)")))
        default:
            return ("other", methodNotAllowed(allowed: "GET, HEAD"))
        }
    }

    private func issueToken(_ request: HTTPRequest) -> HTTPResponse {
        guard let app = basicAuthApp(request.headers["authorization"]) else {
            return failure(
                ErrorBody(.unauthorized, "POST /v1/tokens needs HTTP Basic auth with the app's API key and secret"),
                headers: [("www-authenticate", "Basic realm=\"switchboard\"")])
        }
        let body: TokenRequest
        do {
            body = try decoder.decode(TokenRequest.self, from: Data(request.body))
        } catch {
            return decodeFailure(request.body, error)
        }
        guard !body.identity.isEmpty, body.identity.utf8.count <= 256 else {
            return failure(ErrorBody(.badRequest, "identity must be 1 to 256 bytes"))
        }
        if let name = body.name, name.utf8.count > 256 {
            return failure(ErrorBody(.badRequest, "name must be at most 256 bytes"))
        }
        let ttl = body.ttl ?? 3600
        guard (1...configuration.limits.maxTokenTTLSeconds).contains(ttl) else {
            return failure(ErrorBody(.badRequest, "ttl must be 1 to \(configuration.limits.maxTokenTTLSeconds) seconds"))
        }
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: body.identity, name: body.name, grants: body.grants ?? Grants(), ttlSeconds: ttl)
        let token = AccessTokenVerifier.sign(claims, secret: app.apiSecret)
        logger.info("token issued", ["app": app.id, "identity": body.identity, "ttl": String(ttl)])
        return encoded(201, TokenResponse(token: token, expiresAt: claims.exp, identity: claims.sub))
    }

    /// The app whose API key and secret are in an HTTP Basic `Authorization` header.
    func basicAuthApp(_ header: String?) -> App? {
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

    func connectionsRefused(_ count: Int, reason: ConnectionRefusal) {
        metrics.increment("switchboard_connections_shed_total", ["reason": reason.rawValue], by: Double(count))
    }

    func acceptingPaused() {
        metrics.increment("switchboard_accept_pauses_total")
    }

    func shouldUpgrade(_ request: HTTPRequest, on connection: ConnectionID) -> UpgradeDecision {
        if draining {
            return .reject(failure(ErrorBody(.unavailable, "server is shutting down")))
        }
        switch request.path {
        case "/v1/ws":
            let token = request.query["access_token"] ?? bearerToken(request.headers["authorization"]) ?? ""
            do throws(TokenError) {
                let claims = try verifier.verify(token) { store.app(apiKey: $0)?.apiSecret }
                guard let app = store.app(apiKey: claims.iss) else { throw TokenError.unknownIssuer }
                if let wait = connectRefusal(app: app, identity: claims.sub) {
                    metrics.increment("switchboard_connections_refused_total", ["reason": ErrorCode.rateLimited.rawValue])
                    return .reject(
                        failure(
                            ErrorBody(.rateLimited, "too many connections for this identity; retry in \(wait) s"),
                            headers: [("Retry-After", String(wait))]))
                }
                var resume: Hub.ResumeRequest?
                if let resumeToken = request.query["resume_token"], !resumeToken.isEmpty {
                    resume = Hub.ResumeRequest(token: resumeToken, lastSequence: UInt64(request.query["last_seq"] ?? "") ?? 0)
                }
                let deviceID = request.query["device_id"].flatMap { $0.isEmpty || $0.utf8.count > 128 ? nil : $0 }
                authenticated[connection] = (claims, app, resume, deviceID)
                return .accept(tag: Endpoint.signaling.rawValue)
            } catch {
                metrics.increment("switchboard_connections_refused_total", ["reason": error.code.rawValue])
                logger.info("websocket refused", ["conn": connection.description, "reason": error.description])
                return .reject(failure(ErrorBody(error.code, error.description)))
            }
        case "/v1/echo" where configuration.enableEcho:
            return .accept(tag: Endpoint.echo.rawValue)
        default:
            return .reject(failure(ErrorBody(.notFound, "no WebSocket endpoint at \(request.path)")))
        }
    }

    /// Seconds to wait when `identity` has used up `connects_per_identity_per_minute`, else nil
    /// (and the connect is counted). Loop thread only.
    private func connectRefusal(app: App, identity: String) -> Int? {
        let perMinute = configuration.limits.connectsPerIdentityPerMinute
        let now = ContinuousClock.now
        let key = app.id + "\u{0}" + identity
        var bucket = connectBuckets[key] ?? TokenBucket(rate: Double(perMinute) / 60, burst: perMinute, now: now)
        let allowed = bucket.take(now: now)
        connectBuckets[key] = bucket
        // Forget identities whose allowance is whole again (most, a second after they
        // connect), every few seconds: at thousands of connects a second the map stays small.
        if now - connectBucketsPruned > .seconds(5) {
            connectBucketsPruned = now
            connectBuckets = connectBuckets.filter { !$0.value.isFull(now: now) }
        }
        return allowed ? nil : max(1, bucket.wait(now: now))
    }

    func bearerToken(_ header: String?) -> String? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
    }

    func webSocketOpened(_ connection: ConnectionID, tag: Int) {
        switch Endpoint(rawValue: tag) {
        case .signaling:
            guard let (claims, app, resume, deviceID) = authenticated.removeValue(forKey: connection) else { return }
            hub.connected(connection, claims: claims, app: app, resume: resume, deviceID: deviceID)
        case .echo:
            echoConnections.insert(connection)
        case nil:
            break
        }
    }

    func webSocketReceived(_ connection: ConnectionID, message: [UInt8], binary: Bool) {
        if echoConnections.contains(connection) {
            server?.send(OutboundFrame(message, binary: binary), to: connection)
        } else {
            hub.received(message, binary: binary, on: connection)
        }
    }

    func webSocketClosed(_ connection: ConnectionID, reason: CloseReason) {
        authenticated.removeValue(forKey: connection)
        if echoConnections.remove(connection) == nil {
            hub.disconnected(connection, reason: reason)
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

    /// A REST handler's answer: ready now, or given once the store has answered (`later`
    /// hands its argument the response exactly once, on the loop).
    enum RESTAnswer {
        case now(HTTPResponse)
        case later((@escaping (HTTPResponse) -> Void) -> Void)

        func whenReady(_ body: @escaping (HTTPResponse) -> Void) {
            switch self {
            case .now(let response): body(response)
            case .later(let start): start(body)
            }
        }
    }

    func json(_ status: Int, _ object: [String: String]) -> HTTPResponse {
        encoded(status, object)
    }

    func encoded(_ status: Int, _ value: some Encodable, headers: [(String, String)] = []) -> HTTPResponse {
        guard let body = try? encoder.encode(value) else {
            return failure(ErrorBody(.internal, "cannot encode the response"))
        }
        return HTTPResponse(status: status, headers: headers, body: .bytes(Array(body)))
    }

    /// A REST error answer: the status is the code's (`ErrorCode.httpStatus`) unless `status`
    /// says otherwise (426 for a plain request to the WebSocket endpoint).
    func failure(_ error: ErrorBody, status: Int? = nil, headers: [(String, String)] = []) -> HTTPResponse {
        let status = status ?? error.code.httpStatus
        metrics.increment("switchboard_errors_total", ["code": error.code.rawValue])
        let body = (try? encoder.encode(ErrorEnvelope(error: error))) ?? Data()
        return HTTPResponse(status: status, headers: headers, body: .bytes(Array(body)))
    }

    func methodNotAllowed(allowed: String) -> HTTPResponse {
        failure(ErrorBody(.methodNotAllowed, "use \(allowed)"), headers: [("allow", allowed)])
    }

    func decodeFailure(_ body: [UInt8], _ error: any Error) -> HTTPResponse {
        failure(Self.decodeError(body, error, decoder: decoder))
    }

    /// Why a body did not decode: not JSON at all, or not the expected fields.
    static func decodeError(_ body: [UInt8], _ error: any Error, decoder: JSONDecoder) -> ErrorBody {
        if (try? decoder.decode(JSONValue.self, from: Data(body))) == nil {
            return ErrorBody(.malformedJSON, "the body is not valid JSON")
        }
        return ErrorBody(.badRequest, "the body does not match the expected fields: \(describe(error))")
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

