// What more than one benchmark uses: reading options, writing the result line, failing, the
// server to load and its tokens, connecting, the monotonic clock, pacing and percentiles.

import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem

// MARK: Options and output

/// The value after `--name`, if it is there.
func option(_ name: String, in arguments: [String]) -> String? {
    guard let index = arguments.firstIndex(of: "--" + name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

/// One line on stdout, written at once (the bench script waits for it).
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The message on stderr, and exit status 2.
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(2)
}

// MARK: The server under load

/// The Switchboard a benchmark loads, and the app credentials it signs tokens with.
struct ServerOptions {
    /// `ws://HOST:PORT`.
    var server: String
    var apiKey: String
    var secret: String

    /// An access token for `identity`, signed with the app's secret.
    func token(for identity: String, grants: SwitchboardProtocol.Grants, ttlSeconds: Int = 3600) -> String {
        let claims = AccessTokenIssuer.claims(apiKey: apiKey, identity: identity, name: nil, grants: grants, ttlSeconds: ttlSeconds)
        return AccessTokenVerifier.sign(claims, secret: secret)
    }
}

/// --server, --api-key and --api-secret, which every load against a Switchboard needs.
func serverOptions(_ arguments: [String]) -> ServerOptions {
    guard let server = option("server", in: arguments), let apiKey = option("api-key", in: arguments),
        let secret = option("api-secret", in: arguments)
    else { fail("--server, --api-key and --api-secret are required") }
    return ServerOptions(server: server, apiKey: apiKey, secret: secret)
}

/// A WebSocket to `url`, asked again while a node has not seen the app yet (503,
/// Retry-After: 1): up to 10 attempts a second apart, then the run fails.
func connect(_ url: String, on loop: EventLoop) async throws -> WebSocketClient {
    for attempt in 1...10 {
        do { return try await WebSocketClient.connect(to: URL(string: url)!, on: loop) } catch where attempt < 10 {
            try await Task.sleep(for: .seconds(1))
        }
    }
    fail("cannot connect to \(url)")
}

// MARK: Time and figures

/// Microseconds on the monotonic clock: send and receive stamps of one run compare.
func monotonicMicros() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
}

/// How many of `total` messages a steady `rate` per second has made due since `started`.
func due(ofTotal total: Int, rate: Int, since started: ContinuousClock.Instant) -> Int {
    let elapsed = ContinuousClock.now - started
    let micros = Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12
    return min(total, Int(micros * Double(rate) / 1e6))
}

/// The `p` quantile (0.5, 0.99…) of `sorted`, 0 when it is empty.
func percentile(_ p: Double, of sorted: [UInt64]) -> UInt64 {
    sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}
