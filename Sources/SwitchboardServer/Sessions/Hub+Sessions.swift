import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore

extension Hub {
    // MARK: Connections

    /// A connection authenticated as `claims` opened; starts or resumes its session.
    /// `secretTag`: which of the app's secrets signed the token (`secretTag(_:)`).
    func connected(
        _ connection: ConnectionID, claims: AccessTokenClaims, app: App, resume: ResumeRequest?, deviceID: String?, secretTag: String
    ) {
        metrics.increment("switchboard_connections_total")
        metrics.add("switchboard_connections", 1)
        var resumeFailed = false
        if let resume {
            if sessions.session(resumeToken: resume.token) == nil, let node = Self.node(ofResumeToken: resume.token), let cluster, node != cluster.nodeID {
                // A session another node of the cluster holds (it drains, or died).
                return resumeFromNode(
                    node, connection: connection, claims: claims, app: app, resume: resume, deviceID: deviceID, secretTag: secretTag)
            }
            if let session = sessions.session(resumeToken: resume.token), session.app.id == app.id, session.identity == claims.sub {
                if let missed = session.log.events(after: resume.lastSequence, newest: session.lastSequence),
                    missed.reduce(0, { $0 + $1.count }) <= replayBudget
                {
                    session.secretTag = secretTag
                    reattach(session, to: connection, claims: claims, replay: missed, from: resume.lastSequence + 1)
                    return
                }
                // Events it missed are no longer kept, or more than one connection's send queue
                // holds: a fresh session (rooms joined again) instead of a replay that would be
                // dropped as a slow consumer before it arrives, again at every retry.
                logger.info("resume impossible, events lost", ["peer": session.peerID])
                end(session, reason: .disconnected)
            }
            resumeFailed = true
            metrics.increment("switchboard_resumes_total", ["outcome": "failed"])
        }
        openSession(connection, claims: claims, app: app, deviceID: deviceID, secretTag: secretTag, resumeFailed: resumeFailed)
    }

    /// A fresh session on `connection`: `session.welcome`, and the calls ringing for its user.
    func openSession(_ connection: ConnectionID, claims: AccessTokenClaims, app: App, deviceID: String?, secretTag: String, resumeFailed: Bool) {
        let session = makeSession(peerID: "p_" + RandomID.alphanumeric(16), claims: claims, app: app, secretTag: secretTag)
        session.deviceID = deviceID
        sessions.add(session, on: connection)
        armTokenTimer(session)
        participantSessionsChanged(appID: app.id, identity: claims.sub)
        logger.debug("session opened", ["peer": session.peerID, "app": app.id, "identity": claims.sub, "conn": connection.description])
        let welcome = SessionWelcome(
            peerID: session.peerID, identity: claims.sub, resumeToken: session.resumeToken,
            serverTime: wallMillis, limits: sessionLimits, resumeFailed: resumeFailed)
        sendControl(MessageType.sessionWelcome, welcome, to: session)
        offerRingingCalls(to: session)
        handleFramesBeforeSession(connection)
    }

    /// A message on a connection whose session is not open yet (in a cluster, while the
    /// connect is counted across the nodes or the session comes from another node): kept, and
    /// handled once the session is open, so that a client may send its first request as soon
    /// as the WebSocket opens. Past `message_burst` of them the connection is closed (1008).
    func holdUntilSession(_ bytes: [UInt8], binary: Bool, on connection: ConnectionID) {
        var held = framesBeforeSession[connection] ?? []
        guard held.count < configuration.limits.messageBurst else {
            framesBeforeSession.removeValue(forKey: connection)
            output?.close(connection, code: CloseCode.policyViolation, reason: "more than message_burst messages before the session opened")
            return
        }
        held.append((bytes, binary))
        framesBeforeSession[connection] = held
    }

    /// Handles what `connection` sent before its session opened, in order.
    func handleFramesBeforeSession(_ connection: ConnectionID?) {
        guard let connection, let held = framesBeforeSession.removeValue(forKey: connection) else { return }
        for frame in held { received(frame.bytes, binary: frame.binary, on: connection) }
    }

    /// A session object with this node's limits and a resume token naming this node (in a
    /// cluster: `<random>.<node id>`, so that any node knows where to ask for it).
    func makeSession(peerID: String, claims: AccessTokenClaims, app: App, secretTag: String) -> Session {
        let limits = configuration.limits
        let session = Session(
            peerID: peerID, app: app, claims: claims, secretTag: secretTag,
            resumeToken: RandomID.alphanumeric(32) + (cluster.map { "." + $0.nodeID } ?? ""),
            log: EventLog(capacity: limits.resumeBufferEvents, maxBytes: min(limits.resumeBufferBytes, replayBudget)),
            rate: TokenBucket(rate: limits.messagesPerSecond, burst: limits.messageBurst, now: now))
        session.openedAtMillis = wallMillis
        return session
    }

