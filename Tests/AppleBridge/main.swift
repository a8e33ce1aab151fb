// Runs CallKitSystem's own logic on Linux against the CallKit stubs, which record what they are
// asked (`CallKitStubLog`), and LiveCommunicationKitSystem's mappings: the parts of the Apple
// bridges that no simulator replaces. Built and run by scripts/typecheck-apple.sh; exits 1 on
// the first run with a failed check, printing each.

import AVFoundation
import CallKit
import Foundation
import LiveCommunicationKit
@testable import SwitchboardKit

final class Delegate: CallSystemDelegate, @unchecked Sendable {
    var performed: [CallAction] = []
    var timedOut: [CallAction] = []
    let fulfils: Bool
    init(fulfils: Bool) { self.fulfils = fulfils }
    func callSystem(perform action: CallAction, completion: ActionCompletion) {
        performed.append(action)
        if fulfils { completion.fulfill() }
    }
    func callSystem(timedOutPerforming action: CallAction) { timedOut.append(action) }
    func callSystem(didChangeAudioActive active: Bool) {}
    func callSystemDidReset() {}
}

nonisolated(unsafe) var failures = 0
func check(_ ok: Bool, _ what: String) {
    print("\(ok ? "ok" : "FAILED"): \(what)")
    if !ok { failures += 1 }
}
func logged(after start: Int) -> [String] { Array(CallKitStubLog.all.dropFirst(start)) }

let system = CallKitSystem()
let provider = CXProvider(configuration: CXProviderConfiguration())

// An incoming report: the provider's configuration set again right before it (issue 31, 5).
var mark = CallKitStubLog.all.count
let incoming = UUID()
system.reportNewIncomingCall(incoming, update: CallUpdate(handle: "+15550100", displayName: "Alice", hasVideo: false)) { _ in }
let reported = logged(after: mark)
check(reported.count == 2 && reported[0] == "configuration maxPerGroup=1" && reported[1].hasPrefix("report \(incoming) name=Alice grouping=false"),
    "the configuration is set again right before each report, one call per group: \(reported)")

// An end CallKit delivers before the manager is the delegate waits for it, then is fulfilled
// (issue 31, 6).
mark = CallKitStubLog.all.count
system.provider(provider, perform: CXEndCallAction(call: incoming))
check(!logged(after: mark).contains("fail CXEndCallAction"), "an end before the delegate exists is not failed")
let delegate = Delegate(fulfils: true)
system.delegate = delegate
check(delegate.performed == [.end(incoming)], "the end reaches the delegate once it is set: \(delegate.performed)")
check(logged(after: mark).contains("fulfill CXEndCallAction"), "and is fulfilled")

// An outgoing call gets its name and what it supports, never grouping (issue 31, 10).
mark = CallKitStubLog.all.count
let outgoing = UUID()
system.provider(provider, perform: CXStartCallAction(call: outgoing, handle: CXHandle(type: .generic, value: "bob")))
let started = logged(after: mark)
check(started.contains("fulfill CXStartCallAction"), "the start is fulfilled")
check(started.contains("update \(outgoing) name=bob grouping=false ungrouping=false holding=true"), "with its name and supports-flags: \(started)")
check(started.contains("connecting \(outgoing)"), "then reported connecting")

// Merging is never offered: a group action is failed at once.
mark = CallKitStubLog.all.count
system.provider(provider, perform: CXSetGroupCallAction(call: outgoing, callUUIDToGroupWith: incoming))
check(logged(after: mark) == ["fail CXSetGroupCallAction"], "a group action is failed")

// An answer CallKit times out: the delegate hears which action.
let waiting = Delegate(fulfils: false)
system.delegate = waiting
let answer = CXAnswerCallAction(call: incoming)
system.provider(provider, perform: answer)
system.provider(provider, timedOutPerforming: answer)
check(waiting.timedOut == [.answer(incoming)], "a timed-out answer is named to the delegate: \(waiting.timedOut)")

// Refusal codes, the newer ones included (issue 31, finer filter reasons).
check(CallKitSystem.reportError(CXErrorCodeIncomingCallError(.callIsProtected)) == .callIsProtected, "code 6: a protected app")
check(CallSystemError.callIsProtected.filter == .protectedApp && CallSystemError.filteredBySensitiveParticipants.filter == .sensitiveParticipants,
    "told to the server as protected_app and sensitive_participants")
check(CallKitSystem.reportError(CXErrorCodeIncomingCallError(.filteredByDoNotDisturb)) == .filteredByDoNotDisturb, "code 3: Do Not Disturb")

// LiveCommunicationKit: every end reason has its counterpart.
check(LiveCommunicationKitSystem.endedReason(.answeredElsewhere) == .joinedElsewhere, "answered elsewhere is joinedElsewhere")
check(LiveCommunicationKitSystem.endedReason(.declinedElsewhere) == .declinedElsewhere, "declined elsewhere")
check(LiveCommunicationKitSystem.endedReason(.unanswered) == .unanswered && LiveCommunicationKitSystem.endedReason(.failed) == .failed
    && LiveCommunicationKitSystem.endedReason(.remoteEnded) == .remoteEnded, "unanswered, failed, remote ended")

// LiveCommunicationKitSystem's actions: a join that comes before the manager waits for it,
// then is fulfilled as a join (with its connection date); a start likewise.
let conversations = LiveCommunicationKitSystem()
let manager = ConversationManager(configuration: ConversationManager.Configuration(
    ringtoneName: nil, iconTemplateImageData: nil, maximumConversationGroups: 2, maximumConversationsPerConversationGroup: 1,
    includesConversationInRecents: true, supportsVideo: false, supportedHandleTypes: [.generic]))
let ringing = UUID()
conversations.conversationManager(manager, perform: JoinConversationAction(conversationUUID: ringing))
check(!LiveCommunicationKitStubLog.all.contains { $0.hasPrefix("fail") }, "a join before the delegate exists is not failed")
let lckDelegate = Delegate(fulfils: true)
conversations.delegate = lckDelegate
check(lckDelegate.performed == [.answer(ringing)], "the join reaches the delegate as an answer: \(lckDelegate.performed)")
check(LiveCommunicationKitStubLog.all.contains("fulfill JoinConversationAction dateConnected"), "and is fulfilled as a join")
conversations.conversationManager(manager, perform: StartConversationAction(conversationUUID: UUID(), handles: [Handle(type: .generic, value: "bob")], isVideo: false))
check(LiveCommunicationKitStubLog.all.contains("fulfill StartConversationAction dateStarted"), "a start is fulfilled as a start")
check(LiveCommunicationKitSystem.callAction(EndConversationAction(conversationUUID: ringing)) == .end(ringing), "an end is an end")

exit(failures == 0 ? 0 : 1)
