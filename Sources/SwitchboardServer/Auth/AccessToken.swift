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
        case .invalidClaims(let detail): "access token claims are invalid: \(detail)"
        }
    }
}

/// Signs and verifies access tokens: HS256 JWTs (RFC 7519) signed with the app's API secret.
public struct AccessTokenVerifier: Sendable {
    /// Tokens longer than this are refused before any parsing.
    public var maxTokenBytes: Int
    /// Tolerance for clock skew when checking `exp` and `nbf`.
    public var leewaySeconds: Int64

    public init(maxTokenBytes: Int = 8 * 1024, leewaySeconds: Int64 = 30) {
        self.maxTokenBytes = maxTokenBytes
        self.leewaySeconds = leewaySeconds
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

        let claims: AccessTokenClaims
        do {
            claims = try JSONDecoder().decode(AccessTokenClaims.self, from: Data(payloadBytes))
        } catch {
            throw .malformed("payload is not a valid claims object")
        }
        guard let secret = secretFor(claims.iss) else { throw .unknownIssuer }
        guard Self.verifySignature(token, key: Array(secret.utf8)) else { throw .badSignature }

        let nowSeconds = Int64(now.timeIntervalSince1970)
        guard claims.exp + leewaySeconds > nowSeconds else { throw .expired }
        guard claims.nbf - leewaySeconds <= nowSeconds else { throw .notYetValid }
        guard !claims.sub.isEmpty, claims.sub.utf8.count <= 256 else { throw .invalidClaims("sub must be 1-256 bytes") }
        return claims
    }
}

/// Builds claims for a new token.
public enum AccessTokenIssuer {
    /// Longest lifetime a token may be issued for.
    public static let maxTTLSeconds = 7 * 24 * 3600

    public static func claims(
        apiKey: String, identity: String, name: String?, grants: Grants, ttlSeconds: Int, now: Date = Date()
    ) -> AccessTokenClaims {
        let issued = Int64(now.timeIntervalSince1970)
        return AccessTokenClaims(
            iss: apiKey, sub: identity, iat: issued, nbf: issued, exp: issued + Int64(ttlSeconds), name: name,
            grants: grants)
    }
}
