import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// Who made a REST request.
enum Caller {
    /// The app's backend, with HTTP Basic auth (API key and secret).
    case app(App)
    /// A user, with `Authorization: Bearer <access token>`.
    case user(AccessTokenClaims, App)

    var app: App {
        switch self {
        case .app(let app), .user(_, let app): app
        }
    }

    /// App credentials, or a token with the admin grant.
    var isAdmin: Bool {
        switch self {
        case .app: true
        case .user(let claims, _): claims.grants.admin == true
        }
    }
}

extension Gateway {
    /// The caller of a REST request, from Basic (app) or Bearer (token) credentials.
    func authenticate(_ request: HTTPRequest) -> Result<Caller, ErrorBody> {
        let header = request.headers["authorization"] ?? ""
        if header.lowercased().hasPrefix("basic ") {
            guard let app = basicAuthApp(header) else { return .failure(ErrorBody(.unauthorized, "the API key or secret is wrong")) }
            return .success(.app(app))
        }
        guard let token = bearerToken(header) else {
            return .failure(ErrorBody(.unauthorized, "send Authorization: Bearer <access token> or Basic <API key:secret>"))
        }
        do throws(TokenError) {
            let claims = try verifier.verify(token) { store.app(apiKey: $0)?.apiSecret }
            guard let app = store.app(apiKey: claims.iss) else { throw TokenError.unknownIssuer }
            return .success(.user(claims, app))
        } catch {
            return .failure(ErrorBody(error.code, error.description))
        }
    }

    private func unauthorized(_ error: ErrorBody) -> HTTPResponse {
        failure(error.code == .forbidden ? 403 : 401, error)
    }

    // MARK: TURN

    func turnCredentials(_ request: HTTPRequest) -> HTTPResponse {
        switch authenticate(request) {
        case .failure(let error): return unauthorized(error)
        case .success(let caller):
            let identity: String
            switch caller {
            case .app: identity = "app"
            case .user(let claims, _): identity = claims.sub
            }
            return encoded(200, hub.turn.credentials(for: identity))
        }
    }

    // MARK: Development tokens

