import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardPush

extension Gateway {
    // MARK: Block lists

    func routeBlocked(_ request: HTTPRequest) -> (String, RESTAnswer) {
        let route = "/v1/users/me/blocked"
        let (claims, app): (AccessTokenClaims, App)
        switch user(request) {
        case .failure(let error): return (route, .now(failure(error)))
        case .success(let found): (claims, app) = found
        }
        let (appID, userID) = (app.id, claims.sub)
        switch request.method {
        case .get:
            return (route, fromStore({ try $0.blocked(appID: appID, userID: userID) }) { [self] result in
                switch result {
                case .success(let identities): return encoded(200, ["identities": identities])
                case .failure(let error):
                    logger.error("block list read failed", ["app": appID, "error": "\(error)"])
                    return failure(.storeRead(error, reading: "the block list"))
                }
            })
        case .put:
            struct Body: Decodable { var identities: [String] }
            let body: Body
            do { body = try decoder.decode(Body.self, from: Data(request.body)) } catch { return (route, .now(decodeFailure(request.body, error))) }
            guard body.identities.count <= 10_000 else { return (route, .now(failure(ErrorBody(.payloadTooLarge, "at most 10000 identities")))) }
            let identities = body.identities
            return (route, fromStore({ try $0.setBlocked(identities, appID: appID, userID: userID) }) { [self] result in
                switch result {
                case .success: return HTTPResponse(status: 204)
                case .failure(let error): return storeFailure(error, saving: "the block list")
                }
            })
        default:
            return (route, .now(methodNotAllowed(allowed: "GET, PUT")))
        }
    }
}
