import Foundation
import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardSupport
import SwitchboardCore

extension Hub {
    // MARK: Connections

    /// A connection authenticated as `claims` opened; starts or resumes its session.
    func connected(_ connection: ConnectionID, claims: AccessTokenClaims, app: App, resume: ResumeRequest?, deviceID: String?) {
        metrics.increment("switchboard_connections_total")
        metrics.add("switchboard_connections", 1)
        var resumeFailed = false
        if let resume {
            if let session = sessions.session(resumeToken: resume.token), session.app.id == app.id, session.identity == claims.sub {
                if let missed = session.log.events(after: resume.lastSequence, newest: session.lastSequence) {
                    reattach(session, to: connection, claims: claims, replay: missed, from: resume.lastSequence + 1)
                    return
                }
                logger.info("resume impossible, events lost", ["peer": session.peerID])
                end(session, reason: .disconnected)
            }
            resumeFailed = true
            metrics.increment("switchboard_resumes_total", ["outcome": "failed"])
        }
        let limits = configuration.limits
        let session = Session(
            peerID: "p_" + RandomID.alphanumeric(16), app: app, claims: claims, resumeToken: RandomID.alphanumeric(32),
            logCapacity: limits.resumeBufferEvents,
            rate: TokenBucket(rate: limits.messagesPerSecond, burst: limits.messageBurst, now: now))
        session.deviceID = deviceID
        sessions.add(session, on: connection)
        logger.debug("session opened", ["peer": session.peerID, "app": app.id, "identity": claims.sub, "conn": connection.description])
        let welcome = SessionWelcome(
            peerID: session.peerID, identity: claims.sub, resumeToken: session.resumeToken,
            serverTime: wallMillis, limits: sessionLimits, resumeFailed: resumeFailed)
        sendControl(MessageType.sessionWelcome, welcome, to: session)
        offerRingingCalls(to: session)
    }

    private var sessionLimits: SessionLimits {
        let limits = configuration.limits
        return SessionLimits(
            maxMessageBytes: limits.maxMessageBytes, maxDataBytes: limits.maxDataBytes,
            messagesPerSecond: limits.messagesPerSecond, pingIntervalSeconds: limits.pingIntervalSeconds,
            idleTimeoutSeconds: limits.idleTimeoutSeconds, resumeGraceSeconds: limits.resumeGraceSeconds)
    }

    private func reattach(_ session: Session, to connection: ConnectionID, claims: AccessTokenClaims, replay: [OutboundFrame], from: UInt64) {
        if let old = sessions.attach(session, to: connection) {
            // The old connection is still open (a half-dead socket): this one replaces it.
            output?.close(old, code: 4001, reason: "replaced by a resumed connection")
        }
        if let timer = session.graceTimer {
            scheduler?.cancel(timer)
            session.graceTimer = nil
        }
        session.claims = claims
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
        guard let session = sessions.detach(connection) else { return }
        if case .peer(let code) = reason, code == 1000 || code == 1001 {
            end(session, reason: .left)
            return
        }
        let grace = configuration.limits.resumeGraceSeconds
        logger.debug("session detached", ["peer": session.peerID, "reason": reason.label, "grace_seconds": String(grace)])
        session.graceTimer = scheduler?.schedule(after: .seconds(grace)) { [weak self, weak session] in
            guard let self, let session, session.connection == nil else { return }
            session.graceTimer = nil
            self.logger.info("resume grace expired", ["peer": session.peerID])
            self.end(session, reason: .disconnected)
        }
    }

    /// Ends a session: it leaves its rooms (others hear `reason`) and can no longer be resumed.
    private func end(_ session: Session, reason: PeerLeftReason) {
        if let timer = session.graceTimer { scheduler?.cancel(timer) }
        for name in session.rooms.sorted() {
            let key = RoomKey(appID: session.app.id, name: name)
            if let effects = try? rooms.leave(key, peerID: session.peerID, reason: reason) { apply(effects) }
        }
        session.rooms.removeAll()
        if let connection = sessions.remove(session) {
            output?.close(connection, code: 1000, reason: "session ended")
        }
        logger.debug("session ended", ["peer": session.peerID, "reason": reason.rawValue])
    }
}
