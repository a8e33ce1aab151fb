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
    /// are `unauthorized` and `token_expired` (401). Reads only the apps in memory: a key
    /// memory does not know was looked up before (`apiKeyToLookUp`).
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
            let verified = try verify(token)
            return .success(.user(verified.claims, verified.app))
        } catch {
            return .failure(ErrorBody(error.code, error.description))
        }
    }

    /// Verifies an access token against the secrets of its app as memory has them.
    func verify(_ token: String) throws(TokenError) -> VerifiedToken { try hub.tokens.verify(token) }

    /// A user's token, for endpoints that act as that user; app credentials are `forbidden`.
    func user(_ request: HTTPRequest) -> Result<UserCredentials, ErrorBody> {
        switch authenticate(request) {
        case .failure(let error): return .failure(error)
        case .success(.app): return .failure(ErrorBody(.forbidden, "this endpoint acts for a user: send a user's access token"))
        case .success(.user(let claims, let app)): return .success(UserCredentials(claims: claims, app: app))
        }
    }

    /// The app whose API key and secret are in an HTTP Basic `Authorization` header (either of
    /// its secrets during a rotation's grace period).
    func basicAuthApp(_ header: String?) -> App? {
        guard let (key, secret) = basicCredentials(header), case .found(let app) = store.cachedApp(apiKey: key),
            app.acceptedSecrets().contains(where: { Crypto.constantTimeEquals(Array($0.utf8), Array(secret.utf8)) })
        else { return nil }
        return app
    }

    /// The API key and secret of an HTTP Basic `Authorization` header.
    private func basicCredentials(_ header: String?) -> (key: String, secret: String)? {
        guard let header, header.lowercased().hasPrefix("basic "), header.utf8.count <= 1024,
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    func bearerToken(_ header: String?) -> String? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
    }

    /// The access token of a WebSocket upgrade: the `access_token` query parameter, else a
    /// bearer `Authorization` header.
    func upgradeToken(_ request: HTTPRequest) -> String {
        request.query["access_token"] ?? bearerToken(request.headers["authorization"]) ?? ""
    }

    /// An API key that `request`'s credentials name (unverified: a Basic header's key, or a
    /// token's `iss`), well formed, that memory neither knows nor knows to be unknown: the
    /// store is asked off the loop (`Store.lookUpApp`) before the request is answered.
    func apiKeyToLookUp(_ request: HTTPRequest) -> String? {
        let key: String?
        if request.path == "/v1/ws" {
            key = hub.tokens.verifier.issuer(of: upgradeToken(request))
        } else if let (basicKey, _) = basicCredentials(request.headers["authorization"]) {
            key = basicKey
        } else {
            key = bearerToken(request.headers["authorization"]).flatMap(hub.tokens.verifier.issuer(of:))
        }
        guard let key, store.cachedApp(apiKey: key) == .notLoaded else { return nil }
        return key
    }
}
