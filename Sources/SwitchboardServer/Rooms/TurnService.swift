import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// Hands out ICE servers with time-limited TURN credentials in coturn's REST-API scheme
/// (`use-auth-secret`): username `expiry:identity`, password base64(HMAC-SHA1(secret, username)).
struct TurnService: Sendable {
    var turnURLs: [String]
    var stunURLs: [String]
    /// coturn's `static-auth-secret`; without it only STUN servers are handed out.
    var secret: String?
    var ttlSeconds: Int

    func credentials(for identity: String, now: Date = Date()) -> TurnCredentials {
        let expiresAt = Int64(now.timeIntervalSince1970) + Int64(ttlSeconds)
        var servers: [ICEServer] = []
        if !stunURLs.isEmpty { servers.append(ICEServer(urls: stunURLs)) }
        if let secret, !turnURLs.isEmpty {
            let username = "\(expiresAt):\(identity)"
            let password = Data(Crypto.hmac(.sha1, key: Array(secret.utf8), message: Array(username.utf8))).base64EncodedString()
            servers.append(ICEServer(urls: turnURLs, username: username, credential: password))
        }
        return TurnCredentials(iceServers: servers, ttl: ttlSeconds, expiresAt: expiresAt)
    }
}
