/// Decodes a `Decodable` from a `JSONValue` already read, so that a message parsed once (the
/// server reads each with jansson) is not parsed again to decode its `data`.
///
/// It follows Foundation's `JSONDecoder` where the protocol's types can tell: a number decodes
/// as an integer only when it is one exactly (`5.0` is 5, `5.5` fails), an integer decodes as a
/// floating-point number, nothing else converts, `null` where a value is required is
/// `valueNotFound`, and errors carry the same coding paths (an array element is `Index N`).
/// A `JSONValue` inside is handed over as it is.
public struct JSONValueDecoder: Sendable {
    public init() {}

    /// `T` from `value`; `codingPath` names the members `value` sits in (for errors).
    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, codingPath: [String] = []) throws -> T {
        try TreeDecoder(value: value, codingPath: codingPath.map(TreeKey.init(stringValue:))).decodeValue(T.self)
    }
}

/// A member name or an array position in a coding path.
private struct TreeKey: CodingKey {
    let stringValue: String
    let intValue: Int?
    init(stringValue: String) {
        self.stringValue = stringValue
        intValue = nil
    }
    init(intValue: Int) {
        stringValue = "Index \(intValue)"
        self.intValue = intValue
    }
}

private struct TreeDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        switch value {
        case .object(let members): return KeyedDecodingContainer(KeyedTree<Key>(members: members, codingPath: codingPath))
        case .null:
            throw DecodingError.valueNotFound(
                KeyedDecodingContainer<Key>.self, context("Cannot get keyed decoding container -- found null value instead"))
        default: throw mismatch([String: JSONValue].self)
        }
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        switch value {
        case .array(let elements): return UnkeyedTree(elements: elements, codingPath: codingPath)
        case .null:
            throw DecodingError.valueNotFound(
                (any UnkeyedDecodingContainer).self, context("Cannot get unkeyed decoding container -- found null value instead"))
        default: throw mismatch([JSONValue].self)
        }
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleTree(decoder: self) }

    func context(_ description: String) -> DecodingError.Context {
        DecodingError.Context(codingPath: codingPath, debugDescription: description)
    }

    func mismatch(_ type: Any.Type) -> DecodingError {
        value == .null
            ? DecodingError.valueNotFound(type, context("Expected \(type) value but found null instead"))
            : DecodingError.typeMismatch(type, context("Expected to decode \(type) but found \(value.kind) instead"))
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        switch type {
        case is JSONValue.Type: return value as! T
        case is String.Type: return try string() as! T
        case is Bool.Type: return try bool() as! T
        case is Int.Type: return try integer(Int.self) as! T
        case is Int64.Type: return try integer(Int64.self) as! T
        case is Double.Type: return try double() as! T
        default: return try T(from: self)
        }
    }

    func string() throws -> String {
        guard case .string(let text) = value else { throw mismatch(String.self) }
        return text
    }

    func bool() throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(Bool.self) }
        return flag
    }

    func double() throws -> Double {
        switch value {
        case .double(let number): return number
        case .int(let number): return Double(number)
        default: throw mismatch(Double.self)
        }
    }

    func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        let exact: T?
        switch value {
        case .int(let number): exact = T(exactly: number)
        case .double(let number): exact = T(exactly: number)
        default: throw mismatch(T.self)
        }
        guard let exact else {
            throw DecodingError.dataCorrupted(context("Parsed JSON number <\(value.numberText)> does not fit in \(T.self)."))
        }
        return exact
    }
}

private struct SingleTree: SingleValueDecodingContainer {
    let decoder: TreeDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.value == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try decoder.bool() }
    func decode(_ type: String.Type) throws -> String { try decoder.string() }
    func decode(_ type: Double.Type) throws -> Double { try decoder.double() }
    func decode(_ type: Float.Type) throws -> Float { Float(try decoder.double()) }
    func decode(_ type: Int.Type) throws -> Int { try decoder.integer(Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try decoder.integer(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try decoder.integer(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decoder.integer(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decoder.integer(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try decoder.integer(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decoder.integer(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decoder.integer(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decoder.integer(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decoder.integer(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(T.self) }
}

private struct KeyedTree<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }
    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    func member(_ key: Key) throws -> TreeDecoder {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key, DecodingError.Context(codingPath: codingPath, debugDescription: "No value associated with key \(key.stringValue)."))
        }
        return TreeDecoder(value: value, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { try member(key).value == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try member(key).bool() }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try member(key).string() }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try member(key).double() }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try member(key).double()) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try member(key).integer(Int.self) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try member(key).integer(Int8.self) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try member(key).integer(Int16.self) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try member(key).integer(Int32.self) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try member(key).integer(Int64.self) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try member(key).integer(UInt.self) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try member(key).integer(UInt8.self) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try member(key).integer(UInt16.self) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try member(key).integer(UInt32.self) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try member(key).integer(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try member(key).decodeValue(T.self) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try member(key).container(keyedBy: type)
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { try member(key).unkeyedContainer() }
    func superDecoder() throws -> any Decoder { try member(Key(stringValue: "super")!) }
    func superDecoder(forKey key: Key) throws -> any Decoder { try member(key) }
}

private struct UnkeyedTree: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    /// The next element's decoder, moving past it.
    mutating func next(_ type: Any.Type) throws -> TreeDecoder {
        let path = codingPath + [TreeKey(intValue: currentIndex)]
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, DecodingError.Context(codingPath: path, debugDescription: "Unkeyed container is at end."))
        }
        defer { currentIndex += 1 }
        return TreeDecoder(value: elements[currentIndex], codingPath: path)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                Never.self, DecodingError.Context(codingPath: codingPath + [TreeKey(intValue: currentIndex)], debugDescription: "Unkeyed container is at end."))
        }
        guard elements[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type).bool() }
    mutating func decode(_ type: String.Type) throws -> String { try next(type).string() }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(type).double() }
    mutating func decode(_ type: Float.Type) throws -> Float { Float(try next(type).double()) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(type).integer(Int.self) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type).integer(Int8.self) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type).integer(Int16.self) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type).integer(Int32.self) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type).integer(Int64.self) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type).integer(UInt.self) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type).integer(UInt8.self) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type).integer(UInt16.self) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type).integer(UInt32.self) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type).integer(UInt64.self) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(type).decodeValue(T.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next(type).container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next([JSONValue].self).unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next(JSONValue.self) }
}

extension JSONValue {
    fileprivate var numberText: String {
        switch self {
        case .int(let number): "\(number)"
        case .double(let number): "\(number)"
        default: kind
        }
    }

    /// The kind of value, as an error names it.
    fileprivate var kind: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .int, .double: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "a dictionary"
        }
    }
}
