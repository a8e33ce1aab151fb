import SwitchboardProtocol
import Foundation
import Synchronization

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
    private let help: [String: (type: String, text: String)] = [
        "switchboard_connections": ("gauge", "Open WebSocket connections."),
        "switchboard_connections_total": ("counter", "WebSocket connections accepted."),
        "switchboard_connections_refused_total": ("counter", "WebSocket upgrades refused, by reason."),
        "switchboard_disconnects_total": ("counter", "WebSocket connections closed, by reason."),
        "switchboard_messages_in_total": ("counter", "WebSocket messages received."),
        "switchboard_messages_out_total": ("counter", "WebSocket messages sent."),
        "switchboard_errors_total": ("counter", "Error replies and responses, by error code."),
        "switchboard_http_requests_total": ("counter", "HTTP requests, by route and status."),
        "switchboard_http_request_duration_seconds": ("histogram", "Time from a complete HTTP request to its response."),
        "switchboard_store_writes_total": ("counter", "Store write transactions, by outcome."),
        "switchboard_store_writable": ("gauge", "1 while the storage takes writes, 0 while it is full or read-only."),
        "switchboard_store_backlog": ("gauge", "Writes waiting in memory for the storage to take writes again."),
        "switchboard_store_writes_dropped_total": ("counter", "Waiting writes lost because the backlog was full (store_backlog_writes)."),
        "switchboard_call_setup_seconds": (
            "summary",
            "Server's share of starting a call: from the invite arriving to every push handed to the APNs connection and the call record written (quantiles over the latest 10,000 calls)."
        ),
    ]

    public init() {}

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
        for name in families.keys.sorted() {
            let (type, text) = help[name] ?? ("untyped", name)
            output += "# HELP \(name) \(text)\n# TYPE \(name) \(type)\n"
            for (_, lines) in families[name]!.sorted(by: { $0.0 < $1.0 }) {
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
}
