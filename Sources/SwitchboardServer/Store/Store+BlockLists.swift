import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Store {
    // MARK: Block lists

    /// Replaces `userID`'s block list. Only what changed is written (read first, off the
    /// writer): the same list again costs the single writer nothing, and a change costs it
    /// the rows that differ, 500 to a statement.
    public func setBlocked(_ identities: [String], appID: String, userID: String) throws {
        let wanted = Set(identities)
        let current = Set(try blocked(appID: appID, userID: userID))
        let added = Array(wanted.subtracting(current)).sorted(), removed = Array(current.subtracting(wanted)).sorted()
        guard !added.isEmpty || !removed.isEmpty else { return }
        _ = try write { database in
            for chunk in removed.batches(of: 500) {
                try database.query(
                    "DELETE FROM blocked WHERE app_id = ? AND user_id = ? AND blocked_id IN (\(Array(repeating: "?", count: chunk.count).joined(separator: ", ")))",
                    [.text(appID), .text(userID)] + chunk.map(SQLValue.text))
            }
            for chunk in added.batches(of: 500) {
                try database.query(
                    "INSERT INTO blocked (app_id, user_id, blocked_id) VALUES "
                        + Array(repeating: "(?, ?, ?)", count: chunk.count).joined(separator: ", ") + " ON CONFLICT DO NOTHING",
                    chunk.flatMap { [SQLValue.text(appID), .text(userID), .text($0)] })
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
