import Foundation
import SwitchboardProtocol
import SwitchboardSystem

extension Gateway {
    // MARK: Block lists

    /// `GET /v1/users/me/blocked`: the identities the user does not take calls from.
    func blockList(_ user: UserCredentials) -> RESTAnswer {
        let (appID, userID) = (user.app.id, user.identity)
        return fromStore(for: appID, afterQueuedWrites: false, { try $0.blocked(appID: appID, userID: userID) }) { [self] result throws(ErrorBody) in
            switch result {
            case .success(let identities): return encoded(200, ["identities": identities])
            case .failure(let error):
                logger.error("block list read failed", ["app": appID, "error": "\(error)"])
                throw .storeRead(error, reading: "the block list")
            }
        }
    }

    /// `PUT /v1/users/me/blocked {"identities": [...]}`: replaces the list (at most 10,000).
    func setBlockList(_ rest: RESTRequest, _ user: UserCredentials) throws(ErrorBody) -> RESTAnswer {
        struct Body: Decodable { var identities: [String] }
        let identities = try decodeBody(rest, as: Body.self).identities
        guard identities.count <= 10_000 else { throw ErrorBody(.payloadTooLarge, "at most 10000 identities") }
        for identity in identities { try FieldLimits.check(identity, field: "each identity", limit: FieldLimits.identity) }
        // A long list costs more of the user's write allowance: one write per 1,000 entries.
        try admitWrite(user, cost: 1 + Double(identities.count / 1000))
        let (appID, userID) = (user.app.id, user.identity)
        return fromStore(for: appID, { try $0.setBlocked(identities, appID: appID, userID: userID) }) { [self] result throws(ErrorBody) in
            if case .failure(let error) = result { throw storeFailure(error, saving: "the block list") }
            return HTTPResponse(status: 204)
        }
    }
}
