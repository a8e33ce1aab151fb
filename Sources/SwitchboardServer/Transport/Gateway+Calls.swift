import Foundation
import SwitchboardProtocol
import SwitchboardSystem

extension Gateway {
    /// A user's token, for endpoints that act as that user.
    private func user(_ request: HTTPRequest) -> Result<(AccessTokenClaims, App), ErrorBody> {
        switch authenticate(request) {
        case .failure(let error): return .failure(error)
        case .success(.app): return .failure(ErrorBody(.forbidden, "this endpoint acts for a user: send a user's access token"))
        case .success(.user(let claims, let app)): return .success((claims, app))
        }
    }

    private func status(for error: ErrorBody) -> Int {
        switch error.code {
        case .unauthorized, .tokenExpired: 401
        case .forbidden: 403
        case .notFound: 404
        case .conflict: 409
        case .payloadTooLarge: 413
        case .rateLimited: 429
        case .internal: 500
        case .unavailable: 503
        default: 400
        }
    }

    private func fail(_ error: ErrorBody) -> HTTPResponse { failure(status(for: error), error) }

    /// A write the store refused: 503 `unavailable` when the storage refuses writes (disk full,
    /// read-only; retry later), 500 `internal` for anything else.
    private func storeFailure(_ error: any Error, saving what: String) -> HTTPResponse {
        if let problem = (error as? SQLiteError)?.storageProblem {
            return fail(ErrorBody(.unavailable, "storage unavailable (\(problem)): \(what) could not be saved; retry later"))
        }
        logger.error("store write failed", ["what": what, "error": "\(error)"])
        return fail(ErrorBody(.internal, "could not save \(what)"))
    }

    // MARK: Devices

    /// `/v1/devices` and `/v1/devices/{device_id}`.
    /// What `PUT /v1/devices/{id}` accepts: a registration with a known platform, device
    /// tokens of 64 hexadecimal characters and an APNs environment.
    static func checkDeviceRegistration(
        _ bytes: [UInt8], decoder: JSONDecoder = JSONDecoder()
    ) throws(ErrorBody) -> (DeviceRegistration, APNsEnvironment) {
        let body: DeviceRegistration
        do { body = try decoder.decode(DeviceRegistration.self, from: Data(bytes)) } catch {
            throw decodeError(bytes, error, decoder: decoder)
        }
        guard ["ios", "android", "web"].contains(body.platform) else {
            throw ErrorBody(.badRequest, "platform is ios, android or web")
        }
        for token in [body.voipToken, body.apnsToken].compactMap({ $0 }) where token.utf8.count != 64 || !token.allSatisfy(\.isHexDigit) {
            throw ErrorBody(.badRequest, "a device token is 64 hexadecimal characters")
        }
        guard let environment = APNsEnvironment(rawValue: body.environment ?? "production") else {
            throw ErrorBody(.badRequest, "environment is sandbox or production")
        }
        return (body, environment)
    }

    func routeDevices(_ request: HTTPRequest) -> (String, HTTPResponse) {
        let parts = request.path.split(separator: "/").map(String.init)
        guard case .success(let (claims, app)) = user(request) else {
            if case .failure(let error) = user(request) { return ("/v1/devices", fail(error)) }
            return ("/v1/devices", fail(ErrorBody(.unauthorized, "no credentials")))
        }
        switch (request.method, parts.count) {
        case (.get, 2):
            let devices = (try? hub.store.devices(appID: app.id, userID: claims.sub)) ?? []
            return ("/v1/devices", encoded(200, ["devices": JSONValue.array(devices.map(\.redacted))]))
        case (.put, 3):
            let deviceID = parts[2]
            guard deviceID.utf8.count <= 128, !deviceID.isEmpty else { return ("/v1/devices/{id}", fail(ErrorBody(.badRequest, "device id is 1-128 bytes"))) }
            let body: DeviceRegistration, environment: APNsEnvironment
            do throws(ErrorBody) {
                (body, environment) = try Self.checkDeviceRegistration(request.body, decoder: decoder)
            } catch {
                return ("/v1/devices/{id}", fail(error))
            }
            let device = Device(
                appID: app.id, userID: claims.sub, deviceID: deviceID, platform: body.platform, voipToken: body.voipToken?.lowercased(),
                apnsToken: body.apnsToken?.lowercased(), environment: environment, bundleID: body.bundleID ?? app.bundleID,
                callKitEnabled: body.callKitEnabled ?? (body.platform == "ios"), appVersion: body.appVersion,
                updatedAt: Int64(Date().timeIntervalSince1970 * 1000))
            do { try hub.store.register(device, limit: configuration.limits.maxDevicesPerUser) } catch let full as DeviceLimitReached {
                return ("/v1/devices/{id}", fail(ErrorBody(.conflict, "a user may register at most \(full.limit) devices; remove one first")))
            } catch {
                return ("/v1/devices/{id}", storeFailure(error, saving: "the device"))
            }
            logger.info("device registered", ["app": app.id, "identity": claims.sub, "device": deviceID, "platform": body.platform])
            return ("/v1/devices/{id}", encoded(200, device.redacted))
        case (.delete, 3):
            let removed: Bool
            do { removed = try hub.store.removeDevice(appID: app.id, userID: claims.sub, deviceID: parts[2]) } catch {
                return ("/v1/devices/{id}", storeFailure(error, saving: "the removal"))
            }
            return ("/v1/devices/{id}", removed ? HTTPResponse(status: 204) : fail(ErrorBody(.notFound, "no such device")))
        default:
            return ("/v1/devices", methodNotAllowed(allowed: parts.count == 2 ? "GET" : "PUT, DELETE"))
        }
    }

