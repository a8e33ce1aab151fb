import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// An access token that verified: its claims, its app, and which secret signed it.
struct VerifiedToken {
    let claims: AccessTokenClaims
    let app: App
    /// Kept only for `secretTag`, computed when a session needs it (not for every REST request).
    fileprivate let signingSecret: String

    /// A tag of the secret that signed the token (`Hub.secretTag`): a session ends when that
    /// secret is no longer accepted.
    var secretTag: String { Hub.secretTag(signingSecret) }
}

/// Verifies access tokens against the apps as the store's memory has them (never the
/// database: the event loop calls it). The gateway checks the tokens of requests and
/// upgrades with it, the hub those a session refreshes itself with.
struct TokenChecker {
    let verifier: AccessTokenVerifier
    let store: Store

    init(configuration: ServerConfiguration, store: Store) {
        verifier = AccessTokenVerifier(
            maxTokenBytes: configuration.limits.maxTokenBytes,
            leewaySeconds: Int64(configuration.limits.tokenLeewaySeconds),
            maxLifetimeSeconds: Int64(configuration.limits.maxTokenTTLSeconds))
        self.store = store
    }

    func verify(_ token: String, now: Date = Date()) throws(TokenError) -> VerifiedToken {
        var app: App?
        var secrets: [String] = []
        let verified = try verifier.verify(token, now: now) { key in
            guard case .found(let found) = store.cachedApp(apiKey: key) else { return [] }
            app = found
            secrets = found.acceptedSecrets(at: now)
            return secrets
        }
        guard let app else { throw TokenError.unknownIssuer }
        return VerifiedToken(claims: verified.claims, app: app, signingSecret: secrets[verified.secretIndex])
    }
}
