import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// Why an access token was refused. Each case maps to a stable error code.
public enum TokenError: Error, Sendable, Equatable, CustomStringConvertible {
    case missing
    case oversized(limit: Int)
    case malformed(String)
    case unsupportedAlgorithm(String)
    case unknownIssuer
    case badSignature
    case expired
    case notYetValid
    /// `exp` is further ahead than the server lets any token live (`max_token_ttl_seconds`).
    case livesTooLong(limit: Int64)
    case invalidClaims(String)

    public var code: ErrorCode {
        self == .expired ? .tokenExpired : .unauthorized
    }

    public var description: String {
        switch self {
        case .missing: "no access token"
        case .oversized(let limit): "access token is longer than \(limit) bytes"
        case .malformed(let detail): "access token is malformed: \(detail)"
        case .unsupportedAlgorithm(let alg): "access token algorithm \(alg) is not allowed (only HS256)"
        case .unknownIssuer: "access token was issued by an unknown API key"
        case .badSignature: "access token signature does not verify"
        case .expired: "access token has expired"
        case .notYetValid: "access token is not valid yet"
        case .livesTooLong(let limit): "access token expires more than \(limit) s from now (max_token_ttl_seconds)"
        case .invalidClaims(let detail): "access token claims are invalid: \(detail)"
        }
    }
}

/// Signs and verifies access tokens: HS256 JWTs (RFC 7519) signed with the app's API secret.
public struct AccessTokenVerifier: Sendable {
    /// Tokens longer than this are refused before any parsing.
    public var maxTokenBytes: Int
    /// Tolerance for clock skew when checking `exp` and `nbf` (clamped to 0...3600).
    public var leewaySeconds: Int64
    /// The longest a token may still live when it is shown: a token whose `exp` is further
    /// ahead (beyond the leeway) is refused, whoever signed it. Nil: no limit.
    public var maxLifetimeSeconds: Int64?

    public init(maxTokenBytes: Int = 8 * 1024, leewaySeconds: Int64 = 30, maxLifetimeSeconds: Int64? = nil) {
        self.maxTokenBytes = maxTokenBytes
        self.leewaySeconds = min(max(leewaySeconds, 0), 3600)
        self.maxLifetimeSeconds = maxLifetimeSeconds.map { min(max($0, 0), Self.latestTime) }
    }

    /// The last second a time claim may name: the end of year 9999 (what JWT libraries and
    /// date types can represent). Claims outside 0...latestTime are refused, so that no
    /// arithmetic on them can overflow.
    public static let latestTime: Int64 = 253_402_300_799

    /// A verified token: its claims and which of the app's secrets signed it (0: the current
    /// one; 1: the previous one, during a rotation's grace period).
    public struct Verified: Sendable, Equatable {
        public var claims: AccessTokenClaims
        public var secretIndex: Int
    }

