import SwitchboardProtocol
import SwitchboardSystem

/// An event for a session: its type, and its data as a value or as JSON bytes already written
/// (a relayed signal, spliced from the bytes it arrived as). The session adds its `seq`.
package struct OutgoingEvent {
    package enum Data {
        case value(JSONValue)
        case encoded([UInt8])
    }

    package var type: String
    package var data: Data

    package init(type: String, data: Data) {
        self.type = type
        self.data = data
    }

    package init(_ event: RoomEvent) { self.init(type: event.type, data: .value(event.data)) }
    package init(_ event: CallEvent) { self.init(type: event.type, data: .value(event.data)) }
}

/// Where one delivery to a user's device went.
package struct DeliveryReceipt: Equatable, Sendable {
    /// How call events address the device (`CallState.DeviceKey`).
    package var device: String
    /// False when the session is detached (in its resume grace): the event waits in its log.
    package var attached: Bool
}

/// The invite of a call, delivered to a callee: where it went is reported to the call's owner
/// (`Hub.invitationDelivered`), as an event, never as the delivery's return: the sessions of
/// this node at once, those of other nodes when their node answers.
package struct Invitation: Sendable {
    package var callID: String
    package var callee: String
}

/// The seam between the hub's decisions and where the receiving sessions are connected: every
/// event the hub sends to a session goes through it. `LocalDelivery` delivers within this
/// process; with several nodes, `ClusterDelivery` delivers what is local through it and
/// publishes the rest to the nodes holding the user's other sessions.
package protocol EventDelivery: AnyObject {
    /// To one session by peer id (a room member).
    func deliver(_ event: OutgoingEvent, toPeer peerID: String)
    /// To every session of `identity` in `appID`, except the one on device `except`.
    /// `invitation`: the event is a call's invite, whose receipts go to the call's owner.
    func deliver(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, invitation: Invitation?)
}

/// Delivery to the sessions of this process: sequenced, kept for resume, written if attached.
final class LocalDelivery: EventDelivery {
    unowned let hub: Hub

    init(hub: Hub) { self.hub = hub }

    func deliver(_ event: OutgoingEvent, toPeer peerID: String) {
        guard let session = hub.session(peerID: peerID) else { return }
        hub.sendEvent(event, to: session)
    }

    func deliver(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, invitation: Invitation?) {
        deliver(event, toUser: identity, appID: appID, except: except, invitation: invitation, eventID: nil)
    }

    /// `eventID`: the event's id in a cluster (each session gets it once).
    func deliver(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, invitation: Invitation?, eventID: String?) {
        let receipts = deliverHere(event, toUser: identity, appID: appID, except: except, eventID: eventID)
        if let invitation { hub.invitationDelivered(receipts, invitation) }
    }

    /// Delivers to the user's sessions on this node and says where it went. `openedBy`: only to
    /// the sessions opened here by then (wall clock, ms).
    func deliverHere(
        _ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, eventID: String? = nil, openedBy: Int64? = nil
    ) -> [DeliveryReceipt] {
        var receipts: [DeliveryReceipt] = []
        for session in hub.sessions.sessions(ofUser: Hub.userKey(appID, identity)) where session.deviceKey != except {
            if let openedBy, session.openedAtMillis > openedBy { continue }
            if let eventID, !session.note(eventID: eventID) { continue }
            hub.sendEvent(event, to: session)
            receipts.append(DeliveryReceipt(device: session.deviceKey, attached: session.connection != nil))
        }
        return receipts
    }
}
