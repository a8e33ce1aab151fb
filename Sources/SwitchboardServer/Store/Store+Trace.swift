import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore
import SwitchboardPush

extension Store {
    // MARK: Call trace

    /// Appends one trace entry (queued).
    func trace(callID: String, user: String, device: String, channel: String, event: String, atMillis: Int64, detail: JSONValue? = nil) {
        enqueue("call trace", statements: [
            Self.traceEntry(
                callID: callID, user: user, device: device, channel: channel, event: event, atMillis: atMillis,
                detail: detail.map(JSONText.string))
        ])
    }

    /// The statement that writes one trace entry (`detail`: a JSON object's text); the store
    /// benchmark and the crash test write it as the server does.
    package static func traceEntry(
        callID: String, user: String, device: String, channel: String, event: String, atMillis: Int64, detail: String?
    ) -> SQLStatement {
        SQLStatement(
            "INSERT INTO call_trace (call_id, user_id, device_id, channel, event, at, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [.text(callID), .text(user), .text(device), .text(channel), .text(event), .integer(atMillis), detail.map(SQLValue.text) ?? .null])
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
                if let detail = row[5].string, case .object(let fields)? = Self.json(detail) {
                    entry.merge(fields) { old, _ in old }
                }
                return .object(entry)
            }
        }
    }
}
