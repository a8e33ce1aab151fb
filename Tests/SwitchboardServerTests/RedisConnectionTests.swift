import Foundation
import SwitchboardSupport
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// The cluster's Redis client against a real Redis: a command sent without waiting for its
/// reply (a relayed signal's `PUBLISH`) never shifts the replies of the commands around it,
/// whether Redis leaves its reply out (`CLIENT REPLY SKIP`) or, where the command is refused,
/// sends it and the client reads it past.
@Suite(.enabled(if: RedisServer.installed, "needs redis-server (make test installs it)"))
struct RedisConnectionTests {
    /// 200 rounds of an `INCR` whose reply is ignored, then one whose reply is read: each read
    /// reply is the even count. Were an ignored reply taken for the next one, the read replies
    /// would be odd. The first 100 rounds go before Redis has said whether it takes
    /// `CLIENT REPLY` (their replies come and are read past), the other 100 after. Answers
    /// whether the connection then had Redis leave replies out, and the read replies.
    private func rounds(_ url: RedisURL) async throws -> (skipped: Bool, counts: [Int]) {
        let loop = try EventLoop(name: "redis-test")
        defer { loop.stop() }
        return try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                let connection = RedisConnection(url: url, loop: loop)
                connection.leavesOutIgnoredReplies = true
                var counts: [Int] = []
                var skipped = false
                func round() {
                    connection.sendIgnoringReply([Array("INCR".utf8), Array("n".utf8)])
                    connection.send(["INCR", "n"]) { result in
                        switch result {
                        case .success(.integer(let count)): counts.append(Int(count))
                        default: counts.append(-1)
                        }
                        guard counts.count == 200 else { return }
                        connection.close(graceful: true)
                        continuation.resume(returning: (skipped, counts))
                    }
                }
                connection.onStateChange = { up in
                    guard up else { return }
                    for _ in 0..<100 { round() }
                    connection.send(["PING"]) { _ in
                        skipped = connection.skipsReplies
                        for _ in 0..<100 { round() }
                    }
                }
            }
        }
    }

    @Test func repliesLeftOutByRedisNeverShiftTheOthers() async throws {
        let redis = try RedisServer()
        defer { redis.destroy() }
        let (skipped, counts) = try await rounds(try RedisURL(redis.url))
        #expect(skipped)
        #expect(counts == (1...200).map { $0 * 2 })
        // Redis was asked once whether it takes `CLIENT REPLY`, then told to skip 100 replies.
        let stats = try #require(try redis.command(["INFO", "commandstats"])?.text)
        #expect(stats.contains("cmdstat_client|reply:calls=101,"), "\(stats)")
    }

    /// A user who may not run `CLIENT` (as behind some proxies and managed services): the
    /// connection does not ask Redis to leave replies out, and reads the ignored ones past.
    @Test func whereRedisRefusesToLeaveRepliesOutTheyAreReadPast() async throws {
        let redis = try RedisServer()
        defer { redis.destroy() }
        _ = try redis.command(["ACL", "SETUSER", "limited", "on", ">secret", "~*", "&*", "+@all", "-client"])
        let (skipped, counts) = try await rounds(try RedisURL("redis://limited:secret@127.0.0.1:\(redis.port)/0"))
        #expect(!skipped)
        #expect(counts == (1...200).map { $0 * 2 })
    }
}
