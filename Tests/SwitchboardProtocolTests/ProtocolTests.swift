import Foundation
import SwitchboardProtocol
import Testing

@Suite(.timeLimit(.minutes(3))) struct ProtocolTests {
    @Test(arguments: [
        #"null"#, #"true"#, #"42"#, #"-7"#, #"1.5"#, #""text""#, #"[1,"a",null]"#, #"{"a":{"b":[true]}}"#,
    ])
    func jsonValuesRoundTrip(text: String) throws {
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        let again = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(value))
        #expect(value == again)
    }

    @Test func eachKindDecodesAsItself() throws {
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(#"[true,false,0,1,-2,1.5,"1","",null,[],{}]"#.utf8))
        #expect(value == .array([.bool(true), .bool(false), .int(0), .int(1), .int(-2), .double(1.5), .string("1"), .string(""), .null, .array([]), .object([:])]))
    }

    @Test func integersStayIntegers() throws {
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(#"{"id":9007199254740993}"#.utf8))
        #expect(value["id"] == .int(9_007_199_254_740_993))
    }

    @Test func envelopeCarriesRepliesAndEvents() throws {
        let ok = Envelope.ok(id: "r1", data: ["x": 1])
        let decoded = try JSONDecoder().decode(Envelope.self, from: JSONEncoder().encode(ok))
        #expect(decoded.type == "ok")
        #expect(decoded.id == "r1")
        #expect(decoded.data?["x"] == 1)
        let error = Envelope.error(id: 3, ErrorBody(.unknownType, "nope"))
        let text = String(decoding: try JSONEncoder().encode(error), as: UTF8.self)
        #expect(text.contains(#""code":"unknown_type""#))
    }

    @Test(arguments: [
        (Grants(room: "team-1", roomJoin: true), "team-1", true),
        (Grants(room: "team-1", roomJoin: true), "team-12", false),
        (Grants(room: "team-*", roomJoin: true), "team-12", true),
        (Grants(room: "team-*", roomJoin: true), "other", false),
        (Grants(room: "team-1", roomJoin: false), "team-1", false),
        (Grants(room: nil, roomJoin: true), "team-1", false),
        (Grants(admin: true), "anything", true),
    ])
    func roomGrantsMatchExactNamesAndPrefixes(grants: Grants, room: String, allowed: Bool) {
        #expect(grants.allowsJoining(room: room) == allowed)
    }

    @Test func errorCodesAreStableStrings() {
        #expect(ErrorCode.malformedJSON.rawValue == "malformed_json")
        #expect(ErrorCode.tokenExpired.rawValue == "token_expired")
        #expect(Set(ErrorCode.allCases.map(\.rawValue)).count == ErrorCode.allCases.count)
    }
}
