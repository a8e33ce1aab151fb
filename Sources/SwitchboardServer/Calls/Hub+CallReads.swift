import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Hub {
    // MARK: Reading calls

    /// The call as its participants see it.
    func describe(_ call: ActiveCall) -> JSONValue {
        var summary = call.state.summary.objectValue ?? [:]
        summary["media"] = call.media.json
        summary["video"] = .bool(call.video)
        return .object(summary)
    }

    /// `GET /v1/calls`: a page of `identity`'s calls, newest first, created before `before`:
    /// its live calls (ringing or answered; `state` says which, `outcome` is null) among its
    /// history of ended ones. `more`: an older page may follow.
    func callHistory(
        app: App, identity: String, limit: Int, before: Int64?, answer: @escaping (Result<(entries: [JSONValue], more: Bool), any Error>) -> Void
    ) {
        let cutoff = before ?? .max
        let nowMillis = wallMillis
        // The live calls as they are now; the store read below is queued after every write
        // made so far, so a call that ended before this request is in it.
        let live = (liveCallsByUser[Self.userKey(app.id, identity)] ?? []).compactMap { calls[$0] }
            .filter { $0.state.createdAtMillis < cutoff }
            .map { call -> (Int64, JSONValue) in (call.state.createdAtMillis, liveHistoryEntry(call, for: identity, nowMillis: nowMillis)) }
        let appID = app.id
        withStore(for: appID, { try $0.history(appID: appID, userID: identity, limit: limit, before: before) }) { result in
            answer(
                result.map { stored in
                    // A call that ended while the read waited is in both: its ended entry wins.
                    let ended = Set(stored.compactMap { $0["call_id"]?.stringValue })
                    let merged = (live.filter { !ended.contains($0.1["call_id"]?.stringValue ?? "") }
                        + stored.map { ($0["created_at"]?.intValue ?? 0, $0) }).sorted { $0.0 > $1.0 }
                    return (merged.prefix(limit).map(\.1), stored.count == limit || merged.count > limit)
                })
        }
    }

    /// A live call as `identity`'s history shows it.
    private func liveHistoryEntry(_ call: ActiveCall, for identity: String, nowMillis: Int64) -> JSONValue {
        let state = call.state
        return [
            "call_id": .string(state.id), "state": .string(state.isRinging ? "ringing" : "accepted"),
            "direction": .string(identity == state.caller ? "outgoing" : "incoming"),
            "peers": .array(state.peers(of: identity).map(JSONValue.string)), "video": .bool(call.video),
            "created_at": .int(state.createdAtMillis), "answered_at": state.answeredAtMillis.map(JSONValue.int) ?? .null,
            "ended_at": .null, "duration_ms": .int(state.answeredAtMillis.map { max(0, nowMillis - $0) } ?? 0),
            "outcome": .null, "end_reason": .null, "ended_by": .null,
        ]
    }

    /// `GET /v1/calls/{id}` for a participant: a live call as it is now, an ended one as the
    /// store has it once every write queued before this request is done.
    func callSummary(id: String, identity: String, app: App, admin: Bool, answer: @escaping (Result<JSONValue, ErrorBody>) -> Void) {
        if let call = calls[id], call.state.appID == app.id {
            guard admin || call.state.caller == identity || call.state.callees.contains(identity) else {
                return answer(.failure(CallError.notParticipant.body))
            }
            return answer(.success(describe(call)))
        }
        let appID = app.id
        withStore(for: appID, { try $0.callSummary(id: id, appID: appID) }) { [logger] result in
            switch result {
            case .success(let stored?):
                guard admin || stored.caller == identity || stored.callees.contains(identity) else {
                    return answer(.failure(CallError.notParticipant.body))
                }
                answer(.success(stored.summary))
            case .success(nil):
                answer(.failure(CallError.notFound.body))
            case .failure(let error):
                logger.error("call read failed", ["call": id, "error": "\(error)"])
                answer(.failure(.storeRead(error, reading: "the call")))
            }
        }
    }
}