    private static let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))

    /// A signed token with `claims`.
    public static func sign(_ claims: AccessTokenClaims, secret: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding these plain value types cannot fail.
        let payload = Base64URL.encode(try! encoder.encode(claims))
        let input = header + "." + payload
        return input + "." + signature(input: input, key: Array(secret.utf8))
    }

    /// The HS256 signature (base64url) of `header.payload`.
    public static func signature(input: String, key: [UInt8]) -> String {
        Base64URL.encode(Crypto.hmac(.sha256, key: key, message: Array(input.utf8)))
    }

    /// Checks the JWS structure and HS256 signature of `token` under `key`, with no claim checks.
    public static func verifySignature(_ token: String, key: [UInt8]) -> Bool {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let given = Base64URL.decode(parts[2]) else { return false }
        let expected = Crypto.hmac(.sha256, key: key, message: Array(parts[0].utf8) + [0x2E] + Array(parts[1].utf8))
        return Crypto.constantTimeEquals(given, expected)
    }

    /// Verifies `token` and returns its claims. `secretFor` maps an API key to its secret.
    public func verify(_ token: String, now: Date = Date(), secretFor: (String) -> String?) throws(TokenError) -> AccessTokenClaims {
        try verify(token, now: now, secretsFor: { secretFor($0).map { [$0] } ?? [] }).claims
    }

    /// Verifies `token` against every secret `secretsFor` gives for its API key (the current
    /// one first; none: the key is unknown) and returns its claims and which secret signed it.
    public func verify(_ token: String, now: Date = Date(), secretsFor: (String) -> [String]) throws(TokenError) -> Verified {
        guard !token.isEmpty else { throw .missing }
        guard token.utf8.count <= maxTokenBytes else { throw .oversized(limit: maxTokenBytes) }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("expected three dot-separated parts") }
        guard let headerBytes = Base64URL.decode(parts[0]) else { throw .malformed("header is not base64url") }
        guard let payloadBytes = Base64URL.decode(parts[1]) else { throw .malformed("payload is not base64url") }
        guard Base64URL.decode(parts[2]) != nil else { throw .malformed("signature is not base64url") }

        guard let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any] else {
            throw .malformed("header is not a JSON object")
        }
        guard let alg = header["alg"] as? String else { throw .malformed("header has no alg") }
        guard alg == "HS256" else { throw .unsupportedAlgorithm(alg) }
        if let typ = header["typ"], (typ as? String)?.uppercased() != "JWT" {
            throw .malformed("header typ is not JWT")
        }
        if header["crit"] != nil { throw .malformed("critical header extensions are not supported") }

        let claims = try Self.claims(fromPayload: payloadBytes)
        let secrets = secretsFor(claims.iss)
        guard !secrets.isEmpty else { throw .unknownIssuer }
        guard let index = secrets.firstIndex(where: { Self.verifySignature(token, key: Array($0.utf8)) }) else { throw .badSignature }

        // Every operand is bounded (claims to 0...latestTime, the leeway to an hour, now to the
        // clock's range), so none of this can overflow.
        let nowSeconds = Int64(min(max(now.timeIntervalSince1970, 0), Double(Self.latestTime)))
        guard claims.exp + leewaySeconds > nowSeconds else { throw .expired }
        if let nbf = claims.nbf { guard nbf - leewaySeconds <= nowSeconds else { throw .notYetValid } }
        if let limit = maxLifetimeSeconds, claims.exp - nowSeconds > limit + leewaySeconds { throw .livesTooLong(limit: limit) }
        return Verified(claims: claims, secretIndex: index)
    }

    /// The `iss` a token names, read without verifying anything (which app's secret to look
    /// up): nil for anything that is not a token of at most `maxTokenBytes`.
    public func issuer(of token: String) -> String? {
        guard !token.isEmpty, token.utf8.count <= maxTokenBytes else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        // jansson, not Foundation's decoder: every request with a token asks this first.
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            case .object(let object)? = JSONText.parse(payload),
            case .string(let iss)? = object["iss"]
        else { return nil }
        return iss
    }

    /// The claims in a token's payload, checked one by one so that a refusal names the claim:
    /// `iss`, `sub` (1-256 bytes) and `exp` are required; `nbf`, `iat`, `name` and `grants`
    /// are optional (a null is the same as leaving it out); other claims (`aud`, `jti`...) are
    /// ignored. Times are JSON numbers of seconds (RFC 7519's NumericDate; a fraction is cut).
    static func claims(fromPayload bytes: [UInt8]) throws(TokenError) -> AccessTokenClaims {
        guard case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) else {
            throw .malformed("payload is not a JSON object")
        }
        func present(_ name: String) -> JSONValue? {
            guard let value = object[name], value != .null else { return nil }
            return value
        }
        func string(_ name: String, required: Bool, meaning: String) throws(TokenError) -> String? {
            guard let value = present(name) else {
                if required { throw .invalidClaims("missing claim '\(name)' (\(meaning))") }
                return nil
            }
            guard case .string(let text) = value else { throw .invalidClaims("claim '\(name)' must be a string (\(meaning))") }
            return text
        }
        func seconds(_ name: String, required: Bool, meaning: String) throws(TokenError) -> Int64? {
            guard let value = present(name) else {
                if required { throw .invalidClaims("missing claim '\(name)' (\(meaning), seconds since 1970)") }
                return nil
            }
            let seconds: Int64
            switch value {
            case .int(let number): seconds = number
            case .double(let number) where number.isFinite && abs(number) < 1e15: seconds = Int64(number.rounded(.down))
            default: throw .invalidClaims("claim '\(name)' must be a number of seconds since 1970 (\(meaning))")
            }
            guard (0...latestTime).contains(seconds) else {
                throw .invalidClaims("claim '\(name)' must be between 0 and \(latestTime) seconds since 1970 (\(meaning))")
            }
            return seconds
        }
        guard let iss = try string("iss", required: true, meaning: "the app's API key"), !iss.isEmpty else {
            throw .invalidClaims("claim 'iss' must be the app's API key")
        }
        guard let sub = try string("sub", required: true, meaning: "the user's identity"), !sub.isEmpty, sub.utf8.count <= 256 else {
            throw .invalidClaims("claim 'sub' must be 1-256 bytes")
        }
        guard let exp = try seconds("exp", required: true, meaning: "expiry") else { throw .invalidClaims("missing claim 'exp'") }
        let nbf = try seconds("nbf", required: false, meaning: "not before")
        let iat = try seconds("iat", required: false, meaning: "issued at")
        let name = try string("name", required: false, meaning: "the display name")
        if let name, name.utf8.count > 256 { throw .invalidClaims("claim 'name' must be at most 256 bytes") }
        let handle = try string("handle", required: false, meaning: "the handle a callee's phone shows")
        if let handle, handle.isEmpty || handle.utf8.count > 256 { throw .invalidClaims("claim 'handle' must be 1-256 bytes") }
        var grants = Grants()
        if let value = present("grants") {
            guard case .object(let fields) = value else { throw .invalidClaims("claim 'grants' must be an object") }
            func flag(_ key: String) throws(TokenError) -> Bool? {
                guard let value = fields[key], value != .null else { return nil }
                guard case .bool(let flag) = value else { throw .invalidClaims("claim 'grants.\(key)' must be true or false") }
                return flag
            }
            if let room = fields["room"], room != .null {
                guard case .string(let pattern) = room else { throw .invalidClaims("claim 'grants.room' must be a room name or a prefix ending in *") }
                grants.room = pattern
            }
            grants.roomJoin = try flag("roomJoin")
            grants.call = try flag("call")
            grants.admin = try flag("admin")
        }
        return AccessTokenClaims(iss: iss, sub: sub, iat: iat, nbf: nbf, exp: exp, name: name, handle: handle, grants: grants)
    }
}

/// Builds claims for a new token.
public enum AccessTokenIssuer {
    /// Longest lifetime a token may be issued for.
    public static let maxTTLSeconds = 7 * 24 * 3600

    public static func claims(
        apiKey: String, identity: String, name: String?, handle: String? = nil, grants: Grants, ttlSeconds: Int, now: Date = Date()
    ) -> AccessTokenClaims {
        let issued = Int64(now.timeIntervalSince1970)
        return AccessTokenClaims(
            iss: apiKey, sub: identity, iat: issued, nbf: issued, exp: issued + Int64(ttlSeconds), name: name, handle: handle,
            grants: grants)
    }
}
