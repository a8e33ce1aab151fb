import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import Testing

@Suite(.timeLimit(.minutes(3))) struct AccessTokenTests {
    static let secret = "s3cret-s3cret-s3cret-s3cret-s3cret-s3cr"
    static let apiKey = "sbk_test"
    let verifier = AccessTokenVerifier(maxTokenBytes: 2048, leewaySeconds: 30)
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func lookup(_ key: String) -> String? { key == Self.apiKey ? Self.secret : nil }

    func claims(exp: Int64 = 1_800_003_600, nbf: Int64 = 1_800_000_000) -> AccessTokenClaims {
        AccessTokenClaims(
            iss: Self.apiKey, sub: "alice", iat: 1_800_000_000, nbf: nbf, exp: exp, name: "Alice",
            grants: Grants(room: "team-*", roomJoin: true, call: true))
    }

    /// A token with a hand-made header and payload, signed with `key`.
    func handMade(header: String, payload: String, key: String = secret) -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        return input + "." + AccessTokenVerifier.signature(input: input, key: Array(key.utf8))
    }

    var validPayload: String {
        #"{"iss":"sbk_test","sub":"alice","iat":1800000000,"nbf":1800000000,"exp":1800003600,"grants":{}}"#
    }

    /// APNs ids come from libcrypto's generator: version 4, RFC 4122's variant, all distinct,
    /// and what Foundation's parser reads back.
    @Test func randomUUIDsAreVersionFourAndDistinct() {
        let ids = (0..<10_000).map { _ in Crypto.randomUUID() }
        #expect(Set(ids).count == ids.count)
        for id in ids.prefix(100) {
            let text = id.uuidString.lowercased()
            #expect(UUID(uuidString: text) == id)
            #expect(Array(text)[14] == "4", "\(text)")
            #expect("89ab".contains(Array(text)[19]), "\(text)")
        }
    }

    @Test func rfc7515AppendixA1VectorVerifiesAndSignsIdentically() throws {
        // RFC 7515 A.1: the JWK's "k" is the base64url HMAC key.
        let key = try #require(Base64URL.decode(
            "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"))
        let token = "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9"
            + ".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
            + ".dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        #expect(AccessTokenVerifier.verifySignature(token, key: key))
        let input = String(token[..<token.lastIndex(of: ".")!])
        #expect(AccessTokenVerifier.signature(input: input, key: key) == "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        var wrongKey = key
        wrongKey[0] ^= 1
        #expect(!AccessTokenVerifier.verifySignature(token, key: wrongKey))
    }

    @Test func signedTokenVerifiesWithItsClaims() throws {
        let token = AccessTokenVerifier.sign(claims(), secret: Self.secret)
        let verified = try verifier.verify(token, now: now, secretFor: lookup)
        #expect(verified == claims())
        #expect(verified.grants.allowsJoining(room: "team-42"))
        #expect(!verified.grants.allowsJoining(room: "other"))
    }

    @Test func leewayAcceptsSmallSkewButNotMore() throws {
        let justExpired = AccessTokenVerifier.sign(claims(exp: 1_800_000_000 - 10), secret: Self.secret)
        _ = try verifier.verify(justExpired, now: now, secretFor: lookup)
        let notYet = AccessTokenVerifier.sign(claims(nbf: 1_800_000_000 + 10), secret: Self.secret)
        _ = try verifier.verify(notYet, now: now, secretFor: lookup)
    }


    @Test func expiredTokenIsRejected() {
        let token = AccessTokenVerifier.sign(claims(exp: 1_800_000_000 - 31), secret: Self.secret)
        #expect(throws: TokenError.expired) { try verifier.verify(token, now: now, secretFor: lookup) }
        #expect(TokenError.expired.code == .tokenExpired)
    }

    @Test func tokenBeforeNotBeforeIsRejected() {
        let token = AccessTokenVerifier.sign(claims(nbf: 1_800_000_000 + 31), secret: Self.secret)
        #expect(throws: TokenError.notYetValid) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func algNoneIsRejected() {
        let header = Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8))
        let payload = Base64URL.encode(Array(validPayload.utf8))
        for token in [header + "." + payload + ".", header + "." + payload] {
            #expect(throws: TokenError.self) { try verifier.verify(token, now: now, secretFor: lookup) }
        }
        #expect(throws: TokenError.unsupportedAlgorithm("none")) {
            try verifier.verify(header + "." + payload + ".", now: now, secretFor: lookup)
        }
    }

    @Test(arguments: ["HS512", "HS384", "RS256", "ES256", "PS256", "hs256"])
    func otherAlgorithmsAreRejected(alg: String) {
        let token = handMade(header: #"{"alg":"\#(alg)","typ":"JWT"}"#, payload: validPayload)
        #expect(throws: TokenError.unsupportedAlgorithm(alg)) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func badSignatureIsRejected() {
        let token = handMade(header: #"{"alg":"HS256"}"#, payload: validPayload, key: "another-secret")
        #expect(throws: TokenError.badSignature) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func tamperedPayloadIsRejected() {
        let token = AccessTokenVerifier.sign(claims(), secret: Self.secret)
        let parts = token.split(separator: ".").map(String.init)
        var tampered = claims()
        tampered.sub = "mallory"
        let forged = parts[0] + "." + Base64URL.encode(try! JSONEncoder().encode(tampered)) + "." + parts[2]
        #expect(throws: TokenError.badSignature) { try verifier.verify(forged, now: now, secretFor: lookup) }
    }

    @Test(arguments: [
        "e30.e30.!!!",  // signature not base64url
        "eyJhbGciOiJIUzI1NiJ9=.e30.AAAA",  // padding is not base64url
        "eyJhbGc+OiJIUzI1NiJ9.e30.AAAA",  // '+' is not base64url
        "a.b.c",  // decodes to garbage
        "onlyonepart",
        "two.parts",
        "four.parts.are.wrong",
    ])
    func malformedTokensAreRejected(token: String) {
        #expect(throws: TokenError.self) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func headerThatIsNotJSONIsRejected() {
        let token = handMade(header: "not json", payload: validPayload)
        #expect(throws: TokenError.malformed("header is not a JSON object")) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func payloadThatIsNotJSONIsRejected() {
        let token = handMade(header: #"{"alg":"HS256"}"#, payload: "{nope")
        #expect(throws: TokenError.malformed("payload is not a JSON object")) {
            try verifier.verify(token, now: now, secretFor: lookup)
        }
    }

    /// Payloads as ordinary JWT libraries write them: only `iss`, `sub` and `exp` are needed.
    static let acceptedPayloads: [(String, String, Grants)] = [
        ("iss, sub and exp only", #"{"iss":"sbk_test","sub":"alice","exp":1800003600}"#, Grants()),
        ("no nbf", #"{"iss":"sbk_test","sub":"alice","iat":1800000000,"exp":1800003600,"grants":{"call":true}}"#, Grants(call: true)),
        ("no iat", #"{"iss":"sbk_test","sub":"alice","nbf":1800000000,"exp":1800003600}"#, Grants()),
        ("null grants and name", #"{"iss":"sbk_test","sub":"alice","exp":1800003600,"grants":null,"name":null}"#, Grants()),
        ("fractional times", #"{"iss":"sbk_test","sub":"alice","exp":1800003600.75,"nbf":1799999999.5}"#, Grants()),
        ("other claims ignored", #"{"iss":"sbk_test","sub":"alice","exp":1800003600,"aud":"x","jti":"1","grants":{"room":"a","future":1}}"#, Grants(room: "a")),
    ]

    @Test(arguments: acceptedPayloads.indices)
    func tokensFromOrdinaryJWTLibrariesAreAccepted(index: Int) throws {
        let (what, payload, grants) = Self.acceptedPayloads[index]
        let token = handMade(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: payload)
        let verified = try verifier.verify(token, now: now, secretFor: lookup)
        #expect(verified.sub == "alice", "\(what)")
        #expect(verified.exp == 1_800_003_600, "\(what)")
        #expect(verified.grants == grants, "\(what)")
    }

    /// Each refusal names the claim that is missing or wrong.
    static let refusedPayloads: [(String, String)] = [
        (#"{"sub":"alice","exp":1800003600}"#, "missing claim 'iss'"),
        (#"{"iss":"sbk_test","exp":1800003600}"#, "missing claim 'sub'"),
        (#"{"iss":"sbk_test","sub":"alice"}"#, "missing claim 'exp'"),
        (#"{"iss":"sbk_test","sub":"alice","exp":"tomorrow"}"#, "claim 'exp' must be a number"),
        (#"{"iss":"sbk_test","sub":"alice","exp":1800003600,"nbf":"now"}"#, "claim 'nbf' must be a number"),
        (#"{"iss":"sbk_test","sub":"alice","exp":1800003600,"iat":true}"#, "claim 'iat' must be a number"),
        (#"{"iss":7,"sub":"alice","exp":1800003600}"#, "claim 'iss' must be a string"),
        (#"{"iss":"sbk_test","sub":"","exp":1800003600}"#, "claim 'sub' must be 1-256 bytes"),
        (#"{"iss":"sbk_test","sub":"alice","exp":1800003600,"name":5}"#, "claim 'name' must be a string"),
        (#"{"iss":"sbk_test","sub":"alice","exp":1800003600,"grants":[]}"#, "claim 'grants' must be an object"),
        (#"{"iss":"sbk_test","sub":"alice","exp":1800003600,"grants":{"call":"yes"}}"#, "claim 'grants.call' must be true or false"),
        (#"{"iss":"sbk_test","sub":"alice","exp":1800003600,"grants":{"room":true}}"#, "claim 'grants.room' must be a room name"),
        (#"[1,2]"#, "payload is not a JSON object"),
    ]

    @Test(arguments: refusedPayloads.indices)
    func aRefusalNamesTheClaimThatIsMissingOrWrong(index: Int) {
        let (payload, words) = Self.refusedPayloads[index]
        let token = handMade(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: payload)
        do {
            _ = try verifier.verify(token, now: now, secretFor: lookup)
            Issue.record("accepted \(payload)")
        } catch {
            #expect(error.description.contains(words), "\(error.description)")
            #expect(error.code == .unauthorized)
        }
    }

    /// Time claims at the ends of Int64 (a backend writing "never expires" as 2^63-1) are
    /// refused as invalid, and nothing computed from them traps: the verifier used to add the
    /// leeway to `exp` unchecked and crash the whole server.
    static let extremeTimes: [String] = [
        #"{"iss":"sbk_test","sub":"alice","exp":9223372036854775807}"#,
        #"{"iss":"sbk_test","sub":"alice","exp":1800003600,"nbf":-9223372036854775808}"#,
        #"{"iss":"sbk_test","sub":"alice","exp":-9223372036854775808}"#,
        #"{"iss":"sbk_test","sub":"alice","exp":1800003600,"nbf":9223372036854775807}"#,
        #"{"iss":"sbk_test","sub":"alice","exp":1800003600,"iat":-1}"#,
        #"{"iss":"sbk_test","sub":"alice","exp":253402300800}"#,
        #"{"iss":"sbk_test","sub":"alice","exp":999999999999999.0}"#,
    ]

    @Test(arguments: extremeTimes)
    func timeClaimsOutsideTheYearsADateCanHoldAreRefusedWithoutTrapping(payload: String) {
        let token = handMade(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: payload)
        for verifier in [verifier, AccessTokenVerifier(leewaySeconds: .max, maxLifetimeSeconds: .max)] {
            do {
                _ = try verifier.verify(token, now: now, secretFor: lookup)
                Issue.record("accepted \(payload)")
            } catch {
                #expect(error.description.contains("must be between 0 and 253402300799"), "\(error.description)")
            }
        }
    }

    /// `max_token_ttl_seconds` bounds every token, whoever signed it: one that still has longer
    /// than that (and the leeway) to live is refused; one within it is accepted.
    @Test func aTokenLivingLongerThanTheLimitIsRefusedWhoeverSignedIt() throws {
        let limited = AccessTokenVerifier(leewaySeconds: 30, maxLifetimeSeconds: 3600)
        let within = AccessTokenVerifier.sign(claims(exp: 1_800_000_000 + 3600 + 30), secret: Self.secret)
        _ = try limited.verify(within, now: now, secretFor: lookup)
        let beyond = AccessTokenVerifier.sign(claims(exp: 1_800_000_000 + 3600 + 31), secret: Self.secret)
        #expect(throws: TokenError.livesTooLong(limit: 3600)) { try limited.verify(beyond, now: now, secretFor: lookup) }
        #expect(TokenError.livesTooLong(limit: 3600).code == .unauthorized)
    }

    /// During a rotation both secrets verify, and the verifier says which one did.
    @Test func eitherOfTwoSecretsVerifiesAndTheOneThatDidIsNamed() throws {
        let old = AccessTokenVerifier.sign(claims(), secret: "old-secret")
        let new = AccessTokenVerifier.sign(claims(), secret: Self.secret)
        let both: (String) -> [String] = { $0 == Self.apiKey ? [Self.secret, "old-secret"] : [] }
        #expect(try verifier.verify(new, now: now, secretsFor: both).secretIndex == 0)
        #expect(try verifier.verify(old, now: now, secretsFor: both).secretIndex == 1)
        #expect(throws: TokenError.badSignature) { try verifier.verify(old, now: now, secretFor: lookup) }
    }

    @Test func criticalHeaderIsRejected() {
        let token = handMade(header: #"{"alg":"HS256","crit":["exp"]}"#, payload: validPayload)
        #expect(throws: TokenError.self) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func unknownIssuerIsRejected() {
        var unknown = claims()
        unknown.iss = "sbk_other"
        let token = AccessTokenVerifier.sign(unknown, secret: Self.secret)
        #expect(throws: TokenError.unknownIssuer) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func oversizedTokenIsRejectedBeforeParsing() {
        let token = String(repeating: "a", count: 2049)
        #expect(throws: TokenError.oversized(limit: 2048)) { try verifier.verify(token, now: now, secretFor: lookup) }
    }

    @Test func emptyTokenIsMissing() {
        #expect(throws: TokenError.missing) { try verifier.verify("", now: now, secretFor: lookup) }
    }

    @Test func emptySubjectIsRejected() {
        var empty = claims()
        empty.sub = ""
        let token = AccessTokenVerifier.sign(empty, secret: Self.secret)
        #expect(throws: TokenError.invalidClaims("claim 'sub' must be 1-256 bytes")) { try verifier.verify(token, now: now, secretFor: lookup) }
    }
}
