import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardPush

/// The sandbox's admin API: JSON over plain HTTP, and WebSocket subscriptions for simulated
/// devices. Runs on its own libwebsockets loop; the sandbox state it touches is under a lock.
///
/// Safety of `@unchecked Sendable`: `subscribers` is touched on the admin loop only (pushes are
/// handed over with `loop.execute`); `sandbox` is set once before any request arrives.
final class SandboxAdmin: HTTPServerHandler, @unchecked Sendable {
    weak var sandbox: APNsSandbox?
    private weak var server: HTTPServer?
    private var subscribers: [String: Set<ConnectionID>] = [:]
    private var pendingSubscriptions: [ConnectionID: String] = [:]
    private var tokenOfConnection: [ConnectionID: String] = [:]
    /// The tokens with a subscriber, readable from the HTTP/2 thread.
    private let subscribedTokens = Locked<Set<String>>([])
    private let logger: Logger
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    init(logger: Logger) {
        self.logger = logger
    }

    func attach(to server: HTTPServer) {
        self.server = server
    }

    /// Hands an accepted push to the devices subscribed to its token. Any thread.
    func deliver(_ record: APNsSandbox.Record) {
        guard subscribedTokens.withLock({ $0.contains(record.token) }), let server, let bytes = try? encoder.encode(record) else {
            return
        }
        let frame = OutboundFrame(bytes)
        server.loop.execute { [self] in
            for connection in subscribers[record.token] ?? [] { server.send(frame, to: connection) }
        }
    }

    func handle(_ request: HTTPRequest, on connection: ConnectionID) {
        server?.respond(to: connection, with: route(request))
    }

    private func route(_ request: HTTPRequest) -> HTTPResponse {
        guard let sandbox else { return reply(503, ["error": "not ready"]) }
        let parts = request.path.split(separator: "/").map(String.init)
        switch (request.method, parts.first, parts.count) {
        case (.get, "pushes", 1):
            var records = sandbox.records
            if let token = request.query["token"]?.lowercased() { records = records.filter { $0.token == token } }
            return encoded(200, ["pushes": records])
        case (.delete, "pushes", 1):
            sandbox.state.withLock { $0.records.removeAll() }
            return HTTPResponse(status: 204)
        case (.get, "stats", 1):
            let stats: [String: JSONValue] = [
                "requests": .int(Int64(sandbox.requestCount)), "connections": .int(Int64(sandbox.connectionCount)),
                "peak_connections": .int(Int64(sandbox.peakConnectionCount)),
                "connections_accepted": .int(Int64(sandbox.connectionsAccepted)),
                "stream_resets": .int(Int64(sandbox.streamResets)),
                "token_updates": .int(Int64(sandbox.tokenUpdates)),
                "accepted": .int(Int64(sandbox.records.filter { $0.status == 200 }.count)),
            ]
            return encoded(200, JSONValue.object(stats))
        case (.post, "reset", 1):
            sandbox.reset()
            return HTTPResponse(status: 204)
        case (.put, "tokens", 2), (.delete, "tokens", 2):
            let token = parts[1].lowercased()
            if request.method == .delete {
                sandbox.setToken(token, nil)
                return HTTPResponse(status: 204)
            }
            guard let body = json(request), let stateName = body["state"]?.stringValue else {
                return reply(400, ["error": "expected {\"state\": \"unregistered\"|\"bad\"|\"topic\", ...}"])
            }
            switch stateName {
            case "unregistered":
                let since: Int64
                if case .int(let value)? = body["since"] { since = value } else { since = Int64(Date().timeIntervalSince1970 * 1000) }
                sandbox.setToken(token, .unregistered(since: since))
            case "bad": sandbox.setToken(token, .bad)
            case "topic":
                guard let topic = body["topic"]?.stringValue else { return reply(400, ["error": "topic needed"]) }
                sandbox.setToken(token, .topic(topic))
            case "active": sandbox.setToken(token, nil)
            default: return reply(400, ["error": "unknown state \(stateName)"])
            }
            return HTTPResponse(status: 204)
        case (.post, "faults", 1):
            guard let body = json(request), let kind = body["kind"]?.stringValue else {
                return reply(400, ["error": "expected {\"kind\": ...}"])
            }
            func int(_ key: String) -> Int? {
                if case .int(let value)? = body[key] { return Int(value) }
                return nil
            }
            switch kind {
            case "status":
                guard let status = int("status"), [429, 500, 503].contains(status) else {
                    return reply(400, ["error": "status must be 429, 500 or 503"])
                }
                sandbox.inject(.status(status, count: int("count") ?? 1))
            case "goaway":
                guard let streams = int("after_streams"), streams > 0 else { return reply(400, ["error": "after_streams needed"]) }
                sandbox.inject(.goAway(afterStreams: streams))
            case "latency":
                sandbox.inject(.latency(.milliseconds(max(0, int("ms") ?? 0))))
            case "expired_provider_token":
                sandbox.inject(.expiredProviderToken(count: int("count") ?? 1))
            case "stall":
                sandbox.inject(.stall(count: max(0, int("count") ?? 1)))
            case "reset":
                guard let every = int("every"), every >= 0 else { return reply(400, ["error": "every needed (0 stops)"]) }
                sandbox.inject(.reset(every: every == 0 ? nil : every))
            default:
                return reply(400, ["error": "unknown fault \(kind)"])
            }
            return HTTPResponse(status: 204)
        default:
            return reply(404, ["error": "no such admin endpoint: \(request.method.rawValue) \(request.path)"])
        }
    }

