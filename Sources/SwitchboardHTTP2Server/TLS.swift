// The only Swift file that imports OpenSSL's libssl.

internal import CTLS
import Foundation
import SwitchboardSystem

/// A server-side TLS configuration: certificate chain, private key, and ALPN "h2".
final class TLSServerContext: @unchecked Sendable {
    // Safety: the SSL_CTX is configured once in init and only read afterwards (OpenSSL allows
    // creating connections from one context on any thread).
    let context: OpaquePointer

    /// `clientCAPath`: certificate authorities whose client certificates authenticate a
    /// connection (optional: clients without a certificate are still accepted).
    init(certificatePath: String, privateKeyPath: String, clientCAPath: String? = nil) throws {
        guard let context = SSL_CTX_new(TLS_server_method()) else { throw SystemError.crypto("SSL_CTX_new failed") }
        self.context = context
        SSL_CTX_ctrl(context, SSL_CTRL_SET_MIN_PROTO_VERSION, Int(TLS1_2_VERSION), nil)
        // Writes may complete partly, and a retried write may come from a moved buffer.
        SSL_CTX_ctrl(context, SSL_CTRL_MODE, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), nil)
        guard SSL_CTX_use_certificate_chain_file(context, certificatePath) == 1 else {
            throw SystemError.crypto("cannot load the certificate \(certificatePath): \(Self.lastError())")
        }
        guard SSL_CTX_use_PrivateKey_file(context, privateKeyPath, SSL_FILETYPE_PEM) == 1,
            SSL_CTX_check_private_key(context) == 1
        else {
            throw SystemError.crypto("cannot load the private key \(privateKeyPath): \(Self.lastError())")
        }
        if let clientCAPath {
            guard SSL_CTX_load_verify_locations(context, clientCAPath, nil) == 1 else {
                throw SystemError.crypto("cannot load the client CA \(clientCAPath): \(Self.lastError())")
            }
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        }
        SSL_CTX_set_alpn_select_cb(context, { _, out, outLength, input, inputLength, _ in
            // Choose "h2" if the client offers it; APNs speaks nothing else.
            guard let input, let out, let outLength else { return SSL_TLSEXT_ERR_ALERT_FATAL }
            var index = 0
            while index < Int(inputLength) {
                let length = Int(input[index])
                if length == 2 && index + 2 < Int(inputLength) && input[index + 1] == 0x68 && input[index + 2] == 0x32 {
                    out.pointee = input + index + 1
                    outLength.pointee = 2
                    return SSL_TLSEXT_ERR_OK
                }
                index += 1 + length
            }
            return SSL_TLSEXT_ERR_ALERT_FATAL
        }, nil)
    }

    deinit { SSL_CTX_free(context) }

    static func lastError() -> String {
        opensslError()
    }
}

/// One server-side TLS connection on a non-blocking socket.
final class TLSConnection {
    enum Outcome {
        /// This many bytes were read or written.
        case done(Int)
        /// Try again when the socket is readable (or writable).
        case wantRead, wantWrite
        /// The peer closed the connection cleanly.
        case closed
        case failed(String)
    }

    private let ssl: OpaquePointer
    private(set) var handshakeDone = false

    init(context: TLSServerContext, socket: Int32) throws {
        guard let ssl = SSL_new(context.context) else { throw SystemError.crypto("SSL_new failed") }
        self.ssl = ssl
        SSL_set_fd(ssl, socket)
        SSL_set_accept_state(ssl)
    }

    deinit { SSL_free(ssl) }

    /// Advances the handshake.
    func handshake() -> Outcome {
        let status = SSL_do_handshake(ssl)
        if status == 1 {
            handshakeDone = true
            return .done(0)
        }
        return outcome(of: status)
    }

    /// The protocol the client chose by ALPN ("h2"), if any.
    var negotiatedProtocol: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Outcome {
        let count = SSL_read(ssl, buffer.baseAddress, Int32(buffer.count))
        return count > 0 ? .done(Int(count)) : outcome(of: count)
    }

    func write(_ buffer: UnsafeRawBufferPointer) -> Outcome {
        let count = SSL_write(ssl, buffer.baseAddress, Int32(buffer.count))
        return count > 0 ? .done(Int(count)) : outcome(of: count)
    }

    /// The subject of the client's certificate, when it sent one that verified.
    var verifiedPeerSubject: String? {
        guard SSL_get_verify_result(ssl) == X509_V_OK, let certificate = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(certificate) }
        guard let name = X509_get_subject_name(certificate), let line = X509_NAME_oneline(name, nil, 0) else { return "" }
        defer { CRYPTO_free(line, #file, #line) }
        return String(cString: line)
    }

    /// Sends close_notify (best effort).
    func shutdown() {
        SSL_shutdown(ssl)
    }

    private func outcome(of status: Int32) -> Outcome {
        switch SSL_get_error(ssl, status) {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_ZERO_RETURN: return .closed
        case SSL_ERROR_SYSCALL:
            ERR_clear_error()
            return errno == 0 ? .closed : .failed(String(cString: strerror(errno)))
        default:
            return .failed(TLSServerContext.lastError())
        }
    }
}
