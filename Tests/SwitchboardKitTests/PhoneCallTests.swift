import Foundation
import SwitchboardProtocol
import Testing

@testable import SwitchboardKit

/// The phone's per-call state machine on its own: every input, and what it makes the manager do.
@Suite(.timeLimit(.minutes(3))) struct PhoneCallTests {
    static let id = UUID(uuidString: "6F1C0000-0000-4000-8000-000000000001")!
    static let callID = id.uuidString.lowercased()
    static let update = CallUpdate(handle: "alice", displayName: "Alice", hasVideo: false)
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    enum Step {
        case reportCompleted(CallSystemError?)
        case reportAgain(mustReport: Bool)
        case end(CallEndedReason)
        case userAnswers
        case answerConfirmed
        case answerRefused(CallRefusal?)
        case answerTimedOut
        case userEnds
        case userHolds(Bool)
        case accepted
        case startFailed
        case reset
    }

    static func run(_ call: inout PhoneCall, _ step: Step) -> [PhoneCall.Effect] {
        switch step {
        case .reportCompleted(let error): return call.reportCompleted(error)
        case .reportAgain(let must): return call.reportAgain(mustReport: must)
        case .end(let reason): return call.end(reason, at: now)
        case .userAnswers: return call.userAnswers() ? [] : [.event(.ended(id, .failed))]  // a refused answer, made visible
        case .answerConfirmed: return call.answerConfirmed()
        case .answerRefused(let refusal): return call.answerRefused(refusal, at: now)
        case .answerTimedOut: return call.actionTimedOut(.answer(id), at: now)
        case .userEnds: return call.userEnds(at: now)
        case .userHolds(let held): return call.userHolds(held)
        case .accepted: return call.accepted()
        case .startFailed: return call.startFailed(at: now)
        case .reset: return call.reset(at: now)
        }
    }

    static func tell(_ type: String, reason: String? = nil, filter: CallFilter? = nil) -> PhoneCall.Effect {
        .tellServer(type: type, CallActionRequest(callID: callID, reason: reason, filter: filter))
    }

    /// (what, incoming?, steps, the effects of the last step, the final phase).
    static let table: [(String, Bool, [Step], [PhoneCall.Effect], PhoneCall.Phase)] = [
        ("shown: the server hears it rings (call.ack)", true, [.reportCompleted(nil)], [tell(MessageType.callAck)], .ringing),
        ("a live duplicate is not a second ack", true, [.reportCompleted(nil), .reportAgain(mustReport: true), .reportCompleted(.callUUIDAlreadyExists)], [], .ringing),
        ("ended before the report came back: the end waits for it (D3)", true, [.end(.unanswered)], [.event(.ended(id, .unanswered))], .ended(.unanswered)),
        ("... and happens in the completion", true, [.end(.unanswered), .reportCompleted(nil)], [.endOnSystem(.unanswered)], .ended(.unanswered)),
        ("ended after it was shown: at once", true, [.reportCompleted(nil), .end(.remoteEnded)], [.endOnSystem(.remoteEnded), .event(.ended(id, .remoteEnded))], .ended(.remoteEnded)),
        ("a late push for an ended call is reported again (D4)", true, [.reportCompleted(nil), .end(.answeredElsewhere), .reportAgain(mustReport: true)], [.report(update)], .ended(.answeredElsewhere)),
        ("... and ended in its completion with the stored reason", true, [.reportCompleted(nil), .end(.answeredElsewhere), .reportAgain(mustReport: true), .reportCompleted(nil)], [.endOnSystem(.answeredElsewhere)], .ended(.answeredElsewhere)),
        ("... also when the system still had it", true, [.reportCompleted(nil), .end(.answeredElsewhere), .reportAgain(mustReport: true), .reportCompleted(.callUUIDAlreadyExists)], [.endOnSystem(.answeredElsewhere)], .ended(.answeredElsewhere)),
        ("iOS 26.4 says no report is needed for a live call", true, [.reportCompleted(nil), .reportAgain(mustReport: false)], [], .ringing),
        ("... nor for one that ended: it is not shown again (no ghost ring)", true, [.reportCompleted(nil), .end(.answeredElsewhere), .reportAgain(mustReport: false)], [], .ended(.answeredElsewhere)),
        ("Do Not Disturb: the server hears filtered at once (D7)", true, [.reportCompleted(.filteredByDoNotDisturb)], [tell(MessageType.callDecline, reason: "filtered", filter: .doNotDisturb), .event(.reportRefused(id, .filteredByDoNotDisturb)), .event(.ended(id, .failed))], .ended(.failed)),
        ("the block list", true, [.reportCompleted(.filteredByBlockList)], [tell(MessageType.callDecline, reason: "filtered", filter: .blockList), .event(.reportRefused(id, .filteredByBlockList)), .event(.ended(id, .failed))], .ended(.failed)),
        ("refused after it ended: nothing to tell", true, [.end(.unanswered), .reportCompleted(.unentitled)], [], .ended(.unanswered)),
        ("answered and confirmed", true, [.reportCompleted(nil), .userAnswers, .answerConfirmed], [.event(.connected(id))], .active),
        ("answer refused: answered elsewhere (typed, not the message)", true, [.reportCompleted(nil), .userAnswers, .answerRefused(.answeredElsewhere)], [.endOnSystem(.answeredElsewhere), .event(.ended(id, .answeredElsewhere))], .ended(.answeredElsewhere)),
        ("answer refused: the call is over", true, [.reportCompleted(nil), .userAnswers, .answerRefused(.callEnded)], [.endOnSystem(.remoteEnded), .event(.ended(id, .remoteEnded))], .ended(.remoteEnded)),
        ("answer timed out in CallKit: ended, the server told (D6)", true, [.reportCompleted(nil), .userAnswers, .answerTimedOut], [.endOnSystem(.failed), .event(.ended(id, .failed)), tell(MessageType.callEnd, reason: "answer_timed_out")], .ended(.failed)),
        ("... and a late confirmation starts no media", true, [.reportCompleted(nil), .userAnswers, .answerTimedOut, .answerConfirmed], [tell(MessageType.callEnd, reason: "answer_timed_out")], .ended(.failed)),
        ("declined here", true, [.reportCompleted(nil), .userEnds], [.event(.endedLocally(id)), tell(MessageType.callDecline, reason: "hangup")], .ended(.remoteEnded)),
        ("hung up after answering", true, [.reportCompleted(nil), .userAnswers, .answerConfirmed, .userEnds], [.event(.endedLocally(id)), tell(MessageType.callEnd, reason: "hangup")], .ended(.remoteEnded)),
        ("held: the server hears it (D8)", true, [.reportCompleted(nil), .userAnswers, .answerConfirmed, .userHolds(true)], [.tellServerHold(true), .event(.held(id, true))], .active),
        ("held twice: once", true, [.reportCompleted(nil), .userAnswers, .answerConfirmed, .userHolds(true), .userHolds(true)], [], .active),
        ("hold while it rings: nothing", true, [.reportCompleted(nil), .userHolds(true)], [], .ringing),
        ("reset while ringing: declined on the server", true, [.reportCompleted(nil), .reset], [tell(MessageType.callDecline, reason: "reset"), .event(.ended(id, .failed))], .ended(.failed)),
        ("a second end is nothing", true, [.reportCompleted(nil), .end(.remoteEnded), .end(.failed)], [], .ended(.remoteEnded)),
        ("outgoing: the callee answers", false, [.accepted], [.connectedOnSystem, .event(.connected(id))], .active),
        ("outgoing: cancelled here", false, [.userEnds], [.event(.endedLocally(id)), tell(MessageType.callCancel, reason: "hangup")], .ended(.remoteEnded)),
        ("outgoing: the system refused to start it (D11)", false, [.startFailed], [tell(MessageType.callCancel, reason: "start_failed"), .event(.ended(id, .failed))], .ended(.failed)),
        ("outgoing: reset while it rings: cancelled", false, [.reset], [tell(MessageType.callCancel, reason: "reset"), .event(.ended(id, .failed))], .ended(.failed)),
    ]

    @Test(arguments: table.indices)
    func everyInputHasTheEffectsItMust(index: Int) {
        let (what, incoming, steps, expected, phase) = Self.table[index]
        var call: PhoneCall
        if incoming {
            let (created, effects) = PhoneCall.incoming(Self.id, update: Self.update)
            #expect(effects == [.report(Self.update), .event(.incoming(Self.id, Self.update))])
            call = created
        } else {
            call = PhoneCall.outgoing(Self.id, update: Self.update, room: "call-x")
        }
        var last: [PhoneCall.Effect] = []
        for step in steps { last = Self.run(&call, step) }
        #expect(last == expected, "\(what)")
        #expect(call.phase == phase, "\(what)")
    }

    @Test func theSystemHearsOfAnEndOnlyOnceItHasShownTheCall() {
        // Whatever order things happen in, no endOnSystem comes before a report completion.
        let orders: [[Step]] = [
            [.end(.failed), .reportCompleted(nil)],
            [.end(.failed), .reportAgain(mustReport: true), .reportCompleted(nil)],
            [.reportCompleted(nil), .end(.remoteEnded), .reportAgain(mustReport: true), .reportCompleted(.callUUIDAlreadyExists)],
            [.userAnswers, .end(.answeredElsewhere), .reportCompleted(nil)],
        ]
        for steps in orders {
            var (call, _) = PhoneCall.incoming(Self.id, update: Self.update)
            var pending = true
            for step in steps {
                if case .reportCompleted = step { pending = false }
                if case .reportAgain = step { pending = true }
                let effects = Self.run(&call, step)
                #expect(!(pending && effects.contains { if case .endOnSystem = $0 { true } else { false } }), "\(steps)")
            }
            #expect(call.isEnded)
        }
    }
}

