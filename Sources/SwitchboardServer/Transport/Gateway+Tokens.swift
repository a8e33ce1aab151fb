import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// Who made a REST request.
extension Gateway {
    // MARK: TURN

    func turnCredentials(_ request: HTTPRequest) -> HTTPResponse {
        switch authenticate(request) {
        case .failure(let error): return unauthorized(error)
        case .success(let caller):
            let identity: String
            switch caller {
            case .app: identity = "app"
            case .user(let claims, _): identity = claims.sub
            }
            return encoded(200, hub.turn.credentials(for: identity))
        }
    }

    // MARK: Development tokens

    /// `POST /v1/dev/tokens {"identity": "alice", "name": "Alice"}`: a token for the oldest app,
    /// joining any room and calling. Only with `--dev-tokens`.
    func issueDevelopmentToken(_ request: HTTPRequest) -> HTTPResponse {
        struct Body: Decodable {
            var identity: String
            var name: String?
        }
        let body: Body
        do { body = try decoder.decode(Body.self, from: Data(request.body)) } catch { return decodeFailure(request.body, error) }
        guard !body.identity.isEmpty, body.identity.utf8.count <= 256, (body.name?.utf8.count ?? 0) <= 256 else {
            return failure(ErrorBody(.badRequest, "identity must be 1 to 256 bytes"))
        }
        guard let app = (try? store.allApps())?.first else {
            return failure(ErrorBody(.notFound, "there is no app yet"))
        }
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: body.identity, name: body.name,
            grants: Grants(room: "*", roomJoin: true, call: true), ttlSeconds: 6 * 3600)
        logger.info("development token issued", ["app": app.id, "identity": body.identity])
        return encoded(201, TokenResponse(token: AccessTokenVerifier.sign(claims, secret: app.apiSecret), expiresAt: claims.exp, identity: body.identity))
    }
}
