// The only Swift file that imports OpenSSL's libcrypto.

import CCrypto
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