@Suite(.timeLimit(.minutes(3))) struct APNsEnvironmentTests {
    /// A provisioning profile is a signed envelope around a property list.
    static func profile(_ environment: String?) -> Data {
        let entitlement = environment.map { "<key>aps-environment</key><string>\($0)</string>" } ?? ""
        let plist = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0"><dict><key>Name</key><string>Demo</string>
            <key>Entitlements</key><dict>\(entitlement)<key>get-task-allow</key><true/></dict></dict></plist>
            """
        return Data([0x30, 0x82, 0x01, 0x00, 0x06, 0x09]) + Data(plist.utf8) + Data([0xA0, 0x82, 0x00])
    }

    @Test func theEnvironmentFollowsTheProfilesEntitlementNotTheBuildConfiguration() {
        #expect(APNsEnvironmentOfBuild.environment(profile: Self.profile("development")) == "sandbox")
        #expect(APNsEnvironmentOfBuild.environment(profile: Self.profile("production")) == "production")
        #expect(APNsEnvironmentOfBuild.environment(profile: Self.profile(nil)) == "production")
        #expect(APNsEnvironmentOfBuild.environment(profile: nil) == "production", "App Store builds carry no profile")
        #expect(APNsEnvironmentOfBuild.environment(profile: Data("garbage".utf8)) == "production")
    }
}

@Suite struct TelURLTests {
    /// `tel:` URLs as the default calling app gets them: separators go, "+" stays, parameters
    /// go; other schemes and numberless URLs are not numbers.
    @Test func aTelURLGivesTheNumberItDials() {
        #expect(TelURL.number(in: URL(string: "tel:+1-201-555-0123")!) == "+12015550123")
        #expect(TelURL.number(in: URL(string: "tel:(03)%205555-0123")!) == "0355550123")
        #expect(TelURL.number(in: URL(string: "tel:+81.3.5555.0123;ext=42")!) == "+81355550123")
        #expect(TelURL.number(in: URL(string: "TEL:7042")!) == "7042")
        #expect(TelURL.number(in: URL(string: "tel:*21#")!) == "*21#")
        #expect(TelURL.number(in: URL(string: "https://example.com/tel:123")!) == nil)
        #expect(TelURL.number(in: URL(string: "tel:abc")!) == nil)
    }
}
