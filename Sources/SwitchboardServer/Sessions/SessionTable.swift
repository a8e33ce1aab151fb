import SwitchboardSystem

/// The sessions of this process and every way the hub finds one: by peer id, by the
/// connection it is attached to, by resume token, and by user (every device of an identity).
/// The maps change together, here only. Loop thread only.
final class SessionTable {
    private var byPeer: [String: Session] = [:]
    private var byConnection: [ConnectionID: Session] = [:]
    private var byResumeToken: [String: Session] = [:]
    private var byUser: [String: [Session]] = [:]
    /// Called when a user (`Hub.userKey`) gets its first session here (true) or loses its last
    /// (false): a cluster listens for the user's events on this node while it has one.
    var userPresenceChanged: ((_ appID: String, _ identity: String, _ present: Bool) -> Void)?

    /// Sessions attached to a connection or waiting in their grace period.
    var count: Int { byPeer.count }

    func session(peerID: String) -> Session? { byPeer[peerID] }
    /// Every session, attached or not.
    var all: Dictionary<String, Session>.Values { byPeer.values }
    func session(on connection: ConnectionID) -> Session? { byConnection[connection] }
    func session(resumeToken: String) -> Session? { byResumeToken[resumeToken] }

    /// The sessions of the user with this key (`Hub.userKey`), attached or not.
    func sessions(ofUser key: String) -> [Session] { byUser[key] ?? [] }

    /// A new session, attached to `connection` (nil: detached, a session that moved here from
    /// another node while its client was away).
    func add(_ session: Session, on connection: ConnectionID?) {
        session.connection = connection
        byPeer[session.peerID] = session
        if let connection { byConnection[connection] = session }
        byResumeToken[session.resumeToken] = session
        let key = Hub.userKey(session.app.id, session.identity)
        let first = byUser[key] == nil
        byUser[key, default: []].append(session)
        if first { userPresenceChanged?(session.app.id, session.identity, true) }
    }

    /// Attaches a session to a new connection; returns the one it was still attached to.
    func attach(_ session: Session, to connection: ConnectionID) -> ConnectionID? {
        let old = session.connection
        if let old { byConnection.removeValue(forKey: old) }
        session.connection = connection
        byConnection[connection] = session
        return old
    }

    /// The connection closed: its session, now detached (it may still be resumed).
    func detach(_ connection: ConnectionID) -> Session? {
        guard let session = byConnection.removeValue(forKey: connection) else { return nil }
        session.connection = nil
        return session
    }

    /// Forgets a session; returns the connection it was still attached to.
    func remove(_ session: Session) -> ConnectionID? {
        byPeer.removeValue(forKey: session.peerID)
        let key = Hub.userKey(session.app.id, session.identity)
        byUser[key]?.removeAll { $0 === session }
        if byUser[key]?.isEmpty == true {
            byUser.removeValue(forKey: key)
            userPresenceChanged?(session.app.id, session.identity, false)
        }
        byResumeToken.removeValue(forKey: session.resumeToken)
        guard let connection = session.connection else { return nil }
        byConnection.removeValue(forKey: connection)
        return connection
    }
}
