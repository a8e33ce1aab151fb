import Testing

import SwitchboardCore

/// The invite rate limits as a value, on a fixed clock.
@Suite struct InvitePolicyTests {
    let t0 = ContinuousClock.now

    @Test func aCallerMayRingAsOftenAsItsMinuteAllows() {
        var policy = InvitePolicy(perCaller: 3, perPair: 10)
        func admit(_ caller: String, _ callee: String, at second: Int) -> Bool {
            policy.admit(caller: caller, callees: [callee], now: t0 + .seconds(second))
        }
        #expect(admit("alice", "bob", at: 0))
        #expect(admit("alice", "carol", at: 10))
        #expect(admit("alice", "dave", at: 20))
        #expect(!admit("alice", "erin", at: 59), "a fourth in the same minute")
        #expect(admit("mallory", "erin", at: 59), "another caller has its own minute")
        #expect(admit("alice", "erin", at: 60), "the first invite is a minute old")
    }

    @Test func oneCalleeIsRungAtMostPerPairTimesAMinute() {
        var policy = InvitePolicy(perCaller: 100, perPair: 2)
        func admit(_ callees: [String], at second: Int) -> Bool {
            policy.admit(caller: "alice", callees: callees, now: t0 + .seconds(second))
        }
        #expect(admit(["bob"], at: 0))
        #expect(admit(["bob", "carol"], at: 1))
        #expect(!admit(["carol", "bob"], at: 2), "bob's third in a minute")
        #expect(admit(["carol"], at: 3), "the refused group call counted for nobody")
        #expect(!admit(["carol"], at: 4))
    }

    @Test func whatItRemembersStaysWithinTheLastMinute() {
        var policy = InvitePolicy(perCaller: 100, perPair: 100)
        var admitted = 0
        for index in 0..<500 where policy.admit(caller: "caller\(index)", callees: ["bob"], now: t0) { admitted += 1 }
        #expect(admitted == 500)
        #expect(policy.remembered == 1000)
        let late = policy.admit(caller: "alice", callees: ["bob"], now: t0 + .seconds(61))
        #expect(late)
        #expect(policy.remembered == 2, "only alice and alice→bob are within the minute")
    }
}
