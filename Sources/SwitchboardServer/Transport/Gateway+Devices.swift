import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardPush

extension Gateway {
    // MARK: Devices

    /// What `PUT /v1/devices/{id}` accepts: a registration with a known platform, device
    /// tokens of 64 hexadecimal characters and an APNs environment.
    static func checkDeviceRegistration(
        _ bytes: [UInt8]
    ) throws(ErrorBody) -> (DeviceRegistration, APNsEnvironment) {
        let body = try decode(bytes, as: DeviceRegistration.self)
        guard ["ios", "android", "web"].contains(body.platform) else {
            throw ErrorBody(.badRequest, "platform is ios, android or web")
        }
        for token in [body.voipToken, body.apnsToken].compactMap({ $0 }) where !PushNotification.isDeviceToken(token) {
            throw ErrorBody(.badRequest, "a device token is 64 hexadecimal characters")
        }
        guard let environment = APNsEnvironment(rawValue: body.environment ?? "production") else {
            throw ErrorBody(.badRequest, "environment is sandbox or production")
        }
        if let bundleID = body.bundleID, !App.isWellFormedBundleID(bundleID) {
            throw ErrorBody(.badRequest, "bundle_id must look like com.example.app (at most \(FieldLimits.bundleID) bytes)")
        }
        try FieldLimits.check(body.appVersion, field: "app_version", limit: FieldLimits.appVersion)
        if let ringtone = body.ringtone, !isSoundFileName(ringtone) {
            throw ErrorBody(
                .badRequest, "ringtone is a sound file name of the app (letters, digits, '.', '_', '-'; at most \(FieldLimits.ringtone) bytes)")
        }
        return (body, environment)
    }

    /// `GET /v1/devices`: the user's devices, tokens redacted.
    func listDevices(_ user: UserCredentials) -> RESTAnswer {
        let (appID, userID) = (user.app.id, user.identity)
        return fromStore(for: appID, afterQueuedWrites: false, { try $0.devices(appID: appID, userID: userID) }) { [self] result throws(ErrorBody) in
            switch result {
            case .success(let devices): return encoded(200, ["devices": JSONValue.array(devices.map(\.redacted))])
            case .failure(let error):
                logger.error("device read failed", ["app": appID, "error": "\(error)"])
                throw .storeRead(error, reading: "the devices")
            }
        }
    }

    /// `PUT /v1/devices/{device_id}`: registers a device of the user (or updates it), at most
    /// `max_devices_per_user` of them.
    func registerDevice(_ rest: RESTRequest, _ user: UserCredentials) throws(ErrorBody) -> RESTAnswer {
        let deviceID = rest["device_id"]
        try FieldLimits.check(deviceID, field: "device id", limit: FieldLimits.deviceID)
        let (body, environment) = try Self.checkDeviceRegistration(rest.http.body)
        let (app, userID) = (user.app, user.identity)
        // The bundle id is the device's APNs topic: only one the app's operator set up.
        if let bundleID = body.bundleID, !app.bundleIDs.contains(bundleID) {
            throw ErrorBody(
                .badRequest, "bundle_id must be the app's bundle id (\(app.bundleIDs.joined(separator: ", "))); leave it out to use the app's")
        }
        let device = Device(
            appID: app.id, userID: userID, deviceID: deviceID, platform: body.platform, voipToken: body.voipToken?.lowercased(),
            apnsToken: body.apnsToken?.lowercased(), environment: environment, bundleID: body.bundleID ?? app.bundleID,
            callKitEnabled: body.callKitEnabled ?? (body.platform == "ios"), appVersion: body.appVersion,
            updatedAt: hub.wallMillis, ringtone: body.ringtone)
        let limit = configuration.limits.maxDevicesPerUser
        try admitWrite(user)
        return fromStore(for: app.id, { try $0.register(device, limit: limit) }) { [self] result throws(ErrorBody) in
            switch result {
            case .success:
                logger.info("device registered", ["app": app.id, "identity": userID, "device": deviceID, "platform": device.platform])
                return encoded(200, device.redacted)
            case .failure(let full as DeviceLimitReached):
                throw ErrorBody(.conflict, "a user may register at most \(full.limit) devices; remove one first")
            case .failure(let error):
                throw storeFailure(error, saving: "the device")
            }
        }
    }

    /// `DELETE /v1/devices/{device_id}`.
    func removeDevice(_ rest: RESTRequest, _ user: UserCredentials) throws(ErrorBody) -> RESTAnswer {
        let (appID, userID, deviceID) = (user.app.id, user.identity, rest["device_id"])
        try FieldLimits.check(deviceID, field: "device id", limit: FieldLimits.deviceID)
        try admitWrite(user)
        return fromStore(for: appID, { try $0.removeDevice(appID: appID, userID: userID, deviceID: deviceID) }) { [self] result throws(ErrorBody) in
            switch result {
            case .success(let removed):
                guard removed else { throw ErrorBody(.notFound, "no such device") }
                return HTTPResponse(status: 204)
            case .failure(let error): throw storeFailure(error, saving: "the removal")
            }
        }
    }

    /// A file name APNs' `sound` may carry: a name the app ships, never a path.
    static func isSoundFileName(_ name: String) -> Bool {
        (1...FieldLimits.ringtone).contains(name.utf8.count) && name.first != "."
            && name.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0) }
    }
}
