import SwitchboardProtocol
import Testing

import SwitchboardCore

/// The room state machine on its own: no sockets, a fixed clock.
@Suite(.timeLimit(.minutes(3))) struct RoomDirectoryTests {
    let t0 = ContinuousClock.now
    let key = RoomKey(appID: "app", name: "r")

    func peer(_ id: String) -> PeerDescription { PeerDescription(peerID: id, identity: id) }

    func directory(max: Int = 3) -> RoomDirectory {
        RoomDirectory(settings: .init(maxParticipants: max, emptyTimeout: .seconds(60), maxRoomsPerApp: 2))
    }

    @Test func firstJoinCreatesTheRoomAndDisarmsNothingLaterJoinsNotify() throws {
        var rooms = directory()
        let first = try rooms.join(key, peer: peer("a"), now: t0, wallMillis: 0)
        #expect(first.others.isEmpty)
        #expect(first.effects == [.disarmEmptyTimer(key)])
        let second = try rooms.join(key, peer: peer("b"), now: t0, wallMillis: 0)
        #expect(second.others == [peer("a")])
        #expect(second.effects == [.send(.peerJoined(room: "r", peer: peer("b")), to: "a")])
        let again = try rooms.join(key, peer: peer("b"), now: t0, wallMillis: 0)
        #expect(again.effects.isEmpty, "joining twice is idempotent")
    }

    @Test(arguments: [
        (PeerLeftReason.left, [RoomDirectory.Effect.send(.peerLeft(room: "r", peerID: "b", reason: .left), to: "a")]),
        (.disconnected, [.send(.peerLeft(room: "r", peerID: "b", reason: .disconnected), to: "a")]),
        (.kicked, [.send(.peerLeft(room: "r", peerID: "b", reason: .kicked), to: "a"), .send(.closed(room: "r", reason: .kicked), to: "b")]),
    ])
    func leavingTellsTheOthersWhy(reason: PeerLeftReason, expected: [RoomDirectory.Effect]) throws {
        var rooms = directory()
        _ = try rooms.join(key, peer: peer("a"), now: t0, wallMillis: 0)
        _ = try rooms.join(key, peer: peer("b"), now: t0, wallMillis: 0)
        let effects = try rooms.leave(key, peerID: "b", reason: reason)
        #expect(effects == expected)
    }

    @Test func theLastToLeaveArmsTheEmptyTimerAndOnlyAnEmptyRoomCloses() throws {
        var rooms = directory()
        _ = try rooms.join(key, peer: peer("a"), now: t0, wallMillis: 0)
        let effects = try rooms.leave(key, peerID: "a", reason: .left)
        #expect(effects == [.armEmptyTimer(key, after: .seconds(60))])
        _ = try rooms.join(key, peer: peer("b"), now: t0, wallMillis: 0)
        let closedWhileOccupied = rooms.closeIfEmpty(key)
        #expect(!closedWhileOccupied, "someone joined before the timer fired")
        _ = try rooms.leave(key, peerID: "b", reason: .left)
        let closedWhenEmpty = rooms.closeIfEmpty(key)
        #expect(closedWhenEmpty)
        #expect(rooms.room(key) == nil)
    }

    @Test func limitsAndErrors() throws {
        var rooms = directory(max: 1)
        _ = try rooms.join(key, peer: peer("a"), now: t0, wallMillis: 0)
        var full = rooms
        #expect(throws: RoomError.full("r", limit: 1)) { try full.join(key, peer: peer("b"), now: t0, wallMillis: 0) }
        #expect(throws: RoomError.peerNotInRoom(peer: "z", room: "r")) { try rooms.signal(key, from: "a", to: "z", signal: 1) }
        #expect(throws: RoomError.peerNotInRoom(peer: "a", room: "r")) { try rooms.signal(key, from: "a", to: "a", signal: 1) }
        #expect(throws: RoomError.notInRoom("r")) { try rooms.signal(key, from: "z", to: "a", signal: 1) }
        var scratch = rooms
        #expect(throws: RoomError.notInRoom("r")) { try scratch.leave(key, peerID: "z", reason: .left) }
        _ = try rooms.create(RoomKey(appID: "app", name: "second"), now: t0, wallMillis: 0)
        scratch = rooms
        #expect(throws: RoomError.tooManyRooms(limit: 2)) { try scratch.create(RoomKey(appID: "app", name: "third"), now: t0, wallMillis: 0) }
        #expect(throws: RoomError.alreadyExists("r")) { try scratch.create(key, now: t0, wallMillis: 0) }
    }

    @Test func deleteTellsEveryMember() throws {
        var rooms = directory()
        _ = try rooms.join(key, peer: peer("a"), now: t0, wallMillis: 0)
        _ = try rooms.join(key, peer: peer("b"), now: t0, wallMillis: 0)
        let result = try rooms.delete(key)
        #expect(result.members == ["a", "b"])
        #expect(result.effects == [
            .send(.closed(room: "r", reason: .deleted), to: "a"), .send(.closed(room: "r", reason: .deleted), to: "b"),
            .disarmEmptyTimer(key),
        ])
    }
}
