import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import Synchronization
import SwitchboardSupport
import SwitchboardPush

/// Counters, gauges and histograms, rendered in Prometheus' text format at `/metrics`.
///
/// Updates take a short lock; the event loop is the main writer, so it is uncontended.
public final class Metrics: Sendable {
    /// Upper bounds of the latency histograms, in seconds.
    public static let latencyBuckets: [Double] = [
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
    ]

    private struct Key: Hashable {
        var name: String
        var labels: [String]
    }

    private struct Histogram {
        var buckets: [UInt64]
        var sum: Double = 0
        var count: UInt64 = 0
    }

    /// The latest observations of a summary (a ring), with the running sum and count.
    private struct Window {
        var samples: [Double] = []
        var next = 0
        var sum: Double = 0
        var count: UInt64 = 0

        mutating func add(_ seconds: Double) {
            if samples.count < Metrics.summaryWindow {
                samples.append(seconds)
            } else {
                samples[next] = seconds
                next = (next + 1) % Metrics.summaryWindow
            }
            sum += seconds
            count += 1
        }
    }

    /// Observations a summary keeps for its quantiles.
    public static let summaryWindow = 10_000
    public static let summaryQuantiles: [Double] = [0.5, 0.9, 0.99, 0.999]

    private struct State {
        var counters: [Key: Double] = [:]
        var gauges: [Key: Double] = [:]
        var histograms: [Key: Histogram] = [:]
        var summaries: [Key: Window] = [:]
    }

    private let state = Locked(State())

    /// Counters bumped for every message: plain atomics, no lock, no label lookup.
    public final class HotCounter: Sendable {
        let name: String
        let value = Atomic<Int>(0)
        init(_ name: String) { self.name = name }
        public func increment() { value.add(1, ordering: .relaxed) }
    }

    public let messagesIn = HotCounter("switchboard_messages_in_total")
    public let messagesOut = HotCounter("switchboard_messages_out_total")
    public let signals = HotCounter("switchboard_signals_total")
    private var hotCounters: [HotCounter] { [messagesIn, messagesOut, signals] }
    /// Every metric family the server exposes: its type, its help line, and the label sets
    /// that exist from the start (at zero), so that dashboards and alerts find every series
    /// before the first event. Families whose labels are open (routes, APNs reasons) start with
    /// their HELP and TYPE lines only.
    public struct Family: Sendable {
        public let name: String
        public let type: String
        public let help: String
        /// Label sets present from the start; `[[]]`: the one unlabelled series.
        public let seeds: [[(String, String)]]
    }

