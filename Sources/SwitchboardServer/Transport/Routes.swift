import SwitchboardSystem

/// One REST route: a path template (`{name}` stands for one path segment) and the methods it
/// answers.
struct RESTRoute: Sendable, Equatable {
    let template: String
    let methods: [HTTPMethod]
    private let segments: [Substring]

    init(_ template: String, _ methods: [HTTPMethod]) {
        self.template = template
        self.methods = methods
        segments = template.split(separator: "/")
    }

    func matches(_ path: String) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        guard parts.count == segments.count else { return false }
        return zip(parts, segments).allSatisfy { part, segment in
            segment.hasPrefix("{") ? !part.isEmpty : part == segment
        }
    }

    /// The `Allow` header of a 405.
    var allow: String { methods.map(\.rawValue).joined(separator: ", ") }

    static func == (lhs: RESTRoute, rhs: RESTRoute) -> Bool { lhs.template == rhs.template && lhs.methods == rhs.methods }
}

extension Gateway {
    /// Every REST route the server answers, as web/openapi.json documents them (HEAD aside).
    /// The router finds a request's route here before anything else: a path no route matches
    /// is `404 not_found`, a method its route lacks `405` with `Allow` from this table, and the
    /// template is the request's metrics label. A handler not listed here cannot be reached.
    static let restRoutes: [RESTRoute] = [
        RESTRoute("/healthz", [.get, .head]),
        RESTRoute("/readyz", [.get, .head]),
        RESTRoute("/metrics", [.get]),
        RESTRoute("/v1/tokens", [.post]),
        RESTRoute("/v1/dev/tokens", [.post]),
        RESTRoute("/v1/turn", [.get]),
        RESTRoute("/v1/rooms", [.get, .post]),
        RESTRoute("/v1/rooms/{name}", [.get, .delete]),
        RESTRoute("/v1/rooms/{name}/data", [.post]),
        RESTRoute("/v1/rooms/{name}/peers/{peer_id}", [.delete]),
        RESTRoute("/v1/devices", [.get]),
        RESTRoute("/v1/devices/{device_id}", [.put, .delete]),
        RESTRoute("/v1/users/me/blocked", [.get, .put]),
        RESTRoute("/v1/calls", [.get, .post]),
        RESTRoute("/v1/calls/{call_id}", [.get]),
        RESTRoute("/v1/calls/{call_id}/trace", [.get]),
        RESTRoute("/v1/calls/{call_id}/answer", [.post]),
        RESTRoute("/v1/calls/{call_id}/decline", [.post]),
        RESTRoute("/v1/calls/{call_id}/cancel", [.post]),
        RESTRoute("/v1/calls/{call_id}/end", [.post]),
        RESTRoute("/v1/calls/{call_id}/hold", [.post]),
    ]

    /// The REST route `path` belongs to, or nil (the web client's files, the WebSocket
    /// endpoints, the OpenAPI document, or nothing).
    static func restRoute(for path: String) -> RESTRoute? {
        restRoutes.first { $0.matches(path) }
    }
}
