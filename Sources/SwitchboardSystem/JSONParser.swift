import CJansson
import SwitchboardProtocol

/// Parses JSON text into a `JSONValue` with jansson: the server's parser for incoming
/// WebSocket messages, where Foundation's `JSONDecoder` is the largest cost of relaying a signal.
public enum JSONParser {
    /// The value `bytes` hold, or nil when jansson rejects them. jansson also rejects what it
    /// cannot represent exactly (integers beyond 64 bits); callers that must accept those fall
    /// back to `JSONDecoder`, which also words the error.
    public static func parse(_ bytes: [UInt8]) -> JSONValue? {
        var error = json_error_t()
        let root = bytes.withUnsafeBufferPointer { buffer -> UnsafeMutablePointer<json_t>? in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                // Any top-level value; NUL characters inside strings are legal JSON.
                json_loadb(chars.baseAddress, chars.count, Int(JSON_DECODE_ANY | JSON_ALLOW_NUL), &error)
            }
        }
        guard let root else { return nil }
        defer { json_decref(root) }
        return value(of: root)
    }

    private static func value(of node: UnsafeMutablePointer<json_t>) -> JSONValue {
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
