import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import Testing

@testable import SwitchboardServer

/// The hub decodes a request's `data` from the value jansson read (`JSONValueDecoder`), not
/// from the bytes again. Every body must come out as Foundation's `JSONDecoder` makes it from
/// the bytes: the same value, or a refusal with the same words. One refusal says more: for a
/// number that is not the integer a field needs, `JSONDecoder`'s error has lost the field's
/// path (`invalid value at ''`); `JSONValueDecoder` names it.
@Suite(.timeLimit(.minutes(3))) struct JSONValueDecoderTests {
    /// Request bodies, valid and not, for the request types the hub decodes this way.
    static let bodies: [String] = [
        // call.create
        #"{"callees":["bob"]}"#,
        #"{"callees":["bob","carol"],"video":true,"caller_name":"Alice","handle":"+81 3","ring_timeout_seconds":30,"busy_policy":"ring","idempotency_key":"k1"}"#,
        #"{"callees":["bob"],"media":{"type":"external","descriptor":{"sfu":"x","n":[1,2.5,null]}},"metadata":{"a":[true,{"b":null}]}}"#,
        #"{"callees":["bob"],"media":{"type":"room"}}"#,
        #"{"callees":["bob"],"media":{"type":"carrier-pigeon"}}"#,
        #"{"callees":["bob"],"ring_timeout_seconds":30.0}"#,
        #"{"callees":["bob"],"ring_timeout_seconds":30.5}"#,
        #"{"callees":["bob"],"ring_timeout_seconds":1e2}"#,
        #"{"callees":["bob"],"ring_timeout_seconds":"30"}"#,
        #"{"callees":["bob"],"ring_timeout_seconds":null}"#,
        #"{"callees":["bob"],"ring_timeout_seconds":99999999999999999999}"#,
        #"{"callees":["bob"],"video":1}"#,
        #"{"callees":["bob"],"busy_policy":"maybe"}"#,
        #"{"callees":"bob"}"#,
        #"{"callees":["bob",7]}"#,
        #"{"callees":["bob",null]}"#,
        #"{"callees":null}"#,
        #"{"video":true}"#,
        #"{}"#,
        #"[]"#,
        #"null"#,
        #""callees""#,
        // call.answer and the others, call.hold
        #"{"call_id":"c1"}"#,
        #"{"call_id":"c1","reason":"filtered","filter":{"kind":"blocked"}}"#,
        #"{"call_id":"c1","reason":7}"#,
        #"{"call_id":"c1","on_hold":true}"#,
        #"{"call_id":"c1","on_hold":"yes"}"#,
        // room.join, room.leave, room.set_metadata
        #"{"room":"r1"}"#,
        #"{"room":"r1","metadata":{"topic":"x"},"max_participants":4}"#,
        #"{"room":"r1","max_participants":-1}"#,
        #"{"room":["r1"]}"#,
        #"{"room":"r1","metadata":null}"#,
    ]

    @Test(arguments: bodies)
    func decodesAsJSONDecoderDoesFromTheBytes(body: String) throws {
        let message = Array(#"{"type":"x","id":1,"data":\#(body)}"#.utf8)
        let object = try #require(try? MessageCodec.parseRequest(message).get().object)
        agree(CallCreateRequest.self, object, message)
        agree(CallActionRequest.self, object, message)
        agree(CallHoldRequest.self, object, message)
        agree(RoomJoinRequest.self, object, message)
        agree(RoomLeaveRequest.self, object, message)
        agree(RoomMetadataRequest.self, object, message)
    }

    /// Every reader of a message (the envelope's, the relay's, this one) takes the last of a
    /// member named twice; `JSONDecoder` from the bytes took the first for `data`, so the
    /// envelope and the body of one message could disagree.
    @Test func aMemberNamedTwiceCountsOnceTheLast() throws {
        let message = Array(#"{"type":"call.create","id":1,"data":7,"data":{"callees":["carol"],"callees":["bob"]}}"#.utf8)
        let object = try #require(try? MessageCodec.parseRequest(message).get().object)
        let request: CallCreateRequest = try MessageCodec.data(of: object)
        #expect(request == CallCreateRequest(callees: ["bob"]))
    }

    @Test func aMessageWithoutDataIsRefusedAsBefore() throws {
        let message = Array(#"{"type":"call.create","id":1}"#.utf8)
        let object = try #require(try? MessageCodec.parseRequest(message).get().object)
        agree(CallCreateRequest.self, object, message)
    }

    private struct RequestData<T: Decodable>: Decodable {
        var data: T
    }

    private func agree<T: Decodable & Equatable>(_ type: T.Type, _ object: [String: JSONValue], _ message: [UInt8]) {
        let fromBytes = Result { try JSONDecoder().decode(RequestData<T>.self, from: Data(message)).data }
            .mapError { ErrorBody(.badRequest, "invalid data: \(Gateway.describe($0))") }
        let fromValue = Result { () throws(ErrorBody) -> T in try MessageCodec.data(of: object) }
        switch (fromBytes, fromValue) {
        case (.success(let expected), .success(let decoded)):
            #expect(decoded == expected, "\(T.self) from \(String(decoding: message, as: UTF8.self))")
        case (.failure(let expected), .failure(let refused)):
            if expected.message == "invalid data: invalid value at ''" {
                #expect(refused.message.hasPrefix("invalid data: invalid value at 'data."), "\(T.self) from \(String(decoding: message, as: UTF8.self))")
            } else {
                #expect(refused.message == expected.message, "\(T.self) from \(String(decoding: message, as: UTF8.self))")
            }
            #expect(refused.code == expected.code)
        default:
            Issue.record("\(T.self) from \(String(decoding: message, as: UTF8.self)): JSONDecoder \(fromBytes), JSONValueDecoder \(fromValue)")
        }
    }
}
