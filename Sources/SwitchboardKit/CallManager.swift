import Foundation
import SwitchboardProtocol

/// What the call manager tells the app.
public enum CallManagerEvent: Sendable, Equatable {
    case incoming(UUID, CallUpdate)
    case outgoingStarted(UUID)
    /// The call is up (answered here, or the callee answered an outgoing call).
    case connected(UUID)
    case ended(UUID, CallEndedReason)
    /// The user ended (or declined) the call on this device.
    case endedLocally(UUID)
    /// The system activated (true) or deactivated the audio session: start or stop media.
    case audioActive(Bool)
    case muted(UUID, Bool)
    case held(UUID, Bool)
}

/// Calls on a phone: turns VoIP pushes and server events into the system's call UI, and the
/// user's actions on that UI into requests to the server. The CallKit UUID of a call is the
/// server's call id, so a push and a WebSocket invite for one call are one call.
///
/// Wire it at launch, before anything else (PushKit requires it):
///
/// ```swift
/// let system = CallKitSystem(configuration: …)      // or SimulatedCallSystem() in tests
/// let calls = CallManager(client: client, system: system)
/// // PKPushRegistryDelegate:
/// calls.handleIncomingVoIPPush(payload: payload.dictionaryPayload as! [String: Any], completion: completion)
/// ```
public final class CallManager: CallSystemDelegate, @unchecked Sendable {
    // Safety: mutable state is in `calls`, under its lock; the rest is immutable.

    private enum Phase: Equatable {
        case ringing, answering, active, ended
    }

    private struct ManagedCall {
        var id: UUID
        var incoming: Bool
        var phase: Phase
        var room: String?
    }

    /// How long to wait for the server before failing an answer or ending an unknown call.
    public let serverTimeout: Duration
    /// The connection to the server.
    public let client: SwitchboardClient
    /// The phone's call UI.
    public let system: any CallSystem
    /// What happens to calls, for the app's UI and media.
    public let events: AsyncStream<CallManagerEvent>
    private let sink: AsyncStream<CallManagerEvent>.Continuation
    private let http: any HTTPTransport
    private let calls = Locked<[UUID: ManagedCall]>([:])
    private let listening = Locked<Task<Void, Never>?>(nil)

    /// Makes the manager the delegate of `system`. `http` defaults to the platform's transport.
    public init(client: SwitchboardClient, system: any CallSystem, http: (any HTTPTransport)? = nil, serverTimeout: Duration = .seconds(10)) {
        self.client = client
        self.system = system
        self.http = http ?? DefaultTransports.http()
        self.serverTimeout = serverTimeout
        (events, sink) = AsyncStream.makeStream(of: CallManagerEvent.self)
        system.delegate = self
    }

    /// Follows the client's events (call them before or after `client.connect()`).
    public func start() {
        let events = client.events()
        listening.withLock { task in
            task?.cancel()
            task = Task { [weak self] in
                for await event in events {
                    guard let self else { return }
                    switch event {
                    case .event(let type, let data, _): self.serverEvent(type, data)
                    case .sessionReplaced: Task { await self.resynchronize() }
                    default: break
                    }
                }
            }
        }
    }

    /// The calls the manager is following.
    public var liveCallIDs: [UUID] { calls.withLock { $0.values.filter { $0.phase != .ended }.map(\.id) } }

    // MARK: PushKit

    /// Handles a VoIP push. Reports a call to the system **before returning**, whatever the
    /// payload holds (a malformed, stale or unknown call is reported, then ended), then connects
    /// and asks the server for the call's state to end it at once if it is over.
    public func handleIncomingVoIPPush(payload: [String: Any], completion: @escaping @Sendable () -> Void) {
        let push = IncomingPush(payload)
        let callID = push.callID
        let id = callID ?? UUID()
        let update = push.update

        let known = calls.withLock { calls -> Bool in
            if calls[id] != nil { return true }
            calls[id] = ManagedCall(id: id, incoming: true, phase: .ringing)
            return false
        }
        system.reportNewIncomingCall(id, update: update) { _ in }
        if !known { sink.yield(.incoming(id, update)) }
        completion()

        guard callID != nil else {
            // Nothing to ring for: reported (as iOS demands), now ended.
            finish(id, reason: .failed)
            return
        }
        if let expires = push.ringExpiresAtMillis, expires / 1000 < Date().timeIntervalSince1970 - 5 {
            finish(id, reason: .unanswered)
            return
        }
        Task { await reconcile(id) }
    }

