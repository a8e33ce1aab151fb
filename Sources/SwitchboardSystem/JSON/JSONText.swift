internal import CJansson
import Glibc
import SwitchboardProtocol

/// JSON text with jansson, for the server's WebSocket hot path, where Foundation's `JSONDecoder`
/// and `JSONEncoder` were the largest costs of relaying a signal (see BENCHMARKS.md, relay).
public enum JSONText {
    /// The value `bytes` hold, or nil when jansson rejects them. jansson also rejects what it
    /// cannot represent exactly (integers beyond 64 bits); callers that must accept those fall
    /// back to `JSONDecoder`, which also words the error.
    public static func parse(_ bytes: [UInt8]) -> JSONValue? {
        guard let root = load(bytes) else { return nil }
        defer { json_decref(root) }
        return value(of: root)
    }

    /// Whether `bytes` hold a JSON object, without building its value; nil when jansson
    /// rejects them (callers that must accept what jansson cannot represent fall back as above).
    public static func holdsObject(_ bytes: [UInt8]) -> Bool? {
        guard let root = load(bytes) else { return nil }
        defer { json_decref(root) }
        return sb_json_typeof(root) == JSON_OBJECT
    }

    /// jansson's tree of `bytes` (one reference, the caller's), or nil when it rejects them.
    static func load(_ bytes: [UInt8]) -> UnsafeMutablePointer<json_t>? {
        var error = json_error_t()
        return bytes.withUnsafeBufferPointer { buffer -> UnsafeMutablePointer<json_t>? in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                // Any top-level value; NUL characters inside strings are legal JSON.
                json_loadb(chars.baseAddress, chars.count, Int(JSON_DECODE_ANY | JSON_ALLOW_NUL), &error)
            }
        }
    }

    /// Compact JSON for `value`, written in Swift without an intermediate tree: object members
    /// in key order, UTF-8 as is, slashes not escaped, a floating-point number in its shortest
    /// form that reads back the same (`1.0` stays `1.0`), one that is not finite as `null`.
    public static func serialize(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        append(value, to: &out)
        return out
    }

    /// `serialize(value)` as a string.
    public static func string(_ value: JSONValue) -> String {
        String(decoding: serialize(value), as: UTF8.self)
    }

    private static func append(_ value: JSONValue, to out: inout [UInt8]) {
        switch value {
        case .null: out += "null".utf8
        case .bool(let flag): out += (flag ? "true" : "false").utf8
        case .int(let integer): out += String(integer).utf8
        case .double(let number): out += (number.isFinite ? "\(number)" : "null").utf8
        case .string(let text): appendQuoted(text, to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                append(item, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendQuoted(key, to: &out)
                out.append(UInt8(ascii: ":"))
                append(members[key]!, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Compact JSON for an object whose members appear in the given order (an envelope's
    /// `type`, `id`, `seq`, `data`), each written as `serialize` writes a value.
    public static func serialize(members: [(String, JSONValue)]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(UInt8(ascii: "{"))
        for (index, (key, member)) in members.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            appendQuoted(key, to: &out)
            out.append(UInt8(ascii: ":"))
            append(member, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func value(of node: UnsafeMutablePointer<json_t>) -> JSONValue {
        switch sb_json_typeof(node) {
        case JSON_OBJECT:
            var object: [String: JSONValue] = [:]
            object.reserveCapacity(json_object_size(node))
            var iterator = json_object_iter(node)
            while let entry = iterator {
                if let key = json_object_iter_key(entry), let member = json_object_iter_value(entry) {
                    object[string(key, length: json_object_iter_key_len(entry))] = value(of: member)
                }
                iterator = json_object_iter_next(node, entry)
            }
            return .object(object)
        case JSON_ARRAY:
            let count = json_array_size(node)
            var array: [JSONValue] = []
            array.reserveCapacity(count)
            for index in 0..<count {
                if let element = json_array_get(node, index) { array.append(value(of: element)) }
            }
            return .array(array)
        case JSON_STRING:
            guard let text = json_string_value(node) else { return .string("") }
            return .string(string(text, length: json_string_length(node)))
        case JSON_INTEGER:
            return .int(Int64(json_integer_value(node)))
        case JSON_REAL:
            // As JSONDecoder reads them: a number with an exact 64-bit integer value (1e3, 2.0)
            // is an integer.
            let real = json_real_value(node)
            if let integer = Int64(exactly: real) { return .int(integer) }
            return .double(real)
        case JSON_TRUE:
            return .bool(true)
        case JSON_FALSE:
            return .bool(false)
        default:
            return .null
        }
    }

    /// jansson's strings are UTF-8 it has validated, with an explicit length (they may hold NUL).
    private static func string(_ pointer: UnsafePointer<CChar>, length: Int) -> String {
        String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
    }
}
