import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import Testing

/// The server parses incoming messages with jansson; it must read every document exactly as
/// Foundation's JSONDecoder does, and leave to it what it cannot hold.
@Suite(.timeLimit(.minutes(3))) struct JSONTextTests {
    @Test(arguments: [
        #"{"type":"signal","id":7,"data":{"room":"r","to":"p_1","signal":{"type":"offer","sdp":"v=0\r\n"}}}"#,
        #"[true,false,null,0,-1,9223372036854775807,-9223372036854775808,1.5,-0.25,1e3,2.0,"",[],{}]"#,
        #"{"é":"\u00e9\u4e2d\ud83d\ude00","quote":"\"\\\/\b\f\n\r\t","nul":"a\u0000b"}"#,
        #""just a string""#, #"42"#, #"  {"nested":{"deeper":[{"a":[1,[2,[3]]]}]}}  "#,
    ])
    func agreesWithJSONDecoder(text: String) throws {
        let expected = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(JSONText.parse(Array(text.utf8)) == expected)
    }

    @Test(arguments: [
        #"{"a":1"#, #"{'a':1}"#, #"{"a":01}"#, "", #"{"a":1}{"b":2}"#, #"{"a":NaN}"#,
    ])
    func rejectsWhatIsNotJSON(text: String) {
        #expect(JSONText.parse(Array(text.utf8)) == nil)
        #expect((try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))) == nil)
    }

    @Test func rejectsInvalidUTF8() {
        #expect(JSONText.parse([0x22, 0xff, 0xfe, 0x22]) == nil)
    }

    @Test func leavesIntegersBeyond64BitsToTheFallback() throws {
        // The hub falls back to JSONDecoder, which reads it as a Double.
        #expect(JSONText.parse(Array(#"{"id":18446744073709551616}"#.utf8)) == nil)
    }
}

