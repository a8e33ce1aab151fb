import SwitchboardProtocol
import SwitchboardSystem

/// A REST request on its way to its handler: the HTTP request and the path's parameters.
struct RESTRequest {
    let http: HTTPRequest
    /// The values of the route template's `{name}` segments.
    let parameters: [String: String]

    /// The value of the template's `{name}` segment (every handler asks only for its own).
    subscript(_ name: String) -> String { parameters[name] ?? "" }
}

/// A REST handler with the credentials it needs, checked by the router before it runs. A
/// handler throws an `ErrorBody` to refuse (the closures here cannot spell that type: Swift
/// infers a closure's typed `throws` only when told); the router answers it with the code's
/// status.
enum RESTHandler: Sendable {
    /// Credentials of its own, or none (health, metrics; `POST /v1/tokens` reads Basic auth).
    case open(@Sendable (Gateway, RESTRequest) throws -> Gateway.RESTAnswer)
    /// The app's credentials (HTTP Basic) or a user's access token (Bearer).
    case requester(@Sendable (Gateway, RESTRequest, Requester) throws -> Gateway.RESTAnswer)
    /// A user's access token: the endpoint acts for that user.
    case user(@Sendable (Gateway, RESTRequest, UserCredentials) throws -> Gateway.RESTAnswer)
}

/// One REST route: a path template (`{name}` stands for one path segment) and its handler for
/// each method it answers.
struct RESTRoute: Sendable {
    let template: String
    let endpoints: [(method: HTTPMethod, handler: RESTHandler)]
    private let segments: [Substring]

    init(_ template: String, _ endpoints: [(HTTPMethod, RESTHandler)]) {
        self.template = template
        self.endpoints = endpoints.map { (method: $0.0, handler: $0.1) }
        segments = template.split(separator: "/")
    }

    var methods: [HTTPMethod] { endpoints.map(\.method) }

    /// The path's parameters if it matches the template, else nil.
    func match(_ path: String) -> [String: String]? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        guard parts.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (part, segment) in zip(parts, segments) {
            if segment.hasPrefix("{") {
                guard !part.isEmpty else { return nil }
                parameters[String(segment.dropFirst().dropLast())] = String(part)
            } else if part != segment {
                return nil
            }
        }
        return parameters
    }

    /// The `Allow` header of a 405.
    var allow: String { methods.map(\.rawValue).joined(separator: ", ") }
}

extension Gateway {
    /// Every REST route the server answers, as web/openapi.json documents them (HEAD aside),
    /// with its handlers: the one place a request finds its code. A path no route matches is
    /// `404 not_found`, a method its route lacks `405` with `Allow` from here, and the template
    /// is the request's metrics label.
    static let restRoutes: [RESTRoute] = [
        RESTRoute("/healthz", [(.get, .open { $0.health($1) }), (.head, .open { $0.health($1) })]),
        RESTRoute("/readyz", [(.get, .open { $0.readiness($1) }), (.head, .open { $0.readiness($1) })]),
        RESTRoute("/metrics", [(.get, .open { $0.metricsPage($1) })]),
        RESTRoute("/v1/tokens", [(.post, .open { try $0.issueToken($1) })]),
        RESTRoute("/v1/dev/tokens", [(.post, .open { try $0.issueDevelopmentToken($1) })]),
        RESTRoute("/v1/turn", [(.get, .requester { $0.turnCredentials($2) })]),
        RESTRoute("/v1/rooms", [(.get, .requester { $0.listRooms($2) }), (.post, .requester { try $0.createRoom($1, $2) })]),
        RESTRoute("/v1/rooms/{name}", [(.get, .requester { try $0.showRoom($1, $2) }), (.delete, .requester { try $0.deleteRoom($1, $2) })]),
        RESTRoute("/v1/rooms/{name}/data", [(.post, .requester { try $0.sendRoomData($1, $2) })]),
        RESTRoute("/v1/rooms/{name}/peers/{peer_id}", [(.delete, .requester { try $0.removePeer($1, $2) })]),
        RESTRoute("/v1/devices", [(.get, .user { $0.listDevices($2) })]),
        RESTRoute("/v1/devices/{device_id}", [(.put, .user { try $0.registerDevice($1, $2) }), (.delete, .user { try $0.removeDevice($1, $2) })]),
        RESTRoute("/v1/users/me/blocked", [(.get, .user { $0.blockList($2) }), (.put, .user { try $0.setBlockList($1, $2) })]),
        RESTRoute("/v1/calls", [(.get, .user { try $0.callHistory($1, $2) }), (.post, .user { try $0.createCall($1, $2) })]),
        RESTRoute("/v1/calls/{call_id}", [(.get, .user { $0.callSummary($1, $2) })]),
        RESTRoute("/v1/calls/{call_id}/trace", [(.get, .user { $0.callTrace($1, $2) })]),
        RESTRoute("/v1/calls/{call_id}/answer", [(.post, .user { try $0.callAction(MessageType.callAnswer, $1, $2) })]),
        RESTRoute("/v1/calls/{call_id}/decline", [(.post, .user { try $0.callAction(MessageType.callDecline, $1, $2) })]),
        RESTRoute("/v1/calls/{call_id}/cancel", [(.post, .user { try $0.callAction(MessageType.callCancel, $1, $2) })]),
        RESTRoute("/v1/calls/{call_id}/end", [(.post, .user { try $0.callAction(MessageType.callEnd, $1, $2) })]),
        RESTRoute("/v1/calls/{call_id}/hold", [(.post, .user { try $0.holdCall($1, $2) })]),
    ]

    /// The REST route of `request` and the answer of its handler, or nil for a path that is
    /// no REST route (the web client's files, the WebSocket endpoints, the OpenAPI document).
    func routeREST(_ request: HTTPRequest) -> (route: String, answer: RESTAnswer)? {
        for route in Self.restRoutes where route.template != "/v1/dev/tokens" || configuration.devTokens {
            guard let parameters = route.match(request.path) else { continue }
            guard let handler = route.endpoints.first(where: { $0.method == request.method })?.handler else {
                return (route.template, .now(methodNotAllowed(allowed: route.allow)))
            }
            let rest = RESTRequest(http: request, parameters: parameters)
            do {
                switch handler {
                case .open(let handle):
                    return (route.template, try handle(self, rest))
                case .requester(let handle):
                    return (route.template, try handle(self, rest, authenticate(request).get()))
                case .user(let handle):
                    return (route.template, try handle(self, rest, user(request).get()))
                }
            } catch let error as ErrorBody {
                return (route.template, .now(failure(error)))
            } catch {
                logger.error("REST handler failed", ["route": route.template, "error": "\(error)"])
                return (route.template, .now(failure(ErrorBody(.internal, "the request failed"))))
            }
        }
        return nil
    }
}
