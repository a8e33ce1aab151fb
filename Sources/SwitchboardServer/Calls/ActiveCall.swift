import Foundation
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
    /// The call's batches of effects (in a cluster) and replies, in order, each run once it is
    /// ready (a batch that saves the call, or on one node a mark for it, once the save is
    /// written: `Hub.perform`).
    private var outbox: [(id: Int, ready: Bool, run: () -> Void)] = []
    private var lastEntry = 0
    /// `continuation`'s fields that never change, encoded the first time it is asked for.
    fileprivate var encodedFixedFields: String?

    /// Queues `run`; returns its entry, for `markReady`.
    func enqueue(ready: Bool, _ run: @escaping () -> Void) -> Int {
        lastEntry += 1
        outbox.append((lastEntry, ready, run))
        return lastEntry
    }

    func markReady(_ entry: Int) {
        if let index = outbox.firstIndex(where: { $0.id == entry }) { outbox[index].ready = true }
    }

    /// The first queued entry, taken, if it is ready.
    func takeReady() -> (() -> Void)? {
        guard let first = outbox.first, first.ready else { return nil }
        outbox.removeFirst()
        return first.run
    }

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

extension ActiveCall {
    /// What another node needs to continue the call (stored with it in a cluster): its state
    /// and what it was started with.
    struct Continuation: Codable {
        var state: CallState.Snapshot
        var request: CallCreateRequest
        var media: CallMedia
        var callerName: String
        var handle: String
        var topic: String
        var allowedTopics: [String]
        var devices: [String: [Device]]
    }

    /// The continuation as the store keeps it (JSON): a `Continuation`, written at every
    /// transition, so what the call started with is written once (`fixedFields`) and only the
    /// state each time, without Foundation's encoder, which cost more than the rest of a save
    /// (`Snapshot.jsonMembers`; what `Continuation`'s encoder would write, as a test checks).
    var continuation: String {
        let state = JSONText.serialize(members: state.snapshot.jsonMembers)
        let fixed = fixedFields
        var text = #"{"state":"#
        text.reserveCapacity(state.count + fixed.utf8.count + 12)
        text += String(decoding: state, as: UTF8.self)
        text += fixed
        return text
    }

    /// The fixed part of `continuation`: its members after the state, from the comma to the
    /// closing brace.
    private var fixedFields: String {
        if let encodedFixedFields { return encodedFixedFields }
        let object = JSONText.serialize(members: [
            ("request", request.json), ("media", media.json), ("callerName", .string(callerName)), ("handle", .string(handle)),
            ("topic", .string(topic)), ("allowedTopics", .array(allowedTopics.sorted().map(JSONValue.string))),
            ("devices", .object(devices.mapValues { .array($0.map(\.storedJSON)) })),
        ])
        // The object's opening brace becomes the comma that follows the state.
        let fields = "," + String(decoding: object.dropFirst(), as: UTF8.self)
        encodedFixedFields = fields
        return fields
    }

    /// The call a stored continuation describes, continued on this node at `now`; nil when
    /// the text is not one.
    convenience init?(continuing text: String, now: ContinuousClock.Instant, nowMillis: Int64) {
        guard let value = try? JSONDecoder().decode(Continuation.self, from: Data(text.utf8)),
            let state = CallState(continuing: value.state, now: now, nowMillis: nowMillis)
        else { return nil }
        self.init(
            state: state, request: value.request, media: value.media, callerName: value.callerName, handle: value.handle, topic: value.topic,
            allowedTopics: Set(value.allowedTopics), devices: value.devices)
    }
}
