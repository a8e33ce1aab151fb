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
    /// The app's bundle id: its pushes' topic unless a device registered with another of the
    /// app's (`allowedTopics`).
    let topic: String
    /// The app's bundle ids (`App.bundleIDs`): the only topics its pushes use.
    let allowedTopics: Set<String>
    /// Each callee's devices when the call started: where its pushes go.
    let devices: [String: [Device]]
    var ringTimer: TimerID?
    /// Ends the call at `max_call_duration_seconds`.
    var durationTimer: TimerID?
    /// Armed while nobody in the answered call has a session (`call_unattended_seconds`).
    var unattendedTimer: TimerID?
    /// Read by the call's push tasks (no retry once it stops ringing); set on the loop.
    let ringing = RingFlag()

    init(
        state: CallState, request: CallCreateRequest, media: CallMedia, callerName: String, handle: String, topic: String,
        allowedTopics: Set<String>, devices: [String: [Device]]
    ) {
        self.allowedTopics = allowedTopics
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
