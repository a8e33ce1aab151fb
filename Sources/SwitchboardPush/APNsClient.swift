import Foundation
import SwitchboardSystem
import SwitchboardSupport

/// How a provider authenticates to APNs.
public enum APNsCredentials: Sendable {
    /// Token-based: a .p8 signing key, its key id and the team id.
    case token(ProviderTokenCache)
    /// Certificate-based: a client certificate (PEM with its key, or a .p12 with a password).
    case certificate(path: String, keyPath: String?, password: String?, isP12: Bool)
}

/// Settings of one APNs client.
public struct APNsClientConfiguration: Sendable {
    public var credentials: APNsCredentials
    public var environment: APNsEnvironment
    /// Overrides the environment's host (the local sandbox, a test server).
    public var baseURL: String?
    /// HTTP/2 connections to keep (each carries up to the server's concurrent-stream limit).
    public var connections = 1
    /// Time allowed for one request.
    public var requestTimeout: Duration = .seconds(10)
    /// A CA file to trust (the sandbox's self-signed certificate).
    public var caFile: String?
    /// First retry delay for 429/5xx; doubles each time, with jitter, up to `maxBackoff`.
    public var initialBackoff: Duration = .milliseconds(100)
    public var maxBackoff: Duration = .seconds(5)

    public init(credentials: APNsCredentials, environment: APNsEnvironment) {
        self.credentials = credentials
        self.environment = environment
    }
}

/// Sends pushes to APNs over HTTP/2: few long-lived connections, many concurrent streams, one
/// provider token reused, typed results, and retries only where they are safe.
public final class APNsClient: Sendable {
    public let configuration: APNsClientConfiguration
    private let http: HTTP2Client
    private let observe: (@Sendable (PushNotification, PushResult) -> Void)?
    private let logger: Logger

    /// `observe` sees every push's final outcome (the server counts them in its metrics).
    public init(
        configuration: APNsClientConfiguration, logger: Logger = Logger(),
        observe: (@Sendable (PushNotification, PushResult) -> Void)? = nil
    ) {
        self.configuration = configuration
        self.observe = observe
        self.logger = logger
        var options = HTTP2Client.Options()
        options.maxConnections = configuration.connections
        options.caFile = configuration.caFile
        if case .certificate(let path, let keyPath, let password, let isP12) = configuration.credentials {
            options.clientCertificate = path
            options.clientKey = keyPath
            options.clientCertificatePassword = password
            options.clientCertificateType = isP12 ? "P12" : "PEM"
        }
        http = HTTP2Client(options: options)
    }

    /// Closes the connections; pending sends fail.
    public func shutdown() {
        http.shutdown()
    }

    /// Connections opened so far.
    public var connectionsOpened: Int { http.connectionsOpened }

    private var baseURL: String { configuration.baseURL ?? configuration.environment.baseURL }

