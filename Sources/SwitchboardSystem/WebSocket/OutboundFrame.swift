// Frames ready to send, and the per-connection queue that writes them.

import SwitchboardProtocol
import SwitchboardSupport
internal import CLibWebSockets
internal import CShims
import Foundation
import Synchronization

// MARK: - Outbound frames

/// A WebSocket message ready to send, with libwebsockets' header room in front. On the server
/// one frame can be queued on many connections (fan-out) without copying. A client connection
/// masks the payload in place as it sends it (RFC 6455 5.3), so a frame goes out on a client
/// connection once.
public final class OutboundFrame: @unchecked Sendable {
    // Safety: the bytes are written once in init; libwebsockets writes the frame header into
    // the reserved room in front only on the loop thread, one connection at a time.
    let storage: UnsafeMutableRawPointer
    public let count: Int
    public let isBinary: Bool

    public init(_ payload: some Collection<UInt8>, binary: Bool = false) {
        count = payload.count
        isBinary = binary
        storage = .allocate(byteCount: Int(sb_lws_pre) + max(count, 1), alignment: 16)
        let body = storage.advanced(by: Int(sb_lws_pre)).assumingMemoryBound(to: UInt8.self)
        _ = UnsafeMutableBufferPointer(start: body, count: count).initialize(from: payload)
    }

    public convenience init(text: String) {
        self.init(Array(text.utf8))
    }

    deinit { storage.deallocate() }

    /// The payload bytes.
    public var bytes: [UInt8] {
        Array(UnsafeRawBufferPointer(start: storage.advanced(by: Int(sb_lws_pre)), count: count))
    }
}

/// A bounded queue of outgoing frames for one connection.
struct SendQueue {
    private var frames: [OutboundFrame] = []
    private var head = 0
    private(set) var bytes = 0

    var isEmpty: Bool { head == frames.count }
    var count: Int { frames.count - head }

    mutating func append(_ frame: OutboundFrame) {
        frames.append(frame)
        bytes += frame.count
    }

    var first: OutboundFrame? { head < frames.count ? frames[head] : nil }

    mutating func popFirst() -> OutboundFrame? {
        guard head < frames.count else { return nil }
        let frame = frames[head]
        head += 1
        bytes -= frame.count
        if head == frames.count {
            frames.removeAll(keepingCapacity: frames.count < 64)
            head = 0
        }
        return frame
    }
}

/// Writes the queued frames, up to `coalesceLimit` bytes of them, with one system call: each
/// gets its (unmasked, final) server frame header here and the whole run goes out as raw bytes
/// (libwebsockets passes raw writes through on a WebSocket, buffering what the socket does
/// not take). One `send()` per frame was a third of the relay's CPU. False if the write failed.
func writeFrames(_ wsi: OpaquePointer, _ queue: inout SendQueue) -> Bool {
    guard queue.count > 1 else { return queue.popFirst().map { writeFrame(wsi, $0) } ?? true }
    var batch: [OutboundFrame] = []
    var total = 0
    while let frame = queue.first, batch.isEmpty || total + frame.count + 10 <= coalesceLimit {
        batch.append(queue.popFirst()!)
        total += frame.count + (frame.count < 126 ? 2 : frame.count < 65_536 ? 4 : 10)
    }
    if batch.count == 1 { return writeFrame(wsi, batch[0]) }
    let pre = Int(sb_lws_pre)
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: pre + total, alignment: 16)
    defer { buffer.deallocate() }
    var offset = pre
    for frame in batch {
        let bytes = buffer.assumingMemoryBound(to: UInt8.self)
        bytes[offset] = frame.isBinary ? 0x82 : 0x81
        if frame.count < 126 {
            bytes[offset + 1] = UInt8(frame.count)
            offset += 2
        } else if frame.count < 65_536 {
            bytes[offset + 1] = 126
            bytes[offset + 2] = UInt8(frame.count >> 8)
            bytes[offset + 3] = UInt8(frame.count & 0xff)
            offset += 4
        } else {
            bytes[offset + 1] = 127
            for index in 0..<8 { bytes[offset + 2 + index] = UInt8((UInt64(frame.count) >> (56 - 8 * UInt64(index))) & 0xff) }
            offset += 10
        }
        (buffer + offset).copyMemory(from: frame.storage.advanced(by: pre), byteCount: frame.count)
        offset += frame.count
    }
    let written = lws_write(wsi, buffer.assumingMemoryBound(to: UInt8.self) + pre, total, LWS_WRITE_HTTP)  // LWS_WRITE_RAW
    return written >= total
}

/// How many bytes of queued frames one coalesced write carries at most.
let coalesceLimit = 64 * 1024

func writeFrame(_ wsi: OpaquePointer, _ frame: OutboundFrame) -> Bool {
    let body = frame.storage.advanced(by: Int(sb_lws_pre)).assumingMemoryBound(to: UInt8.self)
    let kind = frame.isBinary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT
    let written = lws_write(wsi, body, frame.count, kind)
    return written >= frame.count
}

func closeWith(_ wsi: OpaquePointer, code: UInt16, reason: String) {
    var bytes = Array(reason.utf8.prefix(120))
    bytes.withUnsafeMutableBufferPointer { buffer in
        lws_close_reason(wsi, lws_close_status(rawValue: UInt32(code)), buffer.baseAddress, buffer.count)
    }
}
