// The only Swift file that imports libcurl.

import SwitchboardProtocol
internal import CCurl
internal import CShims
import Foundation
import Synchronization
import SwitchboardSupport

/// A response read by `HTTPClient`.
public struct HTTPClientResponse: Sendable {
    public var status: Int
    /// Header values by lower-case name (the last one wins).
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// A plain HTTP/1.1 and HTTP/2 client on libcurl's easy interface: one blocking request at a
/// time per call, for the command-line tools, webhooks and tests.
public enum HTTPClient {
    private final class Collector {
        var body: [UInt8] = []
        var headers: [String: String] = [:]
    }

    static let globalInitOnce: Void = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
    }()

    /// Performs one request and waits for the whole response.
    public static func perform(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        timeout: Duration = .seconds(10)
    ) throws -> HTTPClientResponse {
        _ = globalInitOnce
        guard let easy = curl_easy_init() else { throw SystemError.http("curl_easy_init failed") }
        defer { curl_easy_cleanup(easy) }

        guard HTTPHeaders.areSafe(headers) else { throw SystemError.http("a header holds CR, LF or NUL: the request is not sent") }
        let collector = Collector()
        let opaque = Unmanaged.passUnretained(collector).toOpaque()
        var headerList: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(headerList) }
        for (name, value) in headers {
            headerList = curl_slist_append(headerList, "\(name): \(value)")
        }
        // An empty Expect stops curl from waiting for "100 Continue" on larger bodies.
        headerList = curl_slist_append(headerList, "Expect:")

        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_URL, url)
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_CUSTOMREQUEST, method)
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, headerList)
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, timeout.curlMilliseconds)
        if method == "HEAD" { _ = sb_curl_easy_setopt_long(easy, CURLOPT_NOBODY, 1) }
        _ = sb_curl_easy_setopt_write_function(easy, { pointer, size, count, user in
            let collector = Unmanaged<Collector>.fromOpaque(user!).takeUnretainedValue()
            let length = size * count
            if let pointer { collector.body.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: length)) }
            return length
        })
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, opaque)
        _ = sb_curl_easy_setopt_header_function(easy, { pointer, size, count, user in
            let collector = Unmanaged<Collector>.fromOpaque(user!).takeUnretainedValue()
            let length = size * count
            if let pointer, let (name, value) = HTTPClient.headerField(UnsafeRawBufferPointer(start: pointer, count: length)) {
                collector.headers[name] = value
            }
            return length
        })
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, opaque)

        let status: CURLcode
        if let body {
            status = body.withUnsafeBufferPointer { buffer in
                _ = sb_curl_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, buffer.count)
                _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_POSTFIELDS, buffer.baseAddress ?? UnsafePointer(bitPattern: 1))
                return curl_easy_perform(easy)
            }
        } else {
            status = curl_easy_perform(easy)
        }
        guard status == CURLE_OK else {
            throw SystemError.http(String(cString: curl_easy_strerror(status)))
        }
        var code: Int = 0
        _ = sb_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &code)
        return HTTPClientResponse(status: code, headers: collector.headers, body: collector.body)
    }

    /// `perform` off the caller's thread, for async code.
    public static func request(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        timeout: Duration = .seconds(10)
    ) async throws -> HTTPClientResponse {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try perform(method, url, headers: headers, body: body, timeout: timeout) })
            }
        }
    }
}

extension HTTPClient {
    /// One header line as libcurl hands it over (`Name: value` and its line end): the name
    /// lowercased, the value without the blanks around it; nil for a line without a colon (the
    /// status line, the blank line that ends the headers). Read from the bytes, without
    /// Foundation's Unicode trimming, as it runs for every header of every push.
    static func headerField(_ line: UnsafeRawBufferPointer) -> (name: String, value: String)? {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        var start = colon + 1
        var end = line.count
        while start < end, isBlank(line[start]) { start += 1 }
        while end > start, isBlank(line[end - 1]) { end -= 1 }
        return (String(decoding: line[..<colon], as: UTF8.self).lowercased(), String(decoding: line[start..<end], as: UTF8.self))
    }
}

