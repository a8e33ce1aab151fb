import Foundation
import SwitchboardKit
import SwitchboardServer

/// Every parser of outside input `make fuzz` drives, by name.
enum FuzzTargets {
    static let all: [String: @Sendable ([UInt8]) -> Void] = [
        "websocket-message": { FuzzEntryPoints.webSocketMessage($0) },
        "access-token": { FuzzEntryPoints.accessToken($0) },
        "device-registration": { FuzzEntryPoints.deviceRegistration($0) },
        "call-creation": { FuzzEntryPoints.callCreation($0) },
        "apns-response": { FuzzEntryPoints.apnsResponse($0) },
        "voip-push": voipPush,
    ]

    /// A VoIP push as PushKit hands it to the SDK: JSON, read leniently into a call to report.
    static func voipPush(_ bytes: [UInt8]) {
        guard let payload = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else { return }
        let push = IncomingPush(payload)
        _ = push.update.displayName.utf8.count + push.update.handle.utf8.count
    }
}
