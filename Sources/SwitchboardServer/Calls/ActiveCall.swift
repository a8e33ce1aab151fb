import Synchronization
import SwitchboardProtocol
import SwitchboardCore
import SwitchboardSystem

/// A call the hub is running.
final class ActiveCall {
    var state: CallState
    let request: CallCreateRequest
    let media: CallMedia
    let callerName: String
    let handle: String
    /// The app's bundle id: its pushes' topic unless a device names its own.
    let topic: String
    /// Each callee's devices when the call started: where its pushes go.
    let devices: [String: [Device]]
    var ringTimer: TimerID?
    /// Read by the call's push tasks (no retry once it stops ringing); set on the loop.
    let ringing = RingFlag()

    init(
        state: CallState, request: CallCreateRequest, media: CallMedia, callerName: String, handle: String, topic: String,
        devices: [String: [Device]]
    ) {
        self.state = state
        self.request = request
        self.media = media
        self.callerName = callerName
        self.handle = handle
        self.topic = topic
        self.devices = devices
    }

    var video: Bool { request.video ?? false }
}

/// Whether one call still rings, for its push tasks on other threads: an atomic flag each
/// call owns (no lock shared between the loop and the pushes). Set once, on the loop.
final class RingFlag: Sendable {
    private let stopped = Atomic<Bool>(false)
    var isRinging: Bool { !stopped.load(ordering: .acquiring) }
    func stop() { stopped.store(true, ordering: .releasing) }
}
