import Foundation
import SwitchboardProtocol
import SwitchboardSystem

extension Gateway {
    // MARK: Rooms

    /// `GET /v1/rooms`: the app's rooms (a user token sees none of the calls' rooms).
    /// `GET /v1/rooms`: the app's rooms (a user token sees none of the calls' rooms); in a
    /// cluster, those of every node.
    func listRooms(_ requester: Requester) -> RESTAnswer {
        guard requester.isAdmin else { return .now(failure(Self.adminNeeded)) }
        let hidesCalls = { if case .user = requester { true } else { false } }()
        let appID = requester.app.id
        return .later { [self] reply in
            hub.listAllRooms(appID: appID) { [self] rooms in
                reply(encoded(200, ["rooms": hidesCalls ? rooms.filter { !Hub.isCallRoomName($0.name) } : rooms]))
            }
        }
    }

    /// `GET /v1/rooms/{name}`.
    func showRoom(_ rest: RESTRequest, _ requester: Requester) throws(ErrorBody) -> RESTAnswer {
        administer(.show, try administeredRoom(rest, requester), requester, status: 200)
    }

    /// `DELETE /v1/rooms/{name}`: closes the room; its members hear `room.closed`.
    func deleteRoom(_ rest: RESTRequest, _ requester: Requester) throws(ErrorBody) -> RESTAnswer {
        administer(.delete, try administeredRoom(rest, requester), requester, status: 204)
    }

    /// `POST /v1/rooms/{name}/data`: a data message from the server to the room or one peer.
    func sendRoomData(_ rest: RESTRequest, _ requester: Requester) throws(ErrorBody) -> RESTAnswer {
        let name = try administeredRoom(rest, requester)
        return administer(.data(try decodeBody(rest)), name, requester, status: 204)
    }

    /// `DELETE /v1/rooms/{name}/peers/{peer_id}`: removes a peer; the others hear it was kicked.
    func removePeer(_ rest: RESTRequest, _ requester: Requester) throws(ErrorBody) -> RESTAnswer {
        try FieldLimits.check(rest["peer_id"], field: "peer_id", limit: FieldLimits.peerID)
        return administer(.kick(peerID: rest["peer_id"]), try administeredRoom(rest, requester), requester, status: 204)
    }

    /// One room's administration, wherever the room runs (`Hub.administerRoom`).
    private func administer(_ operation: Hub.RoomAdministration, _ name: String, _ requester: Requester, status: Int) -> RESTAnswer {
        let appID = requester.app.id
        return .later { [self] reply in
            hub.administerRoom(operation, appID: appID, name: name) { [self] result in
                switch result {
                case .success(let value): reply(status == 204 ? HTTPResponse(status: 204) : encoded(status, value))
                case .failure(let error): reply(failure(error))
                }
            }
        }
    }

    /// The room a room-admin request names, once the requester may act on it: app credentials
    /// or a token with the admin grant. A call's room (`call-…`) refuses every token, the admin
    /// grant included: it belongs to the call's participants. The app's own credentials (its
    /// backend, which can mint any user's token anyway) may inspect the room and send to it,
    /// but not close it or remove a participant: the room closes when the call ends, and a
    /// participant removed would only join again.
    private func administeredRoom(_ rest: RESTRequest, _ requester: Requester) throws(ErrorBody) -> String {
        let name = rest["name"]
        try Hub.validateRoomName(name)
        if Hub.isCallRoomName(name) {
            guard case .app = requester else { throw Hub.callRoomRefusal(name) }
            if rest.http.method == .delete {
                throw ErrorBody(.conflict, "a call's room closes when its call ends; its participants cannot be removed")
            }
        }
        guard requester.isAdmin else { throw Self.adminNeeded }
        return name
    }

    private static let adminNeeded = ErrorBody(.forbidden, "this needs the app's credentials or a token with the admin grant")

    /// `POST /v1/rooms`: a room with a server-generated unique name. App credentials and admin
    /// tokens may give a `prefix`; a user token with a prefix grant (`team-*`) gets a name under
    /// that prefix; a token for one exact room cannot create rooms.
    func createRoom(_ rest: RESTRequest, _ requester: Requester) throws(ErrorBody) -> RESTAnswer {
        let body = rest.http.body.isEmpty ? CreateRoomRequest() : try decodeBody(rest, as: CreateRoomRequest.self)
        var prefix = body.prefix ?? ""
        if case .user(let claims, _) = requester, !requester.isAdmin {
            guard claims.grants.roomJoin == true, let pattern = claims.grants.room, pattern.hasSuffix("*") else {
                throw ErrorBody(.forbidden, "creating rooms needs a room grant with a prefix (room-*) or the admin grant")
            }
            prefix = String(pattern.dropLast())
        }
        if let max = body.maxParticipants, !(2...256).contains(max) {
            throw ErrorBody(.badRequest, "max_participants must be 2 to 256")
        }
        // A user's rooms linger empty a bounded time: a day-long empty room per request would
        // let one user hold the app's room quota.
        let longestTimeout = requester.isAdmin ? 86400 : configuration.limits.maxUserRoomEmptyTimeoutSeconds
        if let timeout = body.emptyTimeoutSeconds, !(1...longestTimeout).contains(timeout) {
            throw ErrorBody(.badRequest, "empty_timeout_seconds must be 1 to \(longestTimeout)")
        }
        let name = prefix + (prefix.isEmpty ? "r-" : "") + RandomID.alphanumeric(16)
        try Hub.validateRoomName(name)
        if Hub.isCallRoomName(name) { throw ErrorBody(.badRequest, "room names starting with call- are reserved for calls' rooms") }
        if let metadata = body.metadata { try hub.checkSize(metadata, what: "metadata") }
        if case .user(let claims, let app) = requester { try hub.admitRoomCreation(appID: app.id, identity: claims.sub) }
        let app = requester.app
        return .later { [self] reply in
            hub.createRoom(app: app, name: name, request: body) { [self] result in
                switch result {
                case .success(let room): reply(encoded(201, room))
                case .failure(let error): reply(failure(error))
                }
            }
        }
    }
}
