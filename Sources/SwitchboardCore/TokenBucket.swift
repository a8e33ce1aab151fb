import SwitchboardSupport
/// A token bucket: `rate` per second, up to `burst` at once.
package struct TokenBucket {
    package let rate: Double
    package let burst: Double
    private var tokens: Double
    private var updated: ContinuousClock.Instant

    package init(rate: Int, burst: Int, now: ContinuousClock.Instant) {
        self.init(rate: Double(rate), burst: burst, now: now)
    }

    package init(rate: Double, burst: Int, now: ContinuousClock.Instant) {
        self.rate = rate
        self.burst = Double(max(burst, 1))
        tokens = self.burst
        updated = now
    }

    /// Whether the bucket would be full by `now` (nothing to remember about it).
    package func isFull(now: ContinuousClock.Instant) -> Bool {
        let elapsed = now - updated
        return tokens + elapsed.seconds * rate >= burst
    }

    /// Seconds until `count` tokens are available (0 when they are).
    package func wait(now: ContinuousClock.Instant, for count: Double = 1) -> Int {
        let elapsed = now - updated
        let available = min(burst, tokens + elapsed.seconds * rate)
        let needed = min(count, burst)
        return available >= needed ? 0 : Int(((needed - available) / rate).rounded(.up))
    }

    /// Takes `count` tokens if there are that many (a cost above the burst takes a whole burst).
    package mutating func take(now: ContinuousClock.Instant, count: Double = 1) -> Bool {
        let elapsed = now - updated
        let seconds = elapsed.seconds
        tokens = min(burst, tokens + seconds * rate)
        updated = now
        let needed = min(count, burst)
        guard tokens >= needed else { return false }
        tokens -= needed
        return true
    }
}

/// A token bucket per key (an app's user, say): `perMinute` a minute, a minute's worth at
/// once. Keys whose allowance is whole again are forgotten every few seconds, so that the map
/// holds only the keys that used some of theirs lately.
package struct KeyedRateLimit {
    package let perMinute: Int
    private var buckets: [String: TokenBucket] = [:]
    private var pruned: ContinuousClock.Instant

    package init(perMinute: Int, now: ContinuousClock.Instant = .now) {
        self.perMinute = perMinute
        pruned = now
    }

    /// Counts `cost` against `key` and returns nil, or, past its allowance, the seconds to wait
    /// (and counts nothing).
    package mutating func admit(_ key: String, cost: Double = 1, now: ContinuousClock.Instant) -> Int? {
        var bucket = buckets[key] ?? TokenBucket(rate: Double(perMinute) / 60, burst: perMinute, now: now)
        let allowed = bucket.take(now: now, count: cost)
        let wait = allowed ? nil : max(1, bucket.wait(now: now, for: cost))
        buckets[key] = bucket
        if now - pruned > .seconds(5) {
            pruned = now
            buckets = buckets.filter { !$0.value.isFull(now: now) }
        }
        return wait
    }

}
