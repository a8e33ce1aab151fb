internal import CJansson
import Glibc
import SwitchboardProtocol

/// A `signal` request as the relay needs it: the envelope's fields, and the signal itself as
/// the bytes it arrived as, to be spliced into the outgoing event without being decoded and
/// encoded again (an SDP offer is most of a signal's bytes).
public struct SignalRequestBytes: Sendable {
    public var id: JSONValue
    public var room: String
    public var to: String
    /// `data.signal`, exactly as sent (valid JSON: jansson accepted the whole message).
    public var signal: ArraySlice<UInt8>
}

/// A request as parsed at the edge: a signal kept as bytes, or any other message as a value.
public enum ParsedRequest: Sendable {
    case signal(SignalRequestBytes)
    case value(JSONValue)
}

extension JSONText {
    /// Parses a WebSocket request. jansson validates the whole message; a `signal` whose `data`
    /// holds string `room` and `to` and a `signal` comes back with the signal's byte range,
    /// found by a scan of the (now known valid) text. Anything else, and a signal the scan
    /// cannot place (a key written with escapes), comes back as a value. Nil: not JSON jansson
    /// accepts.
    ///
    /// With a `reader`, a signal is read by it first (simdjson validates the whole message much
    /// faster); whatever it does not take as a signal goes the way above.
    public static func parseRequest(_ bytes: [UInt8], reader: SignalReader? = nil) -> ParsedRequest? {
        if let reader, let signal = reader.read(bytes) { return .signal(signal) }
        guard let root = load(bytes) else { return nil }
        defer { json_decref(root) }
        if let signal = signalRequest(root, bytes) { return .signal(signal) }
        return .value(value(of: root))
    }

    /// The `id` member of a message no parser took (a lone surrogate escape, `"\ud800"`, which
    /// RFC 8259's grammar allows and JSON parsers refuse): found by a scan of the text, at most
    /// 160 bytes, and parsed on its own. Nil when the scan does not find one that parses.
    public static func idOfUnparsedMessage(_ bytes: [UInt8]) -> JSONValue? {
        let span: Range<Int>? = bytes.withUnsafeBufferPointer { text in
            JSONSpans.member("id", ofObjectAt: JSONSpans.skipSpace(text, 0), in: text)
        }
        guard let span, span.count <= 160, span.upperBound <= bytes.count else { return nil }
        return parse(Array(bytes[span]))
    }

    private static func signalRequest(_ root: UnsafeMutablePointer<json_t>, _ bytes: [UInt8]) -> SignalRequestBytes? {
        guard sb_json_typeof(root) == JSON_OBJECT, let type = json_object_get(root, "type"), sb_json_typeof(type) == JSON_STRING,
            json_string_length(type) == 6, let typeText = json_string_value(type), strncmp(typeText, "signal", 6) == 0,
            let id = json_object_get(root, "id"), let data = json_object_get(root, "data"), sb_json_typeof(data) == JSON_OBJECT,
            let room = json_object_get(data, "room"), sb_json_typeof(room) == JSON_STRING,
            let to = json_object_get(data, "to"), sb_json_typeof(to) == JSON_STRING, json_object_get(data, "signal") != nil
        else { return nil }
        guard let span = signalSpan(bytes) else { return nil }
        return SignalRequestBytes(id: value(of: id), room: stringValue(room), to: stringValue(to), signal: bytes[span])
    }

    /// Where `data.signal` is in a signal request known to be valid JSON: nil when the scan
    /// cannot place it (a key written with escapes).
    static func signalSpan(_ bytes: [UInt8]) -> Range<Int>? {
        bytes.withUnsafeBufferPointer { text in
            guard let dataValue = JSONSpans.member("data", ofObjectAt: JSONSpans.skipSpace(text, 0), in: text) else { return nil }
            return JSONSpans.member("signal", ofObjectAt: dataValue.lowerBound, in: text)
        }
    }

