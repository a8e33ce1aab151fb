// The only Swift file that imports OpenSSL's libcrypto.

internal import CCrypto
import Foundation

/// Hashes, MACs and randomness from libcrypto.
public enum Crypto {
    public enum Digest: Sendable {
        case sha1, sha256

        fileprivate var evp: OpaquePointer? {
            switch self {
            case .sha1: EVP_sha1()
            case .sha256: EVP_sha256()
            }
        }
    }

    /// HMAC of `message` under `key`.
    public static func hmac(_ digest: Digest, key: some ContiguousBytes, message: some ContiguousBytes) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        key.withUnsafeBytes { keyBytes in
            message.withUnsafeBytes { messageBytes in
                _ = HMAC(
                    digest.evp, keyBytes.baseAddress, Int32(keyBytes.count),
                    messageBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), messageBytes.count,
                    &output, &length)
            }
        }
        return Array(output.prefix(Int(length)))
    }

    /// SHA-1 of `data` (Redis names a script by it: not for anything that needs a secure hash).
    public static func sha1(_ data: some ContiguousBytes) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 20)
        data.withUnsafeBytes { bytes in
            _ = SHA1(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, &output)
        }
        return output
    }

    /// SHA-256 of `data`.
    public static func sha256(_ data: some ContiguousBytes) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        data.withUnsafeBytes { bytes in
            _ = SHA256(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, &output)
        }
        return output
    }

    /// `count` bytes from the system's cryptographic random generator.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else {
            // libcrypto seeds from the OS; failing here means the OS has no entropy source.
            preconditionFailure("RAND_bytes failed")
        }
        return bytes
    }

    /// A random (version 4) UUID from libcrypto's generator. Foundation's `UUID()` on Linux
    /// opens, reads and closes `/dev/urandom` for each one: three system calls per push.
    public static func randomUUID() -> UUID {
        var bytes = randomBytes(16)
        bytes[6] = (bytes[6] & 0x0f) | 0x40  // version 4
        bytes[8] = (bytes[8] & 0x3f) | 0x80  // RFC 4122 variant
        return UUID(uuid: (
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
            bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }

    /// Compares in time that depends only on the length, not on where the bytes differ.
    public static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        return lhs.withUnsafeBytes { a in
            rhs.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 }
        }
    }
}

/// Base64url without padding (RFC 4648 §5), as JWTs use it.
public enum Base64URL {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes strict base64url: only the URL alphabet, no padding, no whitespace.
    public static func decode(_ text: Substring) -> [UInt8]? {
        guard text.utf8.allSatisfy({ byte in
            (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == 0x2D || byte == 0x5F
        }), text.utf8.count % 4 != 1 else { return nil }
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        standard += String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
        return Data(base64Encoded: standard).map(Array.init)
    }
}

/// Random identifiers.
public enum RandomID {
    private static let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)

