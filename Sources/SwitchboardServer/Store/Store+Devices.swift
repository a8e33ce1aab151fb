import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

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
    /// The app's sound for the alert that rings it without CallKit (nil: the default).
    public var ringtone: String? = nil

    /// The device as `encode(to:)` writes it (a nil member left out), without an encoder: with
    /// its whole tokens, for the store only (a call's continuation), never for a reply.
    var storedJSON: JSONValue {
        var members: [String: JSONValue] = [
            "appID": .string(appID), "userID": .string(userID), "deviceID": .string(deviceID), "platform": .string(platform),
            "environment": .string(environment.rawValue), "callKitEnabled": .bool(callKitEnabled), "updatedAt": .int(updatedAt),
        ]
        if let voipToken { members["voipToken"] = .string(voipToken) }
        if let apnsToken { members["apnsToken"] = .string(apnsToken) }
        if let bundleID { members["bundleID"] = .string(bundleID) }
        if let appVersion { members["appVersion"] = .string(appVersion) }
        if let ringtone { members["ringtone"] = .string(ringtone) }
        return .object(members)
    }

    /// The device as its owner may see it: tokens shortened to their first 8 characters.
    public var redacted: JSONValue {
        [
            "device_id": .string(deviceID), "platform": .string(platform),
            "voip_token": voipToken.map { .string(Redact.token($0)) } ?? .null,
            "apns_token": apnsToken.map { .string(Redact.token($0)) } ?? .null,
            "environment": .string(environment.rawValue), "bundle_id": bundleID.map(JSONValue.string) ?? .null,
            "callkit_enabled": .bool(callKitEnabled), "app_version": appVersion.map(JSONValue.string) ?? .null,
            "ringtone": ringtone.map(JSONValue.string) ?? .null, "updated_at": .int(updatedAt),
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
        "app_id, user_id, device_id, platform, voip_token, apns_token, environment, bundle_id, callkit_enabled, app_version, updated_at, ringtone"

    private static func device(from row: [SQLValue]) -> Device {
        Device(
            appID: row[0].string ?? "", userID: row[1].string ?? "", deviceID: row[2].string ?? "", platform: row[3].string ?? "",
            voipToken: row[4].string, apnsToken: row[5].string, environment: APNsEnvironment(rawValue: row[6].string ?? "") ?? .production,
            bundleID: row[7].string, callKitEnabled: row[8].int64 == 1, appVersion: row[9].string, updatedAt: row[10].int64 ?? 0,
            ringtone: row.count > 11 ? row[11].string : nil)
    }

    /// Registers (or updates) a device; a new one past `limit` devices for its user is refused.
    /// A token registered by another user or device moves here; a rotated token replaces the old one.
    public func register(_ device: Device, limit: Int = .max) throws {
        // A registration past the limit is refused by a read: it never waits for, or takes, the
        // single writer (checked again in the write, which another registration may race).
        /// Refuses `device` when its user has `limit` other devices already.
        @Sendable func checkLimit(in database: any SQLDatabase) throws {
            let others = try database.query(
                "SELECT COUNT(*) FROM devices WHERE app_id = ? AND user_id = ? AND device_id != ?",
                [.text(device.appID), .text(device.userID), .text(device.deviceID)])
            if let count = others.first?[0].int64, count >= Int64(limit) { throw DeviceLimitReached(limit: limit) }
        }
        try read(checkLimit)
        let engine = self.engine
        _ = try write { database in
            if engine == .postgres {
                // Servers sharing the database register one user's devices one at a time, so
                // that two of them cannot each find room for one more (held until the commit).
                try database.query("SELECT pg_advisory_xact_lock(hashtextextended(?, 7350002))", [.text(device.appID + ":" + device.userID)])
            }
            try checkLimit(in: database)
            for (column, token) in [("voip_token", device.voipToken), ("apns_token", device.apnsToken)] {
                guard let token else { continue }
                try database.query(
                    "UPDATE devices SET \(column) = NULL WHERE app_id = ? AND \(column) = ? AND NOT (user_id = ? AND device_id = ?)",
                    [.text(device.appID), .text(token), .text(device.userID), .text(device.deviceID)])
            }
            try database.query(
                """
                INSERT INTO devices (\(Self.deviceColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (app_id, user_id, device_id) DO UPDATE SET platform = excluded.platform,
                    voip_token = excluded.voip_token, apns_token = excluded.apns_token, environment = excluded.environment,
                    bundle_id = excluded.bundle_id, callkit_enabled = excluded.callkit_enabled,
                    app_version = excluded.app_version, updated_at = excluded.updated_at, ringtone = excluded.ringtone
                """,
                [.text(device.appID), .text(device.userID), .text(device.deviceID), .text(device.platform),
                 device.voipToken.map(SQLValue.text) ?? .null, device.apnsToken.map(SQLValue.text) ?? .null,
                 .text(device.environment.rawValue), device.bundleID.map(SQLValue.text) ?? .null,
                 .integer(device.callKitEnabled ? 1 : 0), device.appVersion.map(SQLValue.text) ?? .null, .integer(device.updatedAt),
                 device.ringtone.map(SQLValue.text) ?? .null])
            for (kind, token) in [("voip", device.voipToken), ("apns", device.apnsToken)] {
                guard let token else { continue }
                try Self.upsertPushToken(token, appID: device.appID, kind: kind, atMillis: device.updatedAt, in: database)
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
        try devices(appID: appID, users: [userID])[userID] ?? []
    }

    /// The devices of each of `users` (each present, with none when it has none), with tokens
    /// APNs declared dead left out: one query, whatever the number of users and devices.
    public func devices(appID: String, users: [String]) throws -> [String: [Device]] {
        guard !users.isEmpty else { return [:] }
        let rows = try read { database in
            try database.query(Self.devicesQuery(users: users.count) + " ORDER BY d.user_id, d.device_id", [.text(appID)] + users.map(SQLValue.text))
        }
        return Self.devices(of: users, rows: rows[...])
    }

    /// What ringing `callees` for `caller` needs, in one query (one round trip of a call's
    /// setup): the first of `callees`, in order, whose block list names `caller` (and then no
    /// devices), or each callee's devices as `devices(appID:users:)` gives them.
    public func ringList(_ caller: String, callees: [String], appID: String) throws -> (blockedBy: String?, devices: [String: [Device]]) {
        guard !callees.isEmpty else { return (nil, [:]) }
        let marks = Array(repeating: "?", count: callees.count).joined(separator: ", ")
        // A block list's rows come first (0), each naming the callee in the device's user column.
        let rows = try read { database in
            try database.query(
                """
                SELECT 0, app_id, user_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM blocked
                WHERE app_id = ? AND blocked_id = ? AND user_id IN (\(marks))
                UNION ALL
                \(Self.devicesQuery(users: callees.count, tagged: true))
                ORDER BY 1, 3, 4
                """, [.text(appID), .text(caller)] + callees.map(SQLValue.text) + [.text(appID)] + callees.map(SQLValue.text))
        }
        let blocking = Set(rows.prefix { $0[0].int64 == 0 }.compactMap { $0[2].string })
        if let blocker = callees.first(where: blocking.contains) { return (blocker, [:]) }
        return (nil, Self.devices(of: callees, rows: rows.drop { $0[0].int64 == 0 }.map { Array($0.dropFirst()) }[...]))
    }

    /// Devices of `users` joined to their tokens' state, `tagged` with a leading 1; the app id
    /// and then each user are its parameters.
    private static func devicesQuery(users: Int, tagged: Bool = false) -> String {
        """
        SELECT \(tagged ? "1, " : "")d.app_id, d.user_id, d.device_id, d.platform,
            CASE WHEN v.disabled_at IS NULL THEN d.voip_token END, CASE WHEN a.disabled_at IS NULL THEN d.apns_token END,
            d.environment, d.bundle_id, d.callkit_enabled, d.app_version, d.updated_at, d.ringtone
        FROM devices d
        LEFT JOIN push_tokens v ON v.token = d.voip_token
        LEFT JOIN push_tokens a ON a.token = d.apns_token
        WHERE d.app_id = ? AND d.user_id IN (\(Array(repeating: "?", count: users).joined(separator: ", ")))
        """
    }

    private static func devices(of users: [String], rows: ArraySlice<[SQLValue]>) -> [String: [Device]] {
        var found = Dictionary(uniqueKeysWithValues: users.map { ($0, [Device]()) })
        for device in rows.map(Self.device(from:)) { found[device.userID, default: []].append(device) }
        return found
    }

    // MARK: Push tokens

    /// Records a (re)registration of `token`; a disabled token becomes active again.
    static func upsertPushToken(_ token: String, appID: String, kind: String, atMillis: Int64, in database: any SQLDatabase) throws {
        try database.query(
            """
            INSERT INTO push_tokens (token, app_id, kind, registered_at) VALUES (?, ?, ?, ?)
            ON CONFLICT(token) DO UPDATE SET app_id = excluded.app_id, kind = excluded.kind,
                registered_at = excluded.registered_at, disabled_at = NULL, disabled_reason = NULL
            """, [.text(token), .text(appID), .text(kind), .integer(atMillis)])
    }

    /// A device token as the store knows it.
    public struct PushTokenRecord: Sendable, Equatable {
        public var token: String
        public var appID: String
        /// `voip` (PushKit) or `apns` (regular notifications).
        public var kind: String
        /// Milliseconds since 1970.
        public var registeredAt: Int64
        public var disabledAt: Int64?
        public var disabledReason: String?

        public var isActive: Bool { disabledAt == nil }
    }

    /// Records that a device (re)registered `token` at `at`; a disabled token becomes active again.
    public func registerPushToken(_ token: String, appID: String, kind: String, at: Date) throws {
        let millis = Int64(at.timeIntervalSince1970 * 1000)
        _ = try write { database in try Self.upsertPushToken(token, appID: appID, kind: kind, atMillis: millis, in: database) }
    }

    /// Disables `token` after APNs called it dead. For `Unregistered` with a timestamp, only when
    /// the device did not register it again after that time (Apple's rule: the token is invalid
    /// since then, but a newer registration wins). Returns whether it was disabled.
    @discardableResult
    public func disablePushToken(_ token: String, reason: String, invalidSince: Date?, at: Date) throws -> Bool {
        let now = Int64(at.timeIntervalSince1970 * 1000)
        let since = invalidSince.map { Int64($0.timeIntervalSince1970 * 1000) } ?? Int64.max
        return try write { database in
            try database.query(
                "UPDATE push_tokens SET disabled_at = ?, disabled_reason = ? WHERE token = ? AND disabled_at IS NULL AND registered_at <= ?",
                [.integer(now), .text(reason), .text(token), .integer(since)])
            return database.changes > 0
        }
    }

    public func pushToken(_ token: String) throws -> PushTokenRecord? {
        try read { database in
            try database.query(
                "SELECT token, app_id, kind, registered_at, disabled_at, disabled_reason FROM push_tokens WHERE token = ?",
                [.text(token)]
            ).first.map { row in
                PushTokenRecord(
                    token: row[0].string ?? "", appID: row[1].string ?? "", kind: row[2].string ?? "",
                    registeredAt: row[3].int64 ?? 0, disabledAt: row[4].int64, disabledReason: row[5].string)
            }
        }
    }
}

/// A user already has the most devices allowed (`max_devices_per_user`).
public struct DeviceLimitReached: Error, Sendable {
    public var limit: Int
}