    private static func stringValue(_ node: UnsafeMutablePointer<json_t>) -> String {
        guard let text = json_string_value(node) else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: text, count: json_string_length(node)), as: UTF8.self)
    }

    /// Appends `text` to `out` as a JSON string literal, quotes included (RFC 8259 7: quote,
    /// backslash and control characters escaped; everything else, slashes included, as is).
    public static func appendQuoted(_ text: String, to out: inout [UInt8]) {
        // Most names need no escape: one copy of the bytes.
        let plain: (UInt8) -> Bool = { $0 >= 0x20 && $0 != 0x22 && $0 != 0x5C }
        if text.utf8.withContiguousStorageIfAvailable({ $0.allSatisfy(plain) }) ?? text.utf8.allSatisfy(plain) {
            out.append(0x22)
            out.append(contentsOf: text.utf8)
            out.append(0x22)
            return
        }
        out.reserveCapacity(out.count + text.utf8.count + 2)
        out.append(0x22)
        for byte in text.utf8 {
            switch byte {
            case 0x22: out += [0x5C, 0x22]
            case 0x5C: out += [0x5C, 0x5C]
            case 0x0A: out += [0x5C, 0x6E]
            case 0x0D: out += [0x5C, 0x72]
            case 0x09: out += [0x5C, 0x74]
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += [0x5C, 0x75, 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default: out.append(byte)
            }
        }
        out.append(0x22)
    }
}

/// Byte ranges in JSON text that jansson has already accepted: no validation here, only the
/// structure needed to find where a member's value starts and ends.
enum JSONSpans {
    static func skipSpace(_ text: UnsafeBufferPointer<UInt8>, _ start: Int) -> Int {
        var index = start
        while index < text.count, text[index] == 0x20 || text[index] == 0x0A || text[index] == 0x0D || text[index] == 0x09 { index += 1 }
        return index
    }

    /// The index just past the string starting at `start` (its opening quote). Jumps from quote
    /// to quote with `memchr` (an SDP is most of a signal's bytes): a quote closes the string
    /// unless an odd run of backslashes comes before it.
    static func skipString(_ text: UnsafeBufferPointer<UInt8>, _ start: Int) -> Int {
        guard let base = text.baseAddress else { return start + 1 }
        var index = start + 1
        while index < text.count {
            guard let hit = memchr(base + index, 0x22, text.count - index) else { return text.count }
            let quote = UnsafeRawPointer(base).distance(to: UnsafeRawPointer(hit))
            var backslashes = 0
            while quote - backslashes - 1 > start, text[quote - backslashes - 1] == 0x5C { backslashes += 1 }
            if backslashes % 2 == 0 { return quote + 1 }
            index = quote + 1
        }
        return index
    }

    /// The index just past the value starting at `start`.
    static func skipValue(_ text: UnsafeBufferPointer<UInt8>, _ start: Int) -> Int {
        guard start < text.count else { return start }
        switch text[start] {
        case 0x22: return skipString(text, start)
        case 0x7B, 0x5B:
            var depth = 0
            var index = start
            while index < text.count {
                switch text[index] {
                case 0x22:
                    index = skipString(text, index)
                    continue
                case 0x7B, 0x5B: depth += 1
                case 0x7D, 0x5D:
                    depth -= 1
                    if depth == 0 { return index + 1 }
                default: break
                }
                index += 1
            }
            return index
        default:
            var index = start
            while index < text.count {
                switch text[index] {
                case 0x2C, 0x7D, 0x5D, 0x20, 0x0A, 0x0D, 0x09: return index
                default: index += 1
                }
            }
            return index
        }
    }

    /// The range of the value of member `key` of the object starting at `start`: the last one
    /// when the key repeats (as jansson keeps it). Nil when the object has no such key written
    /// without escapes, or holds a key with escapes (it might be `key` spelt another way).
    static func member(_ key: StaticString, ofObjectAt start: Int, in text: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        guard start < text.count, text[start] == 0x7B else { return nil }
        let wanted = UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount)
        var found: Range<Int>?
        var index = skipSpace(text, start + 1)
        while index < text.count, text[index] == 0x22 {
            let keyEnd = skipString(text, index)
            // An unterminated key (only in text no parser took: `idOfUnparsedMessage`).
            guard keyEnd - 1 >= index + 1, keyEnd <= text.count, text[keyEnd - 1] == 0x22 else { return nil }
            let keyBytes = UnsafeBufferPointer(rebasing: text[(index + 1)..<(keyEnd - 1)])
            if keyBytes.contains(0x5C) { return nil }
            index = skipSpace(text, keyEnd)  // at ':'
            let valueStart = skipSpace(text, index + 1)
            let valueEnd = skipValue(text, valueStart)
            if keyBytes.elementsEqual(wanted) { found = valueStart..<valueEnd }
            index = skipSpace(text, valueEnd)
            guard index < text.count, text[index] == 0x2C else { break }
            index = skipSpace(text, index + 1)
        }
        return found
    }
}
