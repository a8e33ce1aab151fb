import Foundation
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardPush

/// Sends pushes and acts on what APNs answers: dead tokens are disabled in the store (a 410
/// only when the device did not register the token again later), configuration errors raise an
/// alarm (in `APNsClient`).
public final class PushService: Sendable {
    public let client: APNsClient
    private let store: Store
    private let logger: Logger
    private let clock: @Sendable () -> Date

    public init(client: APNsClient, store: Store, logger: Logger = Logger(), clock: @escaping @Sendable () -> Date = { Date() }) {
        self.client = client
        self.store = store
        self.logger = logger
        self.clock = clock
    }

    public func send(
        _ notification: PushNotification, deadline: ContinuousClock.Instant? = nil,
        stillWanted: @escaping @Sendable () -> Bool = { true }, onSubmitted: (@Sendable () -> Void)? = nil
    ) async -> PushResult {
        let result = await client.send(notification, deadline: deadline, stillWanted: stillWanted, onSubmitted: onSubmitted)
        if let failure = result.failure, failure.invalidatesToken {
            var since: Date?
            if case .unregistered(let timestamp) = failure { since = timestamp }
            let (token, reason, at, store, invalidSince) = (notification.deviceToken, failure.apnsReason, clock(), store, since)
            // On the store's own thread, not this task's.
            let written: Result<Bool, any Error> = await withCheckedContinuation { done in
                store.perform({ try $0.disablePushToken(token, reason: reason, invalidSince: invalidSince, at: at) }) { done.resume(returning: $0) }
            }
            do {
                let disabled = try written.get()
                // The environment and bundle id tell a sandbox/production mix-up (BadDeviceToken
                // for a development build's token sent to production) from a dead token.
                logger.info(
                    disabled ? "push token disabled" : "push token kept: registered again after APNs invalidated it",
                    ["token": Redact.token(notification.deviceToken), "reason": failure.apnsReason,
                     "environment": client.configuration.environment.rawValue, "bundle_id": notification.topic, "type": notification.type.rawValue])
            } catch {
                logger.error(
                    "cannot record a dead push token",
                    ["token": Redact.token(notification.deviceToken), "environment": client.configuration.environment.rawValue,
                     "bundle_id": notification.topic, "error": "\(error)"])
            }
        }
        return result
    }
}
