import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Store {
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
                INSERT INTO app_push (app_id, kind, key_pem, key_id, team_id, certificate_pem, certificate_password, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (app_id) DO UPDATE SET kind = excluded.kind, key_pem = excluded.key_pem, key_id = excluded.key_id,
                    team_id = excluded.team_id, certificate_pem = excluded.certificate_pem,
                    certificate_password = excluded.certificate_password, updated_at = excluded.updated_at
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

    /// Keeps a provider token just minted, unless another process already replaced the one it
    /// replaces (`replacing`: that token's issue time; nil: none was in use), and returns the
    /// token to use: this one, or the one stored first. Written at once (the push waits: once
    /// per key every 40 minutes).
    public func settleProviderToken(_ jwt: String, issuedAt: Date, replacing: Date?, keyID: String, teamID: String) throws -> String? {
        try write { database in
            let stored = try database.query(
                """
                INSERT INTO provider_tokens (key_id, team_id, jwt, issued_at) VALUES (?, ?, ?, ?)
                ON CONFLICT (key_id, team_id) DO UPDATE SET jwt = excluded.jwt, issued_at = excluded.issued_at
                WHERE provider_tokens.issued_at <= ?
                RETURNING jwt
                """,
                [.text(keyID), .text(teamID), .text(jwt), .integer(Int64(issuedAt.timeIntervalSince1970)),
                 .integer(Int64(replacing?.timeIntervalSince1970 ?? 0))])
            if let won = stored.first?[0].string { return won }
            return try database.query("SELECT jwt FROM provider_tokens WHERE key_id = ? AND team_id = ?", [.text(keyID), .text(teamID)])
                .first?[0].string
        }
    }
}
