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
    private(set) weak var server: HTTPServer?
    let hub: Hub
    private var authenticated: [ConnectionID: (VerifiedToken, Hub.ResumeRequest?, String?)] = [:]
    /// WebSocket connects per app and identity (`connects_per_identity_per_minute`). Loop thread only.
    private var connectLimit: KeyedRateLimit
    /// REST writes per app and user (`writes_per_user_per_minute`). Loop thread only.
    private var writeLimit: KeyedRateLimit
    private var echoConnections: Set<ConnectionID> = []
    private(set) var draining = false
    private let staticFiles: StaticFiles
    private let crossOrigin: CrossOriginPolicy
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    init(configuration: ServerConfiguration, hub: Hub, metrics: Metrics, logger: Logger) {
        self.configuration = configuration
        self.hub = hub
        store = hub.store
        self.metrics = metrics
        self.logger = logger
        connectLimit = KeyedRateLimit(perMinute: configuration.limits.connectsPerIdentityPerMinute)
        writeLimit = KeyedRateLimit(perMinute: configuration.limits.writesPerUserPerMinute)
        staticFiles = StaticFiles(root: configuration.webRoot)
        crossOrigin = CrossOriginPolicy(origins: configuration.corsOrigins)
    }

    func attach(to server: HTTPServer) {
        self.server = server
        hub.attach(output: server, scheduler: server.loop)
        hub.refreshAppsPeriodically()
        hub.keepCallLeases()
    }

    // MARK: HTTP

    func handle(_ request: HTTPRequest, on connection: ConnectionID) {
        serve(request, on: connection, started: DispatchTime.now().uptimeNanoseconds, lookedUp: false)
    }

    /// Answers `request`. Credentials naming an API key memory does not know are looked up
    /// off the loop first (once: `lookedUp`), and the request is served when the store has
    /// answered: the loop never reads the store.
    private func serve(_ request: HTTPRequest, on connection: ConnectionID, started: UInt64, lookedUp: Bool) {
        if !lookedUp, let key = apiKeyToLookUp(request) {
            let scheduler = hub.scheduler
            let retry = LoopBound { [weak self] in self?.serve(request, on: connection, started: started, lookedUp: true) }
            store.lookUpApp(apiKey: key) { scheduler?.execute { retry.value() } }
            return
        }
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

    /// A REST route's handler (`restRoutes`), else what is served outside the API.
    private func route(_ request: HTTPRequest) -> (String, RESTAnswer) {
        if let routed = routeREST(request) { return routed }
        let (route, response) = serveOutsideTheAPI(request)
        return (route, .now(response))
    }

    /// What is not a REST route: the WebSocket endpoints asked without an upgrade, the OpenAPI
    /// document, the web client's files.
    private func serveOutsideTheAPI(_ request: HTTPRequest) -> (String, HTTPResponse) {
        switch (request.method, request.path) {
        case (.get, "/v1/openapi.json"), (.head, "/v1/openapi.json"):
            // The REST API's description, also at /openapi.json with the web client.
            if let file = staticFiles.resolve("/openapi.json") {
                return ("/v1/openapi.json", HTTPResponse(status: 200, contentType: file.contentType, body: .file(path: file.path)))
            }
            return ("/v1/openapi.json", failure(ErrorBody(.notFound, "no OpenAPI document in the web root")))
        case (_, "/v1/ws"), (_, "/v1/echo"):
            // 426 Upgrade Required: the one answer whose status is not its code's.
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
            if let key = apiKeyToLookUp(request) {
                // The upgrade cannot wait for the store: the client tries again in a second,
                // when memory knows the key (or knows it is unknown).
                store.lookUpApp(apiKey: key) {}
                metrics.increment("switchboard_connections_refused_total", ["reason": ErrorCode.unavailable.rawValue])
                return .reject(
                    failure(ErrorBody(.unavailable, "this API key is being looked up; retry in a second"), headers: [("Retry-After", "1")]))
            }
            do throws(TokenError) {
                let token = try verify(upgradeToken(request))
                let (claims, app) = (token.claims, token.app)
                if let wait = connectRefusal(app: app, identity: claims.sub) {
                    metrics.increment("switchboard_connections_refused_total", ["reason": ErrorCode.rateLimited.rawValue])
                    return .reject(
                        failure(
                            ErrorBody(.rateLimited, "too many connections for this identity; retry in \(wait) s"),
                            headers: [("Retry-After", String(wait))]))
                }
                var resume: Hub.ResumeRequest?
                if let resumeToken = request.query["resume_token"], !resumeToken.isEmpty {
                    // A `seq` never passes 2^63 - 1 (the number another node is sent): one beyond it
                    // names no event of any session, and the resume fails as any such one does.
                    let lastSequence = min(UInt64(request.query["last_seq"] ?? "") ?? 0, UInt64(Int64.max))
                    resume = Hub.ResumeRequest(token: resumeToken, lastSequence: lastSequence)
                }
                let deviceID: String?
                do throws(ErrorBody) { deviceID = try Self.deviceParameter(request.query["device_id"]) } catch {
                    metrics.increment("switchboard_connections_refused_total", ["reason": error.code.rawValue])
                    return .reject(failure(error))
                }
                authenticated[connection] = (token, resume, deviceID)
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
        connectLimit.admit(Hub.userKey(app.id, identity), now: .now)
    }

    /// Counts a REST write of `user` (`cost` writes' worth) against `writes_per_user_per_minute`;
    /// past it the request is refused with `429 rate_limited` before anything is read or written.
    func admitWrite(_ user: UserCredentials, cost: Double = 1) throws(ErrorBody) {
        if let wait = writeLimit.admit(Hub.userKey(user.app.id, user.identity), cost: cost, now: .now) {
            throw ErrorBody(.rateLimited, "too many changes (writes_per_user_per_minute); retry in \(wait) s")
        }
    }

    func webSocketOpened(_ connection: ConnectionID, tag: Int) {
        switch Endpoint(rawValue: tag) {
        case .signaling:
            guard let (token, resume, deviceID) = authenticated.removeValue(forKey: connection) else { return }
            guard let cluster = hub.cluster else {
                return hub.connected(connection, claims: token.claims, app: token.app, resume: resume, deviceID: deviceID, secretTag: token.secretTag)
            }
            // In a cluster the connects of an identity are counted across the nodes too: past
            // the limit there, the connection is closed (1008) before it gets a session.
            hub.pendingResumes.insert(connection)
            let limit = configuration.limits.connectsPerIdentityPerMinute
            cluster.admitConnect(appID: token.app.id, identity: token.claims.sub, limit: limit, nowMillis: hub.wallMillis) { [weak self] admitted in
                guard let self, hub.pendingResumes.remove(connection) != nil else { return }
                guard admitted else {
                    metrics.increment("switchboard_connections_refused_total", ["reason": ErrorCode.rateLimited.rawValue])
                    server?.close(connection, code: CloseCode.policyViolation, reason: "too many connects for this identity (connects_per_identity_per_minute)")
                    return
                }
                hub.connected(connection, claims: token.claims, app: token.app, resume: resume, deviceID: deviceID, secretTag: token.secretTag)
            }
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
    /// From now on `/readyz` answers 503 and no connection is accepted or upgraded.
    func beginDraining() { draining = true }

    /// Closes every WebSocket with `code` (1001 going away; 1012 in a cluster: reconnect and
    /// resume on another node) and completes once they are closed, and with
    /// `waitForSessions` once every session has left (taken by another node), or at `grace`.
    func drain(grace: Duration, code: UInt16 = 1001, waitForSessions: Bool = false, completion: @escaping @Sendable () -> Void) {
        draining = true
        guard let server else {
            completion()
            return
        }
        for connection in server.webSocketConnections {
            server.close(connection, code: code, reason: code == 1001 ? "server shutting down" : "server restarting: reconnect")
        }
        let deadline = ContinuousClock.now + grace
        func check() {
            if (server.webSocketCount == 0 && (!waitForSessions || hub.sessionCount == 0)) || ContinuousClock.now >= deadline {
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

    /// A REST request's body as `T`, or why not (`malformed_json`, `bad_request`).
    func decodeBody<T: Decodable>(_ rest: RESTRequest, as type: T.Type = T.self) throws(ErrorBody) -> T {
        try Self.decode(rest.http.body, as: T.self)
    }

    /// A JSON body as `T`, decoded as WebSocket messages are (parsed, then read from the value):
    /// a refusal names the field at fault (`wrong type at 'ring_timeout_seconds'` for 30.5,
    /// which Foundation's decoder reports without a path), and a member named twice counts once,
    /// the last (protocol.md).
    static func decode<T: Decodable>(_ bytes: [UInt8], as type: T.Type = T.self) throws(ErrorBody) -> T {
        guard let value = MessageCodec.parseJSON(bytes) else {
            throw ErrorBody(.malformedJSON, "the body is not valid JSON")
        }
        do { return try JSONValueDecoder().decode(T.self, from: value) } catch {
            throw ErrorBody(.badRequest, "the body does not match the expected fields: \(describe(error))")
        }
    }

    /// A write the store refused: 503 `unavailable` when the storage refuses writes (disk full,
    /// read-only; retry later), 500 `internal` for anything else.
    func storeFailure(_ error: any Error, saving what: String) -> ErrorBody {
        if let problem = Store.storageProblem(of: error) {
            return ErrorBody(.unavailable, "storage unavailable (\(problem)): \(what) could not be saved; retry later")
        }
        logger.error("store write failed", ["what": what, "error": "\(error)"])
        return ErrorBody(.internal, "could not save \(what)")
    }

    /// Answers once `body` has run against the store, off the loop and after every write queued
    /// before it (`Hub.withStore`); `respond` turns its result into the response on the loop,
    /// or throws the refusal.
    func fromStore<T: Sendable>(
        for appID: String, afterQueuedWrites: Bool = true, _ body: @escaping @Sendable (Store) throws -> T,
        _ respond: @escaping (Result<T, any Error>) throws(ErrorBody) -> HTTPResponse
    ) -> RESTAnswer {
        .later { [self] reply in
            hub.withStore(for: appID, body, afterQueuedWrites: afterQueuedWrites) { [self] result in
                do throws(ErrorBody) { reply(try respond(result)) } catch { reply(failure(error)) }
            }
        }
    }

    /// The answer of a hub operation that answers through a closure: `status` and its value on
    /// success, the error with its code's status otherwise.
    func answer(status: Int, _ operation: @escaping (@escaping (Result<JSONValue, ErrorBody>) -> Void) -> Void) -> RESTAnswer {
        .later { [self] reply in
            operation { [self] result in
                switch result {
                case .success(let value): reply(encoded(status, value))
                case .failure(let error): reply(failure(error))
                }
            }
        }
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