// MARK: - HTTP/2 client on the multi interface

/// A request for `HTTP2Client`.
public struct HTTP2Request: Sendable {
    public var method: String
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]
    public var timeout: Duration
    /// Called on the sender's thread when the request joins its connection (it is written in
    /// the same turn of the sender's loop).
    public var onSubmitted: (@Sendable () -> Void)?

    public init(
        method: String = "POST", url: String, headers: [(String, String)] = [], body: [UInt8] = [], timeout: Duration = .seconds(10),
        onSubmitted: (@Sendable () -> Void)? = nil
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.onSubmitted = onSubmitted
    }
}

/// A transfer that failed below HTTP: no response was read.
public struct HTTP2TransportError: Error, Sendable, CustomStringConvertible {
    /// libcurl's result code.
    public var code: Int32
    public var message: String
    /// True when the request certainly never reached the server (no connection could be made),
    /// so sending it again cannot deliver it twice.
    public var notSent: Bool

    public var description: String { "\(message) (curl \(code))" }
}

/// Many concurrent requests multiplexed over few long-lived HTTP/2 connections (libcurl's multi
/// interface with nghttp2), serviced by a thread of its own.
///
/// Requests wait for a free stream on an open connection rather than opening new connections,
/// up to `maxConnections`; each connection carries at most the server's
/// SETTINGS_MAX_CONCURRENT_STREAMS (and `maxConcurrentStreams`) at once. Requests above a
/// GOAWAY's last stream id (refused unprocessed) are retried by libcurl on a new connection.
/// Any other request whose connection ended before the answer fails instead, because the
/// server may have processed it (a lone REFUSED_STREAM too: libcurl does not tell it apart).
public final class HTTP2Client: @unchecked Sendable {
    // Safety: `multi` is touched only on the client's thread; `queue` and `stopping` are guarded.

    public struct Options: Sendable {
        /// Connections per host (the pool).
        public var maxConnections = 1
        public var maxConcurrentStreams = 1000
        public var connectTimeout: Duration = .seconds(10)
        /// PEM file of certificate authorities to trust instead of the system's (a sandbox's
        /// self-signed certificate).
        public var caFile: String?
        /// A client certificate (PEM or P12) for certificate-based authentication.
        public var clientCertificate: String?
        public var clientCertificateType = "PEM"
        public var clientKey: String?
        public var clientCertificatePassword: String?
        /// HTTP/2 over cleartext without an upgrade (h2c with prior knowledge), for test servers.
        public var cleartext = false

        public init() {}
    }

    private final class Transfer {
        let request: HTTP2Request
        let continuation: CheckedContinuation<HTTPClientResponse, any Error>
        var body: [UInt8] = []
        var headers: [String: String] = [:]
        var headerList: UnsafeMutablePointer<curl_slist>?
        let payload: UnsafeMutableBufferPointer<UInt8>
        /// What libcurl reads the payload through (and whether it may rewind it to resend).
        let source: UnsafeMutablePointer<sb_curl_body>

        init(request: HTTP2Request, continuation: CheckedContinuation<HTTPClientResponse, any Error>) {
            self.request = request
            self.continuation = continuation
            payload = .allocate(capacity: max(request.body.count, 1))
            _ = payload.initialize(from: request.body)
            source = .allocate(capacity: 1)
            source.initialize(
                to: sb_curl_body(
                    data: payload.baseAddress, length: request.body.count, offset: 0, goaways: nil, connection: -1, stream: -1,
                    ended_connection: -1, ended_stream: -1, refused_rewind: 0))
        }

        deinit {
            curl_slist_free_all(headerList)
            payload.deallocate()
            source.deallocate()
        }
    }

    public let options: Options
    private let multi: UnsafeMutableRawPointer
    /// GOAWAYs seen per connection: which requests libcurl may safely resend.
    private let goaways: UnsafeMutablePointer<sb_curl_goaways>
    private let queue = Locked<[Transfer]>([])
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let connects = Atomic<Int>(0)
    private let active = Atomic<Int>(0)

