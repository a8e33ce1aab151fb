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
            if case .failure(let error) = user(request) { return ("/v1/devices", failure(error)) }
            return ("/v1/devices", failure(ErrorBody(.unauthorized, "no credentials")))
        }
        switch (request.method, parts.count) {
        case (.get, 2):
            let devices = (try? hub.store.devices(appID: app.id, userID: claims.sub)) ?? []
            return ("/v1/devices", encoded(200, ["devices": JSONValue.array(devices.map(\.redacted))]))
        case (.put, 3):
            let deviceID = parts[2]
            guard deviceID.utf8.count <= 128, !deviceID.isEmpty else { return ("/v1/devices/{id}", failure(ErrorBody(.badRequest, "device id is 1-128 bytes"))) }
            let body: DeviceRegistration, environment: APNsEnvironment
            do throws(ErrorBody) {
                (body, environment) = try Self.checkDeviceRegistration(request.body, decoder: decoder)
            } catch {
                return ("/v1/devices/{id}", failure(error))
            }
            let device = Device(
                appID: app.id, userID: claims.sub, deviceID: deviceID, platform: body.platform, voipToken: body.voipToken?.lowercased(),
                apnsToken: body.apnsToken?.lowercased(), environment: environment, bundleID: body.bundleID ?? app.bundleID,
                callKitEnabled: body.callKitEnabled ?? (body.platform == "ios"), appVersion: body.appVersion,
                updatedAt: Int64(Date().timeIntervalSince1970 * 1000))
            do { try hub.store.register(device, limit: configuration.limits.maxDevicesPerUser) } catch let full as DeviceLimitReached {
                return ("/v1/devices/{id}", failure(ErrorBody(.conflict, "a user may register at most \(full.limit) devices; remove one first")))
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
            return ("/v1/devices/{id}", removed ? HTTPResponse(status: 204) : failure(ErrorBody(.notFound, "no such device")))
        default:
            return ("/v1/devices", methodNotAllowed(allowed: parts.count == 2 ? "GET" : "PUT, DELETE"))
        }
    }
}
