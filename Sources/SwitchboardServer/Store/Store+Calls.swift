import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Store {
    // MARK: Calls

    /// Writes a call's record (queued), with this store's `owner` holding it until
    /// `leaseUntilMillis` or while the owner renews its lease (`renewCallLeases`); `written`
    /// runs on the writer once it is stored.
    /// `continuation`: what another node needs to continue the call (in a cluster).
    func saveCall(
        _ state: CallState, idempotencyKey: String?, leaseUntilMillis: Int64, continuation: String? = nil, written: (@Sendable () -> Void)? = nil,
        settledWhenKept: Bool = false
    ) {
        let summary = JSONText.string(state.summary)
        let callees = JSONText.string(.array(state.callees.map(JSONValue.string)))
        let phase = state.isEnded ? "ended" : state.isRinging ? "ringing" : "accepted"
        let owner = self.owner
        enqueue("call", statements: [SQLStatement(
            """
            INSERT INTO calls (id, app_id, caller, callees, state, summary, created_at, idempotency_key, owner, lease_until, continuation)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, summary = excluded.summary, owner = excluded.owner,
                lease_until = excluded.lease_until, continuation = excluded.continuation
            """,
            [.text(state.id), .text(state.appID), .text(state.caller), .text(callees), .text(phase), .text(summary),
             .integer(state.createdAtMillis), idempotencyKey.map(SQLValue.text) ?? .null, .text(owner), .integer(leaseUntilMillis),
             state.isEnded ? .null : continuation.map(SQLValue.text) ?? .null])],
            written: written, settledWhenKept: settledWhenKept)
    }

    /// Gives up this store's `owner`'s hold on calls `ids` (a node draining): another server
    /// takes them at its next sweep. `written` runs once it is stored.
    func giveUpCallLeases(_ ids: [String], written: @escaping @Sendable () -> Void) {
        let owner = self.owner
        enqueue("call leases given up", statements: ids.map {
            SQLStatement("UPDATE calls SET lease_until = 0 WHERE id = ? AND owner = ? AND state != 'ended'", [.text($0), .text(owner)])
        }, written: written)
    }

    /// Extends this store's `owner`'s hold on every call it runs to `untilMillis` (queued: one
    /// row, whatever the number of calls); owners gone for a day are forgotten. `written` runs
    /// once it is committed.
    func renewCallLeases(untilMillis: Int64, written: (@Sendable () -> Void)? = nil) {
        enqueue("call leases", statements: [
            SQLStatement(
                "INSERT INTO call_owners (owner, lease_until) VALUES (?, ?) ON CONFLICT (owner) DO UPDATE SET lease_until = excluded.lease_until",
                [.text(owner), .integer(untilMillis)]),
            SQLStatement("DELETE FROM call_owners WHERE lease_until < ?", [.integer(untilMillis - 86_400_000)]),
        ], written: written)
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

    /// The live calls other servers stopped renewing (their lease expired), with what another
    /// node needs to continue each (nil: the call was stored without it). At most `limit`.
    /// `id`: that call only. `previous`: a process known to be gone, whose calls count whatever
    /// their lease says.
    func abandonedCalls(nowMillis: Int64, id: String? = nil, previous: String? = nil, limit: Int = 100) throws -> [AbandonedCall] {
        let which: Abandoned = id.map { .leaseExpiredCall($0) } ?? .leaseExpired(previous: previous)
        let owner = self.owner
        return try read { database in
            let narrowed = try Self.narrowed(database, which, except: owner, nowMillis: nowMillis)
            return try database.query(
                "SELECT id, continuation FROM calls WHERE " + Self.abandoned(which) + narrowed.sql + " ORDER BY created_at LIMIT ?",
                Self.abandonedParameters(which, owner, nowMillis) + narrowed.parameters + [.integer(Int64(limit))]
            ).compactMap { row in row[0].string.map { AbandonedCall(id: $0, continuation: row[1].string) } }
        }
    }

    /// Whether call `id` is live in the store and held by a server that renews it (nil: ended
    /// or unknown), and if its lease expired, what another node needs to continue it.
    func liveCall(id: String, nowMillis: Int64) throws -> (abandoned: AbandonedCall?, held: Bool)? {
        try read { database in
            guard let row = try database.query(
                """
                SELECT c.id, c.continuation, c.lease_until, c.owner, o.lease_until FROM calls c
                LEFT JOIN call_owners o ON o.owner = c.owner WHERE c.id = ? AND c.state != 'ended'
                """, [.text(id)]).first
            else { return nil }
            let callLease = row[2].int64 ?? 0
            let expired = row[3].string != owner && callLease < nowMillis && (callLease == 0 || (row[4].int64 ?? 0) < nowMillis)
            return (expired ? AbandonedCall(id: id, continuation: row[1].string) : nil, !expired)
        }
    }

    /// Which of calls `ids` this store's `owner` no longer runs: ended, or held by another.
    func callsNoLongerHeld(_ ids: [String]) throws -> Set<String> {
        let owner = self.owner
        return try read { database in
            var gone: Set<String> = []
            for batch in ids.batches(of: 500) {
                let marks = Array(repeating: "?", count: batch.count).joined(separator: ", ")
                let rows = try database.query(
                    "SELECT id FROM calls WHERE id IN (\(marks)) AND (state = 'ended' OR owner != ?)", batch.map(SQLValue.text) + [.text(owner)])
                gone.formUnion(rows.compactMap { $0[0].string })
            }
            return gone
        }
    }

    /// A live call whose owner stopped renewing it, and what another node needs to continue it.
    struct AbandonedCall: Sendable {
        var id: String
        var continuation: String?
    }

    /// Which calls of other servers recovery ends.
    enum Abandoned: Sendable {
        /// Every call another process left live: on SQLite, where the data directory's lock
        /// proves no other server runs.
        case everyOtherOwner
        /// The calls whose owner stopped renewing its lease, and those of `previous`, a process
        /// known to be gone (the one that held this server's data directory before it): on a
        /// store several servers share, where the others may be running.
        case leaseExpired(previous: String? = nil)
        /// That one call, if its lease expired (one another node cannot continue).
        case leaseExpiredCall(String)
    }

    /// Ends the calls other servers left ringing or answered (`which`) as `failed`, reason
    /// `server_restart`, and writes their history, now. Each call is ended once, whichever
    /// server gets to it first (the update re-checks it, so a call renewed meanwhile or ended
    /// by another server is left alone). On a store that takes no writes now (full or read-only
    /// disk) this waits in the backlog, ahead of every later write, and returns how many wait.
    func endAbandonedCalls(_ which: Abandoned, nowMillis: Int64) throws -> Int {
        let owner = self.owner
        guard storageProblem == nil else {
            enqueue("abandoned calls") { database in _ = try Self.endAbandonedCalls(database, which, except: owner, nowMillis: nowMillis) }
            return try read {
                try $0.query("SELECT COUNT(*) FROM calls WHERE " + Self.abandoned(which), Self.abandonedParameters(which, owner, nowMillis))
                    .first?.first?.int64
            }.map(Int.init) ?? 0
        }
        return try write { database in try Self.endAbandonedCalls(database, which, except: owner, nowMillis: nowMillis) }
    }

    /// `endAbandonedCalls` as a queued write (the periodic sweep); `ended` hears how many.
    func endAbandonedCallsLater(_ which: Abandoned, nowMillis: Int64, ended: @escaping @Sendable (Int) -> Void) {
        let owner = self.owner
        enqueue("abandoned calls") { database in ended(try Self.endAbandonedCalls(database, which, except: owner, nowMillis: nowMillis)) }
    }

    private static func abandoned(_ which: Abandoned) -> String {
        switch which {
        case .everyOtherOwner: "state != 'ended' AND (owner IS NULL OR owner != ?)"
        case .leaseExpired: "state != 'ended' AND (owner IS NULL OR owner != ?) AND (owner = ? OR " + leaseOver + ")"
        case .leaseExpiredCall: "state != 'ended' AND (owner IS NULL OR owner != ?) AND " + leaseOver + " AND id = ?"
        }
    }

    /// A call's lease is over: none, given up (0), or past with its owner's lease past too
    /// (parameters: now, now).
    private static let leaseOver = """
        (lease_until IS NULL OR lease_until = 0 OR (lease_until < ? AND NOT EXISTS \
        (SELECT 1 FROM call_owners o WHERE o.owner = calls.owner AND o.lease_until >= ?)))
        """

    private static func abandonedParameters(_ which: Abandoned, _ owner: String, _ nowMillis: Int64) -> [SQLValue] {
        switch which {
        case .everyOtherOwner: [.text(owner)]
        case .leaseExpired(let previous): [.text(owner), .text(previous ?? ""), .integer(nowMillis), .integer(nowMillis)]
        case .leaseExpiredCall(let id): [.text(owner), .integer(nowMillis), .integer(nowMillis), .text(id)]
        }
    }

    /// What narrows `.leaseExpired` to the rows it can match, found without reading every live
    /// call (the sweep runs every third of `call_lease_seconds` on every server, and a table
    /// scan of 10,000 live calls held PostgreSQL's core for tens of milliseconds each time):
    /// the calls of the owners that stopped renewing (or `previous`), found by walking the
    /// owners of live calls in `calls_unended` (one index probe per owner) and comparing them
    /// with `call_owners`; and the calls given up (0), never leased or never owned
    /// (`calls_unended_lease`, `calls_unended`). Appended to `abandoned(which)`, which still
    /// decides each row. Nothing for the other cases (`.everyOtherOwner` at start, one call).
    static func narrowed(
        _ database: any SQLDatabase, _ which: Abandoned, except owner: String, nowMillis: Int64
    ) throws -> (sql: String, parameters: [SQLValue]) {
        guard case .leaseExpired(let previous) = which else { return ("", []) }
        let owners = try database.query(
            """
            WITH RECURSIVE owners(owner) AS (
                SELECT (SELECT owner FROM calls WHERE state != 'ended' AND owner IS NOT NULL ORDER BY owner LIMIT 1)
                UNION ALL
                SELECT (SELECT c.owner FROM calls c WHERE c.state != 'ended' AND c.owner > owners.owner ORDER BY c.owner LIMIT 1)
                FROM owners WHERE owners.owner IS NOT NULL
            )
            SELECT owner FROM owners WHERE owner IS NOT NULL
            """, []
        ).compactMap { $0[0].string }
        let renewing = Set(try database.query("SELECT owner FROM call_owners WHERE lease_until >= ?", [.integer(nowMillis)]).compactMap { $0[0].string })
        let gone = owners.filter { $0 != owner && ($0 == previous || !renewing.contains($0)) }
        var arms = ["lease_until = 0", "lease_until IS NULL", "owner IS NULL"]
        if !gone.isEmpty { arms.insert("owner IN (" + Array(repeating: "?", count: gone.count).joined(separator: ", ") + ")", at: 0) }
        return (" AND (" + arms.joined(separator: " OR ") + ")", gone.map(SQLValue.text))
    }

    private static func endAbandonedCalls(_ database: any SQLDatabase, _ which: Abandoned, except owner: String, nowMillis: Int64) throws -> Int {
        let parameters = abandonedParameters(which, owner, nowMillis)
        let narrowed = try narrowed(database, which, except: owner, nowMillis: nowMillis)
        let rows = try database.query(
            "SELECT id, app_id, caller, callees, summary FROM calls WHERE " + abandoned(which) + narrowed.sql, parameters + narrowed.parameters)
        var ended = 0
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
            // The condition again, on this row: another server may have ended it, or its owner
            // renewed it, since the read.
            let updated = try database.query(
                "UPDATE calls SET state = 'ended', summary = ? WHERE id = ? AND " + abandoned(which) + " RETURNING id",
                [.text(JSONText.string(.object(summary))), .text(id)] + parameters)
            guard !updated.isEmpty else { continue }
            ended += 1
            for user in [caller] + callees {
                let peers = user == caller ? callees : [caller] + callees.filter { $0 != user }
                let entry = Self.historyEntry(
                    appID: appID, user: user, callID: id, direction: user == caller ? "outgoing" : "incoming", peers: peers, video: false,
                    createdAt: created, answeredAt: answered, endedAt: nowMillis, outcome: "failed", endReason: "server_restart", endedBy: nil)
                try database.query(entry.sql, entry.parameters)
            }
        }
        return ended
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