    public init(options: Options = Options()) {
        _ = HTTPClient.globalInitOnce
        self.options = options
        multi = curl_multi_init()
        goaways = .allocate(capacity: 1)
        sb_curl_goaways_init(goaways)
        _ = sb_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX)
        _ = sb_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, options.maxConnections)
        _ = sb_curl_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, options.maxConnections)
        _ = sb_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, options.maxConcurrentStreams)
        let thread = Thread { [self] in run() }
        thread.name = "switchboard-http2"
        thread.start()
    }

    /// Connections opened so far (a new one after each GOAWAY or drop).
    public var connectionsOpened: Int { connects.load(ordering: .relaxed) }

    /// Requests in flight.
    public var inFlight: Int { active.load(ordering: .relaxed) }

    /// Sends `request` and waits for the whole response.
    public func send(_ request: HTTP2Request) async throws -> HTTPClientResponse {
        try await withCheckedThrowingContinuation { continuation in
            guard !stopping.load(ordering: .acquiring) else {
                continuation.resume(throwing: HTTP2TransportError(code: -1, message: "client is shut down", notSent: true))
                return
            }
            queue.withLock { $0.append(Transfer(request: request, continuation: continuation)) }
            curl_multi_wakeup(multi)
        }
    }

    /// Fails queued and in-flight requests, closes the connections and stops the thread.
    public func shutdown() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        curl_multi_wakeup(multi)
        finished.wait()
    }

    deinit {
        shutdown()
        curl_multi_cleanup(multi)
        goaways.deallocate()
    }

    private func run() {
        var running: Int32 = 0
        while !stopping.load(ordering: .acquiring) {
            for transfer in queue.withLock({ queue -> [Transfer] in
                let taken = queue
                queue.removeAll()
                return taken
            }) {
                start(transfer)
            }
            curl_multi_perform(multi, &running)
            collectFinished()
            curl_multi_poll(multi, nil, 0, 1000, nil)
        }
        // Fail everything still waiting.
        let error = HTTP2TransportError(code: -1, message: "client is shut down", notSent: false)
        for transfer in queue.withLock({ $0 }) { transfer.continuation.resume(throwing: error) }
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(multi, &remaining) {
            _ = message
        }
        for easy in handles {
            finish(easy, result: CURLE_ABORTED_BY_CALLBACK, error: error)
        }
        finished.signal()
    }

    private var handles: Set<UnsafeMutableRawPointer> = []

    private func start(_ transfer: Transfer) {
        guard let easy = curl_easy_init() else {
            transfer.continuation.resume(throwing: HTTP2TransportError(code: -1, message: "curl_easy_init failed", notSent: true))
            return
        }
        let request = transfer.request
        guard HTTPHeaders.areSafe(request.headers) else {
            curl_easy_cleanup(easy)
            transfer.continuation.resume(
                throwing: HTTP2TransportError(code: -1, message: "a header holds CR, LF or NUL: the request is not sent", notSent: true))
            return
        }
        for (name, value) in request.headers {
            transfer.headerList = curl_slist_append(transfer.headerList, "\(name): \(value)")
        }
        transfer.headerList = curl_slist_append(transfer.headerList, "Expect:")
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_URL, request.url)
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_CUSTOMREQUEST, request.method)
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, transfer.headerList)
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION,
            options.cleartext ? Int(CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE) : Int(CURL_HTTP_VERSION_2TLS))
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1)
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, request.timeout.curlMilliseconds)
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, options.connectTimeout.curlMilliseconds)
        if let caFile = options.caFile { _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_CAINFO, caFile) }
        if let certificate = options.clientCertificate {
            _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_SSLCERT, certificate)
            _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_SSLCERTTYPE, options.clientCertificateType)
            if let key = options.clientKey { _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_SSLKEY, key) }
            if let password = options.clientCertificatePassword { _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_KEYPASSWD, password) }
        }
        if request.method != "GET" {
            // Through a read callback rather than CURLOPT_POSTFIELDS: libcurl resends a request
            // whose connection ended before the answer, which could deliver a push twice; the
            // callbacks allow that only for a stream a GOAWAY refused (see CShims.h).
            _ = sb_curl_easy_setopt_long(easy, CURLOPT_POST, 1)
            transfer.source.pointee.goaways = goaways
            _ = sb_curl_easy_set_body(easy, transfer.source)
        }
        let opaque = Unmanaged.passRetained(transfer).toOpaque()
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_PRIVATE, opaque)
        _ = sb_curl_easy_setopt_write_function(easy, { pointer, size, count, user in
            let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
            if let pointer { transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: size * count)) }
            return size * count
        })
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, opaque)
        _ = sb_curl_easy_setopt_header_function(easy, { pointer, size, count, user in
            let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
            if let pointer {
                let line = UnsafeRawBufferPointer(start: pointer, count: size * count)
                // A new status line (after an interim answer): the headers start again.
                if line.starts(with: "HTTP/".utf8) { transfer.headers.removeAll() }
                if let (name, value) = HTTPClient.headerField(line) { transfer.headers[name] = value }
            }
            return size * count
        })
        _ = sb_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, opaque)
        handles.insert(easy)
        active.add(1, ordering: .relaxed)
        curl_multi_add_handle(multi, easy)
        request.onSubmitted?()
    }

    private func collectFinished() {
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            finish(easy, result: message.pointee.data.result, error: nil)
        }
    }

    private func finish(_ easy: UnsafeMutableRawPointer, result: CURLcode, error: HTTP2TransportError?) {
        handles.remove(easy)
        active.subtract(1, ordering: .relaxed)
        var privatePointer: UnsafeMutableRawPointer?
        _ = sb_curl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &privatePointer)
        var newConnections = 0
        _ = sb_curl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &newConnections)
        connects.add(newConnections, ordering: .relaxed)
        var status = 0
        _ = sb_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        curl_multi_remove_handle(multi, easy)
        curl_easy_cleanup(easy)
        guard let privatePointer else { return }
        let transfer = Unmanaged<Transfer>.fromOpaque(privatePointer).takeRetainedValue()
        if let error {
            transfer.continuation.resume(throwing: error)
        } else if result == CURLE_OK {
            transfer.continuation.resume(returning: HTTPClientResponse(status: status, headers: transfer.headers, body: transfer.body))
        } else {
            let refusedUnprocessed = sb_curl_body_refused_unprocessed(transfer.source) != 0
            let notSent = result == CURLE_COULDNT_CONNECT || result == CURLE_COULDNT_RESOLVE_HOST || refusedUnprocessed
            let message =
                refusedUnprocessed
                ? "the stream was above the last one a GOAWAY let through; not processed by the server"
                : transfer.source.pointee.refused_rewind != 0
                ? "the connection ended before the answer; not resent (the server may have it)"
                : String(cString: curl_easy_strerror(result))
            transfer.continuation.resume(throwing: HTTP2TransportError(code: Int32(result.rawValue), message: message, notSent: notSent))
        }
    }
}

extension Duration {
    /// The timeout libcurl should get: whole milliseconds, rounded up, never 0 (which libcurl
    /// reads as "no timeout": a push sent with 300 µs of ringing left would wait forever).
    var curlMilliseconds: Int {
        let (seconds, attoseconds) = components
        guard seconds >= 0, self > .zero else { return 1 }
        return max(1, Int(clamping: seconds) * 1000 + Int((attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000))
    }
}

/// Header lines as libcurl takes them: one `name: value` string each, which it splits at CR
/// and LF. A value holding either (or NUL) would end its header and start another: such a
/// request is never sent.
public enum HTTPHeaders {
    public static func areSafe(_ headers: [(String, String)]) -> Bool {
        headers.allSatisfy { isSafe($0.0) && isSafe($0.1) }
    }

    public static func isSafe(_ text: String) -> Bool {
        !text.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }
    }
}