    /// The node a resume token names (a cluster's), or nil.
    static func node(ofResumeToken token: String) -> String? {
        guard let dot = token.firstIndex(of: "."), token.index(after: dot) < token.endIndex else { return nil }
        return String(token[token.index(after: dot)...])
    }

    /// The most a resume replays: what a connection's send queue holds (`send_queue_bytes`)
    /// less room for `session.resumed` and a reply or two.
    var replayBudget: Int { max(0, configuration.limits.sendQueueBytes - 16 * 1024) }

    /// A short, one-way tag of an app secret: which one signed a session's token, kept without
    /// keeping the secret.
    static func secretTag(_ secret: String) -> String {
        Crypto.sha256(Array(secret.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    // MARK: Token expiry

    /// Arms the session's token timer: `session.expiring` `token_expiry_warning_seconds`
    /// before the token's `exp` (at once for a token that lives less), then, unless a
    /// `session.refresh` came, a close with 4003 once `exp` and the leeway have passed. A
    /// session that is detached then simply waits: its resume needs a valid token anyway.
    func armTokenTimer(_ session: Session) {
        if let timer = session.tokenTimer { scheduler?.cancel(timer) }
        let limits = configuration.limits
        let exp = session.claims.exp
        let closesAt = (exp + Int64(limits.tokenLeewaySeconds)) * 1000
        let warnAt = (exp - Int64(limits.tokenExpiryWarningSeconds)) * 1000
        session.tokenTimer = scheduler?.schedule(after: .milliseconds(max(0, warnAt - wallMillis))) { [weak self, weak session] in
            guard let self, let session else { return }
            if session.connection != nil {
                sendControl(MessageType.sessionExpiring, SessionExpiring(expiresAt: exp, closesAt: closesAt), to: session)
            }
            session.tokenTimer = scheduler?.schedule(after: .milliseconds(max(0, closesAt - wallMillis))) { [weak self, weak session] in
                guard let self, let session else { return }
                session.tokenTimer = nil
                closeForToken(session, reason: "access token expired")
            }
        }
    }

    /// Closes the session's connection with 4003: its token no longer holds. The session waits
    /// its grace period, in which a fresh token resumes it.
    func closeForToken(_ session: Session, reason: String) {
        guard let connection = session.connection else { return }
        logger.info("session token no longer valid", ["peer": session.peerID, "reason": reason])
        output?.close(connection, code: CloseCode.tokenExpired, reason: reason)
    }

    /// `session.refresh {"access_token"}`: a fresh token of the same identity and app for the
    /// open session; its expiry is counted from the new token.
    func refreshToken(_ request: SessionRefresh, session: Session) throws(ErrorBody) -> Outcome {
        let token: VerifiedToken
        do { token = try tokens.verify(request.accessToken, now: Date(timeIntervalSince1970: Double(wallMillis) / 1000)) } catch {
            throw ErrorBody(error.code, error.description)
        }
        guard token.app.id == session.app.id, token.claims.sub == session.identity else {
            throw ErrorBody(.forbidden, "the token is for another identity or app than this session")
        }
        session.claims = token.claims
        session.secretTag = token.secretTag
        armTokenTimer(session)
        return Outcome(reply: ["token_expires_at": .int(token.claims.exp)])
    }

    /// The apps were read again: a session whose token was signed by a secret its app no
    /// longer accepts (a rotation's grace is over, or the secret was replaced at once) is closed
    /// with 4003, like an expired one.
    ///
    /// The sessions are looked at only when some app's accepted secrets lost one since the last
    /// time (a rotation): the check every `app_refresh_seconds` costs the loop nothing otherwise.
    /// `accepted`: each app's accepted secrets' tags (`acceptedSecretTags(_:at:)`), computed off
    /// the loop by the refresh; computed here when not given.
    func appsRefreshed(accepted given: [String: Set<String>]? = nil) {
        let accepted = given ?? Self.acceptedSecretTags(store.cachedApps(), at: Date(timeIntervalSince1970: Double(wallMillis) / 1000))
        let retired = Set(accepted.compactMap { id, tags in (acceptedSecretTags[id].map { !$0.isSubset(of: tags) } ?? false) ? id : nil })
        acceptedSecretTags = accepted
        guard !retired.isEmpty else { return }
        for session in sessions.all where session.connection != nil && retired.contains(session.app.id) {
            if accepted[session.app.id]?.contains(session.secretTag) == false {
                closeForToken(session, reason: "the app secret that signed the token was rotated")
            }
        }
    }

    /// Each app's accepted secrets at `date`, as tags (hashing them is the store thread's work,
    /// not the loop's).
    static func acceptedSecretTags(_ apps: [App], at date: Date) -> [String: Set<String>] {
        apps.reduce(into: [:]) { tags, app in tags[app.id] = Set(app.acceptedSecrets(at: date).map(secretTag)) }
    }

    /// Reads the apps again every `app_refresh_seconds`, off the loop (apps made and secrets
    /// rotated by `switchboard app …` in another process), then closes the sessions whose
    /// secret is no longer accepted.
    func refreshAppsPeriodically() {
        _ = scheduler?.schedule(after: .seconds(configuration.limits.appRefreshSeconds)) { [weak self] in
            guard let self else { return }
            withStore(for: Store.appsLane, { store in
                try store.refreshApps()
                return Self.acceptedSecretTags(store.cachedApps(), at: Date())
            }, afterQueuedWrites: false) { [weak self] result in
                guard let self else { return }
                switch result {
                case .success(let accepted): appsRefreshed(accepted: accepted)
                case .failure(let error): logger.warning("reading the apps again failed", ["error": "\(error)"])
                }
                refreshAppsPeriodically()
            }
        }
    }

    private var sessionLimits: SessionLimits {
        let limits = configuration.limits
        return SessionLimits(
            maxMessageBytes: limits.maxMessageBytes, maxDataBytes: limits.maxDataBytes,
            messagesPerSecond: limits.messagesPerSecond, pingIntervalSeconds: limits.pingIntervalSeconds,
            idleTimeoutSeconds: limits.idleTimeoutSeconds, resumeGraceSeconds: limits.resumeGraceSeconds)
    }

    func reattach(_ session: Session, to connection: ConnectionID, claims: AccessTokenClaims, replay: [OutboundFrame], from: UInt64) {
        if let old = sessions.attach(session, to: connection) {
            // The old connection is still open (a half-dead socket): this one replaces it.
            output?.close(old, code: CloseCode.replaced, reason: "replaced by a resumed connection")
        }
        if let timer = session.graceTimer {
            scheduler?.cancel(timer)
            session.graceTimer = nil
        }
        session.claims = claims
        armTokenTimer(session)
        metrics.increment("switchboard_resumes_total", ["outcome": "resumed"])
        logger.info("session resumed", ["peer": session.peerID, "conn": connection.description, "replayed": String(replay.count)])
        sendControl(MessageType.sessionResumed, SessionResumed(peerID: session.peerID, replayFrom: from, replayCount: replay.count), to: session)
        for frame in replay { transmit(frame, to: session) }
    }

    /// A connection closed. A clean close by the client ends the session; anything else starts
    /// the grace period in which the client may resume.
    func disconnected(_ connection: ConnectionID, reason: CloseReason) {
        metrics.add("switchboard_connections", -1)
        metrics.increment("switchboard_disconnects_total", ["reason": reason.label])
        pendingResumes.remove(connection)
        framesBeforeSession.removeValue(forKey: connection)
        guard let session = sessions.detach(connection) else { return }
        if case .peer(let code) = reason, code == 1000 || code == 1001 {
            end(session, reason: .left)
            return
        }
        startGrace(session, reason: reason.label)
    }

    /// A detached session waits `resume_grace_seconds` for its client, then ends.
    func startGrace(_ session: Session, reason: String) {
        let grace = configuration.limits.resumeGraceSeconds
        logger.debug("session detached", ["peer": session.peerID, "reason": reason, "grace_seconds": String(grace)])
        session.graceTimer = scheduler?.schedule(after: .seconds(grace)) { [weak self, weak session] in
            guard let self, let session, session.connection == nil else { return }
            session.graceTimer = nil
            self.logger.info("resume grace expired", ["peer": session.peerID])
            self.end(session, reason: .disconnected)
        }
    }

    /// Ends a session: it leaves its rooms (others hear `reason`) and can no longer be resumed.
    func end(_ session: Session, reason: PeerLeftReason) {
        if let timer = session.graceTimer { scheduler?.cancel(timer) }
        if let timer = session.tokenTimer { scheduler?.cancel(timer) }
        for name in session.rooms.sorted() {
            let key = RoomKey(appID: session.app.id, name: name)
            if rooms.room(key) == nil, let home = roomHomes[key] {
                leaveElsewhere(key, home: home, peerID: session.peerID, reason: reason)
            } else if let effects = try? rooms.leave(key, peerID: session.peerID, reason: reason) {
                apply(effects)
            }
        }
        let elsewhere = session.rooms.map { RoomKey(appID: session.app.id, name: $0) }.filter { roomHomes[$0] != nil }
        session.rooms.removeAll()
        if let connection = sessions.remove(session) {
            output?.close(connection, code: 1000, reason: "session ended")
        }
        // Now that the session is gone, the rooms' homes nobody here uses are forgotten.
        for key in elsewhere { forgetHomeIfUnused(key) }
        participantSessionsChanged(appID: session.app.id, identity: session.identity)
        logger.debug("session ended", ["peer": session.peerID, "reason": reason.rawValue])
    }
}
