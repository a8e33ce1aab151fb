import Foundation
import SwitchboardProtocol
import SwitchboardSystem

extension Gateway {
    // MARK: Access tokens

    /// `POST /v1/tokens` with the app's credentials (HTTP Basic): a user's access token.
    func issueToken(_ rest: RESTRequest) throws(ErrorBody) -> RESTAnswer {
        guard let app = basicAuthApp(rest.http.headers["authorization"]) else {
            return .now(
                failure(
                    ErrorBody(.unauthorized, "POST /v1/tokens needs HTTP Basic auth with the app's API key and secret"),
                    headers: [("www-authenticate", "Basic realm=\"switchboard\"")]))
        }
        let body = try decodeBody(rest, as: TokenRequest.self)
        try FieldLimits.check(body.identity, field: "identity", limit: FieldLimits.identity)
        try FieldLimits.check(body.name, field: "name", limit: FieldLimits.displayName)
        try FieldLimits.check(body.handle, field: "handle", limit: FieldLimits.handle)
        let ttl = body.ttl ?? 3600
        guard (1...configuration.limits.maxTokenTTLSeconds).contains(ttl) else {
            throw ErrorBody(.badRequest, "ttl must be 1 to \(configuration.limits.maxTokenTTLSeconds) seconds")
        }
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: body.identity, name: body.name, handle: body.handle, grants: body.grants ?? Grants(),
            ttlSeconds: ttl)
        let token = AccessTokenVerifier.sign(claims, secret: app.apiSecret)
        logger.info("token issued", ["app": app.id, "identity": body.identity, "ttl": String(ttl)])
        return .now(encoded(201, TokenResponse(token: token, expiresAt: claims.exp, identity: claims.sub)))
    }

    /// `POST /v1/dev/tokens {"identity": "alice", "name": "Alice"}`: a token for the oldest app,
    /// joining any room and calling. Only with `--dev-tokens`.
    func issueDevelopmentToken(_ rest: RESTRequest) throws(ErrorBody) -> RESTAnswer {
        struct Body: Decodable {
            var identity: String
            var name: String?
        }
        let body: Body = try decodeBody(rest)
        try FieldLimits.check(body.identity, field: "identity", limit: FieldLimits.identity)
        try FieldLimits.check(body.name, field: "name", limit: FieldLimits.displayName)
        return fromStore(for: "", { try $0.allApps().first }) { [self] result throws(ErrorBody) in
            guard let app = try result.mapError({ ErrorBody.storeRead($0, reading: "the apps") }).get() else {
                throw ErrorBody(.notFound, "there is no app yet")
            }
            let claims = AccessTokenIssuer.claims(
                apiKey: app.apiKey, identity: body.identity, name: body.name,
                grants: Grants(room: "*", roomJoin: true, call: true), ttlSeconds: min(6 * 3600, configuration.limits.maxTokenTTLSeconds))
            logger.info("development token issued", ["app": app.id, "identity": body.identity])
            let token = AccessTokenVerifier.sign(claims, secret: app.apiSecret)
            return encoded(201, TokenResponse(token: token, expiresAt: claims.exp, identity: body.identity))
        }
    }

    // MARK: TURN

    /// `GET /v1/turn`: short-lived TURN credentials for the requester.
    func turnCredentials(_ requester: Requester) -> RESTAnswer {
        let identity: String
        switch requester {
        case .app: identity = "app"
        case .user(let claims, _): identity = claims.sub
        }
        return .now(encoded(200, hub.turn.credentials(for: identity)))
    }
}
