import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// The signaling protocol's messages as bytes, both ways, in one place. Requests are read
/// with jansson (a relayed signal as the byte range of its payload, anything else as a
/// value, its `data` decoded from that value); replies and events are written by `JSONText`'s
/// writer on the hot path, and with `JSONEncoder` for errors and connection messages (rare).
struct MessageCodec {
    /// A message read: a signal to relay as it is, or a request with its envelope's fields.
    enum Message {
        case signal(SignalRequestBytes)
        case request(id: JSONValue, type: String, object: [String: JSONValue])
    }

    /// Why a message is not a request, with its id when it had a usable one.
    struct Refusal: Error {
        var id: JSONValue?
        var error: ErrorBody
    }

    static let missingID = ErrorBody(.badRequest, "every request needs an id (a string or an integer)")

    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()
    private let decoder = JSONDecoder()
    /// The relay's fast reader of signals (loop thread only, as the codec).
    private let signals = SignalReader()

    // MARK: Reading

    func read(_ bytes: [UInt8]) -> Result<Message, Refusal> {
        switch JSONText.parseRequest(bytes, reader: signals) {
        case .signal(let signal)?: return .success(.signal(signal))
        case .value(let value)?: return Self.parseRequest(bytes, parsed: value).map { .request(id: $0.id, type: $0.type, object: $0.object) }
        case nil: return Self.parseRequest(bytes).map { .request(id: $0.id, type: $0.type, object: $0.object) }
        }
    }

    /// The envelope of a request: a JSON object with a usable `id` and a string `type`.
    /// `parsed`: the value already read from `bytes`, if any.
    static func parseRequest(
        _ bytes: [UInt8], parsed: JSONValue? = nil
    ) -> Result<(id: JSONValue, type: String, object: [String: JSONValue]), Refusal> {
        guard let value = parsed ?? parseJSON(bytes) else {
            // The id, when a scan still finds a usable one (a string with a lone surrogate
            // escape elsewhere in the message): the client learns which request failed.
            let id = JSONText.idOfUnparsedMessage(bytes).flatMap { isUsableID($0) ? $0 : nil }
            return .failure(Refusal(id: id, error: ErrorBody(.malformedJSON, "the message is not valid JSON")))
        }
        guard case .object(let object) = value else {
            return .failure(Refusal(error: ErrorBody(.badRequest, "a message must be a JSON object")))
        }
        guard let id = object["id"], isUsableID(id) else {
            return .failure(Refusal(error: missingID))
        }
        guard case .string(let type) = object["type"] else {
            return .failure(Refusal(id: id, error: ErrorBody(.badRequest, "every request needs a string type")))
        }
        return .success((id, type, object))
    }

    /// Any JSON text as a value: jansson first (fast), Foundation's decoder for what jansson
    /// cannot hold (integers beyond 64 bits). Nil: not JSON. REST bodies are read the same way.
    static func parseJSON(_ bytes: [UInt8]) -> JSONValue? {
        JSONText.parse(bytes) ?? (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)))
    }

    static func isUsableID(_ id: JSONValue) -> Bool {
        switch id {
        case .string(let text): !text.isEmpty && text.utf8.count <= 128
        case .int: true
        default: false
        }
    }

    /// A request's `data` as `T`, decoded from the request as `read` parsed it (the bytes are
    /// not parsed again).
    static func data<T: Decodable>(of request: [String: JSONValue]) throws(ErrorBody) -> T {
        guard let data = request["data"] else { throw ErrorBody(.badRequest, "invalid data: missing field 'data'") }
        do {
            return try JSONValueDecoder().decode(T.self, from: data, codingPath: ["data"])
        } catch {
            throw ErrorBody(.badRequest, "invalid data: \(Gateway.describe(error))")
        }
    }

    // MARK: Writing

    /// A reply or an event.
    func encode(_ envelope: Envelope) -> [UInt8]? {
        if envelope.error == nil, envelope.data == nil, envelope.seq == nil, let id = envelope.id {
            // A bare reply (the relay's `ok`): written directly, as the relay's events are.
            var bytes: [UInt8] = []
            bytes.reserveCapacity(48)
            bytes.append(contentsOf: #"{"type":"#.utf8)
            JSONText.appendQuoted(envelope.type, to: &bytes)
            bytes.append(contentsOf: #","id":"#.utf8)
            switch id {
            case .string(let text): JSONText.appendQuoted(text, to: &bytes)
            case .int(let number): bytes.append(contentsOf: String(number).utf8)
            default: return (try? encoder.encode(envelope)).map(Array.init)
            }
            bytes.append(0x7D)
            return bytes
        }
        if envelope.error == nil {
            var members: [(String, JSONValue)] = [("type", .string(envelope.type))]
            if let id = envelope.id { members.append(("id", id)) }
            if let seq = envelope.seq { members.append(("seq", .int(Int64(seq)))) }
            if let data = envelope.data { members.append(("data", data)) }
            return JSONText.serialize(members: members)
        }
        return (try? encoder.encode(envelope)).map(Array.init)
    }

    /// A sequenced event. Data already written as JSON (a relayed signal) is spliced in as it is.
    func event(_ event: OutgoingEvent, seq: UInt64) -> [UInt8]? {
        switch event.data {
        case .value(let data): return encode(Envelope(type: event.type, seq: seq, data: data))
        case .encoded(let data):
            var frame: [UInt8] = []
            frame.reserveCapacity(data.count + event.type.utf8.count + 40)
            frame.append(contentsOf: #"{"type":"#.utf8)
            JSONText.appendQuoted(event.type, to: &frame)
            frame.append(contentsOf: #","seq":"#.utf8)
            frame.append(contentsOf: String(seq).utf8)
            frame.append(contentsOf: #","data":"#.utf8)
            frame.append(contentsOf: data)
            frame.append(0x7D)
            return frame
        }
    }

    /// An unsequenced connection message (`session.welcome`, `session.resumed`).
    func control(_ type: String, _ data: some Encodable) -> [UInt8]? {
        (try? encoder.encode(Envelope(type: type, data: value(data)))).map(Array.init)
    }

    /// Any encodable value as a JSON value.
    func value(_ value: some Encodable) -> JSONValue {
        (try? encoder.encode(value)).flatMap { try? decoder.decode(JSONValue.self, from: $0) } ?? .null
    }
}
