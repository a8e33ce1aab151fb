import Foundation
import SwitchboardProtocol
import SwitchboardSystem

/// Who made a REST request.
extension Gateway {
    // MARK: Rooms

    /// `/v1/rooms...`
    func routeRooms(_ request: HTTPRequest) -> (String, HTTPResponse) {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        // ["v1", "rooms", name?, "data" | "peers", peer?]
        let requester: Requester
        switch authenticate(request) {
        case .failure(let error): return ("/v1/rooms", unauthorized(error))
        case .success(let found): requester = found
        }
        if parts.count >= 3, Hub.isCallRoomName(parts[2]), let refusal = callRoomRefusal(request, parts: parts, requester: requester) {
            return refusal
        }
        switch (request.method, parts.count) {
        case (.post, 2):
            return ("/v1/rooms", createRoom(request, requester: requester))
        case (.get, 2):
            guard requester.isAdmin else { return ("/v1/rooms", forbidden()) }
            var rooms = hub.listRooms(app: requester.app)
            if case .user = requester { rooms.removeAll { Hub.isCallRoomName($0.name) } }
            return ("/v1/rooms", encoded(200, ["rooms": rooms]))
        case (_, 2):
            return ("/v1/rooms", methodNotAllowed(allowed: "GET, POST"))
        case (.get, 3):
            guard requester.isAdmin else { return ("/v1/rooms/{name}", forbidden()) }
            do throws(ErrorBody) { return ("/v1/rooms/{name}", encoded(200, try hub.room(app: requester.app, name: parts[2]))) } catch {
                return ("/v1/rooms/{name}", failure(error))
            }
        case (.delete, 3):
            guard requester.isAdmin else { return ("/v1/rooms/{name}", forbidden()) }
            do throws(ErrorBody) {
                try hub.deleteRoom(app: requester.app, name: parts[2])
                return ("/v1/rooms/{name}", HTTPResponse(status: 204))
            } catch { return ("/v1/rooms/{name}", failure(error)) }
        case (_, 3):
            return ("/v1/rooms/{name}", methodNotAllowed(allowed: "GET, DELETE"))
        case (.post, 4) where parts[3] == "data":
            guard requester.isAdmin else { return ("/v1/rooms/{name}/data", forbidden()) }
            let body: RoomDataRequest
            do { body = try decoder.decode(RoomDataRequest.self, from: Data(request.body)) } catch {
                return ("/v1/rooms/{name}/data", decodeFailure(request.body, error))
            }
            do throws(ErrorBody) {
                try hub.sendData(app: requester.app, room: parts[2], request: body)
                return ("/v1/rooms/{name}/data", HTTPResponse(status: 204))
            } catch { return ("/v1/rooms/{name}/data", failure(error)) }
        case (.delete, 5) where parts[3] == "peers":
            guard requester.isAdmin else { return ("/v1/rooms/{name}/peers/{peer}", forbidden()) }
            do throws(ErrorBody) {
                try hub.kick(app: requester.app, room: parts[2], peerID: parts[4])
                return ("/v1/rooms/{name}/peers/{peer}", HTTPResponse(status: 204))
            } catch { return ("/v1/rooms/{name}/peers/{peer}", failure(error)) }
        default:
            return ("/v1/rooms/*", failure(ErrorBody(.notFound, "no such endpoint: \(request.path)")))
        }
    }

    /// The rooms API on a call's room (`call-…`). A token is refused whatever its grants, the
    /// admin grant included: the room belongs to the call's participants. The app's own
    /// credentials (its backend, which can mint any user's token anyway) may inspect the room
    /// and send to it, but not close it or remove a participant: the room closes when the call
    /// ends, and a participant removed would only join again. Nil: go on.
    private func callRoomRefusal(_ request: HTTPRequest, parts: [String], requester: Requester) -> (String, HTTPResponse)? {
        let route = parts.count == 3 ? "/v1/rooms/{name}" : parts.count == 4 ? "/v1/rooms/{name}/data" : "/v1/rooms/{name}/peers/{peer}"
        guard case .app = requester else { return (route, failure(Hub.callRoomRefusal(parts[2]))) }
        guard request.method == .delete else { return nil }
        return (route, failure(ErrorBody(.conflict, "a call's room closes when its call ends; its participants cannot be removed")))
    }

    private func forbidden() -> HTTPResponse {
        failure(ErrorBody(.forbidden, "this needs the app's credentials or a token with the admin grant"))
    }

    /// `POST /v1/rooms`: a room with a server-generated unique name. App credentials and admin
    /// tokens may give a `prefix`; a user token with a prefix grant (`team-*`) gets a name under
    /// that prefix; a token for one exact room cannot create rooms.
    private func createRoom(_ request: HTTPRequest, requester: Requester) -> HTTPResponse {
        var body = CreateRoomRequest()
        if !request.body.isEmpty {
            do { body = try decoder.decode(CreateRoomRequest.self, from: Data(request.body)) } catch {
                return decodeFailure(request.body, error)
            }
        }
        var prefix = body.prefix ?? ""
        if case .user(let claims, _) = requester, !requester.isAdmin {
            guard claims.grants.roomJoin == true, let pattern = claims.grants.room, pattern.hasSuffix("*") else {
                return failure(ErrorBody(.forbidden, "creating rooms needs a room grant with a prefix (room-*) or the admin grant"))
            }
            prefix = String(pattern.dropLast())
        }
        if let max = body.maxParticipants, !(2...256).contains(max) {
            return failure(ErrorBody(.badRequest, "max_participants must be 2 to 256"))
        }
        if let timeout = body.emptyTimeoutSeconds, !(1...86400).contains(timeout) {
            return failure(ErrorBody(.badRequest, "empty_timeout_seconds must be 1 to 86400"))
        }
        let name = prefix + (prefix.isEmpty ? "r-" : "") + RandomID.alphanumeric(16)
        do throws(ErrorBody) {
            try Hub.validateRoomName(name)
            if Hub.isCallRoomName(name) { throw ErrorBody(.badRequest, "room names starting with call- are reserved for calls' rooms") }
            if let metadata = body.metadata, ((try? JSONEncoder().encode(metadata).count) ?? .max) > configuration.limits.maxDataBytes {
                throw ErrorBody(.payloadTooLarge, "metadata is larger than \(configuration.limits.maxDataBytes) bytes")
            }
            return encoded(201, try hub.createRoom(app: requester.app, name: name, request: body))
        } catch {
            return failure(error)
        }
    }
}
