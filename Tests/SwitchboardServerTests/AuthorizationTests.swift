import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import Testing

/// Every REST endpoint and WebSocket request against every kind of wrong credential: no
/// token, a forged, expired or not-yet-valid one, another app's, another user's, one without
/// the grant. Each must be refused, and no refusal may carry the owner's data.
@Suite(.timeLimit(.minutes(3))) struct AuthorizationTests {
    /// Kinds of credential, each a header value (nil: no header).
    enum Credential: String, CaseIterable, CustomStringConvertible {
        case none, garbage, forged, expired, notYetValid, otherApp, otherAppAdmin, otherUser, noGrants, owner, admin, appBasic
        var description: String { rawValue }
    }

    final class World: Sendable {
        let fixture: CallFixture
        let otherApp: App
        let callID: String
        let room: String
        let voipToken: String

        init() async throws {
            fixture = try CallFixture()
            otherApp = App.make(name: "Other", bundleID: "com.example.other")
            try fixture.server.server.store.insert(otherApp)
            voipToken = try await fixture.registerPhone("alice", device: "alice-phone", seed: 4242).voip
            try await fixture.registerPhone("bob", device: "bob-phone", seed: 4343)
            let caller = try await fixture.connect("alice", device: "alice-phone")
            callID = try await fixture.call(caller, to: ["bob"], timeout: 120)
            let app = fixture.server.app
            let basic = "Basic " + Data("\(app.apiKey):\(app.apiSecret)".utf8).base64EncodedString()
            let created = try await HTTPClient.request(
                "POST", fixture.server.baseURL + "/v1/rooms", headers: [("Authorization", basic)], body: Array("{}".utf8))
            room = try #require(try JSONDecoder().decode(JSONValue.self, from: Data(created.body))["name"]?.stringValue, "\(created.text)")
        }

        func header(_ credential: Credential) -> String? {
            let server = fixture.server
            let all = Grants(room: "*", roomJoin: true, call: true)
            switch credential {
            case .none: return nil
            case .garbage: return "Bearer not-a-token"
            case .forged:
                let claims = AccessTokenIssuer.claims(apiKey: server.app.apiKey, identity: "alice", name: nil, grants: all, ttlSeconds: 600)
                return "Bearer " + AccessTokenVerifier.sign(claims, secret: "not-the-secret")
            case .expired: return "Bearer " + server.token("alice", grants: all, ttl: 60, now: Date().addingTimeInterval(-3600))
            case .notYetValid: return "Bearer " + server.token("alice", grants: all, ttl: 600, now: Date().addingTimeInterval(3600))
            case .otherApp, .otherAppAdmin:
                let grants = Grants(room: "*", roomJoin: true, call: true, admin: credential == .otherAppAdmin)
                let claims = AccessTokenIssuer.claims(apiKey: otherApp.apiKey, identity: "alice", name: nil, grants: grants, ttlSeconds: 600)
                return "Bearer " + AccessTokenVerifier.sign(claims, secret: otherApp.apiSecret)
            case .otherUser: return "Bearer " + server.token("mallory", grants: all)
            case .noGrants: return "Bearer " + server.token("alice", grants: Grants())
            case .owner: return "Bearer " + server.token("alice", grants: all)
            case .admin: return "Bearer " + server.token("alice", grants: Grants(admin: true))
            case .appBasic: return "Basic " + Data("\(server.app.apiKey):\(server.app.apiSecret)".utf8).base64EncodedString()
            }
        }

        func send(_ method: String, _ path: String, _ credential: Credential, body: String? = nil) async throws -> HTTPClientResponse {
            try await HTTPClient.request(
                method, fixture.server.baseURL + path, headers: header(credential).map { [("Authorization", $0)] } ?? [],
                body: body.map { Array($0.utf8) })
        }

        /// What must never appear in an answer to someone else: the owner's device token, the
        /// callee of the owner's call, the owner's room.
        func assertNoLeak(_ response: HTTPClientResponse, _ context: String) {
            #expect(!response.text.contains(voipToken), "\(context) leaked a device token")
            #expect(!response.text.contains("bob"), "\(context) leaked the call's callee")
            #expect(!response.text.contains("alice-phone"), "\(context) leaked a device id")
        }
    }

    static let unauthenticated: [Credential] = [.none, .garbage, .forged, .expired, .notYetValid]

    /// (method, path, body): every REST operation that acts on the owner's data.
    static func operations(_ world: World) -> [(String, String, String?)] {
        let call = world.callID
        return [
            ("GET", "/v1/devices", nil),
            ("PUT", "/v1/devices/alice-phone", #"{"platform":"web"}"#),
            ("DELETE", "/v1/devices/alice-phone", nil),
            ("GET", "/v1/users/me/blocked", nil),
            ("GET", "/v1/calls", nil),
            ("POST", "/v1/calls", #"{"callees":["bob"]}"#),
            ("GET", "/v1/calls/\(call)", nil),
            ("GET", "/v1/calls/\(call)/trace", nil),
            ("POST", "/v1/calls/\(call)/answer", "{}"),
            ("POST", "/v1/calls/\(call)/decline", "{}"),
            ("POST", "/v1/calls/\(call)/cancel", "{}"),
            ("POST", "/v1/calls/\(call)/end", "{}"),
            ("GET", "/v1/rooms", nil),
            ("POST", "/v1/rooms", "{}"),
            ("GET", "/v1/rooms/\(world.room)", nil),
            ("POST", "/v1/rooms/\(world.room)/data", #"{"data":{"x":1}}"#),
            ("DELETE", "/v1/rooms/\(world.room)/peers/p_nobody", nil),
            ("DELETE", "/v1/rooms/\(world.room)", nil),
            ("GET", "/v1/turn", nil),
        ]
    }

    @Test func withoutAValidTokenEveryOperationIsRefusedWith401() async throws {
        let world = try await World()
        defer { world.fixture.stop() }
        for (method, path, body) in Self.operations(world) {
            for credential in Self.unauthenticated {
                let response = try await world.send(method, path, credential, body: body)
                #expect(response.status == 401, "\(method) \(path) with \(credential): \(response.status) \(response.text)")
                world.assertNoLeak(response, "\(method) \(path) with \(credential)")
            }
        }
    }

    @Test func anotherUserOrAnotherAppSeesAndChangesNothingOfTheOwners() async throws {
        let world = try await World()
        defer { world.fixture.stop() }
        let call = world.callID
        for credential in [Credential.otherUser, .otherApp, .otherAppAdmin] {
            // Reads answer for the caller's own (empty) data, or not at all.
            for path in ["/v1/devices", "/v1/calls", "/v1/users/me/blocked", "/v1/rooms"] {
                let response = try await world.send("GET", path, credential)
                // Listing rooms needs the admin grant (of this app: another app's admin sees its own).
                let expected = path == "/v1/rooms" && credential != .otherAppAdmin ? 403 : 200
                #expect(response.status == expected, "GET \(path) with \(credential): \(response.status)")
                world.assertNoLeak(response, "GET \(path) with \(credential)")
                #expect(!response.text.contains(world.room), "GET \(path) with \(credential) leaked the room")
                #expect(!response.text.contains(call), "GET \(path) with \(credential) leaked the call")
            }
            // The owner's call, device and room are not theirs.
            let refused: [(String, String, String?)] = [
                ("GET", "/v1/calls/\(call)", nil), ("GET", "/v1/calls/\(call)/trace", nil),
                ("POST", "/v1/calls/\(call)/answer", "{}"), ("POST", "/v1/calls/\(call)/decline", "{}"),
                ("POST", "/v1/calls/\(call)/cancel", "{}"), ("POST", "/v1/calls/\(call)/end", "{}"),
                ("DELETE", "/v1/devices/alice-phone", nil), ("GET", "/v1/rooms/\(world.room)", nil),
                ("POST", "/v1/rooms/\(world.room)/data", #"{"data":{"x":1}}"#), ("DELETE", "/v1/rooms/\(world.room)", nil),
            ]
            for (method, path, body) in refused {
                let response = try await world.send(method, path, credential, body: body)
                // Within the app a call is refused to a non-participant; to another app it does
                // not exist. A device is only ever its user's. Rooms need this app's admin grant.
                let expected: (Int, String)
                if path.hasPrefix("/v1/calls/") {
                    expected = credential == .otherUser ? (403, "forbidden") : (404, "not_found")
                } else if path.hasPrefix("/v1/devices/") {
                    expected = (404, "not_found")
                } else {
                    expected = credential == .otherAppAdmin ? (404, "not_found") : (403, "forbidden")
                }
                #expect(response.status == expected.0, "\(method) \(path) with \(credential): \(response.status) \(response.text)")
                #expect(response.text.contains(#""code":"\#(expected.1)""#), "\(method) \(path) with \(credential): \(response.text)")
                world.assertNoLeak(response, "\(method) \(path) with \(credential)")
            }
        }
        // Nothing changed: the owner still has the device, the call still rings, the room exists.
        let devices = try await world.send("GET", "/v1/devices", .owner)
        #expect(devices.text.contains("alice-phone"))
        let state = try await world.send("GET", "/v1/calls/\(call)", .owner)
        #expect(state.text.contains(#""ringing""#), "\(state.text)")
        let room = try await world.send("GET", "/v1/rooms/\(world.room)", .admin)
        #expect(room.status == 200)
    }

    @Test func aTokenWithoutTheGrantIsRefusedWith403() async throws {
        let world = try await World()
        defer { world.fixture.stop() }
        let needsAdmin: [(String, String, String?)] = [
            ("GET", "/v1/rooms", nil), ("GET", "/v1/rooms/\(world.room)", nil), ("DELETE", "/v1/rooms/\(world.room)", nil),
            ("POST", "/v1/rooms/\(world.room)/data", #"{"data":{"x":1}}"#), ("DELETE", "/v1/rooms/\(world.room)/peers/p_nobody", nil),
        ]
        for credential in [Credential.owner, .noGrants] {
            for (method, path, body) in needsAdmin {
                let response = try await world.send(method, path, credential, body: body)
                #expect(response.status == 403, "\(method) \(path) with \(credential): \(response.status) \(response.text)")
            }
        }
        let call = try await world.send("POST", "/v1/calls", .noGrants, body: #"{"callees":["bob"]}"#)
        #expect(call.status == 403, "\(call.text)")
        let room = try await world.send("POST", "/v1/rooms", .noGrants, body: "{}")
        #expect(room.status == 403, "\(room.text)")
    }

    @Test func theWebSocketRefusesBadTokensBeforeTheUpgradeAndRequestsWithoutGrants() async throws {
        let world = try await World()
        defer { world.fixture.stop() }
        let url = world.fixture.server.webSocketURL
        for credential in Self.unauthenticated where credential != .none {
            let token = String(world.header(credential)!.dropFirst("Bearer ".count))
            let error = await #expect(throws: WebSocketClientError.self, "\(credential)") { _ = try await TestClient.connect(url + "?access_token=\(token)") }
            #expect(error?.httpStatus == 401, "\(credential): refused with 401 before the upgrade (\(String(describing: error)))")
        }
        // No grants: joins, calls and call actions are refused, the connection stays.
        let token = String(world.header(.noGrants)!.dropFirst("Bearer ".count))
        let client = try await TestClient.connect(url + "?access_token=\(token)")
        #expect(try await client.nextEnvelope().type == MessageType.sessionWelcome)
        let join = try await client.request(MessageType.roomJoin, data: ["room": .string(world.room)])
        #expect(join.error?.code == .forbidden, "\(join)")
        let create = try await client.request(MessageType.callCreate, encoding: CallCreateRequest(callees: ["bob"]))
        #expect(create.error?.code == .forbidden, "\(create)")
        // Another user of the same app cannot answer or end the owner's call.
        let mallory = try await world.fixture.connect("mallory", device: "m-phone")
        for type in [MessageType.callAnswer, MessageType.callDecline, MessageType.callEnd, MessageType.callCancel] {
            let reply = try await world.fixture.act(mallory, type, world.callID)
            #expect(reply.error?.code == .forbidden, "\(type) by another user: \(reply)")
            #expect(reply.error?.reason == "not_participant", "\(type) by another user: \(reply)")
        }
        let state = try await world.send("GET", "/v1/calls/\(world.callID)", .owner)
        #expect(state.text.contains(#""ringing""#), "\(state.text)")
    }
}
