import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardPush

extension Gateway {
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
        for token in [body.voipToken, body.apnsToken].compactMap({ $0 }) where !PushNotification.isDeviceToken(token) {
            throw ErrorBody(.badRequest, "a device token is 64 hexadecimal characters")
        }
        guard let environment = APNsEnvironment(rawValue: body.environment ?? "production") else {
            throw ErrorBody(.badRequest, "environment is sandbox or production")
        }
        return (body, environment)
    }

    func routeDevices(_ request: HTTPRequest) -> (String, RESTAnswer) {
        let parts = request.path.split(separator: "/").map(String.init)
        let (claims, app): (AccessTokenClaims, App)
        switch user(request) {
        case .failure(let error): return ("/v1/devices", .now(failure(error)))
        case .success(let found): (claims, app) = found
        }
        let (appID, userID) = (app.id, claims.sub)
        switch (request.method, parts.count) {
        case (.get, 2):
            return ("/v1/devices", fromStore({ try $0.devices(appID: appID, userID: userID) }) { [self] result in
                switch result {
                case .success(let devices): return encoded(200, ["devices": JSONValue.array(devices.map(\.redacted))])
                case .failure(let error):
                    logger.error("device read failed", ["app": appID, "error": "\(error)"])
                    return failure(.storeRead(error, reading: "the devices"))
                }
            })
        case (.put, 3):
            let deviceID = parts[2]
            guard deviceID.utf8.count <= 128, !deviceID.isEmpty else {
                return ("/v1/devices/{id}", .now(failure(ErrorBody(.badRequest, "device id is 1-128 bytes"))))
            }
            let body: DeviceRegistration, environment: APNsEnvironment
            do throws(ErrorBody) {
                (body, environment) = try Self.checkDeviceRegistration(request.body, decoder: decoder)
            } catch {
                return ("/v1/devices/{id}", .now(failure(error)))
            }
            let device = Device(
                appID: app.id, userID: claims.sub, deviceID: deviceID, platform: body.platform, voipToken: body.voipToken?.lowercased(),
                apnsToken: body.apnsToken?.lowercased(), environment: environment, bundleID: body.bundleID ?? app.bundleID,
                callKitEnabled: body.callKitEnabled ?? (body.platform == "ios"), appVersion: body.appVersion,
                updatedAt: Int64(Date().timeIntervalSince1970 * 1000))
            let limit = configuration.limits.maxDevicesPerUser
            return ("/v1/devices/{id}", fromStore({ try $0.register(device, limit: limit) }) { [self] result in
                switch result {
                case .success:
                    logger.info("device registered", ["app": appID, "identity": userID, "device": deviceID, "platform": device.platform])
                    return encoded(200, device.redacted)
                case .failure(let full as DeviceLimitReached):
                    return failure(ErrorBody(.conflict, "a user may register at most \(full.limit) devices; remove one first"))
                case .failure(let error):
                    return storeFailure(error, saving: "the device")
                }
            })
        case (.delete, 3):
            let deviceID = parts[2]
            return ("/v1/devices/{id}", fromStore({ try $0.removeDevice(appID: appID, userID: userID, deviceID: deviceID) }) { [self] result in
                switch result {
                case .success(let removed): return removed ? HTTPResponse(status: 204) : failure(ErrorBody(.notFound, "no such device"))
                case .failure(let error): return storeFailure(error, saving: "the removal")
                }
            })
        default:
            return ("/v1/devices", .now(methodNotAllowed(allowed: parts.count == 2 ? "GET" : "PUT, DELETE")))
        }
    }
}