    public static let families: [Family] = {
        func family(_ name: String, _ type: String, _ help: String, _ label: String? = nil, _ values: [String] = []) -> Family {
            Family(name: name, type: type, help: help, seeds: label.map { label in values.map { [(label, $0)] } } ?? [[]])
        }
        let configurationAlarms: [PushFailureReason] = [
            .deviceTokenNotForTopic, .topicDisallowed, .badCertificate, .badCertificateEnvironment, .invalidProviderToken,
            .missingProviderToken, .forbidden, .unrelatedKeyIDInToken, .badTopic, .notConfigured,
        ]
        return [
            family("switchboard_connections", "gauge", "Open WebSocket connections on /v1/ws."),
            family("switchboard_connections_total", "counter", "WebSocket connections accepted on /v1/ws."),
            family(
                "switchboard_connections_refused_total", "counter", "WebSocket upgrades refused, by error code.", "reason",
                [ErrorCode.unauthorized, .tokenExpired, .rateLimited, .badRequest, .unavailable].map(\.rawValue)),
            family(
                "switchboard_disconnects_total", "counter", "WebSocket connections closed, by why.", "reason",
                ["peer", "lost", "slow_consumer", "message_too_large", "receive_rate", "server_1000", "server_1001", "server_4001", "server_4003"]),
            family("switchboard_open_connections", "gauge", "TCP connections open, HTTP and WebSocket (against max_connections)."),
            family(
                "switchboard_connections_shed_total", "counter", "TCP connections closed as soon as accepted, by why.", "reason",
                ConnectionRefusal.allCases.map(\.rawValue)),
            family("switchboard_accept_pauses_total", "counter", "Times accepting paused because the process ran out of descriptors."),
            family("switchboard_sessions", "gauge", "Sessions, attached to a connection or waiting to be resumed."),
            family("switchboard_resumes_total", "counter", "Resume attempts, by outcome.", "outcome", ["resumed", "failed"]),
            family("switchboard_messages_in_total", "counter", "WebSocket messages received on /v1/ws."),
            family("switchboard_messages_out_total", "counter", "WebSocket messages sent on /v1/ws."),
            family("switchboard_signals_total", "counter", "signal requests received (WebRTC offers, answers, candidates)."),
            family("switchboard_errors_total", "counter", "Error replies and responses, by error code.", "code", ErrorCode.allCases.map(\.rawValue)),
            // Always labelled (a route, a method, a status): no series until the first request.
            Family(name: "switchboard_http_requests_total", type: "counter", help: "HTTP requests, by method, route and status.", seeds: []),
            Family(
                name: "switchboard_http_request_duration_seconds", type: "histogram",
                help: "Time from a complete HTTP request to its response, by route.", seeds: []),
            family("switchboard_rooms", "gauge", "Rooms open, calls' rooms included."),
            family("switchboard_room_joins_total", "counter", "Room joins."),
            family("switchboard_rooms_closed_total", "counter", "Rooms closed by their empty timeout.", "reason", ["empty"]),
            family("switchboard_calls_total", "counter", "Calls started."),
            family(
                "switchboard_calls_refused_total", "counter", "Calls refused before ringing, by why.", "reason",
                ["storage", "blocked", "rate_limited", "overload"]),
            family("switchboard_calls_ended_total", "counter", "Calls ended, by outcome.", "outcome", CallOutcome.allCases.map(\.rawValue)),
            family(
                "switchboard_call_setup_seconds", "summary",
                "Server's share of starting a call: from the invite arriving to every push handed to the APNs connection and the call record written (quantiles over the latest 10,000 calls)."
            ),
            Family(
                name: "switchboard_apns_pushes_total", type: "counter", help: "Pushes sent to APNs, by type and Apple's reason (Success when accepted).",
                seeds: [PushType.voip, .alert].map { [("type", $0.rawValue), ("reason", "Success")] }),
            family("switchboard_apns_request_duration_seconds", "histogram", "Time from a push handed to APNs to its answer."),
            family(
                "switchboard_apns_config_alarms_total", "counter", "APNs answers that mean the app's push settings are wrong, by reason.", "reason",
                configurationAlarms.map(\.apnsReason)),
            family("switchboard_store_writes_total", "counter", "Store writes, by outcome.", "outcome", ["ok", "error"]),
            family("switchboard_store_commits_total", "counter", "Store write transactions committed (writes queued while one commits go in the next)."),
            family("switchboard_store_writable", "gauge", "1 while the storage takes writes, 0 while it is full or read-only."),
            family("switchboard_store_backlog", "gauge", "Writes waiting in memory for the storage to take writes again."),
            family("switchboard_store_writes_dropped_total", "counter", "Waiting writes lost because the backlog was full (store_backlog_writes)."),
            family(
                "switchboard_cluster_redis_disconnects_total", "counter",
                "Connections to the cluster's Redis lost (each reconnects by itself), by which: commands or subscriber.", "connection",
                ["commands", "subscriber"]),
            family(
                "switchboard_cluster_late_events_total", "counter",
                "User events that crossed nodes late, by outcome: republished (held while Redis was away), caught_up (read back after a lost subscription), dropped (held past cluster_event_replay_seconds).",
                "outcome", ["republished", "caught_up", "dropped"]),
        ]
    }()

    private static let byName: [String: Family] = Dictionary(uniqueKeysWithValues: families.map { ($0.name, $0) })

    public init() {
        state.withLock { state in
            for family in Self.families {
                for seed in family.seeds {
                    let key = Key(name: family.name, labels: seed.flatMap { [$0.0, $0.1] })
                    switch family.type {
                    case "counter": state.counters[key] = 0
                    case "gauge": state.gauges[key] = family.name == "switchboard_store_writable" ? 1 : 0
                    case "histogram" where seed.isEmpty:
                        state.histograms[key] = Histogram(buckets: Array(repeating: 0, count: Self.latencyBuckets.count + 1))
                    case "summary" where seed.isEmpty: state.summaries[key] = Window()
                    default: break
                    }
                }
            }
        }
    }

    /// Adds `value` to a counter.
    public func increment(_ name: String, _ labels: KeyValuePairs<String, String> = [:], by value: Double = 1) {
        let key = Self.key(name, labels)
        state.withLock { $0.counters[key, default: 0] += value }
    }

    /// Sets a gauge.
    public func set(_ name: String, _ labels: KeyValuePairs<String, String> = [:], to value: Double) {
        let key = Self.key(name, labels)
        state.withLock { $0.gauges[key] = value }
    }

    /// Adds `delta` to a gauge.
    public func add(_ name: String, _ delta: Double, _ labels: KeyValuePairs<String, String> = [:]) {
        let key = Self.key(name, labels)
        state.withLock { $0.gauges[key, default: 0] += delta }
    }

    /// Records one observation, in seconds, in a latency histogram.
    public func observe(_ name: String, _ labels: KeyValuePairs<String, String> = [:], seconds: Double) {
        let key = Self.key(name, labels)
        let bucket = Self.latencyBuckets.firstIndex { seconds <= $0 } ?? Self.latencyBuckets.count
        state.withLock { state in
            var histogram = state.histograms[key] ?? Histogram(buckets: Array(repeating: 0, count: Self.latencyBuckets.count + 1))
            histogram.buckets[bucket] += 1
            histogram.sum += seconds
            histogram.count += 1
            state.histograms[key] = histogram
        }
    }