@Suite(.timeLimit(.minutes(3))) struct JSONTextSerializeTests {
    @Test func writesWhatJSONDecoderReadsBack() throws {
        let data: JSONValue = [
            "sdp": "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n", "path": "a/b", "unicode": "é中😀\u{0}",
            "list": [1, -2, true, false, .null, [], [:]], "nested": ["deeper": ["n": .int(Int64.min)]],
        ]
        let bytes = JSONText.serialize(members: [("type", "signal"), ("seq", 3), ("data", data)])
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.hasPrefix(#"{"type":"signal","seq":3,"data":{"#))
        #expect(text.contains(#""path":"a/b""#))
        let back = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        #expect(back == ["type": "signal", "seq": 3, "data": data])
    }

    /// A floating-point number in its shortest form that reads back the same, and still a
    /// floating-point number (`1.0`, not `1`); one that is not finite as `null`.
    @Test func writesFloatingPointInItsShortestForm() throws {
        let data: JSONValue = ["a": .double(0.1), "b": .double(1.0), "c": .double(-2.5e-7), "d": .double(1e300), "e": .double(.infinity)]
        let bytes = JSONText.serialize(members: [("data", data)])
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"data":{"a":0.1,"b":1.0,"c":-2.5e-07,"d":1e+300,"e":null}}"#)
        // Read back, each is the number written (`1.0` reads as the integer 1, as JSONDecoder has it).
        let back = try #require(JSONText.parse(bytes))
        #expect(back == ["data": ["a": .double(0.1), "b": 1, "c": .double(-2.5e-7), "d": .double(1e300), "e": .null]])
    }

    /// The relay keeps a signal's payload as the bytes it arrived as: the range found is exactly
    /// the member jansson read, whatever the text around it holds.
    @Test(arguments: [
        #"{"type":"signal","id":1,"data":{"room":"r","to":"p","signal":{"type":"offer","sdp":"v=0\r\n}{\"x"}}}"#,
        // Backslash runs before a quote: even (the quote closes the string), odd (it is escaped).
        #"{"type":"signal","id":7,"data":{"room":"r","to":"p","signal":{"a":"x\\","b":"\\\"}\\\\","c":"\\\\\"]"}}}"#,
        #"{ "data" : { "signal" : [1, {"a": "]}"}, -2.5e3, null] , "to" : "p", "room" : "r" } , "type" : "signal", "id" : "s" }"#,
        #"{"type":"signal","id":2,"data":{"room":"r","to":"p","signal":"first","signal":{"last":true}}}"#,
        #"{"type":"signal","id":3,"data":{"room":"r","to":"p","signal":true}}"#,
        #"{"data":{"x":{"signal":1},"room":"r","to":"p","signal":"\u00e9\ud83d\ude00"},"id":4,"type":"signal"}"#,
        #"{"type":"data","type":"signal","id":5,"data":{"room":"r","to":"p","signal":{}}}"#,  // the last of a repeated key
        #"{"type":"signal","id":"x","id":6,"data":{"room":"q","to":"q","signal":{}},"data":{"room":"r","to":"p","signal":[]}}"#,
    ])
    func aSignalsPayloadIsFoundExactly(text: String) throws {
        let bytes = Array(text.utf8)
        guard case .signal(let request)? = JSONText.parseRequest(bytes) else {
            Issue.record("not read as a signal")
            return
        }
        let whole = try #require(JSONText.parse(bytes))
        #expect(JSONText.parse(Array(request.signal)) == whole["data"]?["signal"])
        #expect(request.room == "r" && request.to == "p")
        #expect(request.id == whole["id"])
        // simdjson's reader, the relay's first try, reads exactly the same.
        let fast = try #require(SignalReader().read(bytes), "the fast reader takes it too")
        #expect(fast.id == request.id && fast.room == request.room && fast.to == request.to && fast.signal == request.signal)
    }

    @Test(arguments: [
        #"{"type":"signal","id":1,"data":{"room":"r","to":"p","sign\u0061l":{"a":1}}}"#,  // a key spelt with an escape
        #"{"type":"signal","id":1,"data":{"room":"r","to":5,"signal":{}}}"#,  // wrong types: the ordinary path words the error
        #"{"type":"signal","id":1,"data":{"room":"r","to":"p"}}"#,
        #"{"type":"sig","id":1,"data":{"room":"r","to":"p","signal":{}}}"#,
        #"{"type":"signal","type":"data","id":1,"data":{"room":"r","to":"p","signal":{}}}"#,
        #"{"type":"signal","id":1,"data":{"room":"r","to":"p","signal":{}}"#,  // not JSON: one brace short
    ])
    func whatTheScanCannotPlaceGoesTheOrdinaryWay(text: String) {
        let bytes = Array(text.utf8)
        #expect(SignalReader().read(bytes) == nil, "the fast reader leaves it to jansson")
        switch JSONText.parseRequest(bytes, reader: SignalReader()) {
        case .signal?: Issue.record("\(text) was taken as a signal")
        case .value?: break
        case nil: #expect(JSONText.parse(bytes) == nil, "nil only for what jansson refuses")
        }
    }

    @Test func quotedStringsAreWhatJSONDecoderReadsBack() throws {
        for text in ["plain", "quote \" and \\ backslash", "tab\tline\nreturn\r", "\u{01}\u{1f}", "é😀/slash"] {
            var quoted: [UInt8] = []
            JSONText.appendQuoted(text, to: &quoted)
            let decoded = try JSONDecoder().decode(String.self, from: Data(quoted))
            #expect(decoded == text)
        }
    }

    /// `serialize(_:)`, the writer of stored call records and push payloads, writes what
    /// Foundation's decoder reads back as the same value: floating-point numbers included (their
    /// shortest form; an integral one, `1.0`, reads back as an integer on both readers, as
    /// before), keys in order, a non-finite number as null.
    @Test func aValueIsWrittenAsJSONDecoderReadsItBack() throws {
        let value: JSONValue = [
            "sdp": "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n", "path": "a/b", "unicode": "é中😀\u{0}\u{1f}\"\\",
            "list": [1, -2, true, false, .null, [], [:], .double(0.1), .double(-2.5e-7), .double(1e300)],
            "nested": ["deeper": ["n": .int(Int64.min), "m": .int(Int64.max)]],
        ]
        let bytes = JSONText.serialize(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) == value)
        #expect(JSONText.parse(bytes) == value)
        #expect(JSONText.string(["b": 1, "a": 2, "c": ["z": 0, "y": 1]]) == #"{"a":2,"b":1,"c":{"y":1,"z":0}}"#)
        #expect(JSONText.string([.double(.nan), .double(.infinity), .double(1)]) == "[null,null,1.0]")
        #expect(JSONText.string(CallMedia.room("call-1").json) == String(decoding: try JSONEncoder.sorted.encode(CallMedia.room("call-1")), as: UTF8.self))
        let external = CallMedia.external(["provider": "skyway", "room": "x/y"])
        #expect(try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(external)) == external.json, "the same as Codable writes")
    }
}

extension JSONEncoder {
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
