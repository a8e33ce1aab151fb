import Foundation

/// Why APNs (or the client, before sending) refused a push. Apple's reason strings map to
/// cases; anything else is `unknown`.
public enum PushFailureReason: Sendable, Equatable, CustomStringConvertible {
    case badCollapseID, badDeviceToken, badExpirationDate, badMessageID, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken
    case missingTopic, payloadEmpty, topicDisallowed
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden, invalidProviderToken
    case missingProviderToken, unrelatedKeyIDInToken
    case badPath, methodNotAllowed
    /// 410: the token is no longer valid since this time (the app was uninstalled, or the token
    /// rotated).
    case unregistered(since: Date?)
    case expiredToken
    case payloadTooLarge, tooManyProviderTokenUpdates, tooManyRequests
    case internalServerError, serviceUnavailable, shutdown
    /// The request did not get an answer (connection failure, timeout).
    case transport(String)
    /// The retry deadline passed before a definite answer.
    case deadlineExceeded
    /// The app has no APNs key configured.
    case notConfigured
    /// The sender stopped wanting it (the call stopped ringing) before it went out again.
    case withdrawn
    case unknown(String)

    /// Apple's reason string for this case.
    public var apnsReason: String {
        switch self {
        case .badCollapseID: "BadCollapseId"
        case .badDeviceToken: "BadDeviceToken"
        case .badExpirationDate: "BadExpirationDate"
        case .badMessageID: "BadMessageId"
        case .badPriority: "BadPriority"
        case .badTopic: "BadTopic"
        case .deviceTokenNotForTopic: "DeviceTokenNotForTopic"
        case .duplicateHeaders: "DuplicateHeaders"
        case .idleTimeout: "IdleTimeout"
        case .invalidPushType: "InvalidPushType"
        case .missingDeviceToken: "MissingDeviceToken"
        case .missingTopic: "MissingTopic"
        case .payloadEmpty: "PayloadEmpty"
        case .topicDisallowed: "TopicDisallowed"
        case .badCertificate: "BadCertificate"
        case .badCertificateEnvironment: "BadCertificateEnvironment"
        case .expiredProviderToken: "ExpiredProviderToken"
        case .forbidden: "Forbidden"
        case .invalidProviderToken: "InvalidProviderToken"
        case .missingProviderToken: "MissingProviderToken"
        case .unrelatedKeyIDInToken: "UnrelatedKeyIdInToken"
        case .badPath: "BadPath"
        case .methodNotAllowed: "MethodNotAllowed"
        case .unregistered: "Unregistered"
        case .expiredToken: "ExpiredToken"
        case .payloadTooLarge: "PayloadTooLarge"
        case .tooManyProviderTokenUpdates: "TooManyProviderTokenUpdates"
        case .tooManyRequests: "TooManyRequests"
        case .internalServerError: "InternalServerError"
        case .serviceUnavailable: "ServiceUnavailable"
        case .shutdown: "Shutdown"
        case .transport: "Transport"
        case .deadlineExceeded: "DeadlineExceeded"
        case .notConfigured: "NotConfigured"
        case .withdrawn: "Withdrawn"
        case .unknown(let reason): reason
        }
    }

    public var description: String {
        switch self {
        case .transport(let detail): "Transport (\(detail))"
        case .unregistered(let since): since.map { "Unregistered since \($0)" } ?? "Unregistered"
        default: apnsReason
        }
    }

    /// Maps Apple's reason string (and, for 410, its timestamp in milliseconds).
    public init(apnsReason reason: String, timestamp: Int64? = nil) {
        let known: [String: PushFailureReason] = [
            "BadCollapseId": .badCollapseID, "BadDeviceToken": .badDeviceToken, "BadExpirationDate": .badExpirationDate,
            "BadMessageId": .badMessageID, "BadPriority": .badPriority, "BadTopic": .badTopic,
            "DeviceTokenNotForTopic": .deviceTokenNotForTopic, "DuplicateHeaders": .duplicateHeaders,
            "IdleTimeout": .idleTimeout, "InvalidPushType": .invalidPushType, "MissingDeviceToken": .missingDeviceToken,
            "MissingTopic": .missingTopic, "PayloadEmpty": .payloadEmpty, "TopicDisallowed": .topicDisallowed,
            "BadCertificate": .badCertificate, "BadCertificateEnvironment": .badCertificateEnvironment,
            "ExpiredProviderToken": .expiredProviderToken, "Forbidden": .forbidden,
            "InvalidProviderToken": .invalidProviderToken, "MissingProviderToken": .missingProviderToken,
            "UnrelatedKeyIdInToken": .unrelatedKeyIDInToken, "BadPath": .badPath, "MethodNotAllowed": .methodNotAllowed,
            "ExpiredToken": .expiredToken, "PayloadTooLarge": .payloadTooLarge,
            "TooManyProviderTokenUpdates": .tooManyProviderTokenUpdates, "TooManyRequests": .tooManyRequests,
            "InternalServerError": .internalServerError, "ServiceUnavailable": .serviceUnavailable, "Shutdown": .shutdown,
        ]
        if reason == "Unregistered" {
            self = .unregistered(since: timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) })
        } else {
            self = known[reason] ?? .unknown(reason)
        }
    }

    /// The device token is dead: stop sending to it.
    public var invalidatesToken: Bool {
        switch self {
        case .badDeviceToken, .unregistered, .expiredToken: true
        default: false
        }
    }

    /// The app's push settings are wrong (key, certificate, topic): an operator must act.
    public var isConfigurationError: Bool {
        switch self {
        case .deviceTokenNotForTopic, .topicDisallowed, .badCertificate, .badCertificateEnvironment,
            .invalidProviderToken, .missingProviderToken, .forbidden, .unrelatedKeyIDInToken, .badTopic, .notConfigured:
            true
        default: false
        }
    }

    /// Worth sending again later (throttling, server trouble).
    public var isRetryable: Bool {
        switch self {
        case .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown: true
        default: false
        }
    }
}

/// The outcome of one push.
public struct PushResult: Sendable, Equatable {
    /// The `apns-id` of the request (Apple's, or the one the client sent).
    public var apnsID: String
    /// The HTTP status of the final answer (0 when none arrived).
    public var status: Int
    /// nil when APNs accepted the push.
    public var failure: PushFailureReason?
    /// Requests sent, counting retries.
    public var attempts: Int
    /// Time from the first send to the final answer.
    public var latency: Duration

    public init(apnsID: String, status: Int, failure: PushFailureReason?, attempts: Int, latency: Duration) {
        self.apnsID = apnsID
        self.status = status
        self.failure = failure
        self.attempts = attempts
        self.latency = latency
    }

    public var accepted: Bool { failure == nil && status == 200 }
}
