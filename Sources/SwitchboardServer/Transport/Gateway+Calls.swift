import Foundation
import SwitchboardProtocol
import SwitchboardSystem

extension Gateway {
    // MARK: Calls

    /// The device a call request acts from: `device_id` in the query, nil when not named (see
    /// docs/calls.md, "The call's room").
    private func actingDevice(_ rest: RESTRequest) throws(ErrorBody) -> String? {
        try Self.deviceParameter(rest.http.query["device_id"])
    }

    /// A `device_id` query parameter: absent, or 1 to 128 bytes of text.
    static func deviceParameter(_ value: String?) throws(ErrorBody) -> String? {
        try FieldLimits.check(value, field: "device_id", limit: FieldLimits.deviceID)
        return value
    }

    /// `POST /v1/calls`: starts a call; an `Idempotency-Key` header counts as the body's key.
    func createCall(_ rest: RESTRequest, _ user: UserCredentials) throws(ErrorBody) -> RESTAnswer {
        var request = try decodeBody(rest, as: CallCreateRequest.self)
        if request.idempotencyKey == nil { request.idempotencyKey = rest.http.headers["idempotency-key"] }
        let device = try actingDevice(rest)
        return answer(status: 201) { [hub, request] in hub.createCall(request, caller: user.claims, app: user.app, device: device, answer: $0) }
    }

    /// `GET /v1/calls?limit=&before=`: a page of the user's calls, newest first.
    func callHistory(_ rest: RESTRequest, _ user: UserCredentials) throws(ErrorBody) -> RESTAnswer {
        let limit = rest.http.query["limit"].map { Int($0) ?? 0 } ?? 50
        guard (1...200).contains(limit) else { throw ErrorBody(.badRequest, "limit must be 1 to 200") }
        var before: Int64?
        if let text = rest.http.query["before"] {
            guard let value = Int64(text) else { throw ErrorBody(.badRequest, "before is the created_at (milliseconds) of the last entry seen") }
            before = value
        }
        return .later { [self] reply in
            hub.callHistory(app: user.app, identity: user.identity, limit: limit, before: before) { [self] result in
                switch result {
                case .success(let page):
                    var body: [String: JSONValue] = ["calls": .array(page.entries)]
                    if page.more, let last = page.entries.last?["created_at"] { body["next_before"] = last }
                    reply(encoded(200, JSONValue.object(body)))
                case .failure(let error):
                    logger.error("history read failed", ["app": user.app.id, "error": "\(error)"])
                    reply(failure(.storeRead(error, reading: "the history")))
                }
            }
        }
    }

    /// `GET /v1/calls/{call_id}`: the call as a participant (or an admin) sees it.
    func callSummary(_ rest: RESTRequest, _ user: UserCredentials) -> RESTAnswer {
        let callID = rest["call_id"]
        return answer(status: 200) { [hub] in
            hub.callSummary(id: callID, identity: user.identity, app: user.app, admin: user.claims.grants.admin == true, answer: $0)
        }
    }

    /// `GET /v1/calls/{call_id}/trace`: every step of the call's delivery, for a participant.
    func callTrace(_ rest: RESTRequest, _ user: UserCredentials) -> RESTAnswer {
        let callID = rest["call_id"]
        return .later { [self] reply in
            hub.callSummary(id: callID, identity: user.identity, app: user.app, admin: user.claims.grants.admin == true) { [self] result in
                if case .failure(let error) = result { return reply(failure(error)) }
                // After the summary: every trace event recorded until now is in the store.
                hub.withStore(for: user.app.id, { try $0.trace(callID: callID) }) { [self] result in
                    switch result {
                    case .success(let entries):
                        let shown = user.claims.grants.admin == true ? entries : entries.map { Self.privateFilter($0, reader: user.identity) }
                        reply(encoded(200, ["call_id": JSONValue.string(callID), "trace": .array(shown)]))
                    case .failure(let error):
                        logger.error("trace read failed", ["call": callID, "error": "\(error)"])
                        reply(failure(.storeRead(error, reading: "the trace")))
                    }
                }
            }
        }
    }

    /// A trace entry as `reader` sees it: why another participant's phone did not show the
    /// call (`filter`: Do Not Disturb, a block list) is that participant's own, and admins'.
    static func privateFilter(_ entry: JSONValue, reader: String) -> JSONValue {
        guard case .object(var fields) = entry, fields["user"]?.stringValue != reader, fields["filter"] != nil else { return entry }
        fields.removeValue(forKey: "filter")
        return .object(fields)
    }

    /// `POST /v1/calls/{call_id}/{answer,decline,cancel,end}`, with an optional body
    /// `{"reason": ..., "filter": ...}`: the WebSocket's `call.*` actions.
    func callAction(_ type: String, _ rest: RESTRequest, _ user: UserCredentials) throws(ErrorBody) -> RESTAnswer {
        struct Body: Decodable {
            var reason: String?
            var filter: CallFilter?
        }
        let body = rest.http.body.isEmpty ? Body() : try decodeBody(rest, as: Body.self)
        let action = CallActionRequest(callID: rest["call_id"], reason: body.reason, filter: body.filter)
        let device = try actingDevice(rest)
        return answer(status: 200) { [hub] in hub.callAction(type, action, claims: user.claims, app: user.app, device: device, answer: $0) }
    }

    /// `POST /v1/calls/{call_id}/hold {"on_hold": true}`.
    func holdCall(_ rest: RESTRequest, _ user: UserCredentials) throws(ErrorBody) -> RESTAnswer {
        struct Body: Decodable {
            var onHold: Bool
            enum CodingKeys: String, CodingKey { case onHold = "on_hold" }
        }
        let hold = CallHoldRequest(callID: rest["call_id"], onHold: try decodeBody(rest, as: Body.self).onHold)
        let device = try actingDevice(rest)
        return answer(status: 200) { [hub] in hub.holdCall(hold, claims: user.claims, app: user.app, device: device, answer: $0) }
    }
}
