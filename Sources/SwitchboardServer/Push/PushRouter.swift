import SwitchboardProtocol
import Foundation
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardPush

/// Sends pushes in the background for the hub: `PushRouter` (APNs) in production, a recorder
/// in the hub's tests.
protocol PushDispatching: Sendable {
    /// Sends `notification` and hands the result to `answered`, on the push's thread.
    func dispatch(
        _ notification: PushNotification, appID: String, environment: APNsEnvironment, deadline: ContinuousClock.Instant,
        stillWanted: @escaping @Sendable () -> Bool, onSubmitted: (@Sendable () -> Void)?,
        answered: @escaping @Sendable (PushResult) -> Void)
    func shutdown()
}

/// Picks the APNs client for each push: one per (app, environment), built from the app's key
/// in the store and kept for the life of the server.
final class PushRouter: PushDispatching {
    /// Where and how the clients connect: the server's APNs settings.
    struct Settings {
        /// Sends to this host instead of Apple's (the local sandbox).
        var baseURL: String?
        var caFile: String?
        var requestTimeout: Duration
        /// Where certificate credentials are written for libcurl (readable by this user only).
        var credentialsDirectory: String

        init(_ configuration: ServerConfiguration) {
            baseURL = configuration.apnsURL
            caFile = configuration.apnsCAFile
            requestTimeout = .seconds(configuration.limits.apnsRequestTimeoutSeconds)
            credentialsDirectory = configuration.dataDirectory + "/apns-credentials"
        }
    }

    private let settings: Settings
    private let store: Store
    private let logger: Logger
    private let services = Locked<[String: PushService]>([:])
    /// Pushes handed over by the loop; one worker runs each as a child task of its group, so
    /// none is a bare task, and shutdown ends them all.
    private let jobs: AsyncStream<@Sendable () async -> Void>.Continuation
    private let worker: Task<Void, Never>

    init(settings: Settings, store: Store, logger: Logger) {
        self.settings = settings
        self.store = store
        self.logger = logger
        let (stream, jobs) = AsyncStream.makeStream(of: (@Sendable () async -> Void).self)
        self.jobs = jobs
        worker = Task {
            await withDiscardingTaskGroup { group in
                for await job in stream { group.addTask { await job() } }
            }
        }
    }

    /// Sends a push in the background and hands its result to `answered` (on the push's
    /// thread: the caller moves it to its own).
    func dispatch(
        _ notification: PushNotification, appID: String, environment: APNsEnvironment, deadline: ContinuousClock.Instant,
        stillWanted: @escaping @Sendable () -> Bool, onSubmitted: (@Sendable () -> Void)?,
        answered: @escaping @Sendable (PushResult) -> Void
    ) {
        jobs.yield { [self] in
            answered(await send(notification, appID: appID, environment: environment, deadline: deadline, stillWanted: stillWanted, onSubmitted: onSubmitted))
        }
    }

    func send(
        _ notification: PushNotification, appID: String, environment: APNsEnvironment, deadline: ContinuousClock.Instant,
        stillWanted: @escaping @Sendable () -> Bool = { true }, onSubmitted: (@Sendable () -> Void)? = nil
    ) async -> PushResult {
        guard let service = await service(appID: appID, environment: environment) else {
            logger.error("no APNs key for the app: set one with `switchboard app push-key`", ["app": appID])
            return PushResult(apnsID: "", status: 0, failure: .notConfigured, attempts: 0, latency: .zero)
        }
        return await service.send(notification, deadline: deadline, stillWanted: stillWanted, onSubmitted: onSubmitted)
    }

    /// The client for an app and environment, made at its first push from the app's push
    /// settings (read on the store's threads, not this task's).
    private func service(appID: String, environment: APNsEnvironment) async -> PushService? {
        let key = appID + "|" + environment.rawValue
        if let existing = services.withLock({ $0[key] }) { return existing }
        let store = store
        let read: Result<(AppPushSettings, String?)?, any Error> = await withCheckedContinuation { done in
            store.perform({ store in
                guard let credentials = try store.pushSettings(appID: appID) else { return nil }
                guard case .key(_, let keyID, let teamID) = credentials else { return (credentials, nil) }
                return (credentials, try store.providerToken(keyID: keyID, teamID: teamID))
            }) { done.resume(returning: $0) }
        }
        guard case .success(let (appCredentials, savedToken)?) = read else { return nil }
        let credentials: APNsCredentials
        switch appCredentials {
        case .key(let pem, let keyID, let teamID):
            guard let signingKey = try? ECPrivateKey(pem: pem) else { return nil }
            // Apple throttles a key whose token changes more often than every 20 minutes: the
            // token in use is kept in the store, a restarted server carries on with it, and
            // servers sharing the store (a cluster) use one: a new token is stored only in place
            // of the one it replaces, else the one another server stored first is used.
            let cache = ProviderTokenCache(key: signingKey, keyID: keyID, teamID: teamID, settle: { minted, replacing in
                try? store.settleProviderToken(
                    minted.jwt, issuedAt: minted.issuedAt, replacing: replacing?.issuedAt, keyID: keyID, teamID: teamID)
            })
            if let savedToken { _ = cache.adopt(savedToken) }
            credentials = .token(cache)
        case .certificate(let pem, let password):
            guard let path = try? writeCredential(pem, appID: appID) else { return nil }
            credentials = .certificate(path: path, keyPath: nil, password: password, isP12: false)
        }
        var configuration = APNsClientConfiguration(credentials: credentials, environment: environment)
        configuration.baseURL = settings.baseURL
        configuration.caFile = settings.caFile
        configuration.requestTimeout = settings.requestTimeout
        let service = PushService(client: APNsClient(configuration: configuration, logger: logger), store: store, logger: logger)
        return services.withLock { services in
            if let raced = services[key] {
                service.client.shutdown()
                return raced
            }
            services[key] = service
            return service
        }
    }

    /// libcurl reads client certificates from files: the PEM goes to a file only this user reads.
    private func writeCredential(_ pem: String, appID: String) throws -> String {
        try FileManager.default.createDirectory(
            atPath: settings.credentialsDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let path = settings.credentialsDirectory + "/\(appID.filter { $0.isLetter || $0.isNumber || $0 == "_" }).pem"
        guard FileManager.default.createFile(atPath: path, contents: Data(pem.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw SystemError.crypto("cannot write \(path)")
        }
        return path
    }

    deinit { jobs.finish() }

    func shutdown() {
        jobs.finish()
        for service in services.withLock({ $0.values }) { service.client.shutdown() }
    }
}
