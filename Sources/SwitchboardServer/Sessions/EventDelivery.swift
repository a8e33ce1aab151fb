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
package struct DeliveryReceipt: Equatable {
    /// How call events address the device (`CallState.DeviceKey`).
    package var device: String
    /// False when the session is detached (in its resume grace): the event waits in its log.
    package var attached: Bool
}

/// The seam between the hub's decisions and where the receiving sessions are connected: every
/// event the hub sends to a session goes through it. `LocalDelivery` delivers within this
/// process; with several nodes, an implementation backed by Redis delivers what is local
/// through it and forwards the rest to the node holding the session.
package protocol EventDelivery: AnyObject {
    /// To one session by peer id (a room member).
    func deliver(_ event: OutgoingEvent, toPeer peerID: String)
    /// To every session of `identity` in `appID`, except the one on device `except`.
    @discardableResult
    func deliver(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?) -> [DeliveryReceipt]
}

/// Delivery to the sessions of this process: sequenced, kept for resume, written if attached.
final class LocalDelivery: EventDelivery {
    unowned let hub: Hub

    init(hub: Hub) { self.hub = hub }

    func deliver(_ event: OutgoingEvent, toPeer peerID: String) {
        guard let session = hub.session(peerID: peerID) else { return }
        hub.sendEvent(event, to: session)
    }

    func deliver(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?) -> [DeliveryReceipt] {
        var receipts: [DeliveryReceipt] = []
        for session in hub.sessions.sessions(ofUser: Hub.userKey(appID, identity)) where session.deviceKey != except {
            hub.sendEvent(event, to: session)
            receipts.append(DeliveryReceipt(device: session.deviceKey, attached: session.connection != nil))
        }
        return receipts
    }
}
