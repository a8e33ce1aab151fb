import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import Testing

@Suite(.timeLimit(.minutes(3))) struct HTTPTests {
    func errorCode(_ response: HTTPClientResponse) throws -> ErrorCode {
        try JSONDecoder().decode(ErrorEnvelope.self, from: Data(response.body)).error.code
    }

    @Test func healthReadinessAndMetricsAnswer() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let health = try await HTTPClient.request("GET", server.baseURL + "/healthz")
        #expect(health.status == 200)
        #expect(health.text == #"{"status":"ok"}"#)
        let ready = try await HTTPClient.request("GET", server.baseURL + "/readyz")
        #expect(ready.status == 200)
        let metrics = try await HTTPClient.request("GET", server.baseURL + "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true)
        #expect(metrics.text.contains("# TYPE switchboard_http_request_duration_seconds histogram"))
        #expect(metrics.text.contains(#"switchboard_http_requests_total{method="GET",route="/healthz",status="200"} 1"#))
    }

    @Test func aPortInUseFailsToStartWithAnErrorAndTheFirstServerKeepsServing() async throws {
        let first = try TestServer()
        defer { first.stop() }
        for _ in 0..<3 {
            #expect(throws: (any Error).self) {
                _ = try TestServer { $0.port = first.server.port }
            }
        }
        let health = try await HTTPClient.request("GET", first.baseURL + "/healthz")
        #expect(health.status == 200)
    }

    @Test func webClientIsServedAndTraversalIsRefused() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let index = try await HTTPClient.request("GET", server.baseURL + "/")
        #expect(index.status == 200)
        #expect(index.headers["content-type"] == "text/html; charset=utf-8")
        #expect(index.text.contains("Switchboard"))
        let traversal = try await HTTPClient.request("GET", server.baseURL + "/%2e%2e/Package.swift")
        #expect(traversal.status == 404 || traversal.status == 403 || traversal.status == 400)
        #expect(!traversal.text.contains("PackageDescription"))
    }

    /// Covers: error:not_found, error:method_not_allowed
    @Test func unknownRoutesGetJSONErrorsWithStableCodes() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let missing = try await HTTPClient.request("GET", server.baseURL + "/v1/nothing-here")
        #expect(missing.status == 404)
        #expect(try errorCode(missing) == .notFound)
        let wrongMethod = try await HTTPClient.request("GET", server.baseURL + "/v1/tokens")
        #expect(wrongMethod.status == 405)
        #expect(wrongMethod.headers["allow"] == "POST")
        #expect(try errorCode(wrongMethod) == .methodNotAllowed)
        let noUpgrade = try await HTTPClient.request("GET", server.baseURL + "/v1/ws")
        #expect(noUpgrade.status == 426)
    }

    func basic(_ app: App, secret: String? = nil) -> (String, String) {
        let credentials = Data("\(app.apiKey):\(secret ?? app.apiSecret)".utf8).base64EncodedString()
        return ("Authorization", "Basic " + credentials)
    }

    @Test func tokenEndpointIssuesVerifiableTokens() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let body = #"{"identity":"bob","name":"Bob","grants":{"call":true,"room":"r1","roomJoin":true},"ttl":600}"#
        let response = try await HTTPClient.request(
            "POST", server.baseURL + "/v1/tokens", headers: [basic(server.app), ("Content-Type", "application/json")],
            body: Array(body.utf8))
        #expect(response.status == 201)
        let issued = try JSONDecoder().decode(TokenResponse.self, from: Data(response.body))
        let claims = try AccessTokenVerifier().verify(issued.token) { $0 == server.app.apiKey ? server.app.apiSecret : nil }
        #expect(claims.sub == "bob")
        #expect(claims.name == "Bob")
        #expect(claims.grants == Grants(room: "r1", roomJoin: true, call: true))
        #expect(claims.iat.map { claims.exp - $0 } == 600)
        #expect(issued.expiresAt == claims.exp)
    }

    @Test func tokenEndpointRefusesBadCredentialsAndBodies() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let url = server.baseURL + "/v1/tokens"
        let good = Array(#"{"identity":"bob"}"#.utf8)

        let noAuth = try await HTTPClient.request("POST", url, body: good)
        #expect(noAuth.status == 401)
        #expect(try errorCode(noAuth) == .unauthorized)
        let wrongSecret = try await HTTPClient.request("POST", url, headers: [basic(server.app, secret: "nope")], body: good)
        #expect(wrongSecret.status == 401)
        #expect(!wrongSecret.text.contains(server.app.apiSecret))

        let malformed = try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: Array("{".utf8))
        #expect(malformed.status == 400)
        #expect(try errorCode(malformed) == .malformedJSON)
        let wrongShape = try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: Array(#"{"name":"x"}"#.utf8))
        #expect(wrongShape.status == 400)
        #expect(try errorCode(wrongShape) == .badRequest)
        let badTTL = try await HTTPClient.request(
            "POST", url, headers: [basic(server.app)], body: Array(#"{"identity":"bob","ttl":0}"#.utf8))
        #expect(try errorCode(badTTL) == .badRequest)

        // The server keeps serving after all of that.
        let ok = try await HTTPClient.request("POST", url, headers: [basic(server.app)], body: good)
        #expect(ok.status == 201)
    }

    /// A body of exactly `max_body_bytes` is read (and judged on its content); one byte more is
    /// `413 payload_too_large` and the connection is closed.
    /// Covers: limit:max_body_bytes, error:payload_too_large
    @Test func oversizedBodyIsRefusedWith413() async throws {
        let server = try TestServer { $0.limits.maxBodyBytes = 4096 }
        defer { server.stop() }
        let atLimit = try await HTTPClient.request("POST", server.baseURL + "/v1/tokens", body: Array(repeating: UInt8(ascii: "a"), count: 4096))
        #expect(atLimit.status == 401, "read, then refused for what it is (no credentials): \(atLimit.text)")
        let over = try await HTTPClient.request("POST", server.baseURL + "/v1/tokens", body: Array(repeating: UInt8(ascii: "a"), count: 4097))
        #expect(over.status == 413)
        #expect(try errorCode(over) == .payloadTooLarge)
        let big = try await HTTPClient.request("POST", server.baseURL + "/v1/tokens", body: Array(repeating: UInt8(ascii: "a"), count: 10_000))
        #expect(big.status == 413)
        let after = try await HTTPClient.request("GET", server.baseURL + "/healthz")
        #expect(after.status == 200)
    }

    /// A request head within `max_header_bytes` is served; a larger one gets no answer: the
    /// connection is closed (docs/configuration.md), and the server serves on.
    /// Covers: limit:max_header_bytes
    @Test func oversizedHeadersAreRefused() async throws {
        let server = try TestServer {
            $0.limits.maxHeaderBytes = 2048
            $0.limits.maxTokenBytes = 1024  // a head must carry the longest token (validate)
        }
        defer { server.stop() }
        func send(filler: Int) async throws -> String {
            let socket = try RawSocket(port: server.server.port)
            defer { socket.close() }
            try socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Filler: \(String(repeating: "x", count: filler))\r\n\r\n")
            return String(decoding: try await socket.readUntilClosed(limit: .seconds(10) * testSlowdown), as: UTF8.self)
        }
        // libwebsockets counts the header data it keeps (names and values), a little less than
        // the head's bytes: 1,900 bytes of one header fit in 2,048, 2,100 do not.
        #expect(try await send(filler: 1900).hasPrefix("HTTP/1.1 200"), "a head under the limit is served")
        let refused = try await send(filler: 2100)
        #expect(refused.isEmpty, "a head over the limit gets no answer at all: \(refused.prefix(80))")
        #expect(try await HTTPClient.request("GET", server.baseURL + "/healthz").status == 200)
    }
}

@Suite(.timeLimit(.minutes(3))) struct CrossOriginTests {
    static let preflight: [(String, String)] = [
        ("Origin", "https://app.example.com"), ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "authorization, content-type"),
    ]

    @Test func anAllowedOriginGetsCorrectPreflightAnswersAndOthersDoNot() async throws {
        let server = try TestServer { $0.corsOrigins = ["https://app.example.com"] }
        defer { server.stop() }
        let allowed = try await HTTPClient.request("OPTIONS", server.baseURL + "/v1/calls", headers: Self.preflight)
        #expect(allowed.status == 204)
        #expect(allowed.headers["access-control-allow-origin"] == "https://app.example.com")
        #expect(allowed.headers["access-control-allow-methods"]?.contains("POST") == true)
        #expect(allowed.headers["access-control-allow-headers"]?.contains("authorization") == true)
        #expect(allowed.headers["access-control-max-age"] == "600")
        #expect(allowed.headers["vary"]?.contains("Origin") == true)

        var stranger = Self.preflight
        stranger[0] = ("Origin", "https://evil.example")
        let refused = try await HTTPClient.request("OPTIONS", server.baseURL + "/v1/calls", headers: stranger)
        #expect(refused.status == 403)
        #expect(refused.headers["access-control-allow-origin"] == nil)
        var oddHeader = Self.preflight
        oddHeader[2] = ("Access-Control-Request-Headers", "x-secret-thing")
        #expect(try await HTTPClient.request("OPTIONS", server.baseURL + "/v1/calls", headers: oddHeader).status == 403)
        var oddMethod = Self.preflight
        oddMethod[1] = ("Access-Control-Request-Method", "PATCH")
        #expect(try await HTTPClient.request("OPTIONS", server.baseURL + "/v1/calls", headers: oddMethod).status == 403)

        // The request itself: the allowed origin may read the answer (errors included).
        let bearer = ("Authorization", "Bearer " + server.token("alice"))
        let turn = try await HTTPClient.request("GET", server.baseURL + "/v1/turn", headers: [bearer, ("Origin", "https://app.example.com")])
        #expect(turn.status == 200)
        #expect(turn.headers["access-control-allow-origin"] == "https://app.example.com")
        #expect(turn.headers["access-control-expose-headers"]?.contains("retry-after") == true)
        let unauthorized = try await HTTPClient.request("GET", server.baseURL + "/v1/turn", headers: [("Origin", "https://app.example.com")])
        #expect(unauthorized.status == 401 && unauthorized.headers["access-control-allow-origin"] == "https://app.example.com")
        let other = try await HTTPClient.request("GET", server.baseURL + "/v1/turn", headers: [bearer, ("Origin", "https://evil.example")])
        #expect(other.status == 200 && other.headers["access-control-allow-origin"] == nil)
    }

    @Test func withoutCorsOriginsNoOriginIsAllowed() async throws {
        let server = try TestServer()
        defer { server.stop() }
        let answer = try await HTTPClient.request("OPTIONS", server.baseURL + "/v1/calls", headers: Self.preflight)
        #expect(answer.status == 403)
        #expect(answer.headers["access-control-allow-origin"] == nil)
        let plain = try await HTTPClient.request(
            "GET", server.baseURL + "/healthz", headers: [("Origin", "https://app.example.com")])
        #expect(plain.status == 200 && plain.headers["access-control-allow-origin"] == nil)

        let any = try TestServer { $0.corsOrigins = ["*"] }
        defer { any.stop() }
        let anywhere = try await HTTPClient.request("OPTIONS", any.baseURL + "/v1/rooms", headers: Self.preflight)
        #expect(anywhere.status == 204 && anywhere.headers["access-control-allow-origin"] == "https://app.example.com")
    }
}
