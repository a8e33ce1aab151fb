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

    /// Seconds until a token is available (0 when one is).
    package func wait(now: ContinuousClock.Instant) -> Int {
        let elapsed = now - updated
        let available = min(burst, tokens + elapsed.seconds * rate)
        return available >= 1 ? 0 : Int(((1 - available) / rate).rounded(.up))
    }

    /// Takes one token if there is one.
    package mutating func take(now: ContinuousClock.Instant) -> Bool {
        let elapsed = now - updated
        let seconds = elapsed.seconds
        tokens = min(burst, tokens + seconds * rate)
        updated = now
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
