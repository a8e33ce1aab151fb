import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardPush

extension Gateway {
    // MARK: Calls

    /// `/v1/calls`, `/v1/calls/{id}`, `/v1/calls/{id}/{answer,decline,cancel,end,trace}`.
    func routeCalls(_ request: HTTPRequest) -> (String, HTTPResponse) {
        let parts = request.path.split(separator: "/").map(String.init)
        let (claims, app): (AccessTokenClaims, App)
        switch user(request) {
        case .failure(let error): return ("/v1/calls", failure(error))
        case .success(let found): (claims, app) = found
        }
        // The device acting (nil: not named; see docs/calls.md, "The call's room").
        let device = request.query["device_id"].flatMap { $0.isEmpty || $0.utf8.count > 128 ? nil : $0 }
        switch (request.method, parts.count) {
        case (.post, 2):
            var body: CallCreateRequest
            do { body = try decoder.decode(CallCreateRequest.self, from: Data(request.body)) } catch {
                return ("/v1/calls", decodeFailure(request.body, error))
            }
            if body.idempotencyKey == nil { body.idempotencyKey = request.headers["idempotency-key"] }
            do throws(ErrorBody) {
                return ("/v1/calls", encoded(201, try hub.createCall(body, caller: claims, app: app, device: device)))
            } catch { return ("/v1/calls", failure(error)) }
        case (.get, 2):
            let limit = request.query["limit"].map { Int($0) ?? 0 } ?? 50
            guard (1...200).contains(limit) else { return ("/v1/calls", failure(ErrorBody(.badRequest, "limit must be 1 to 200"))) }
            let before: Int64?
            if let text = request.query["before"] {
                guard let value = Int64(text) else {
                    return ("/v1/calls", failure(ErrorBody(.badRequest, "before is the created_at (milliseconds) of the last entry seen")))
                }
                before = value
            } else {
                before = nil
            }
            let page: (entries: [JSONValue], more: Bool)
            do { page = try hub.callHistory(app: app, identity: claims.sub, limit: limit, before: before) } catch {
                logger.error("history read failed", ["app": app.id, "error": "\(error)"])
                return ("/v1/calls", failure(ErrorBody(.internal, "could not read the history")))
            }
            var body: [String: JSONValue] = ["calls": .array(page.entries)]
            if page.more, let last = page.entries.last?["created_at"] { body["next_before"] = last }
            return ("/v1/calls", encoded(200, JSONValue.object(body)))
        case (.get, 3):
            do throws(ErrorBody) {
                return ("/v1/calls/{id}", encoded(200, try hub.callSummary(id: parts[2], identity: claims.sub, app: app, admin: claims.grants.admin == true)))
            } catch { return ("/v1/calls/{id}", failure(error)) }
        case (.get, 4) where parts[3] == "trace":
            do throws(ErrorBody) {
                _ = try hub.callSummary(id: parts[2], identity: claims.sub, app: app, admin: claims.grants.admin == true)
            } catch { return ("/v1/calls/{id}/trace", failure(error)) }
            hub.store.flush()
            let entries = (try? hub.store.trace(callID: parts[2])) ?? []
            return ("/v1/calls/{id}/trace", encoded(200, ["call_id": JSONValue.string(parts[2]), "trace": .array(entries)]))
        case (.post, 4) where ["answer", "decline", "cancel", "end"].contains(parts[3]):
            var reason: String?
            var filter: CallFilter?
            if !request.body.isEmpty, let object = (try? decoder.decode(JSONValue.self, from: Data(request.body)))?.objectValue {
                reason = object["reason"]?.stringValue
                filter = object["filter"]?.stringValue.flatMap(CallFilter.init(rawValue:))
            }
            do throws(ErrorBody) {
                let action = CallActionRequest(callID: parts[2], reason: reason, filter: filter)
                let summary = try hub.callAction("call." + parts[3], action, identity: claims.sub, app: app, device: device)
                return ("/v1/calls/{id}/" + parts[3], encoded(200, summary))
            } catch { return ("/v1/calls/{id}/" + parts[3], failure(error)) }
        case (.post, 4) where parts[3] == "hold":
            struct Body: Decodable {
                var onHold: Bool
                enum CodingKeys: String, CodingKey { case onHold = "on_hold" }
            }
            let body: Body
            do { body = try decoder.decode(Body.self, from: Data(request.body)) } catch {
                return ("/v1/calls/{id}/hold", decodeFailure(request.body, error))
            }
            do throws(ErrorBody) {
                let summary = try hub.holdCall(CallHoldRequest(callID: parts[2], onHold: body.onHold), identity: claims.sub, app: app, device: device)
                return ("/v1/calls/{id}/hold", encoded(200, summary))
            } catch { return ("/v1/calls/{id}/hold", failure(error)) }
        default:
            return ("/v1/calls/*", failure(ErrorBody(.notFound, "no such endpoint: \(request.method.rawValue) \(request.path)")))
        }
    }
}
