import SwitchboardProtocol

/// The longest each free-text field a client sends may be, in UTF-8 bytes: fixed by the
/// protocol (docs/configuration.md, "Field limits"), so that no field can carry a megabyte into
/// every participant's history, a database index or a push. Text fields hold no control
/// characters either (they end up in events, histories and log lines).
enum FieldLimits {
    /// A user's identity (`sub`, callees, block-list entries).
    static let identity = 256
    /// `caller_name`, a token's `name`.
    static let displayName = 256
    /// `handle`.
    static let handle = 256
    /// `reason` of `call.end` / `call.decline`.
    static let reason = 128
    /// `idempotency_key` (and the `Idempotency-Key` header).
    static let idempotencyKey = 128
    /// A device id (`PUT /v1/devices/{device_id}`, `?device_id=`).
    static let deviceID = 128
    /// A call id (a UUID, 36 bytes).
    static let callID = 64
    /// A peer id.
    static let peerID = 64
    /// `bundle_id`: Apple's limit for a bundle identifier.
    static let bundleID = 155
    /// `app_version`.
    static let appVersion = 64
    /// A device's ringtone file name.
    static let ringtone = 64

    /// Checks a free-text field: 1 to `limit` bytes, no control characters; a refusal names it.
    static func check(_ value: String, field: String, limit: Int) throws(ErrorBody) {
        guard !value.isEmpty, value.utf8.count <= limit, !value.unicodeScalars.contains(where: isControl) else {
            throw ErrorBody(.badRequest, "\(field) must be 1 to \(limit) bytes of text without control characters")
        }
    }

    /// Checks an optional free-text field when it is there.
    static func check(_ value: String?, field: String, limit: Int) throws(ErrorBody) {
        if let value { try check(value, field: field, limit: limit) }
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator: true
        default: false
        }
    }
}