    private func json(_ request: HTTPRequest) -> [String: JSONValue]? {
        (try? JSONDecoder().decode(JSONValue.self, from: Data(request.body)))?.objectValue
    }

    private func encoded(_ status: Int, _ value: some Encodable) -> HTTPResponse {
        HTTPResponse(status: status, body: .bytes((try? encoder.encode(value)).map(Array.init) ?? []))
    }

    private func reply(_ status: Int, _ object: [String: String]) -> HTTPResponse {
        encoded(status, object)
    }

    // MARK: Simulated devices

    func shouldUpgrade(_ request: HTTPRequest, on connection: ConnectionID) -> UpgradeDecision {
        let parts = request.path.split(separator: "/").map(String.init)
        guard parts.count == 2, parts[0] == "devices", PushNotification.isDeviceToken(parts[1]) else {
            return .reject(reply(404, ["error": "subscribe at /devices/{64 hex token}"]))
        }
        pendingSubscriptions[connection] = parts[1].lowercased()
        return .accept(tag: 1)
    }

    func webSocketOpened(_ connection: ConnectionID, tag: Int) {
        guard let token = pendingSubscriptions.removeValue(forKey: connection) else { return }
        subscribers[token, default: []].insert(connection)
        tokenOfConnection[connection] = token
        _ = subscribedTokens.withLock { $0.insert(token) }
        logger.debug("device subscribed", ["token": Redact.token(token)])
        // From now on pushes for the token reach it: said first, so a device can wait for it.
        server?.send(OutboundFrame(text: #"{"subscribed":true}"#), to: connection)
    }

    func webSocketReceived(_ connection: ConnectionID, message: [UInt8], binary: Bool) {}

    func webSocketClosed(_ connection: ConnectionID, reason: CloseReason) {
        pendingSubscriptions.removeValue(forKey: connection)
        if let token = tokenOfConnection.removeValue(forKey: connection) {
            subscribers[token]?.remove(connection)
            if subscribers[token]?.isEmpty == true {
                subscribers.removeValue(forKey: token)
                subscribedTokens.withLock { _ = $0.remove(token) }
            }
        }
    }

    func shouldAcceptConnection() -> Bool { true }
}