    // MARK: Block lists

    func routeBlocked(_ request: HTTPRequest) -> (String, HTTPResponse) {
        let route = "/v1/users/me/blocked"
        let (claims, app): (AccessTokenClaims, App)
        switch user(request) {
        case .failure(let error): return (route, fail(error))
        case .success(let found): (claims, app) = found
        }
        switch request.method {
        case .get:
            return (route, encoded(200, ["identities": (try? hub.store.blocked(appID: app.id, userID: claims.sub)) ?? []]))
        case .put:
            struct Body: Decodable { var identities: [String] }
            let body: Body
            do { body = try decoder.decode(Body.self, from: Data(request.body)) } catch { return (route, decodeFailure(request.body, error)) }
            guard body.identities.count <= 10_000 else { return (route, fail(ErrorBody(.payloadTooLarge, "at most 10000 identities"))) }
            do { try hub.store.setBlocked(body.identities, appID: app.id, userID: claims.sub) } catch {
                return (route, storeFailure(error, saving: "the block list"))
            }
            return (route, HTTPResponse(status: 204))
        default:
            return (route, methodNotAllowed(allowed: "GET, PUT"))
        }
    }

    // MARK: Calls

    /// `/v1/calls`, `/v1/calls/{id}`, `/v1/calls/{id}/{answer,decline,cancel,end,trace}`.
    func routeCalls(_ request: HTTPRequest) -> (String, HTTPResponse) {
        let parts = request.path.split(separator: "/").map(String.init)
        let (claims, app): (AccessTokenClaims, App)
        switch user(request) {
        case .failure(let error): return ("/v1/calls", fail(error))
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
            } catch { return ("/v1/calls", fail(error)) }
        case (.get, 2):
            let limit = request.query["limit"].map { Int($0) ?? 0 } ?? 50
            guard (1...200).contains(limit) else { return ("/v1/calls", fail(ErrorBody(.badRequest, "limit must be 1 to 200"))) }
            let before: Int64?
            if let text = request.query["before"] {
                guard let value = Int64(text) else {
                    return ("/v1/calls", fail(ErrorBody(.badRequest, "before is the created_at (milliseconds) of the last entry seen")))
                }
                before = value
            } else {
                before = nil
            }
            let page: (entries: [JSONValue], more: Bool)
            do { page = try hub.callHistory(app: app, identity: claims.sub, limit: limit, before: before) } catch {
                logger.error("history read failed", ["app": app.id, "error": "\(error)"])
                return ("/v1/calls", fail(ErrorBody(.internal, "could not read the history")))
            }
            var body: [String: JSONValue] = ["calls": .array(page.entries)]
            if page.more, let last = page.entries.last?["created_at"] { body["next_before"] = last }
            return ("/v1/calls", encoded(200, JSONValue.object(body)))
        case (.get, 3):
            do throws(ErrorBody) {
                return ("/v1/calls/{id}", encoded(200, try hub.callSummary(id: parts[2], identity: claims.sub, app: app, admin: claims.grants.admin == true)))
            } catch { return ("/v1/calls/{id}", fail(error)) }
        case (.get, 4) where parts[3] == "trace":
            do throws(ErrorBody) {
                _ = try hub.callSummary(id: parts[2], identity: claims.sub, app: app, admin: claims.grants.admin == true)
            } catch { return ("/v1/calls/{id}/trace", fail(error)) }
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
            } catch { return ("/v1/calls/{id}/" + parts[3], fail(error)) }
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
            } catch { return ("/v1/calls/{id}/hold", fail(error)) }
        default:
            return ("/v1/calls/*", failure(404, ErrorBody(.notFound, "no such endpoint: \(request.method.rawValue) \(request.path)")))
        }
    }
}
