import Dispatch
import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// A running Switchboard server: the store, the transport and everything on top.
///
/// ```swift
/// var configuration = ServerConfiguration()
/// configuration.port = 0
/// let server = try SwitchboardServer.start(configuration)
/// print(server.port)
/// server.shutdown()
/// ```
public final class SwitchboardServer: Sendable {
    public let configuration: ServerConfiguration
    public let store: Store
    public let metrics: Metrics
    let logger: Logger
    private let http: HTTPServer
    private let gateway: Gateway

    private init(configuration: ServerConfiguration, store: Store, metrics: Metrics, logger: Logger) throws {
        self.configuration = configuration
        self.store = store
        self.metrics = metrics
        self.logger = logger
        gateway = Gateway(configuration: configuration, store: store, metrics: metrics, logger: logger)
        http = try HTTPServer(options: configuration.serverOptions, handler: gateway, logger: logger.with("component", "transport"))
    }

    /// Opens the store and starts listening.
    public static func start(_ configuration: ServerConfiguration, logger: Logger = Logger()) throws -> SwitchboardServer {
        let metrics = Metrics()
        let store = try Store(
            directory: configuration.dataDirectory, metrics: metrics, logger: logger, backlogLimit: configuration.limits.storeBacklogWrites)
        let interrupted = try store.failInterruptedCalls(nowMillis: Int64(Date().timeIntervalSince1970 * 1000))
        if interrupted > 0 { logger.warning("calls interrupted by a restart ended as failed", ["count": String(interrupted)]) }
        let server = try SwitchboardServer(configuration: configuration, store: store, metrics: metrics, logger: logger)
        logger.info(
            "listening",
            ["host": configuration.host, "port": String(server.port), "data_dir": configuration.dataDirectory])
        return server
    }

    /// The port the server listens on (the real one when configured with 0).
    public var port: Int { http.port }

    /// `http://host:port`
    public var baseURL: String { "http://\(configuration.host):\(port)" }

    /// The URL people should open.
    public var publicURL: String { configuration.publicURL ?? baseURL + "/" }

    /// Creates the development app when the store has no app yet; returns it if it did.
    public func createDevelopmentAppIfNeeded() throws -> App? {
        guard try store.allApps().isEmpty else { return nil }
        let app = App.make(name: "Development", bundleID: "com.example.switchboard")
        try store.insert(app)
        logger.info("development app created", ["app": app.id, "api_key": app.apiKey])
        return app
    }

    /// Graceful shutdown: stop accepting, close WebSockets with 1001 (waiting up to the grace
    /// period for them to go), stop the loop, then finish store writes and close the store.
    public func shutdown() {
        logger.info("shutting down")
        let drained = DispatchSemaphore(value: 0)
        let grace = Duration.seconds(configuration.limits.shutdownGraceSeconds)
        let gateway = self.gateway
        http.loop.execute { gateway.drain(grace: grace) { drained.signal() } }
        drained.wait()
        http.stop()
        gateway.hub.push.shutdown()
        store.close()
        logger.info("stopped")
    }
}