    /// Sends one push. Retries 429 and 5xx answers with backoff until `deadline` (a ring never
    /// outlives its expiry), and an `ExpiredProviderToken` once with a new token. Never throws:
    /// every outcome is a `PushResult`.
    public func send(
        _ notification: PushNotification, deadline: ContinuousClock.Instant? = nil,
        stillWanted: @escaping @Sendable () -> Bool = { true }, onSubmitted: (@Sendable () -> Void)? = nil
    ) async -> PushResult {
        let started = ContinuousClock.now
        let apnsID = (notification.id ?? Crypto.randomUUID()).uuidString.lowercased()
        let deadline = deadline ?? started + .seconds(30)
        func result(_ status: Int, _ failure: PushFailureReason?, _ attempts: Int, id: String = apnsID) -> PushResult {
            let outcome = PushResult(apnsID: id, status: status, failure: failure, attempts: attempts, latency: .now - started)
            record(outcome, notification)
            return outcome
        }

        guard !notification.payload.isEmpty else { return result(0, .payloadEmpty, 0) }
        guard notification.payload.count <= notification.type.maxPayloadBytes else { return result(0, .payloadTooLarge, 0) }
        guard PushNotification.isDeviceToken(notification.deviceToken) else {
            return result(0, .badDeviceToken, 0)
        }
        // A topic is a bundle id: letters, digits, dots and dashes (and `.voip`), never
        // anything that could end the header it travels in.
        guard PushNotification.isTopic(notification.topic) else { return result(0, .badTopic, 0) }

        var attempts = 0
        var reminted = false
        var backoff = configuration.initialBackoff
        var token: ProviderTokenCache.Token?
        var lastAnswer: (status: Int, failure: PushFailureReason)?
        while true {
            var headers: [(String, String)] = [
                ("apns-push-type", notification.type.rawValue),
                ("apns-topic", notification.apnsTopic),
                ("apns-priority", String(notification.priority ?? notification.type.defaultPriority)),
                ("apns-id", apnsID),
                ("content-type", "application/json"),
            ]
            if let expiration = notification.expiration { headers.append(("apns-expiration", String(expiration))) }
            if let collapse = notification.collapseID { headers.append(("apns-collapse-id", collapse)) }
            if case .token(let cache) = configuration.credentials {
                do {
                    token = try token ?? cache.token()
                } catch {
                    return result(0, .invalidProviderToken, attempts)
                }
                headers.append(("authorization", "bearer " + token!.jwt))
            }
            if attempts > 0 && !stillWanted() { return result(lastAnswer?.status ?? 0, .withdrawn, attempts) }
            let remaining = deadline - .now
            guard remaining > .zero else {
                // Out of time between retries: report what APNs said last.
                return result(lastAnswer?.status ?? 0, lastAnswer?.failure ?? .deadlineExceeded, attempts)
            }
            let request = HTTP2Request(
                url: "\(baseURL)/3/device/\(notification.deviceToken)", headers: headers, body: notification.payload,
                timeout: min(configuration.requestTimeout, remaining), onSubmitted: attempts == 0 ? onSubmitted : nil)
            attempts += 1
            let response: HTTPClientResponse
            do {
                response = try await http.send(request)
            } catch let error as HTTP2TransportError {
                // Sending again after an unknown outcome could ring twice: only retry when the
                // request certainly never left.
                if error.notSent, await pause(&backoff, until: deadline) { continue }
                return result(0, .transport(error.description), attempts)
            } catch {
                return result(0, .transport("\(error)"), attempts)
            }
            let id = response.headers["apns-id"] ?? apnsID
            if response.status == 200 { return result(200, nil, attempts, id: id) }
            let failure = Self.reason(of: response)
            if failure == .expiredProviderToken, !reminted, case .token(let cache) = configuration.credentials, let stale = token {
                reminted = true
                token = try? cache.replace(stale)
                logger.info("provider token expired; minted a new one", ["key_id": cache.keyID])
                continue
            }
            lastAnswer = (response.status, failure)
            if failure.isRetryable, await pause(&backoff, until: deadline) { continue }
            return result(response.status, failure, attempts, id: id)
        }
    }

    /// Sleeps the current backoff (with jitter) and doubles it; false when that would pass the deadline.
    private func pause(_ backoff: inout Duration, until deadline: ContinuousClock.Instant) async -> Bool {
        let jittered = backoff * Double.random(in: 0.5...1.0)
        guard ContinuousClock.now + jittered < deadline else { return false }
        try? await Task.sleep(for: jittered)
        backoff = min(backoff * 2, configuration.maxBackoff)
        return true
    }

    package static func reason(of response: HTTPClientResponse) -> PushFailureReason {
        struct Body: Decodable {
            var reason: String?
            var timestamp: Int64?
        }
        if let body = try? JSONDecoder().decode(Body.self, from: Data(response.body)), let reason = body.reason {
            return PushFailureReason(apnsReason: reason, timestamp: body.timestamp)
        }
        switch response.status {
        case 429: return .tooManyRequests
        case 500: return .internalServerError
        case 503: return .serviceUnavailable
        default: return .unknown("HTTP \(response.status)")
        }
    }

    private func record(_ outcome: PushResult, _ notification: PushNotification) {
        observe?(notification, outcome)
        if let failure = outcome.failure, failure.isConfigurationError {
            logger.error(
                "APNs configuration alarm: fix the app's push settings",
                ["reason": failure.apnsReason, "topic": notification.apnsTopic, "token": Redact.token(notification.deviceToken)])
        }
    }
}