    /// `length` characters of [0-9a-zA-Z] from the cryptographic generator.
    public static func alphanumeric(_ length: Int) -> String {
        var result = [UInt8]()
        result.reserveCapacity(length)
        while result.count < length {
            for byte in Crypto.randomBytes(length) where byte < 248 && result.count < length {
                result.append(alphabet[Int(byte) % alphabet.count])
            }
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// A random RFC 4122 version-4 UUID.
    public static func uuid() -> UUID {
        var bytes = Crypto.randomBytes(16)
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(uuid: (
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
            bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }
}

// MARK: - ES256 (ECDSA P-256 with SHA-256), as APNs provider tokens use it

/// Reads everything written to a memory BIO.
private func drain(_ bio: OpaquePointer) -> String {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = BIO_read(bio, &buffer, Int32(buffer.count))
        if count <= 0 { break }
        bytes += buffer[0..<Int(count)]
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// A memory BIO holding a copy of `text`.
private func memoryBIO(_ text: String) -> OpaquePointer? {
    guard let bio = BIO_new(BIO_s_mem()) else { return nil }
    let bytes = Array(text.utf8)
    guard BIO_write(bio, bytes, Int32(bytes.count)) == bytes.count else {
        BIO_free(bio)
        return nil
    }
    return bio
}

/// The description of OpenSSL's most recent error (libcrypto's queue serves libssl too).
package func opensslError() -> String {
    let code = ERR_get_error()
    guard code != 0 else { return "unknown error" }
    var buffer = [CChar](repeating: 0, count: 256)
    ERR_error_string_n(code, &buffer, buffer.count)
    return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// A P-256 private key: an APNs .p8 auth key, or a generated one.
public final class ECPrivateKey: @unchecked Sendable {
    // Safety: the EVP_PKEY is never mutated after init; OpenSSL allows concurrent signing with it.
    fileprivate let key: OpaquePointer

    /// Reads a PEM private key (PKCS#8 `BEGIN PRIVATE KEY`, as Apple's AuthKey_XXXX.p8, or SEC1).
    public init(pem: String) throws {
        guard let bio = memoryBIO(pem) else { throw SystemError.crypto("cannot read the key") }
        defer { BIO_free(bio) }
        guard let key = PEM_read_bio_PrivateKey(bio, nil, nil, nil) else {
            throw SystemError.crypto("not a PEM private key: \(opensslError())")
        }
        guard EVP_PKEY_get_bits(key) == 256, EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else {
            EVP_PKEY_free(key)
            throw SystemError.crypto("the key is not an EC P-256 key (APNs keys are)")
        }
        self.key = key
    }

    private init(taking key: OpaquePointer) {
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    /// A new random P-256 key.
    public static func generate() throws -> ECPrivateKey {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else { throw SystemError.crypto("no EC support") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1,
            EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1,
            EVP_PKEY_keygen(context, &key) == 1, let key
        else { throw SystemError.crypto("EC key generation failed: \(opensslError())") }
        return ECPrivateKey(taking: key)
    }

    /// PKCS#8 PEM, as a .p8 file holds it.
    public var pem: String {
        guard let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil)
        return drain(bio)
    }

    /// The public half, as PEM (`BEGIN PUBLIC KEY`).
    public var publicKeyPEM: String {
        guard let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        PEM_write_bio_PUBKEY(bio, key)
        return drain(bio)
    }

    /// An ES256 signature of `message` in JWS form: the raw 64 bytes R || S (RFC 7518 §3.4).
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw SystemError.crypto("no digest context") }
        defer { EVP_MD_CTX_free(context) }
        var length = 0
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1,
            EVP_DigestSign(context, nil, &length, message, message.count) == 1
        else { throw SystemError.crypto("signing failed: \(opensslError())") }
        var der = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &der, &length, message, message.count) == 1 else {
            throw SystemError.crypto("signing failed: \(opensslError())")
        }
        return try ECDSASignature.raw(fromDER: Array(der.prefix(length)))
    }

    /// A self-signed TLS certificate for `127.0.0.1` and `localhost` signed by this key, as PEM.
    public func selfSignedCertificate(commonName: String, days: Int) throws -> String {
        guard let certificate = X509_new() else { throw SystemError.crypto("cannot make a certificate") }
        defer { X509_free(certificate) }
        X509_set_version(certificate, 2)
        let serial = Crypto.randomBytes(16)
        if let number = BN_bin2bn(serial, Int32(serial.count), nil) {
            BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate))
            BN_free(number)
        }
        X509_gmtime_adj(X509_getm_notBefore(certificate), -3600)
        X509_gmtime_adj(X509_getm_notAfter(certificate), days * 86400)
        X509_set_pubkey(certificate, key)
        let name = X509_get_subject_name(certificate)
        let value = Array(commonName.utf8)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, value, Int32(value.count), -1, 0)
        X509_set_issuer_name(certificate, name)
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, certificate, certificate, nil, nil, 0)
        for (nid, text) in [(NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1"), (NID_basic_constraints, "critical,CA:TRUE")] {
            if let extensionValue = X509V3_EXT_conf_nid(nil, &context, nid, text) {
                X509_add_ext(certificate, extensionValue, -1)
                X509_EXTENSION_free(extensionValue)
            }
        }
        guard X509_sign(certificate, key, EVP_sha256()) > 0 else {
            throw SystemError.crypto("certificate signing failed: \(opensslError())")
        }
        guard let bio = BIO_new(BIO_s_mem()) else { throw SystemError.crypto("no BIO") }
        defer { BIO_free(bio) }
        PEM_write_bio_X509(bio, certificate)
        return drain(bio)
    }
}

/// A P-256 public key that checks ES256 signatures.
public final class ECPublicKey: @unchecked Sendable {
    // Safety: immutable after init; verification does not mutate the key.
    private let key: OpaquePointer

