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

    /// A transaction answers `EXEC`'s array of its commands' replies, between commands whose
    /// replies Redis leaves out (none shifted); one with a command Redis refuses as it is
    /// queued answers the refusal and runs none of its commands.
    @Test func aTransactionRunsItsCommandsTogetherOrNone() async throws {
        let redis = try RedisServer()
        defer { redis.destroy() }
        let url = try RedisURL(redis.url)
        let loop = try EventLoop(name: "redis-transaction-test")
        defer { loop.stop() }
        let replies: [RedisValue] = try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                let connection = RedisConnection(url: url, loop: loop)
                connection.leavesOutIgnoredReplies = true
                var replies: [RedisValue] = []
                let bytes = { (command: [String]) in command.map { Array($0.utf8) } }
                let keep = { (result: Result<RedisValue, RedisError>) in replies.append((try? result.get()) ?? .null) }
                connection.onStateChange = { up in
                    guard up, replies.isEmpty else { return }
                    // Once answered, Redis has said it takes `CLIENT REPLY`.
                    connection.send(["PING"]) { _ in
                        connection.sendIgnoringReply(bytes(["INCR", "n"]))
                        connection.transaction([bytes(["INCR", "n"]), bytes(["RPUSH", "l", "a"])], reply: keep)
                        connection.sendIgnoringReply(bytes(["INCR", "n"]))
                        connection.transaction([bytes(["INCR", "n"]), bytes(["INCR"])], reply: keep)
                        connection.send(["GET", "n"]) { result in
                            keep(result)
                            connection.close(graceful: true)
                            continuation.resume(returning: replies)
                        }
                    }
                }
            }
        }
        try #require(replies.count == 3, "\(replies)")
        #expect(replies[0] == .array([.integer(2), .integer(1)]))
        guard case .error(let refusal) = replies[1] else { Issue.record("\(replies[1])"); return }
        #expect(refusal.hasPrefix("EXECABORT"), "\(refusal)")
        #expect(replies[2].text == "3", "the refused transaction's INCR did not run")
        let stats = try #require(try redis.command(["INFO", "commandstats"])?.text)
        #expect(stats.contains("cmdstat_client|reply:calls=3,"), "asked once, then told to skip 2: \(stats)")
    }

    /// Runs `count` rounds of a script that counts in `n` and answers the count, on a connection
    /// of its own; `between` runs after round `pauseAfter`. Answers the replies.
    private func scriptRounds(_ url: RedisURL, count: Int, pauseAfter: Int = -1, between: @escaping @Sendable () -> Void = {}) async throws
        -> [Int]
    {
        let loop = try EventLoop(name: "redis-script-test")
        defer { loop.stop() }
        let script = RedisScript("return redis.call('incrby', KEYS[1], ARGV[1])")
        return try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                let connection = RedisConnection(url: url, loop: loop)
                connection.reconnectDelay = .milliseconds(50)
                var replies: [Int] = []
                func round() {
                    connection.run(script, keys: ["n"], arguments: ["1"]) { result in
                        switch result {
                        case .success(.integer(let value)): replies.append(Int(value))
                        case .failure:  // Redis restarting: again
                            _ = loop.schedule(after: .milliseconds(50)) { round() }
                            return
                        default: replies.append(-1)
                        }
                        if replies.count == count {
                            connection.close(graceful: true)
                            return continuation.resume(returning: replies)
                        }
                        // On the loop, which waits meanwhile.
                        if replies.count == pauseAfter + 1 { between() }
                        round()
                    }
                }
                connection.onStateChange = { up in
                    guard up, replies.isEmpty else { return }
                    round()
                }
            }
        }
    }

    /// Redis ran `inFull` scripts sent whole (`EVAL`) and `byName` by their SHA-1 (`EVALSHA`).
    private func expectScripts(_ redis: RedisServer, inFull: Int, byName: Int, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let stats = try #require(try redis.command(["INFO", "commandstats"])?.text, sourceLocation: sourceLocation)
        #expect(stats.contains("cmdstat_eval:calls=\(inFull),"), "\(stats)", sourceLocation: sourceLocation)
        #expect(stats.contains("cmdstat_evalsha:calls=\(byName),"), "\(stats)", sourceLocation: sourceLocation)
    }

    /// A script goes in full once, by its SHA-1 after: Redis reads and hashes 40 bytes for it.
    @Test func aScriptIsSentInFullOnceThenByItsName() async throws {
        let redis = try RedisServer()
        defer { redis.destroy() }
        let replies = try await scriptRounds(try RedisURL(redis.url), count: 5)
        #expect(replies == [1, 2, 3, 4, 5])
        try expectScripts(redis, inFull: 1, byName: 4)
    }

    /// A Redis that lost its scripts while the connection held (`SCRIPT FLUSH`) answers
    /// `NOSCRIPT`: the script goes in full again and runs, and the caller never sees the
    /// refusal. A Redis restarted behind the address (a new connection) gets it in full too.
    @Test func aScriptRedisLostIsSentInFullAgain() async throws {
        let redis = try RedisServer()
        defer { redis.destroy() }
        let url = try RedisURL(redis.url)
        let flushed = try await scriptRounds(url, count: 4, pauseAfter: 1) { _ = try? redis.command(["SCRIPT", "FLUSH"]) }
        #expect(flushed == [1, 2, 3, 4])
        // Rounds 1 and 3 in full; round 3 first by name, refused.
        try expectScripts(redis, inFull: 2, byName: 3)

        let restarted = try await scriptRounds(url, count: 4, pauseAfter: 1) {
            redis.stop()
            try? redis.start()
        }
        // The restarted Redis has no `n` and no script: counting starts again, in full.
        #expect(restarted == [5, 6, 1, 2])
        try expectScripts(redis, inFull: 1, byName: 1)
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