    /// A JSON number from a push payload, whatever type the platform's decoder gave it.
    static func number(_ value: Any?) -> Double? {
        switch value {
        case let number as Int: Double(number)
        case let number as Int64: Double(number)
        case let number as Double: number
        case let number as NSNumber: number.doubleValue
        default: nil
        }
    }

    /// After a session the server could not resume (it restarted, or the gap outlasted its grace
    /// period), events may be lost: asks about every live call and ends those that are over,
    /// including calls in progress here.
    private func resynchronize() async {
        for id in liveCallIDs { await reconcile(id, sessionLost: true) }
    }

    /// Connects if needed and ends the call if the server says it is over. A call answered here
    /// ends only after a lost session (otherwise its own events end it).
    private func reconcile(_ id: UUID, sessionLost: Bool = false) async {
        let deadline = ContinuousClock.now + serverTimeout
        while ContinuousClock.now < deadline {
            do {
                try await client.connect()
                let summary = try await client.callState(id.uuidString.lowercased(), http: http)
                // This device answering (or having answered) is not "answered elsewhere".
                let answeredHere = calls.withLock { $0[id].map { $0.phase == .answering || $0.phase == .active } ?? false }
                if answeredHere {
                    if sessionLost, summary["state"] == "ended" {
                        finish(id, reason: summary["outcome"] == "failed" ? .failed : .remoteEnded)
                    }
                } else if let reason = await endReason(from: summary) {
                    finish(id, reason: reason)
                }
                return
            } catch SwitchboardError.server(let error) where error.code == .notFound || error.code == .forbidden {
                finish(id, reason: .failed)
                return
            } catch {
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        finish(id, reason: .failed)
    }

    /// The reason to show for a call the server reports, or nil while it still rings for us.
    private func endReason(from summary: JSONValue) async -> CallEndedReason? {
        let me = await client.identity
        let mine = summary["callees"].flatMap { value -> JSONValue? in
            guard case .array(let callees) = value else { return nil }
            return callees.first { $0["identity"]?.stringValue == me }
        }
        let status = mine?["status"]?.stringValue
        switch summary["state"]?.stringValue {
        case "ringing":
            return status == "declined" ? .declinedElsewhere : status == "missed" ? .unanswered : nil
        case "accepted":
            if status == "accepted" { return .answeredElsewhere }
            if status == "declined" { return .declinedElsewhere }
            return status == "ringing" ? nil : .unanswered
        default:
            if status == "accepted" { return .answeredElsewhere }
            if status == "declined" { return .declinedElsewhere }
            switch summary["outcome"]?.stringValue {
            case "missed": return .unanswered
            case "failed": return .failed
            default: return .remoteEnded
            }
        }
    }

    /// Handles an alert push for a call on a device without CallKit (region policy
    /// `.noCallKit`): the app rings in its own UI, here the `system`.
    public func handleIncomingAlertPush(userInfo: [String: Any]) {
        guard userInfo["missed"] as? Bool != true else { return }
        handleIncomingVoIPPush(payload: userInfo) {}
    }

    // MARK: Outgoing

    /// Rings `callees`: creates the call on the server, then asks the system to show it with the
    /// server's call id as its UUID.
    public func startCall(to callees: [String], video: Bool = false, handle: String? = nil) async throws -> UUID {
        try await client.connect()
        let reply = try await client.request(
            MessageType.callCreate, encoding: CallCreateRequest(callees: callees, video: video, handle: handle))
        guard let callID = reply?["call_id"]?.stringValue, let id = UUID(uuidString: callID) else {
            throw SwitchboardError.invalidResponse("call.create returned no call id")
        }
        calls.withLock { $0[id] = ManagedCall(id: id, incoming: false, phase: .ringing, room: reply?["media"]?["room"]?.stringValue) }
        try await system.request(.start(id, handle: callees.joined(separator: ", "), video: video))
        sink.yield(.outgoingStarted(id))
        return id
    }

    // MARK: Server events

    private func serverEvent(_ type: String, _ data: JSONValue) {
        guard type.hasPrefix("call."), let callID = data["call_id"]?.stringValue, let id = UUID(uuidString: callID) else { return }
        switch type {
        case "call.incoming":
            let caller = data["caller"]
            let update = CallUpdate(
                handle: caller?["handle"]?.stringValue ?? caller?["identity"]?.stringValue ?? "",
                displayName: caller?["name"]?.stringValue ?? caller?["identity"]?.stringValue ?? "Unknown caller",
                hasVideo: data["video"] == true)
            let known = calls.withLock { calls -> Bool in
                if calls[id] != nil { return true }
                calls[id] = ManagedCall(id: id, incoming: true, phase: .ringing, room: data["media"]?["room"]?.stringValue)
                return false
            }
            if !known {
                system.reportNewIncomingCall(id, update: update) { _ in }
                sink.yield(.incoming(id, update))
            } else if let room = data["media"]?["room"]?.stringValue {
                calls.withLock { $0[id]?.room = room }
            }
        case "call.accepted":
            let outgoing = calls.withLock { calls -> Bool in
                guard let call = calls[id], !call.incoming, call.phase == .ringing else { return false }
                calls[id]?.phase = .active
                return true
            }
            if outgoing {
                system.reportOutgoingCallConnected(id)
                sink.yield(.connected(id))
            }
        case "call.answered_elsewhere": finish(id, reason: .answeredElsewhere)
        case "call.declined_elsewhere": finish(id, reason: .declinedElsewhere)
        case "call.cancelled": finish(id, reason: .remoteEnded)
        case "call.missed": finish(id, reason: .unanswered)
        case "call.ended":
            let outcome = data["outcome"]?.stringValue
            finish(id, reason: outcome == "failed" ? .failed : outcome == "missed" ? .unanswered : .remoteEnded)
        default:
            break
        }
    }

    /// Ends a call on the system's UI once.
    private func finish(_ id: UUID, reason: CallEndedReason) {
        let wasLive = calls.withLock { calls -> Bool in
            guard let call = calls[id], call.phase != .ended else { return false }
            calls[id]?.phase = .ended
            return true
        }
        guard wasLive else { return }
        system.reportCall(id, endedAt: Date(), reason: reason)
        sink.yield(.ended(id, reason))
    }

    // MARK: CallSystemDelegate

    /// Performs a user's action against the server and fulfils or fails it in time.
    public func callSystem(perform action: CallAction, completion: ActionCompletion) {
        let id = action.callID
        let callID = id.uuidString.lowercased()
        switch action {
        case .start:
            completion.fulfill()  // created on the server before the system was asked
        case .answer:
            let known = calls.withLock { calls -> Bool in
                guard calls[id]?.phase == .ringing else { return false }
                calls[id]?.phase = .answering
                return true
            }
            guard known else {
                completion.fail()
                return
            }
            // Hold the answer until the server confirms; fail it if the call is over.
            let timeout = serverTimeout
            Task {
                let deadline = ContinuousClock.now + timeout
                while ContinuousClock.now < deadline {
                    do {
                        try await client.connect()
                        // The answer action must end by the deadline, whatever the network does.
                        try await client.request(
                            MessageType.callAnswer, encoding: CallActionRequest(callID: callID), timeout: deadline - ContinuousClock.now)
                        calls.withLock { $0[id]?.phase = .active }
                        completion.fulfill()
                        sink.yield(.connected(id))
                        return
                    } catch SwitchboardError.server(let error) {
                        completion.fail()
                        finish(id, reason: error.message.contains("another device") ? .answeredElsewhere : .remoteEnded)
                        return
                    } catch {
                        try? await Task.sleep(for: .milliseconds(200))
                    }
                }
                completion.fail()
                finish(id, reason: .failed)
            }
        case .end:
            let call = calls.withLock { calls -> ManagedCall? in
                let call = calls[id]
                calls[id]?.phase = .ended
                return call
            }
            // Fulfil at once (hanging up must never wait for the network); tell the server after.
            completion.fulfill()
            guard let call, call.phase != .ended else { return }
            let type: String
            if call.incoming && call.phase == .ringing {
                type = MessageType.callDecline
            } else if !call.incoming && call.phase == .ringing {
                type = MessageType.callCancel
            } else {
                type = MessageType.callEnd
            }
            sink.yield(.endedLocally(id))
            Task { try? await client.request(type, encoding: CallActionRequest(callID: callID, reason: "hangup")) }
        case .setMuted(_, let muted):
            completion.fulfill()
            sink.yield(.muted(id, muted))
        case .setHeld(_, let held):
            completion.fulfill()
            sink.yield(.held(id, held))
        case .playDTMF(_, let digits):
            // DTMF travels as signaling: a data message in the call's room.
            let room = calls.withLock { $0[id]?.room }
            completion.fulfill()
            if let room {
                Task { try? await client.request(MessageType.data, encoding: DataRequest(room: room, data: ["dtmf": .string(digits)])) }
            }
        }
    }

    /// Passes audio activation on to the app (`CallManagerEvent.audioActive`).
    public func callSystem(didChangeAudioActive active: Bool) {
        sink.yield(.audioActive(active))
    }

    /// Ends every call on the server after the call UI dropped them.
    public func callSystemDidReset() {
        // Every call is gone from the UI: end them on the server too.
        let live = calls.withLock { calls -> [ManagedCall] in
            let live = calls.values.filter { $0.phase != .ended }
            for call in live { calls[call.id]?.phase = .ended }
            return live
        }
        for call in live {
            let type = call.phase == .ringing ? (call.incoming ? MessageType.callDecline : MessageType.callCancel) : MessageType.callEnd
            sink.yield(.ended(call.id, .failed))
            Task { try? await client.request(type, encoding: CallActionRequest(callID: call.id.uuidString.lowercased(), reason: "reset")) }
        }
    }
}

/// What a VoIP push says, read leniently: any payload gives a call to report (iOS demands
/// one for every VoIP push), with defaults for what is missing or of the wrong type.
public struct IncomingPush: Sendable {
    /// The server's call id (`call_id`, else `UUID`), nil when absent or not a UUID.
    public var callID: UUID?
    /// What the call screen shows.
    public var update: CallUpdate
    /// When ringing stops, in milliseconds since 1970, when the payload says.
    public var ringExpiresAtMillis: Double?

    /// Reads a push payload as PushKit delivers it.
    public init(_ payload: [String: Any]) {
        callID = (payload["call_id"] as? String).flatMap(UUID.init(uuidString:))
            ?? (payload["UUID"] as? String).flatMap(UUID.init(uuidString:))
        let caller = payload["caller"] as? [String: Any]
        let name = (caller?["name"] as? String) ?? (caller?["identity"] as? String) ?? "Unknown caller"
        let handle = (caller?["handle"] as? String) ?? (payload["handle"] as? String) ?? name
        let video = (payload["video"] as? Bool) ?? (payload["hasVideo"] as? Bool) ?? false
        update = CallUpdate(handle: handle, displayName: name, hasVideo: video)
        ringExpiresAtMillis = CallManager.number(payload["ring_expires_at"])
    }
}
