import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// Who made a REST request (not a call's caller).
enum Requester {
    /// The app's backend, with HTTP Basic auth (API key and secret).
    case app(App)
    /// A user, with `Authorization: Bearer <access token>`.
    case user(AccessTokenClaims, App)

    var app: App {
        switch self {
        case .app(let app), .user(_, let app): app
        }
    }

    /// App credentials, or a token with the admin grant.
    var isAdmin: Bool {
        switch self {
        case .app: true
        case .user(let claims, _): claims.grants.admin == true
        }
    }
}

extension Gateway {
    /// The caller of a REST request, from Basic (app) or Bearer (token) credentials.
    func authenticate(_ request: HTTPRequest) -> Result<Requester, ErrorBody> {
        let header = request.headers["authorization"] ?? ""
        if header.lowercased().hasPrefix("basic ") {
            guard let app = basicAuthApp(header) else { return .failure(ErrorBody(.unauthorized, "the API key or secret is wrong")) }
            return .success(.app(app))
        }
        guard let token = bearerToken(header) else {
            return .failure(ErrorBody(.unauthorized, "send Authorization: Bearer <access token> or Basic <API key:secret>"))
        }
        do throws(TokenError) {
            let claims = try verifier.verify(token) { store.app(apiKey: $0)?.apiSecret }
            guard let app = store.app(apiKey: claims.iss) else { throw TokenError.unknownIssuer }
            return .success(.user(claims, app))
        } catch {
            return .failure(ErrorBody(error.code, error.description))
        }
    }

    func unauthorized(_ error: ErrorBody) -> HTTPResponse {
        failure(error, status: error.code == .forbidden ? 403 : 401)
    }

    /// A user's token, for endpoints that act as that user.
    func user(_ request: HTTPRequest) -> Result<(AccessTokenClaims, App), ErrorBody> {
        switch authenticate(request) {
        case .failure(let error): return .failure(error)
        case .success(.app): return .failure(ErrorBody(.forbidden, "this endpoint acts for a user: send a user's access token"))
        case .success(.user(let claims, let app)): return .success((claims, app))
        }
    }


    /// A write the store refused: 503 `unavailable` when the storage refuses writes (disk full,
    /// read-only; retry later), 500 `internal` for anything else.
    func storeFailure(_ error: any Error, saving what: String) -> HTTPResponse {
        if let problem = Store.storageProblem(of: error) {
            return failure(ErrorBody(.unavailable, "storage unavailable (\(problem)): \(what) could not be saved; retry later"))
        }
        logger.error("store write failed", ["what": what, "error": "\(error)"])
        return failure(ErrorBody(.internal, "could not save \(what)"))
    }

    /// Answers once `body` has run against the store, off the loop and after every write queued
    /// before it (`Hub.withStore`); `respond` turns its result into the response, on the loop.
    func fromStore<T: Sendable>(
        _ body: @escaping @Sendable (Store) throws -> T, _ respond: @escaping (Result<T, any Error>) -> HTTPResponse
    ) -> RESTAnswer {
        .later { [hub] reply in hub.withStore(body) { reply(respond($0)) } }
    }
}
