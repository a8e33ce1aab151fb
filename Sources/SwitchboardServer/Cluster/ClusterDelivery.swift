import SwitchboardProtocol
import SwitchboardSystem

/// Delivery across the cluster: the user's sessions on this node at once (through
/// `LocalDelivery`), and a publish on the user's channel for the nodes holding the others.
final class ClusterDelivery: EventDelivery {
    let local: LocalDelivery
    let cluster: Cluster

    init(local: LocalDelivery, cluster: Cluster) {
        self.local = local
        self.cluster = cluster
    }

    /// A room member here, or on the node its session is on (a member of a room this node
    /// runs).
    func deliver(_ event: OutgoingEvent, toPeer peerID: String) {
        if local.hub.session(peerID: peerID) != nil { return local.deliver(event, toPeer: peerID) }
        guard let node = local.hub.remoteMembers[peerID] else { return }
        let data: JSONValue
        switch event.data {
        case .value(let value): data = value
        case .encoded(let bytes): data = JSONText.parse(bytes) ?? .null
        }
        cluster.tell("peer", ["peer": .string(peerID), "type": .string(event.type), "data": data], toNode: node)
    }

    func deliver(_ event: OutgoingEvent, toUser identity: String, appID: String, except: String?, invitation: Invitation?) {
        let eventID = cluster.nextEventID()
        local.deliver(event, toUser: identity, appID: appID, except: except, invitation: invitation, eventID: eventID)
        // A session of the user on its way here from another node gets it once here: that
        // node may hand the session over before the event reaches it there.
        local.hub.heldUserEvents[Hub.userKey(appID, identity)]?.events.append((eventID, event, except))
        cluster.publish(event, toUser: identity, appID: appID, except: except, invitation: invitation, eventID: eventID)
    }
}
