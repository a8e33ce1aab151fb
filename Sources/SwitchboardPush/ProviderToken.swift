import SwitchboardProtocol
import Foundation
import Synchronization
import SwitchboardSystem
import SwitchboardSupport

/// Apple's token-based authentication: one ES256 JWT per signing key, reused for every request
/// and re-minted only when it gets old (Apple refuses tokens older than an hour and throttles
/// ones refreshed more often than every 20 minutes) or when Apple says it expired.
public final class ProviderTokenCache: Sendable {
    /// A minted token and when.
    public struct Token: Sendable, Equatable {
        public var jwt: String
        public var issuedAt: Date
    }

    public let keyID: String
    public let teamID: String
    /// How old a token may get before it is replaced (20–60 minutes; default 40).
    public let refreshInterval: Duration
    private let key: ECPrivateKey
    private let clock: @Sendable () -> Date
    private let current = Locked<Token?>(nil)
    private let mints = Atomic<Int>(0)
    private let settle: (@Sendable (_ minted: Token, _ replacing: Token?) -> String?)?

    /// Several processes that push with one key must use one token (Apple refuses a new one
    /// within 20 minutes of the last): `settle` is handed every token this cache mints, with
    /// the one it replaces, before it is used, and answers the token to use (the server keeps
    /// it in its store: the minted one when it is the first to replace that one, else the one
    /// another process stored first). Nil: the minted one.
    public init(
        key: ECPrivateKey, keyID: String, teamID: String, refreshInterval: Duration = .seconds(40 * 60),
        clock: @escaping @Sendable () -> Date = { Date() }, settle: (@Sendable (_ minted: Token, _ replacing: Token?) -> String?)? = nil
    ) {
        self.settle = settle
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.refreshInterval = min(max(refreshInterval, .seconds(20 * 60)), .seconds(60 * 60))
        self.clock = clock
    }

    /// Starts from a token minted earlier (by another process with the same key), if it is
    /// still young enough and really signed by this key, team and key id. Apple throttles
    /// providers that mint new tokens more often than every 20 minutes, so processes that come
    /// and go (the command line) should share one.
    public func adopt(_ jwt: String) -> Bool {
        guard let token = verified(jwt) else { return false }
        current.withLock { $0 = token }
        return true
    }

    /// `jwt` as a token of this key, team and key id, still young enough; nil when it is not.
    private func verified(_ jwt: String) -> Token? {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let signature = Base64URL.decode(parts[2]), let claimsBytes = Base64URL.decode(parts[1]),
            let headerBytes = Base64URL.decode(parts[0]),
            String(decoding: headerBytes, as: UTF8.self) == #"{"alg":"ES256","kid":"\#(keyID)"}"#,
            let claims = try? JSONSerialization.jsonObject(with: Data(claimsBytes)) as? [String: Any],
            claims["iss"] as? String == teamID, let issued = (claims["iat"] as? NSNumber)?.int64Value,
            let publicKey = try? ECPublicKey(pem: key.publicKeyPEM),
            publicKey.verify(signature, of: Array("\(parts[0]).\(parts[1])".utf8))
        else { return nil }
        let issuedAt = Date(timeIntervalSince1970: Double(issued))
        let age = clock().timeIntervalSince(issuedAt)
        guard age >= 0, age < refreshInterval.seconds else { return nil }
        return Token(jwt: jwt, issuedAt: issuedAt)
    }

    /// The token in use, if one was minted or adopted.
    public var currentToken: Token? { current.withLock { $0 } }

    /// Tokens minted and put in use so far (one another process stored first is not counted).
    public var mintCount: Int { mints.load(ordering: .relaxed) }

    /// The token to use now: the cached one, or a new one when it is too old.
    public func token() throws -> Token {
        try reuse { token, now in now.timeIntervalSince(token.issuedAt) < refreshInterval.seconds }
    }

    /// Apple answered `ExpiredProviderToken` for `stale`: replace it, unless another request has
    /// already done so. Returns the token to retry with.
    public func replace(_ stale: Token) throws -> Token {
        try reuse { token, _ in token != stale }
    }

    /// The cached token if `usable` says so, else a new one minted under the same lock (so
    /// requests racing for a new token mint one), settled with the other processes (`settle`).
    private func reuse(if usable: (Token, Date) -> Bool) throws -> Token {
        let now = clock()
        return try current.withLock { token -> Token in
            if let token, usable(token, now) { return token }
            var fresh = try mint(at: now)
            if let settle, let shared = settle(fresh, token), shared != fresh.jwt, let other = verified(shared) {
                fresh = other
            } else {
                mints.add(1, ordering: .relaxed)
            }
            token = fresh
            return fresh
        }
    }

    private func mint(at now: Date) throws -> Token {
        let header = Base64URL.encode(Array(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8))
        let issued = Int64(now.timeIntervalSince1970)
        let claims = Base64URL.encode(Array(#"{"iss":"\#(teamID)","iat":\#(issued)}"#.utf8))
        let input = header + "." + claims
        let signature = try key.sign(Array(input.utf8))
        return Token(jwt: input + "." + Base64URL.encode(signature), issuedAt: Date(timeIntervalSince1970: Double(issued)))
    }
}
