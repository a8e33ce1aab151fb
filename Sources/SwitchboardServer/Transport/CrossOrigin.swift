import SwitchboardSystem

/// Which web origins may call the REST API from a browser (CORS, `cors_origins`), and the
/// headers that say so. Empty: none (the web client served by the server itself needs none).
struct CrossOriginPolicy: Sendable {
    /// Exact origins (`https://app.example.com`), or `*` for any.
    let origins: Set<String>

    static let allowedMethods = "GET, HEAD, POST, PUT, DELETE"
    /// Request headers a page may send: the API's own.
    static let allowedHeaders: Set<String> = ["authorization", "content-type", "idempotency-key", "x-request-id"]
    /// Response headers a page may read besides the simple ones.
    static let exposedHeaders = "retry-after, allow"
    static let maxAgeSeconds = 600

    init(origins: [String]) {
        self.origins = Set(origins.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 })
    }

    func allows(_ origin: String) -> Bool {
        !origins.isEmpty && (origins.contains("*") || origins.contains(origin))
    }

    /// Whether `request` is a browser's preflight (an `OPTIONS` asking before a request).
    static func isPreflight(_ request: HTTPRequest) -> Bool {
        request.method == .options && request.headers["origin"] != nil && request.headers["access-control-request-method"] != nil
    }

    /// The answer to a preflight from an allowed origin, or nil when the origin, the method or
    /// a header asked for is not allowed.
    func preflight(_ request: HTTPRequest) -> [(String, String)]? {
        guard let origin = request.headers["origin"], allows(origin),
            let method = request.headers["access-control-request-method"]?.uppercased(),
            Self.allowedMethods.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == method })
        else { return nil }
        let asked = (request.headers["access-control-request-headers"] ?? "").split(separator: ",")
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
        guard asked.allSatisfy(Self.allowedHeaders.contains) else { return nil }
        return [
            ("access-control-allow-origin", origin),
            ("access-control-allow-methods", Self.allowedMethods),
            ("access-control-allow-headers", Self.allowedHeaders.sorted().joined(separator: ", ")),
            ("access-control-max-age", String(Self.maxAgeSeconds)),
            ("vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        ]
    }

    /// Headers for the answer to a request from `origin`: empty when it is not allowed (the
    /// browser then keeps the answer from the page).
    func responseHeaders(origin: String?) -> [(String, String)] {
        guard let origin, allows(origin) else { return origins.isEmpty ? [] : [("vary", "Origin")] }
        return [("access-control-allow-origin", origin), ("access-control-expose-headers", Self.exposedHeaders), ("vary", "Origin")]
    }
}
