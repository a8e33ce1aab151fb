import SwitchboardProtocol
import SwitchboardSystem

extension Gateway {
    // MARK: Health, readiness, metrics

    /// `GET /healthz`: the process answers.
    func health(_ rest: RESTRequest) -> RESTAnswer {
        .now(json(200, ["status": "ok"]))
    }

    /// `GET /readyz`: ready for traffic, unless shutting down, the storage refuses writes, or
    /// (a node of a cluster) Redis is not connected.
    func readiness(_ rest: RESTRequest) -> RESTAnswer {
        if draining { return .now(failure(ErrorBody(.unavailable, "server is shutting down"))) }
        if let problem = hub.store.storageProblem {
            return .now(failure(ErrorBody(.unavailable, "storage refuses writes (\(problem)); calls are refused until it recovers")))
        }
        if let cluster = hub.cluster, !cluster.isConnected {
            return .now(failure(ErrorBody(.unavailable, "not connected to the cluster's Redis")))
        }
        return .now(json(200, ["status": "ready"]))
    }

    /// `GET /metrics`: Prometheus' text format; with `metrics_token`, only for its bearer.
    func metricsPage(_ rest: RESTRequest) -> RESTAnswer {
        if let secret = configuration.metricsToken {
            let given = bearerToken(rest.http.headers["authorization"]) ?? ""
            guard Crypto.constantTimeEquals(Array(given.utf8), Array(secret.utf8)) else {
                return .now(
                    failure(
                        ErrorBody(.unauthorized, "/metrics needs Authorization: Bearer <metrics_token>"),
                        headers: [("www-authenticate", "Bearer realm=\"switchboard-metrics\"")]))
            }
        }
        metrics.set("switchboard_sessions", to: Double(hub.sessionCount))
        metrics.set("switchboard_open_connections", to: Double(server?.openConnections ?? 0))
        return .now(
            HTTPResponse(
                status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: .bytes(Array(metrics.render().utf8))))
    }
}
