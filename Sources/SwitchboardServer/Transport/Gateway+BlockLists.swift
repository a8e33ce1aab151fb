import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardPush

extension Gateway {
    // MARK: Block lists

    func routeBlocked(_ request: HTTPRequest) -> (String, HTTPResponse) {
        let route = "/v1/users/me/blocked"
        let (claims, app): (AccessTokenClaims, App)
        switch user(request) {
        case .failure(let error): return (route, failure(error))
        case .success(let found): (claims, app) = found
        }
        switch request.method {
        case .get:
            return (route, encoded(200, ["identities": (try? hub.store.blocked(appID: app.id, userID: claims.sub)) ?? []]))
        case .put:
            struct Body: Decodable { var identities: [String] }
            let body: Body
            do { body = try decoder.decode(Body.self, from: Data(request.body)) } catch { return (route, decodeFailure(request.body, error)) }
            guard body.identities.count <= 10_000 else { return (route, failure(ErrorBody(.payloadTooLarge, "at most 10000 identities"))) }
            do { try hub.store.setBlocked(body.identities, appID: app.id, userID: claims.sub) } catch {
                return (route, storeFailure(error, saving: "the block list"))
            }
            return (route, HTTPResponse(status: 204))
        default:
            return (route, methodNotAllowed(allowed: "GET, PUT"))
        }
    }
}
