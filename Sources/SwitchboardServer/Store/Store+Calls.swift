import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// A registered device of a user.
public struct Device: Sendable, Equatable, Codable {
    public var appID: String
    public var userID: String
    public var deviceID: String
    public var platform: String
    public var voipToken: String?
    public var apnsToken: String?
    public var environment: APNsEnvironment
    public var bundleID: String?
    public var callKitEnabled: Bool
    public var appVersion: String?
    /// Milliseconds since 1970.
    public var updatedAt: Int64

    /// The device as its owner may see it: tokens shortened to their first 8 characters.
    public var redacted: JSONValue {
        [
            "device_id": .string(deviceID), "platform": .string(platform),
            "voip_token": voipToken.map { .string(Redact.token($0)) } ?? .null,
            "apns_token": apnsToken.map { .string(Redact.token($0)) } ?? .null,
            "environment": .string(environment.rawValue), "bundle_id": bundleID.map(JSONValue.string) ?? .null,
            "callkit_enabled": .bool(callKitEnabled), "app_version": appVersion.map(JSONValue.string) ?? .null,
            "updated_at": .int(updatedAt),
        ]
    }
}

/// How an app authenticates to APNs: a signing key (token-based) or a client certificate.
public enum AppPushSettings: Sendable, Equatable {
    /// A .p8 key with its key id and team id.
    case key(pem: String, keyID: String, teamID: String)
    /// A VoIP services certificate and its private key, both PEM (one text).
    case certificate(pem: String, password: String?)

    public init(keyPEM: String, keyID: String, teamID: String) {
        self = .key(pem: keyPEM, keyID: keyID, teamID: teamID)
    }
}

extension Store {
    // MARK: Devices

    private static let deviceColumns =
        "app_id, user_id, device_id, platform, voip_token, apns_token, environment, bundle_id, callkit_enabled, app_version, updated_at"

    private static func device(from row: [SQLValue]) -> Device {
        Device(
            appID: row[0].string ?? "", userID: row[1].string ?? "", deviceID: row[2].string ?? "", platform: row[3].string ?? "",
            voipToken: row[4].string, apnsToken: row[5].string, environment: APNsEnvironment(rawValue: row[6].string ?? "") ?? .production,
            bundleID: row[7].string, callKitEnabled: row[8].int64 == 1, appVersion: row[9].string, updatedAt: row[10].int64 ?? 0)
    }

    /// Registers (or updates) a device. A token registered by another user or device moves here;
    /// a rotated token replaces the old one.
    /// Registers (or updates) a device; a new one past `limit` devices for its user is refused.
    public func register(_ device: Device, limit: Int = .max) throws {
        _ = try write { database in
            let others = try database.query(
                "SELECT COUNT(*) FROM devices WHERE app_id = ? AND user_id = ? AND device_id != ?",
                [.text(device.appID), .text(device.userID), .text(device.deviceID)])
            if let count = others.first?[0].int64, count >= Int64(limit) { throw DeviceLimitReached(limit: limit) }
            for (column, token) in [("voip_token", device.voipToken), ("apns_token", device.apnsToken)] {
                guard let token else { continue }
                try database.query(
                    "UPDATE devices SET \(column) = NULL WHERE app_id = ? AND \(column) = ? AND NOT (user_id = ? AND device_id = ?)",
                    [.text(device.appID), .text(token), .text(device.userID), .text(device.deviceID)])
            }
            try database.query(
                """
                INSERT INTO devices (\(Self.deviceColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (app_id, user_id, device_id) DO UPDATE SET platform = excluded.platform,
                    voip_token = excluded.voip_token, apns_token = excluded.apns_token, environment = excluded.environment,
                    bundle_id = excluded.bundle_id, callkit_enabled = excluded.callkit_enabled,
                    app_version = excluded.app_version, updated_at = excluded.updated_at
                """,
                [.text(device.appID), .text(device.userID), .text(device.deviceID), .text(device.platform),
                 device.voipToken.map(SQLValue.text) ?? .null, device.apnsToken.map(SQLValue.text) ?? .null,
                 .text(device.environment.rawValue), device.bundleID.map(SQLValue.text) ?? .null,
                 .integer(device.callKitEnabled ? 1 : 0), device.appVersion.map(SQLValue.text) ?? .null, .integer(device.updatedAt)])
            for (kind, token) in [("voip", device.voipToken), ("apns", device.apnsToken)] {
                guard let token else { continue }
                try database.query(
                    """
                    INSERT INTO push_tokens (token, app_id, kind, registered_at) VALUES (?, ?, ?, ?)
                    ON CONFLICT(token) DO UPDATE SET app_id = excluded.app_id, kind = excluded.kind,
                        registered_at = excluded.registered_at, disabled_at = NULL, disabled_reason = NULL
                    """, [.text(token), .text(device.appID), .text(kind), .integer(device.updatedAt)])
            }
        }
    }