    /// Records one observation, in seconds, in a summary: exact quantiles over the latest
    /// `summaryWindow` observations.
    public func observeRecent(_ name: String, seconds: Double) {
        let key = Self.key(name, [:])
        state.withLock { state in
            // In place: a copy of the window per observation would cost 80 KB of copying.
            state.summaries[key, default: Window()].add(seconds)
        }
    }

    /// The current value of a counter (0 if never touched).
    public func counter(_ name: String, _ labels: KeyValuePairs<String, String> = [:]) -> Double {
        if labels.isEmpty, let hot = hotCounters.first(where: { $0.name == name }) { return Double(hot.value.load(ordering: .relaxed)) }
        let key = Self.key(name, labels)
        return state.withLock { $0.counters[key] ?? 0 }
    }

    /// The current value of a gauge (0 if never set).
    public func gauge(_ name: String, _ labels: KeyValuePairs<String, String> = [:]) -> Double {
        let key = Self.key(name, labels)
        return state.withLock { $0.gauges[key] ?? 0 }
    }

    /// Everything, in Prometheus text exposition format 0.0.4.
    public func render() -> String {
        var snapshot = state.withLock { $0 }
        for hot in hotCounters { snapshot.counters[Key(name: hot.name, labels: [])] = Double(hot.value.load(ordering: .relaxed)) }
        // Each series is (sort key, lines); a histogram's lines stay in bucket order.
        var families: [String: [(String, [String])]] = [:]
        for (key, value) in snapshot.counters.merging(snapshot.gauges, uniquingKeysWith: { $1 }) {
            let line = "\(key.name)\(Self.labelText(key.labels)) \(Self.number(value))"
            families[key.name, default: []].append((line, [line]))
        }
        for (key, histogram) in snapshot.histograms {
            var lines: [String] = []
            var cumulative: UInt64 = 0
            for (index, bound) in Self.latencyBuckets.enumerated() {
                cumulative += histogram.buckets[index]
                lines.append("\(key.name)_bucket\(Self.labelText(key.labels + ["le", Self.number(bound)])) \(cumulative)")
            }
            lines.append("\(key.name)_bucket\(Self.labelText(key.labels + ["le", "+Inf"])) \(histogram.count)")
            lines.append("\(key.name)_sum\(Self.labelText(key.labels)) \(histogram.sum)")
            lines.append("\(key.name)_count\(Self.labelText(key.labels)) \(histogram.count)")
            families[key.name, default: []].append((Self.labelText(key.labels), lines))
        }
        for (key, window) in snapshot.summaries {
            let sorted = window.samples.sorted()
            var lines: [String] = []
            for quantile in Self.summaryQuantiles where !sorted.isEmpty {
                let value = sorted[min(sorted.count - 1, Int(Double(sorted.count) * quantile))]
                lines.append("\(key.name)\(Self.labelText(key.labels + ["quantile", Self.number(quantile)])) \(value)")
            }
            lines.append("\(key.name)_sum\(Self.labelText(key.labels)) \(window.sum)")
            lines.append("\(key.name)_count\(Self.labelText(key.labels)) \(window.count)")
            families[key.name, default: []].append((Self.labelText(key.labels), lines))
        }
        var output = ""
        for name in Set(families.keys).union(Self.byName.keys).sorted() {
            let family = Self.byName[name]
            output += "# HELP \(name) \(family?.help ?? "(not in Metrics.families)")\n# TYPE \(name) \(family?.type ?? "untyped")\n"
            for (_, lines) in (families[name] ?? []).sorted(by: { $0.0 < $1.0 }) {
                for line in lines { output += line + "\n" }
            }
        }
        return output
    }

    private static func key(_ name: String, _ labels: KeyValuePairs<String, String>) -> Key {
        Key(name: name, labels: labels.flatMap { [$0.key, $0.value] })
    }

    private static func labelText(_ flat: [String]) -> String {
        guard !flat.isEmpty else { return "" }
        var parts: [String] = []
        var index = 0
        while index + 1 < flat.count {
            let value = flat[index + 1].replacingOccurrences(of: "\\", with: "\\\\")
                .replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
            parts.append("\(flat[index])=\"\(value)\"")
            index += 2
        }
        return "{" + parts.joined(separator: ",") + "}"
    }

    private static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    /// Counts one push's outcome: by type and Apple's reason, its latency, and configuration
    /// alarms. The server calls it on the loop when a push's result comes back; an app with no
    /// APNs key sent nothing, so only its alarm counts.
    package func recordPush(_ notification: PushNotification, _ outcome: PushResult) {
        let reason = outcome.failure?.apnsReason ?? "Success"
        if case .notConfigured? = outcome.failure {
            increment("switchboard_apns_config_alarms_total", ["reason": reason])
            return
        }
        increment("switchboard_apns_pushes_total", ["type": notification.type.rawValue, "reason": reason])
        observe("switchboard_apns_request_duration_seconds", seconds: outcome.latency.seconds)
        if let failure = outcome.failure, failure.isConfigurationError {
            increment("switchboard_apns_config_alarms_total", ["reason": reason])
        }
    }
}
