import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardPush

/// The server's parsers of outside input, callable with raw bytes: what `make fuzz` drives
/// with libFuzzer and what the regression inputs under `fuzz/regressions/` replay in
/// `make test`. Each runs the same code the server runs on a request, and returns whether the
/// input was accepted (a refusal is a normal outcome; only a crash or a hang is a finding).
public enum FuzzEntryPoints {
    /// A WebSocket message: the envelope, then every request body the server decodes, with the
    /// checks it applies before acting (room names, call requests).
    @discardableResult
    public static func webSocketMessage(_ bytes: [UInt8]) -> Bool {
        // The relay's splice: the bytes it keeps for a signal are exactly the member jansson read.
        if case .signal(let signal)? = JSONText.parseRequest(bytes) {
            precondition(JSONText.parse(Array(signal.signal)) == JSONText.parse(bytes)?["data"]?["signal"], "a spliced signal differs")
        }
        // The fast reader of signals (simdjson) and jansson's path agree on every signal it reads.
        if let fast = SignalReader().read(bytes) {
            guard case .signal(let slow)? = JSONText.parseRequest(bytes) else { preconditionFailure("simdjson read a signal jansson does not") }
            precondition(fast.id == slow.id && fast.room == slow.room && fast.to == slow.to && fast.signal == slow.signal, "the readers differ")
        }
        guard case .success(let request) = MessageCodec.parseRequest(bytes) else { return false }
        // Each body decoded as the server decodes it (from the value read), and by Foundation's
        // JSONDecoder from that value written out again: the decoders must agree. (Not from the
        // input itself: where a member is named twice, JSONDecoder takes the first, and every
        // reader of the server the last.)
        let written = Data(JSONText.serialize(.object(request.object)))
        func decoded<T: Decodable & Equatable>(_ type: T.Type) -> T? {
            let fromValue: T? = try? MessageCodec.data(of: request.object)
            let fromBytes = try? JSONDecoder().decode(RequestData<T>.self, from: written).data
            precondition(fromValue == fromBytes, "JSONValueDecoder and JSONDecoder differ on a \(T.self)")
            return fromValue
        }
        var accepted = false
        if let join = decoded(RoomJoinRequest.self) {
            accepted = (try? Hub.validateRoomName(join.room)) != nil
        }
        if decoded(RoomLeaveRequest.self) != nil { accepted = true }
        if decoded(RoomMetadataRequest.self) != nil { accepted = true }
        if decoded(CallActionRequest.self) != nil { accepted = true }
        if decoded(CallHoldRequest.self) != nil { accepted = true }
        if let call = decoded(CallCreateRequest.self) {
            accepted = (try? Hub.checkCallRequest(call, caller: "fuzz", limits: ServerConfiguration.Limits())) != nil
        }
        // What the server writes back: the parsed object, serialized again.
        _ = JSONText.serialize(members: request.object.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        return accepted
    }

    /// An access token, as the `access_token` query or `Authorization: Bearer` value; and the
    /// input as a token's claims, validly signed, to reach the claim checks.
    @discardableResult
    public static func accessToken(_ bytes: [UInt8]) -> Bool {
        // As the server has it: a leeway and a lifetime limit, so that their arithmetic runs too.
        let verifier = AccessTokenVerifier(leewaySeconds: 30, maxLifetimeSeconds: 7 * 24 * 3600)
        let secret = "fuzzing-secret"
        let asToken = (try? verifier.verify(String(decoding: bytes, as: UTF8.self), secretFor: { _ in secret })) != nil
        let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        let input = header + "." + Base64URL.encode(bytes)
        let signed = input + "." + AccessTokenVerifier.signature(input: input, key: Array(secret.utf8))
        let asClaims = (try? verifier.verify(signed, secretFor: { _ in secret })) != nil
        return asToken || asClaims
    }

    /// A `PUT /v1/devices/{id}` body.
    @discardableResult
    public static func deviceRegistration(_ bytes: [UInt8]) -> Bool {
        (try? Gateway.checkDeviceRegistration(bytes)) != nil
    }

    /// A `POST /v1/calls` body (the same request as `call.create` over the WebSocket).
    @discardableResult
    public static func callCreation(_ bytes: [UInt8]) -> Bool {
        guard let request = try? JSONDecoder().decode(CallCreateRequest.self, from: Data(bytes)) else { return false }
        return (try? Hub.checkCallRequest(request, caller: "fuzz", limits: ServerConfiguration.Limits())) != nil
    }

    /// An APNs response: the first byte picks the status, the rest is the body.
    @discardableResult
    public static func apnsResponse(_ bytes: [UInt8]) -> Bool {
        let statuses = [200, 400, 403, 404, 405, 410, 413, 429, 500, 503]
        let status = bytes.first.map { statuses[Int($0) % statuses.count] } ?? 200
        let response = HTTPClientResponse(status: status, headers: ["apns-id": "fuzz"], body: Array(bytes.dropFirst()))
        _ = APNsClient.reason(of: response)  // the reader under test, for every status
        return status == 200
    }
}

/// A request as Foundation's `JSONDecoder` reads it from the bytes (the fuzzer's reference).
private struct RequestData<T: Decodable>: Decodable {
    var data: T
}