    public func removeDevice(appID: String, userID: String, deviceID: String) throws -> Bool {
        try write { database in
            try database.query(
                "DELETE FROM devices WHERE app_id = ? AND user_id = ? AND device_id = ?", [.text(appID), .text(userID), .text(deviceID)])
            return database.changes > 0
        }
    }

    /// The devices of a user, with tokens APNs declared dead left out.
    public func devices(appID: String, userID: String) throws -> [Device] {
        try read { database in
            let rows = try database.query(
                """
                SELECT \(Self.deviceColumns.split(separator: ",").map { "d." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", "))
                FROM devices d WHERE d.app_id = ? AND d.user_id = ? ORDER BY d.device_id
                """, [.text(appID), .text(userID)])
            var devices = rows.map(Self.device(from:))
            for index in devices.indices {
                if let token = devices[index].voipToken, let record = try pushTokenRecord(token, database), !record { devices[index].voipToken = nil }
                if let token = devices[index].apnsToken, let record = try pushTokenRecord(token, database), !record { devices[index].apnsToken = nil }
            }
            return devices
        }
    }

    /// Whether a token is active (nil when unknown).
    private func pushTokenRecord(_ token: String, _ database: SQLiteDatabase) throws -> Bool? {
        try database.query("SELECT disabled_at FROM push_tokens WHERE token = ?", [.text(token)]).first.map { $0[0] == .null }
    }

    // MARK: Push settings

    public func setPushSettings(_ settings: AppPushSettings, appID: String) throws {
        var values: [SQLValue] = [.text(appID)]
        switch settings {
        case .key(let pem, let keyID, let teamID):
            values += [.text("key"), .text(pem), .text(keyID), .text(teamID), .null, .null]
        case .certificate(let pem, let password):
            values += [.text("certificate"), .null, .null, .null, .text(pem), password.map(SQLValue.text) ?? .null]
        }
        values.append(.integer(Int64(Date().timeIntervalSince1970 * 1000)))
        let row = values
        _ = try write { database in
            try database.query(
                """
                INSERT OR REPLACE INTO app_push (app_id, kind, key_pem, key_id, team_id, certificate_pem, certificate_password, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """, row)
        }
    }

    public func pushSettings(appID: String) throws -> AppPushSettings? {
        try read { database in
            try database.query(
                "SELECT kind, key_pem, key_id, team_id, certificate_pem, certificate_password FROM app_push WHERE app_id = ?",
                [.text(appID)]
            ).first.map { row in
                row[0].string == "certificate"
                    ? .certificate(pem: row[4].string ?? "", password: row[5].string)
                    : .key(pem: row[1].string ?? "", keyID: row[2].string ?? "", teamID: row[3].string ?? "")
            }
        }
    }

    /// The provider token last minted for a signing key (by this process or an earlier one).
    public func providerToken(keyID: String, teamID: String) throws -> String? {
        try read { database in
            try database.query("SELECT jwt FROM provider_tokens WHERE key_id = ? AND team_id = ?", [.text(keyID), .text(teamID)])
                .first?[0].string
        }
    }

