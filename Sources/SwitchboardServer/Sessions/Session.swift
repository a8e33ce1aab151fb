import SwitchboardProtocol
import SwitchboardSystem
import SwitchboardCore

/// One client session: a peer id that outlives its connection for the resume grace period.
final class Session {
    /// The session id, also the peer id others see in rooms.
    let peerID: String
    let app: App
    /// The claims of the token the session was opened (or last resumed) with.
    var claims: AccessTokenClaims
    /// The connection it is attached to; nil while detached (within the grace period).
    var connection: ConnectionID?
    /// Lets a new connection take this session over. A secret: never logged.
    let resumeToken: String
    /// The `seq` of the last event sent; events count from 1.
    var lastSequence: UInt64 = 0
    /// Recent events, kept for replay on resume.
    var log: EventLog
    /// Names of the rooms it is in.
    var rooms: Set<String> = []
    /// Rooms whose join waits for the node running them (a cluster), with how many joins: they
    /// count against `max_rooms_per_peer` with `rooms`.
    var joining: [String: Int] = [:]
    var graceTimer: TimerID?
    /// The timer of the token's expiry: first the warning (`session.expiring`), then the close.
    var tokenTimer: TimerID?
    /// Which app secret signed its token (`Hub.secretTag`): once the app no longer accepts
    /// that secret (a rotation's grace is over), the connection is closed.
    var secretTag: String
    var rate: TokenBucket
    /// The registered device this connection belongs to (`device_id` on `/v1/ws`), if any.
    var deviceID: String?
    /// In a cluster: the ids of the last user events it got (`ClusterDelivery`), so that an
    /// event that reaches it twice while it moves between nodes is delivered once.
    private(set) var recentEventIDs: [String] = []
    /// When it was opened here (wall clock, ms): the user events a node catches up on after
    /// losing its subscription go only to sessions that were open when they were published.
    var openedAtMillis: Int64 = 0

    /// Replies waiting for the reply to an earlier request that is answered later (after the
    /// store or another node), so that replies go out in the order their requests arrived.
    /// Empty almost always: a reply then goes out at once.
    var repliesInOrder: [(slot: UInt64, frame: OutboundFrame?)] = []
    /// The number the next reply answered later waits under.
    var nextReplySlot: UInt64 = 0

    /// Notes a user event's id; false when it had it already.
    func note(eventID: String) -> Bool {
        guard !recentEventIDs.contains(eventID) else { return false }
        recentEventIDs.append(eventID)
        if recentEventIDs.count > 64 { recentEventIDs.removeFirst(recentEventIDs.count - 64) }
        return true
    }

    /// How call events address this connection's device.
    var deviceKey: String { deviceID ?? "session:" + peerID }

    init(
        peerID: String, app: App, claims: AccessTokenClaims, secretTag: String, resumeToken: String, log: EventLog, rate: TokenBucket
    ) {
        self.peerID = peerID
        self.app = app
        self.claims = claims
        self.secretTag = secretTag
        self.resumeToken = resumeToken
        self.log = log
        self.rate = rate
    }

    var identity: String { claims.sub }

    var description: PeerDescription {
        PeerDescription(peerID: peerID, identity: claims.sub, name: claims.name)
    }
}

/// The last events sent on a session, by `seq`, for replay after a reconnect: at most
/// `capacity` of them (`resume_buffer_events`) and `maxBytes` of their frames
/// (`resume_buffer_bytes`), the oldest dropped first.
struct EventLog {
    let capacity: Int
    let maxBytes: Int
    private var entries: [(seq: UInt64, frame: OutboundFrame)] = []
    private var head = 0
    /// The bytes of the frames kept.
    private(set) var bytes = 0

    init(capacity: Int, maxBytes: Int) {
        self.capacity = capacity
        self.maxBytes = maxBytes
    }

    var count: Int { entries.count - head }

    mutating func append(seq: UInt64, frame: OutboundFrame) {
        entries.append((seq, frame))
        bytes += frame.count
        while count > capacity || (bytes > maxBytes && count > 0) {
            bytes -= entries[head].frame.count
            head += 1
        }
        if head > 64 && head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
    }

    /// The events after `seq`, or nil when some of them are no longer kept.
    func events(after seq: UInt64, newest: UInt64) -> [OutboundFrame]? {
        numbered(after: seq, newest: newest)?.map(\.frame)
    }

    /// The events after `seq` with their `seq`, or nil when some are no longer kept.
    func numbered(after seq: UInt64, newest: UInt64) -> [(seq: UInt64, frame: OutboundFrame)]? {
        if seq == newest { return [] }
        guard seq < newest, let oldest = entries[head...].first?.seq, oldest <= seq + 1 else { return nil }
        return entries[head...].filter { $0.seq > seq }
    }
}