    /// Reads a PEM public key (`BEGIN PUBLIC KEY`), or the public half of a PEM private key.
    public init(pem: String) throws {
        guard let bio = memoryBIO(pem) else { throw SystemError.crypto("cannot read the key") }
        defer { BIO_free(bio) }
        if let key = PEM_read_bio_PUBKEY(bio, nil, nil, nil) {
            self.key = key
        } else {
            let privateKey = try ECPrivateKey(pem: pem)
            guard let bio = memoryBIO(privateKey.publicKeyPEM), let key = PEM_read_bio_PUBKEY(bio, nil, nil, nil) else {
                throw SystemError.crypto("not a PEM public key")
            }
            BIO_free(bio)
            self.key = key
        }
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC, EVP_PKEY_get_bits(key) == 256 else {
            throw SystemError.crypto("the key is not an EC P-256 key")
        }
    }

    deinit { EVP_PKEY_free(key) }

    /// Whether `signature` (raw R || S, 64 bytes) is an ES256 signature of `message`.
    public func verify(_ signature: [UInt8], of message: [UInt8]) -> Bool {
        guard signature.count == 64, let der = try? ECDSASignature.der(fromRaw: signature),
            let context = EVP_MD_CTX_new()
        else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
        return EVP_DigestVerify(context, der, der.count, message, message.count) == 1
    }
}

/// Conversions between DER ECDSA signatures (OpenSSL's) and JWS's raw R || S.
enum ECDSASignature {
    static func raw(fromDER der: [UInt8]) throws -> [UInt8] {
        var cursor: UnsafePointer<UInt8>? = der.withUnsafeBufferPointer { $0.baseAddress }
        let owned = der  // keep the bytes alive while OpenSSL reads them
        return try owned.withUnsafeBufferPointer { buffer -> [UInt8] in
            cursor = buffer.baseAddress
            guard let signature = d2i_ECDSA_SIG(nil, &cursor, buffer.count) else {
                throw SystemError.crypto("bad DER signature")
            }
            defer { ECDSA_SIG_free(signature) }
            var r: OpaquePointer?
            var s: OpaquePointer?
            ECDSA_SIG_get0(signature, &r, &s)
            var output = [UInt8](repeating: 0, count: 64)
            guard BN_bn2binpad(r, &output, 32) == 32 else { throw SystemError.crypto("bad R") }
            let sPart = output.withUnsafeMutableBufferPointer { BN_bn2binpad(s, $0.baseAddress! + 32, 32) }
            guard sPart == 32 else { throw SystemError.crypto("bad S") }
            return output
        }
    }

    static func der(fromRaw raw: [UInt8]) throws -> [UInt8] {
        guard raw.count == 64, let signature = ECDSA_SIG_new() else { throw SystemError.crypto("bad raw signature") }
        defer { ECDSA_SIG_free(signature) }
        let r = BN_bin2bn(raw, 32, nil)
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard ECDSA_SIG_set0(signature, r, s) == 1 else { throw SystemError.crypto("bad raw signature") }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { throw SystemError.crypto("cannot encode the signature") }
        var der = [UInt8](repeating: 0, count: Int(length))
        var cursor: UnsafeMutablePointer<UInt8>? = nil
        _ = der.withUnsafeMutableBufferPointer { buffer in
            cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return der
    }
}