    public func setProviderToken(_ jwt: String, issuedAt: Date, keyID: String, teamID: String) throws {
        _ = try write { database in
            try database.query(
                "INSERT OR REPLACE INTO provider_tokens (key_id, team_id, jwt, issued_at) VALUES (?, ?, ?, ?)",
                [.text(keyID), .text(teamID), .text(jwt), .integer(Int64(issuedAt.timeIntervalSince1970))])
        }
    }

    // MARK: Block lists

    public func setBlocked(_ identities: [String], appID: String, userID: String) throws {
        _ = try write { database in
            try database.query("DELETE FROM blocked WHERE app_id = ? AND user_id = ?", [.text(appID), .text(userID)])
            for identity in Set(identities) {
                try database.query("INSERT INTO blocked (app_id, user_id, blocked_id) VALUES (?, ?, ?)", [.text(appID), .text(userID), .text(identity)])
            }
        }
    }

    public func blocked(appID: String, userID: String) throws -> [String] {
        try read { database in
            try database.query("SELECT blocked_id FROM blocked WHERE app_id = ? AND user_id = ? ORDER BY blocked_id", [.text(appID), .text(userID)])
                .compactMap { $0[0].string }
        }
    }

    public func isBlocked(_ caller: String, by callee: String, appID: String) throws -> Bool {
        try read { database in
            try !database.query(
                "SELECT 1 FROM blocked WHERE app_id = ? AND user_id = ? AND blocked_id = ?", [.text(appID), .text(callee), .text(caller)]
            ).isEmpty
        }
    }

    // MARK: Calls

    /// Writes a call's record (queued); `written` runs on the writer once it is stored.
    func saveCall(_ state: CallState, idempotencyKey: String?, written: (@Sendable () -> Void)? = nil) {
        let summary = String(decoding: (try? JSONEncoder().encode(state.summary)) ?? Data(), as: UTF8.self)
        let callees = String(decoding: (try? JSONEncoder().encode(state.callees)) ?? Data(), as: UTF8.self)
        let phase = state.isEnded ? "ended" : state.isRinging ? "ringing" : "accepted"
        let owner = self.owner
        enqueue("call") { database in
            try database.query(
                """
                INSERT INTO calls (id, app_id, caller, callees, state, summary, created_at, idempotency_key, owner)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET state = excluded.state, summary = excluded.summary, owner = excluded.owner
                """,
                [.text(state.id), .text(state.appID), .text(state.caller), .text(callees), .text(phase), .text(summary),
                 .integer(state.createdAtMillis), idempotencyKey.map(SQLValue.text) ?? .null, .text(owner)])
            written?()
        }
    }

