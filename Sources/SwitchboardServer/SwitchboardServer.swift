import Dispatch
import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport

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
    /// Held for the process's life: one server per data directory.
    private let lock: DirectoryLock

    /// This node's part in a cluster (`cluster_redis_url`); nil on one node.
    private let cluster: Cluster?

    private init(configuration: ServerConfiguration, store: Store, metrics: Metrics, logger: Logger, lock: DirectoryLock, cluster: Cluster?) throws {
        self.configuration = configuration
        self.store = store
        self.metrics = metrics
        self.logger = logger
        self.lock = lock
        // The composition: the hub is handed its store and push dispatcher here, its output and
        // scheduler when the transport attaches the gateway; nothing below creates them.
        // The push tasks log through a repeat limiter of their own: no lock shared with the loop.
        let push = PushRouter(settings: .init(configuration), store: store, logger: logger.with("component", "push").separated())
        let hub = Hub(configuration: configuration, store: store, metrics: metrics, logger: logger, push: push)
        self.cluster = cluster
        // Before the loop runs: the first session already finds the hub in the cluster.
        if let cluster { hub.join(cluster) }
        gateway = Gateway(configuration: configuration, hub: hub, metrics: metrics, logger: logger)
        http = try HTTPServer(options: configuration.serverOptions, handler: gateway, logger: logger.with("component", "transport"))
        if let cluster, let loop = http.loop { loop.execute { cluster.start(on: loop) } }
    }

    /// Takes the data directory's lock, opens the store, ends the calls servers that are gone left
    /// behind, and starts listening. Throws, with a sentence saying why, when the directory is
    /// another server's, the store cannot be opened, or the address cannot be bound.
    public static func start(_ configuration: ServerConfiguration, logger: Logger = Logger()) throws -> SwitchboardServer {
        try configuration.validate()
        let directory = configuration.dataDirectory
        if try Files.createPrivateDirectory(directory) {
            logger.warning("the data directory was readable by others: made private to its owner", ["data_dir": directory])
        }
        let lock: DirectoryLock
        let since = Logger.timestamp()
        do {
            lock = try DirectoryLock(
                directory: directory, infoFile: (directory as NSString).appendingPathComponent("switchboard.lock"),
                holder: "pid \(getpid()), starting since \(since)")
        } catch {
            guard case .held(_, let holder) = error else { throw StartError(description: error.description) }
            throw StartError(
                description: "another switchboard serve is using the data directory '\(directory)' (\(holder)): stop it, or give this one its own --data-dir")
        }
        // The process that held the data directory before this one is gone (the lock says so):
        // its calls are over, whatever their lease says.
        let ownerFile = (directory as NSString).appendingPathComponent("switchboard.owner")
        let previousOwner = (try? String(contentsOfFile: ownerFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        let owner = "p_" + RandomID.alphanumeric(12)
        // A disk that takes no writes now (full, read-only) does not stop the server: the next
        // start then waits for the leases of this process's calls instead.
        do { try owner.write(toFile: ownerFile, atomically: true, encoding: .utf8) } catch {
            logger.warning("cannot note this process in the data directory", ["file": ownerFile, "error": error.localizedDescription])
        }
        let metrics = Metrics()
        let store = try Store.open(
            url: configuration.storeURL, directory: directory, metrics: metrics, logger: logger,
            limits: Store.Limits(
                backlogWrites: configuration.limits.storeBacklogWrites, poolSize: configuration.limits.storePoolSize,
                statementTimeoutMillis: configuration.limits.storeStatementTimeoutMillis,
                commitDelayMillis: configuration.limits.storeCommitDelayMillis,
                appRefreshSeconds: configuration.limits.appRefreshSeconds),
            owner: owner)
        let server: SwitchboardServer
        var cluster: Cluster?
        do {
            if let text = configuration.clusterRedisURL {
                guard store.engine == .postgres else {
                    throw StartError(description: "cluster_redis_url needs store_url: the nodes of a cluster share one PostgreSQL store")
                }
                let url = try RedisURL(text)
                let nodeID = configuration.effectiveNodeID
                // Refused while another live node holds this id: two nodes as one would take
                // each other's calls and messages.
                try Cluster.claim(nodeID: nodeID, instance: owner, url: url, timeout: .seconds(configuration.limits.nodeTimeoutSeconds))
                cluster = Cluster(
                    nodeID: nodeID, instance: owner, previousInstance: previousOwner, url: url, limits: configuration.limits, logger: logger)
            }
            // On SQLite the directory's lock proves no other server runs: every call another
            // process left is over. A shared PostgreSQL may have other servers running theirs:
            // only the calls whose owner stopped renewing its lease are, and the previous
            // process's on this data directory.
            // In a cluster nothing ends here: the nodes' sweeps take over the calls of one that
            // died, this one's previous process's included.
            let abandoned: Store.Abandoned = store.engine == .sqlite ? .everyOtherOwner : .leaseExpired(previous: previousOwner)
            if cluster == nil {
                let interrupted = try store.endAbandonedCalls(abandoned, nowMillis: Int64(Date().timeIntervalSince1970 * 1000))
                if interrupted > 0 { logger.warning("calls interrupted by a restart ended as failed", ["count": String(interrupted)]) }
            }
            server = try SwitchboardServer(configuration: configuration, store: store, metrics: metrics, logger: logger, lock: lock, cluster: cluster)
        } catch {
            store.close()
            lock.release()
            throw error
        }
        let addresses = server.http.addresses.map(\.description).joined(separator: ",")
        lock.update("pid \(getpid()), listening on \(addresses), since \(since)")
        logger.info(
            "listening",
            ["host": configuration.host, "port": String(server.port), "addresses": addresses, "data_dir": directory,
             "max_connections": String(server.http.maxConnections), "descriptor_limit": String(DescriptorLimit.current)])
        return server
    }

    /// The port the server listens on (the real one when configured with 0).
    public var port: Int { http.port }

    /// The addresses the server listens on (`127.0.0.1:8080`, `[::1]:8080`).
    public var addresses: [SocketAddress] { http.addresses }

    /// `http://host:port`
    public var baseURL: String { "http://\(SocketAddress.urlHost(configuration.host)):\(port)" }

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
        let cluster = self.cluster
        http.loop.execute {
            guard let cluster else { return gateway.drain(grace: grace) { drained.signal() } }
            // A node of a cluster: out of the balancer at once (/readyz 503), its rooms closed
            // and its calls handed over, then its sessions told to resume elsewhere (1012) and
            // handed over as they do; it leaves the cluster last.
            gateway.beginDraining()
            gateway.hub.drainCluster(storeWait: grace) {
                gateway.drain(grace: grace, code: CloseCode.serviceRestart, waitForSessions: true) {
                    cluster.stop()
                    drained.signal()
                }
            }
        }
        drained.wait()
        http.stop()
        gateway.hub.push.shutdown()
        store.close()
        lock.release()
        logger.info("stopped")
    }
}

/// Why the server did not start, as a sentence for the operator.
public struct StartError: Error, Sendable, CustomStringConvertible {
    public var description: String
}
