import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardPush

extension Gateway {
    // MARK: Calls

    /// `/v1/calls`, `/v1/calls/{id}`, `/v1/calls/{id}/{answer,decline,cancel,end,trace}`.
    func routeCalls(_ request: HTTPRequest) -> (String, RESTAnswer) {
        let parts = request.path.split(separator: "/").map(String.init)
        let (claims, app): (AccessTokenClaims, App)
        switch user(request) {
        case .failure(let error): return ("/v1/calls", .now(failure(error)))
        case .success(let found): (claims, app) = found
        }
        // The device acting (nil: not named; see docs/calls.md, "The call's room").
        let device = request.query["device_id"].flatMap { $0.isEmpty || $0.utf8.count > 128 ? nil : $0 }
        let admin = claims.grants.admin == true
        switch (request.method, parts.count) {
        case (.post, 2):
            var body: CallCreateRequest
            do { body = try decoder.decode(CallCreateRequest.self, from: Data(request.body)) } catch {
                return ("/v1/calls", .now(decodeFailure(request.body, error)))
            }
            if body.idempotencyKey == nil { body.idempotencyKey = request.headers["idempotency-key"] }
            let request = body
            return ("/v1/calls", answer(status: 201) { [hub] in hub.createCall(request, caller: claims, app: app, device: device, answer: $0) })
        case (.get, 2):
            let limit = request.query["limit"].map { Int($0) ?? 0 } ?? 50
            guard (1...200).contains(limit) else { return ("/v1/calls", .now(failure(ErrorBody(.badRequest, "limit must be 1 to 200")))) }
            let before: Int64?
            if let text = request.query["before"] {
                guard let value = Int64(text) else {
                    return ("/v1/calls", .now(failure(ErrorBody(.badRequest, "before is the created_at (milliseconds) of the last entry seen"))))
                }
                before = value
            } else {
                before = nil
            }
            return ("/v1/calls", .later { [self] reply in
                hub.callHistory(app: app, identity: claims.sub, limit: limit, before: before) { [self] result in
                    switch result {
                    case .success(let page):
                        var body: [String: JSONValue] = ["calls": .array(page.entries)]
                        if page.more, let last = page.entries.last?["created_at"] { body["next_before"] = last }
                        reply(encoded(200, JSONValue.object(body)))
                    case .failure(let error):
                        logger.error("history read failed", ["app": app.id, "error": "\(error)"])
                        reply(failure(.storeRead(error, reading: "the history")))
                    }
                }
            })
        case (.get, 3):
            let callID = parts[2]
            return ("/v1/calls/{id}", answer(status: 200) { [hub] in hub.callSummary(id: callID, identity: claims.sub, app: app, admin: admin, answer: $0) })
        case (.get, 4) where parts[3] == "trace":
            let callID = parts[2]
            return ("/v1/calls/{id}/trace", .later { [self] reply in
                hub.callSummary(id: callID, identity: claims.sub, app: app, admin: admin) { [self] result in
                    if case .failure(let error) = result { return reply(failure(error)) }
                    // After the summary: every trace event recorded until now is in the store.
                    hub.withStore({ try $0.trace(callID: callID) }) { [self] result in
                        switch result {
                        case .success(let entries):
                            reply(encoded(200, ["call_id": JSONValue.string(callID), "trace": .array(entries)]))
                        case .failure(let error):
                            logger.error("trace read failed", ["call": callID, "error": "\(error)"])
                            reply(failure(.storeRead(error, reading: "the trace")))
                        }
                    }
                }
            })
        case (.post, 4) where ["answer", "decline", "cancel", "end"].contains(parts[3]):
            var reason: String?
            var filter: CallFilter?
            if !request.body.isEmpty, let object = (try? decoder.decode(JSONValue.self, from: Data(request.body)))?.objectValue {
                reason = object["reason"]?.stringValue
                filter = object["filter"]?.stringValue.flatMap(CallFilter.init(rawValue:))
            }
            let action = CallActionRequest(callID: parts[2], reason: reason, filter: filter)
            let type = "call." + parts[3]
            return ("/v1/calls/{id}/" + parts[3], answer(status: 200) { [hub] in
                hub.callAction(type, action, identity: claims.sub, app: app, device: device, answer: $0)
            })
        case (.post, 4) where parts[3] == "hold":
            struct Body: Decodable {
                var onHold: Bool
                enum CodingKeys: String, CodingKey { case onHold = "on_hold" }
            }
            let body: Body
            do { body = try decoder.decode(Body.self, from: Data(request.body)) } catch {
                return ("/v1/calls/{id}/hold", .now(decodeFailure(request.body, error)))
            }
            let hold = CallHoldRequest(callID: parts[2], onHold: body.onHold)
            return ("/v1/calls/{id}/hold", answer(status: 200) { [hub] in hub.holdCall(hold, identity: claims.sub, app: app, device: device, answer: $0) })
        default:
            return ("/v1/calls/*", .now(failure(ErrorBody(.notFound, "no such endpoint: \(request.method.rawValue) \(request.path)"))))
        }
    }

    /// The answer of a hub operation that answers through a closure: `status` and the call on
    /// success, the error with its own status otherwise.
    private func answer(
        status: Int, _ operation: @escaping (@escaping (Result<JSONValue, ErrorBody>) -> Void) -> Void
    ) -> RESTAnswer {
        .later { [self] reply in
            operation { [self] result in
                switch result {
                case .success(let value): reply(encoded(status, value))
                case .failure(let error): reply(failure(error))
                }
            }
        }
    }
}