    /// Writes every participant's history entry for an ended call (queued).
    func recordHistory(_ state: CallState, video: Bool) {
        let participants = [state.caller] + state.callees
        enqueue("call history") { database in
            for user in participants {
                let direction = user == state.caller ? "outgoing" : "incoming"
                let peers = state.peers(of: user)
                let answered = state.answeredAtMillis
                let ended = state.endedAtMillis ?? state.createdAtMillis
                let duration = answered.map { max(0, ended - $0) } ?? 0
                try database.query(
                    """
                    INSERT OR REPLACE INTO call_history (app_id, user_id, call_id, direction, peers, video, created_at,
                        answered_at, ended_at, duration_ms, outcome, end_reason, ended_by)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [.text(state.appID), .text(user), .text(state.id), .text(direction),
                     .text(String(decoding: try JSONEncoder().encode(peers), as: UTF8.self)), .integer(video ? 1 : 0),
                     .integer(state.createdAtMillis), answered.map(SQLValue.integer) ?? .null, .integer(ended), .integer(duration),
                     .text(state.historyOutcome(for: user).rawValue), state.endReason.map(SQLValue.text) ?? .null,
                     state.endedBy.map(SQLValue.text) ?? .null])
            }
        }
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
                let peers = (try? JSONDecoder().decode(JSONValue.self, from: Data((row[2].string ?? "[]").utf8))) ?? .array([])
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
            let callees = (try? JSONDecoder().decode([String].self, from: Data((row[1].string ?? "[]").utf8))) ?? []
            let summary = (try? JSONDecoder().decode(JSONValue.self, from: Data((row[2].string ?? "{}").utf8))) ?? .null
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

    private static func endInterruptedCalls(_ database: SQLiteDatabase, except owner: String, nowMillis: Int64) throws -> Int {
        let rows = try database.query(
            "SELECT id, app_id, caller, callees, summary FROM calls WHERE state != 'ended' AND (owner IS NULL OR owner != ?)",
            [.text(owner)])
        for row in rows {
            guard let id = row[0].string, let appID = row[1].string, let caller = row[2].string else { continue }
            let callees = (try? JSONDecoder().decode([String].self, from: Data((row[3].string ?? "[]").utf8))) ?? []
            var summary = (try? JSONDecoder().decode(JSONValue.self, from: Data((row[4].string ?? "{}").utf8)))?.objectValue ?? [:]
            summary["state"] = "ended"
            summary["outcome"] = "failed"
            summary["end_reason"] = "server_restart"
            summary["ended_at"] = .int(nowMillis)
            let created = summary["created_at"].flatMap { if case .int(let value) = $0 { value } else { nil } } ?? nowMillis
            let answered = summary["answered_at"].flatMap { if case .int(let value) = $0 { value } else { nil } }
            try database.query(
                "UPDATE calls SET state = 'ended', summary = ? WHERE id = ?",
                [.text(String(decoding: try JSONEncoder().encode(JSONValue.object(summary)), as: UTF8.self)), .text(id)])
            for user in [caller] + callees {
                let peers = user == caller ? callees : [caller] + callees.filter { $0 != user }
                try database.query(
                    """
                    INSERT OR REPLACE INTO call_history (app_id, user_id, call_id, direction, peers, video, created_at,
                        answered_at, ended_at, duration_ms, outcome, end_reason, ended_by)
                    VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, 'failed', 'server_restart', NULL)
                    """,
                    [.text(appID), .text(user), .text(id), .text(user == caller ? "outgoing" : "incoming"),
                     .text(String(decoding: try JSONEncoder().encode(peers), as: UTF8.self)), .integer(created),
                     answered.map(SQLValue.integer) ?? .null, .integer(nowMillis), .integer(answered.map { nowMillis - $0 } ?? 0)])
            }
        }
        return rows.count
    }

    // MARK: Push trace

    /// Appends one trace entry (queued).
    func trace(callID: String, user: String, device: String, channel: String, event: String, atMillis: Int64, detail: JSONValue? = nil) {
        let detailText = detail.flatMap { try? JSONEncoder().encode($0) }.map { String(decoding: $0, as: UTF8.self) }
        enqueue("call trace") { database in
            try database.query(
                "INSERT INTO call_trace (call_id, user_id, device_id, channel, event, at, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [.text(callID), .text(user), .text(device), .text(channel), .text(event), .integer(atMillis),
                 detailText.map(SQLValue.text) ?? .null])
        }
    }

    public func trace(callID: String) throws -> [JSONValue] {
        try read { database in
            try database.query(
                "SELECT user_id, device_id, channel, event, at, detail FROM call_trace WHERE call_id = ? ORDER BY seq", [.text(callID)]
            ).map { row in
                var entry: [String: JSONValue] = [
                    "user": .string(row[0].string ?? ""), "device": .string(row[1].string ?? ""),
                    "channel": .string(row[2].string ?? ""), "event": .string(row[3].string ?? ""), "at": .int(row[4].int64 ?? 0),
                ]
                if let detail = row[5].string, case .object(let fields)? = try? JSONDecoder().decode(JSONValue.self, from: Data(detail.utf8)) {
                    entry.merge(fields) { old, _ in old }
                }
                return .object(entry)
            }
        }
    }
}

/// A user already has the most devices allowed (`max_devices_per_user`).
public struct DeviceLimitReached: Error, Sendable {
    public var limit: Int
}
