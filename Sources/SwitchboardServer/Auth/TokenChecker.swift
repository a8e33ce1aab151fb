import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// An access token that verified: its claims, its app, and a tag of the secret that signed it
/// (`Hub.secretTag`: a session ends when that secret is no longer accepted).
struct VerifiedToken {
    let claims: AccessTokenClaims
    let app: App
    let secretTag: String
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
        return VerifiedToken(claims: verified.claims, app: app, secretTag: Hub.secretTag(secrets[verified.secretIndex]))
    }
}
