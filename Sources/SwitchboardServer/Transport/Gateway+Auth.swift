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

/// A user's access token, verified, and the app that issued it.
struct UserCredentials {
    let claims: AccessTokenClaims
    let app: App

    /// The user's identity (the token's `sub`).
    var identity: String { claims.sub }
}

extension Gateway {
    // MARK: Credentials of a REST request

    /// Who sent a REST request, from Basic (app) or Bearer (token) credentials. The refusals
    /// are `unauthorized` and `token_expired` (401).
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

    /// A user's token, for endpoints that act as that user; app credentials are `forbidden`.
    func user(_ request: HTTPRequest) -> Result<UserCredentials, ErrorBody> {
        switch authenticate(request) {
        case .failure(let error): return .failure(error)
        case .success(.app): return .failure(ErrorBody(.forbidden, "this endpoint acts for a user: send a user's access token"))
        case .success(.user(let claims, let app)): return .success(UserCredentials(claims: claims, app: app))
        }
    }

    /// The app whose API key and secret are in an HTTP Basic `Authorization` header.
    func basicAuthApp(_ header: String?) -> App? {
        guard let header, header.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        let key = String(text[..<colon])
        let secret = Array(text[text.index(after: colon)...].utf8)
        guard let app = store.app(apiKey: key), Crypto.constantTimeEquals(Array(app.apiSecret.utf8), secret) else {
            return nil
        }
        return app
    }

    func bearerToken(_ header: String?) -> String? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
    }
}