    /// `POST /v1/dev/tokens {"identity": "alice", "name": "Alice"}`: a token for the oldest app,
    /// joining any room and calling. Only with `--dev-tokens`.
    func issueDevelopmentToken(_ request: HTTPRequest) -> HTTPResponse {
        struct Body: Decodable {
            var identity: String
            var name: String?
        }
        let body: Body
        do { body = try decoder.decode(Body.self, from: Data(request.body)) } catch { return decodeFailure(request.body, error) }
        guard !body.identity.isEmpty, body.identity.utf8.count <= 256, (body.name?.utf8.count ?? 0) <= 256 else {
            return failure(400, ErrorBody(.badRequest, "identity must be 1 to 256 bytes"))
        }
        guard let app = (try? store.allApps())?.first else {
            return failure(404, ErrorBody(.notFound, "there is no app yet"))
        }
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: body.identity, name: body.name,
            grants: Grants(room: "*", roomJoin: true, call: true), ttlSeconds: 6 * 3600)
        logger.info("development token issued", ["app": app.id, "identity": body.identity])
        return encoded(201, TokenResponse(token: AccessTokenVerifier.sign(claims, secret: app.apiSecret), expiresAt: claims.exp, identity: body.identity))
    }

    // MARK: Rooms

    /// `/v1/rooms...`
    func routeRooms(_ request: HTTPRequest) -> (String, HTTPResponse) {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        // ["v1", "rooms", name?, "data" | "peers", peer?]
        let caller: Caller
        switch authenticate(request) {
        case .failure(let error): return ("/v1/rooms", unauthorized(error))
        case .success(let found): caller = found
        }
        if parts.count >= 3, Hub.isCallRoomName(parts[2]), let refusal = callRoomRefusal(request, parts: parts, caller: caller) {
            return refusal
        }
        switch (request.method, parts.count) {
        case (.post, 2):
            return ("/v1/rooms", createRoom(request, caller: caller))
        case (.get, 2):
            guard caller.isAdmin else { return ("/v1/rooms", forbidden()) }
            var rooms = hub.listRooms(app: caller.app)
            if case .user = caller { rooms.removeAll { Hub.isCallRoomName($0.name) } }
            return ("/v1/rooms", encoded(200, ["rooms": rooms]))
        case (_, 2):
            return ("/v1/rooms", methodNotAllowed(allowed: "GET, POST"))
        case (.get, 3):
            guard caller.isAdmin else { return ("/v1/rooms/{name}", forbidden()) }
            do throws(ErrorBody) { return ("/v1/rooms/{name}", encoded(200, try hub.room(app: caller.app, name: parts[2]))) } catch {
                return ("/v1/rooms/{name}", failure(404, error))
            }
        case (.delete, 3):
            guard caller.isAdmin else { return ("/v1/rooms/{name}", forbidden()) }
            do throws(ErrorBody) {
                try hub.deleteRoom(app: caller.app, name: parts[2])
                return ("/v1/rooms/{name}", HTTPResponse(status: 204))
            } catch { return ("/v1/rooms/{name}", failure(404, error)) }
        case (_, 3):
            return ("/v1/rooms/{name}", methodNotAllowed(allowed: "GET, DELETE"))
        case (.post, 4) where parts[3] == "data":
            guard caller.isAdmin else { return ("/v1/rooms/{name}/data", forbidden()) }
            let body: RoomDataRequest
            do { body = try decoder.decode(RoomDataRequest.self, from: Data(request.body)) } catch {
                return ("/v1/rooms/{name}/data", decodeFailure(request.body, error))
            }
            do throws(ErrorBody) {
                try hub.sendData(app: caller.app, room: parts[2], request: body)
                return ("/v1/rooms/{name}/data", HTTPResponse(status: 204))
            } catch { return ("/v1/rooms/{name}/data", failure(error.code == .payloadTooLarge ? 413 : 404, error)) }
        case (.delete, 5) where parts[3] == "peers":
            guard caller.isAdmin else { return ("/v1/rooms/{name}/peers/{peer}", forbidden()) }
            do throws(ErrorBody) {
                try hub.kick(app: caller.app, room: parts[2], peerID: parts[4])
                return ("/v1/rooms/{name}/peers/{peer}", HTTPResponse(status: 204))
            } catch { return ("/v1/rooms/{name}/peers/{peer}", failure(404, error)) }
        default:
            return ("/v1/rooms/*", failure(404, ErrorBody(.notFound, "no such endpoint: \(request.path)")))
        }
    }

    /// The rooms API on a call's room (`call-…`). A token is refused whatever its grants, the
    /// admin grant included: the room belongs to the call's participants. The app's own
    /// credentials (its backend, which can mint any user's token anyway) may inspect the room
    /// and send to it, but not close it or remove a participant: the room closes when the call
    /// ends, and a participant removed would only join again. Nil: go on.
    private func callRoomRefusal(_ request: HTTPRequest, parts: [String], caller: Caller) -> (String, HTTPResponse)? {
        let route = parts.count == 3 ? "/v1/rooms/{name}" : parts.count == 4 ? "/v1/rooms/{name}/data" : "/v1/rooms/{name}/peers/{peer}"
        guard case .app = caller else { return (route, failure(403, Hub.callRoomRefusal(parts[2]))) }
        guard request.method == .delete else { return nil }
        return (route, failure(409, ErrorBody(.conflict, "a call's room closes when its call ends; its participants cannot be removed")))
    }

    private func forbidden() -> HTTPResponse {
        failure(403, ErrorBody(.forbidden, "this needs the app's credentials or a token with the admin grant"))
    }

    /// `POST /v1/rooms`: a room with a server-generated unique name. App credentials and admin
    /// tokens may give a `prefix`; a user token with a prefix grant (`team-*`) gets a name under
    /// that prefix; a token for one exact room cannot create rooms.
    private func createRoom(_ request: HTTPRequest, caller: Caller) -> HTTPResponse {
        var body = CreateRoomRequest()
        if !request.body.isEmpty {
            do { body = try decoder.decode(CreateRoomRequest.self, from: Data(request.body)) } catch {
                return decodeFailure(request.body, error)
            }
        }
        var prefix = body.prefix ?? ""
        if case .user(let claims, _) = caller, !caller.isAdmin {
            guard claims.grants.roomJoin == true, let pattern = claims.grants.room, pattern.hasSuffix("*") else {
                return failure(403, ErrorBody(.forbidden, "creating rooms needs a room grant with a prefix (room-*) or the admin grant"))
            }
            prefix = String(pattern.dropLast())
        }
        if let max = body.maxParticipants, !(2...256).contains(max) {
            return failure(400, ErrorBody(.badRequest, "max_participants must be 2 to 256"))
        }
        if let timeout = body.emptyTimeoutSeconds, !(1...86400).contains(timeout) {
            return failure(400, ErrorBody(.badRequest, "empty_timeout_seconds must be 1 to 86400"))
        }
        let name = prefix + (prefix.isEmpty ? "r-" : "") + RandomID.alphanumeric(16)
        do throws(ErrorBody) {
            try Hub.validateRoomName(name)
            if Hub.isCallRoomName(name) { throw ErrorBody(.badRequest, "room names starting with call- are reserved for calls' rooms") }
            if let metadata = body.metadata, ((try? JSONEncoder().encode(metadata).count) ?? .max) > configuration.limits.maxDataBytes {
                throw ErrorBody(.payloadTooLarge, "metadata is larger than \(configuration.limits.maxDataBytes) bytes")
            }
            return encoded(201, try hub.createRoom(app: caller.app, name: name, request: body))
        } catch {
            return failure(error.code == .payloadTooLarge ? 413 : error.code == .rateLimited ? 429 : 400, error)
        }
    }
}
