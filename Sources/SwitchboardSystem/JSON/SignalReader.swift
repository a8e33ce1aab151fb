internal import CSimdJSON
import SwitchboardProtocol

/// Reads `signal` requests at the relay's speed: simdjson validates the whole message and
/// finds the envelope's fields; the signal's bytes are found by the same scan as on jansson's
/// path. What it does not take as a signal is left to `JSONText.parseRequest`'s jansson path,
/// so the two always agree on a signal (the fuzz replay checks it).
///
/// One per thread: it keeps simdjson's buffers between messages (the hub's codec holds the
/// loop's).
public final class SignalReader {
    private let reader: OpaquePointer

    public init() {
        guard let reader = sb_signal_reader_new() else { fatalError("out of memory for the signal reader") }
        self.reader = reader
    }

    deinit { sb_signal_reader_free(reader) }

    /// The signal request in `bytes`, or nil: not a signal this reader can place.
    public func read(_ bytes: [UInt8]) -> SignalRequestBytes? {
        var fields = sb_signal_fields()
        let result = bytes.withUnsafeBufferPointer { text in
            text.withMemoryRebound(to: CChar.self) { sb_signal_reader_read(reader, $0.baseAddress, $0.count, &fields) }
        }
        guard result == 1, let span = JSONText.signalSpan(bytes) else { return nil }
        let id: JSONValue = fields.id_kind == 2 ? .int(fields.id_int) : .string(Self.string(fields.id_text, fields.id_length))
        return SignalRequestBytes(
            id: id, room: Self.string(fields.room, fields.room_length), to: Self.string(fields.to, fields.to_length), signal: bytes[span])
    }

    /// The fields of a signal another node of a cluster passed on, or nil: not such a message.
    /// Where its payload is, the caller finds (it is spliced in as it came).
    public func readPassedSignal(_ bytes: [UInt8]) -> PassedSignalFields? {
        var fields = sb_node_signal_fields()
        let result = bytes.withUnsafeBufferPointer { text in
            text.withMemoryRebound(to: CChar.self) { sb_node_signal_read(reader, $0.baseAddress, $0.count, &fields) }
        }
        guard result == 1 else { return nil }
        return PassedSignalFields(
            from: Self.string(fields.from, fields.from_length), appID: Self.string(fields.app, fields.app_length),
            room: Self.string(fields.room, fields.room_length), peer: Self.string(fields.peer, fields.peer_length),
            to: Self.string(fields.to, fields.to_length))
    }

    private static func string(_ text: UnsafePointer<CChar>?, _ length: Int) -> String {
        guard let text else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: text, count: length), as: UTF8.self)
    }
}

/// Who passed a signal on, and to whom in which room (`SignalReader.readPassedSignal`).
public struct PassedSignalFields: Sendable, Equatable {
    public var from: String
    public var appID: String
    public var room: String
    public var peer: String
    public var to: String

    public init(from: String, appID: String, room: String, peer: String, to: String) {
        (self.from, self.appID, self.room, self.peer, self.to) = (from, appID, room, peer, to)
    }
}
