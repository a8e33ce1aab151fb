// The only Swift file that imports libcurl.

import CCurl
import CShims
import Foundation

/// A response read by `HTTPClient`.
public struct HTTPClientResponse: Sendable {
    public var status: Int
    /// Header values by lower-case name (the last one wins).
    public var headers: [String: String]
    public var body: [UInt8]

    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// A plain HTTP/1.1 and HTTP/2 client on libcurl's easy interface: one blocking request at a
/// time per call, for the command-line tools, webhooks and tests.
public enum HTTPClient {
    private final class Collector {
        var body: [UInt8] = []
        var headers: [String: String] = [:]
    }

    private static let globalInit: Void = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
    }()

    /// Performs one request and waits for the whole response.
    public static func perform(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        timeout: Duration = .seconds(10)
    ) throws -> HTTPClientResponse {
        _ = globalInit
        guard let easy = curl_easy_init() else { throw SystemError.http("curl_easy_init failed") }
        defer { curl_easy_cleanup(easy) }

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
        _ = sb_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, Int(timeout.components.seconds * 1000))
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
            if let pointer {
                let line = String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
                if let colon = line.firstIndex(of: ":") {
                    let name = line[..<colon].lowercased()
                    let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
                    collector.headers[name] = value
                }
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
