import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Store {
    // MARK: Calls

    /// Writes a call's record (queued); `written` runs on the writer once it is stored.
    func saveCall(_ state: CallState, idempotencyKey: String?, written: (@Sendable () -> Void)? = nil) {
        let summary = JSONText.string(state.summary)
        let callees = JSONText.string(.array(state.callees.map(JSONValue.string)))
        let phase = state.isEnded ? "ended" : state.isRinging ? "ringing" : "accepted"
        let owner = self.owner
        enqueue("call", statements: [SQLStatement(
            """
            INSERT INTO calls (id, app_id, caller, callees, state, summary, created_at, idempotency_key, owner)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, summary = excluded.summary, owner = excluded.owner
            """,
            [.text(state.id), .text(state.appID), .text(state.caller), .text(callees), .text(phase), .text(summary),
             .integer(state.createdAtMillis), idempotencyKey.map(SQLValue.text) ?? .null, .text(owner)])],
            written: written)
    }

    /// Writes every participant's history entry for an ended call (queued).
    func recordHistory(_ state: CallState, video: Bool) {
        let participants = [state.caller] + state.callees
        enqueue("call history", statements: participants.map { user in
            Self.historyEntry(
                appID: state.appID, user: user, callID: state.id, direction: user == state.caller ? "outgoing" : "incoming",
                peers: state.peers(of: user), video: video, createdAt: state.createdAtMillis, answeredAt: state.answeredAtMillis,
                endedAt: state.endedAtMillis ?? state.createdAtMillis, outcome: state.historyOutcome(for: user).rawValue,
                endReason: state.endReason, endedBy: state.endedBy)
        })
    }

    /// One participant's history entry (written again if the call's entry exists).
    static func historyEntry(
        appID: String, user: String, callID: String, direction: String, peers: [String], video: Bool, createdAt: Int64,
        answeredAt: Int64?, endedAt: Int64, outcome: String, endReason: String?, endedBy: String?
    ) -> SQLStatement {
        SQLStatement(
            """
            INSERT INTO call_history (app_id, user_id, call_id, direction, peers, video, created_at,
                answered_at, ended_at, duration_ms, outcome, end_reason, ended_by)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (app_id, user_id, call_id) DO UPDATE SET direction = excluded.direction, peers = excluded.peers,
                video = excluded.video, created_at = excluded.created_at, answered_at = excluded.answered_at,
                ended_at = excluded.ended_at, duration_ms = excluded.duration_ms, outcome = excluded.outcome,
                end_reason = excluded.end_reason, ended_by = excluded.ended_by
            """,
            [.text(appID), .text(user), .text(callID), .text(direction),
             .text(JSONText.string(.array(peers.map(JSONValue.string)))), .integer(video ? 1 : 0),
             .integer(createdAt), answeredAt.map(SQLValue.integer) ?? .null, .integer(endedAt),
             .integer(answeredAt.map { max(0, endedAt - $0) } ?? 0), .text(outcome), endReason.map(SQLValue.text) ?? .null,
             endedBy.map(SQLValue.text) ?? .null])
    }

    /// A page of a user's call history, newest first.
    public func history(appID: String, userID: String, limit: Int, before: Int64?) throws -> [JSONValue] {
        try read { database in
            try database.query(
                """
                SELECT call_id, direction, peers, video, created_at, answered_at, ended_at, duration_ms, outcome, end_reason, ended_by
                FROM call_history WHERE app_id = ? AND user_id = ? AND created_at < ? ORDER BY created_at DESC, call_id LIMIT ?
                """, [.text(appID), .text(userID), .integer(before ?? Int64.max), .integer(Int64(limit))]
            ).map { row in
                let peers = Self.json(row[2].string) ?? .array([])
                return [
                    "call_id": .string(row[0].string ?? ""), "state": "ended", "direction": .string(row[1].string ?? ""), "peers": peers,
                    "video": .bool(row[3].int64 == 1), "created_at": .int(row[4].int64 ?? 0),
                    "answered_at": row[5].int64.map(JSONValue.int) ?? .null, "ended_at": row[6].int64.map(JSONValue.int) ?? .null,
                    "duration_ms": .int(row[7].int64 ?? 0), "outcome": .string(row[8].string ?? ""),
                    "end_reason": row[9].string.map(JSONValue.string) ?? .null, "ended_by": row[10].string.map(JSONValue.string) ?? .null,
                ]
            }
        }
    }

    /// The stored summary of a call (for calls no longer in memory).
    public func callSummary(id: String, appID: String) throws -> (caller: String, callees: [String], summary: JSONValue)? {
        try read { database in
            guard let row = try database.query("SELECT caller, callees, summary FROM calls WHERE id = ? AND app_id = ?", [.text(id), .text(appID)]).first
            else { return nil }
            let callees = Self.strings(row[1].string)
            let summary = Self.json(row[2].string) ?? .null
            return (row[0].string ?? "", callees, summary)
        }
    }

    /// Ends every call that processes other than this store's `owner` left ringing or
    /// accepted: `failed`, reason `server_restart`. On SQLite, one `switchboard serve` holds the
    /// data directory's lock, so every other owner is a process that is gone; a store shared by
    /// several live processes must pass only the owners known to be dead. On a store that takes
    /// no writes now (full or read-only disk) this waits in the backlog, ahead of every later
    /// write.
    func failInterruptedCalls(nowMillis: Int64) throws -> Int {
        let owner = self.owner
        guard storageProblem == nil else {
            enqueue("interrupted calls") { database in _ = try Self.endInterruptedCalls(database, except: owner, nowMillis: nowMillis) }
            return try read {
                try $0.query(
                    "SELECT COUNT(*) FROM calls WHERE state != 'ended' AND (owner IS NULL OR owner != ?)", [.text(owner)]
                ).first?.first?.int64
            }.map(Int.init) ?? 0
        }
        return try write { database in try Self.endInterruptedCalls(database, except: owner, nowMillis: nowMillis) }
    }

    private static func endInterruptedCalls(_ database: any SQLDatabase, except owner: String, nowMillis: Int64) throws -> Int {
        let rows = try database.query(
            "SELECT id, app_id, caller, callees, summary FROM calls WHERE state != 'ended' AND (owner IS NULL OR owner != ?)",
            [.text(owner)])
        for row in rows {
            guard let id = row[0].string, let appID = row[1].string, let caller = row[2].string else { continue }
            let callees = Self.strings(row[3].string)
            var summary = Self.json(row[4].string)?.objectValue ?? [:]
            summary["state"] = "ended"
            summary["outcome"] = "failed"
            summary["end_reason"] = "server_restart"
            summary["ended_at"] = .int(nowMillis)
            let created = summary["created_at"].flatMap { if case .int(let value) = $0 { value } else { nil } } ?? nowMillis
            let answered = summary["answered_at"].flatMap { if case .int(let value) = $0 { value } else { nil } }
            try database.query(
                "UPDATE calls SET state = 'ended', summary = ? WHERE id = ?",
                [.text(JSONText.string(.object(summary))), .text(id)])
            for user in [caller] + callees {
                let peers = user == caller ? callees : [caller] + callees.filter { $0 != user }
                let entry = Self.historyEntry(
                    appID: appID, user: user, callID: id, direction: user == caller ? "outgoing" : "incoming", peers: peers, video: false,
                    createdAt: created, answeredAt: answered, endedAt: nowMillis, outcome: "failed", endReason: "server_restart", endedBy: nil)
                try database.query(entry.sql, entry.parameters)
            }
        }
        return rows.count
    }

    /// The JSON a column holds (written by `JSONText`), or nil.
    static func json(_ text: String?) -> JSONValue? {
        text.flatMap { JSONText.parse(Array($0.utf8)) }
    }

    /// A column's JSON array of strings (the callees).
    static func strings(_ text: String?) -> [String] {
        guard case .array(let items)? = json(text) else { return [] }
        return items.compactMap(\.stringValue)
    }
}
