import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Store {
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
}
