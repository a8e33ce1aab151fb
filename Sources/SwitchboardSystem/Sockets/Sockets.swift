// Listening TCP sockets and the process's descriptor limit, on the C library's socket API.
// Every server of the project listens through `ListeningSockets`, so that each binds exactly
// the addresses it was asked for, or fails at start with a sentence saying why.

internal import CShims
import Foundation
import Glibc

/// Why a server could not listen. Each reads as a sentence for the operator.
public enum ListenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The host name does not resolve.
    case cannotResolve(host: String, detail: String)
    /// Another process (another server?) listens on this address and port.
    case addressInUse(address: String)
    /// This machine has no such address.
    case addressNotAvailable(address: String)
    /// Ports below 1024 need privileges.
    case permissionDenied(address: String)
    case failed(address: String, detail: String)

    public var description: String {
        switch self {
        case .cannotResolve(let host, let detail): "cannot listen on '\(host)': the name does not resolve (\(detail))"
        case .addressInUse(let address): "cannot listen on \(address): the port is in use (is another server running?)"
        case .addressNotAvailable(let address): "cannot listen on \(address): this machine has no such address"
        case .permissionDenied(let address): "cannot listen on \(address): permission denied (ports below 1024 need privileges)"
        case .failed(let address, let detail): "cannot listen on \(address): \(detail)"
        }
    }
}

/// A socket address as text: `127.0.0.1:8080`, `[::1]:8080`.
public struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
    public var ip: String
    public var port: Int
    public var isIPv6: Bool { ip.contains(":") }
    public var description: String { isIPv6 ? "[\(ip)]:\(port)" : "\(ip):\(port)" }

    /// `host` as a URL's authority wants it: IPv6 literals in brackets.
    public static func urlHost(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }
}

/// What one `accept` gave.
public enum AcceptResult: Sendable {
    case accepted(Int32)
    /// Nothing is waiting.
    case none
    /// The process (EMFILE) or the system (ENFILE) has no descriptor left: the connection stays
    /// queued, and accepting again at once would spin.
    case outOfDescriptors
}

/// The listening sockets of one server: every address its host stands for, on one port.
///
/// - An IPv4 or IPv6 literal binds exactly that address; `::` binds every IPv6 and IPv4
///   address (dual stack), `0.0.0.0` every IPv4 one.
/// - A host name binds every address it resolves to that this machine has (`localhost`:
///   127.0.0.1 and ::1); those it does not have are skipped, and none at all is an error.
/// - Any failure (in use, no such address, no privilege) throws a `ListenError` before anything
///   is accepted.
///
/// Safety of `@unchecked Sendable`: the descriptors are set in init and cleared by `close`;
/// `accept`, `shed` and `close` run on one thread (the owning server's loop), and `spare` is
/// touched only there.
public final class ListeningSockets: @unchecked Sendable {
    public let addresses: [SocketAddress]
    /// The listening descriptors, one per address; empty once closed.
    public private(set) var descriptors: [Int32]
    /// A descriptor held in reserve: when the process runs out, closing it lets one queued
    /// connection be accepted and closed at once instead of waiting in the queue.
    private var spare: Int32

    public var port: Int { addresses.first?.port ?? 0 }

    public init(host: String, port: Int, backlog: Int32 = 512) throws(ListenError) {
        let candidates = try Self.resolve(host)
        var lastError: ListenError?
        // With port 0 the first socket picks the port and the others must get the same one;
        // another process may take it in between, so try a few times.
        for _ in 0..<(port == 0 && candidates.count > 1 ? 8 : 1) {
            do {
                let (descriptors, addresses) = try Self.bind(candidates, host: host, port: port, backlog: backlog)
                self.descriptors = descriptors
                self.addresses = addresses
                spare = open("/dev/null", O_RDONLY | O_CLOEXEC)
                return
            } catch {
                lastError = error
                if case .addressInUse = error, port == 0 { continue }
                throw error
            }
        }
        throw lastError ?? .failed(address: host, detail: "no address")
    }

    deinit { close() }

    /// Stops listening. Once only: closing a descriptor number again would close whatever the
    /// process opened under it since (another thread's file, socket or directory).
    public func close() {
        for fd in descriptors where fd >= 0 { Glibc.close(fd) }
        descriptors = []
        if spare >= 0 { Glibc.close(spare) }
        spare = -1
    }

    /// Accepts one connection from `descriptors[index]`, non-blocking and close-on-exec.
    public func accept(_ index: Int) -> AcceptResult {
        while true {
            let fd = sb_accept_nonblocking(descriptors[index])
            if fd >= 0 { return .accepted(fd) }
            switch errno {
            case EINTR, ECONNABORTED, EPROTO, EPERM: continue  // that connection is gone; the next may wait
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: return .outOfDescriptors
            default: return .none
            }
        }
    }

    /// Out of descriptors: gives up the spare one to accept and close up to `limit` queued
    /// connections on `descriptors[index]` (their clients see the connection closed rather
    /// than hang), then takes it back. Returns how many were closed.
    public func shed(_ index: Int, limit: Int) -> Int {
        guard spare >= 0 else {
            spare = open("/dev/null", O_RDONLY | O_CLOEXEC)
            return 0
        }
        var closed = 0
        while closed < limit {
            Glibc.close(spare)
            let fd = sb_accept_nonblocking(descriptors[index])
            if fd >= 0 {
                Glibc.close(fd)
                closed += 1
            }
            spare = open("/dev/null", O_RDONLY | O_CLOEXEC)
            if fd < 0 || spare < 0 { break }
        }
        return closed
    }

    // MARK: Resolving and binding

    /// A resolved address to bind, with whether the host named it literally.
    private struct Candidate {
        var storage: sockaddr_storage
        var length: socklen_t
        var ip: String
        var literal: Bool
    }

    private static func resolve(_ host: String) throws(ListenError) -> [Candidate] {
        let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, name, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            return [candidate(&v4, ip: name, literal: true)]
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, name, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            return [candidate(&v6, ip: name, literal: true)]
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(name, nil, &hints, &list)
        guard status == 0, let list else {
            throw .cannotResolve(host: host, detail: String(cString: gai_strerror(status)))
        }
        defer { freeaddrinfo(list) }
        var found: [Candidate] = []
        var seen: Set<String> = []
        var cursor: UnsafeMutablePointer<addrinfo>? = list
        while let entry = cursor {
            cursor = entry.pointee.ai_next
            guard let address = entry.pointee.ai_addr, entry.pointee.ai_family == AF_INET || entry.pointee.ai_family == AF_INET6 else { continue }
            var storage = sockaddr_storage()
            memcpy(&storage, address, Int(entry.pointee.ai_addrlen))
            let ip = numericHost(&storage)
            guard seen.insert(ip).inserted else { continue }
            found.append(Candidate(storage: storage, length: entry.pointee.ai_addrlen, ip: ip, literal: false))
        }
        guard !found.isEmpty else { throw .cannotResolve(host: host, detail: "no IPv4 or IPv6 address") }
        return found
    }

    private static func candidate<T>(_ address: inout T, ip: String, literal: Bool) -> Candidate {
        var storage = sockaddr_storage()
        withUnsafeBytes(of: &address) { bytes in
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: bytes) }
        }
        return Candidate(storage: storage, length: socklen_t(MemoryLayout<T>.size), ip: ip, literal: literal)
    }

    private static func numericHost(_ storage: inout sockaddr_storage) -> String {
        var text = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let length = socklen_t(storage.ss_family == sa_family_t(AF_INET6) ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &text, socklen_t(text.count), nil, 0, NI_NUMERICHOST)
            }
        }
        return text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    private static func setPort(_ storage: inout sockaddr_storage, _ port: Int) {
        let network = in_port_t(UInt16(port).bigEndian)
        withUnsafeMutablePointer(to: &storage) { pointer in
            if pointer.pointee.ss_family == sa_family_t(AF_INET6) {
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port = network }
            } else {
                pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port = network }
            }
        }
    }

    private static func boundPort(_ fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return withUnsafePointer(to: &storage) { pointer in
            pointer.pointee.ss_family == sa_family_t(AF_INET6)
                ? pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
                : pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
        }
    }

    private static func bind(
        _ candidates: [Candidate], host: String, port: Int, backlog: Int32
    ) throws(ListenError) -> ([Int32], [SocketAddress]) {
        var descriptors: [Int32] = []
        var addresses: [SocketAddress] = []
        var chosenPort = port
        var skipped: ListenError?
        for var candidate in candidates {
            let shown = SocketAddress(ip: candidate.ip, port: chosenPort).description
            setPort(&candidate.storage, chosenPort)
            let family = Int32(candidate.storage.ss_family)
            let fd = socket(family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else {
                let error = ListenError.failed(address: shown, detail: String(cString: strerror(errno)))
                if !candidate.literal && errno == EAFNOSUPPORT {
                    skipped = error
                    continue
                }
                descriptors.forEach { _ = Glibc.close($0) }
                throw error
            }
            var yes: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
            if family == AF_INET6 {
                // `::` means every address, IPv4 included; any other IPv6 address only itself.
                var only: Int32 = candidate.ip == "::" ? 0 : 1
                setsockopt(fd, SOL_IPV6, IPV6_V6ONLY, &only, socklen_t(MemoryLayout<Int32>.size))
            }
            let bound = withUnsafePointer(to: &candidate.storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, candidate.length) }
            }
            let failure = errno
            if bound != 0 || listen(fd, backlog) != 0 {
                let code = bound != 0 ? failure : errno
                Glibc.close(fd)
                let error: ListenError
                switch code {
                case EADDRINUSE: error = .addressInUse(address: shown)
                case EADDRNOTAVAIL: error = .addressNotAvailable(address: shown)
                case EACCES: error = .permissionDenied(address: shown)
                default: error = .failed(address: shown, detail: String(cString: strerror(code)))
                }
                if !candidate.literal, code == EADDRNOTAVAIL || code == EAFNOSUPPORT {
                    skipped = error  // a name's address this machine does not have
                    continue
                }
                descriptors.forEach { _ = Glibc.close($0) }
                throw error
            }
            if chosenPort == 0 { chosenPort = boundPort(fd) }
            descriptors.append(fd)
            addresses.append(SocketAddress(ip: candidate.ip, port: chosenPort))
        }
        guard !descriptors.isEmpty else { throw skipped ?? .failed(address: host, detail: "no address to listen on") }
        return (descriptors, addresses)
    }
}

/// The process's open-file limit.
public enum DescriptorLimit {
    /// The soft limit on open descriptors (RLIMIT_NOFILE).
    public static var current: Int {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        return Int(clamping: min(limit.rlim_cur, UInt(Int32.max)))
    }

    /// Raises the soft limit to the hard one (as a server should: the soft default of 1,024
    /// is for interactive programs). Returns the limit now in force.
    @discardableResult
    public static func raiseToHardLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return current }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return current
    }

    /// The connections a server may hold under `limit` descriptors: the rest (an eighth, at
    /// least 128) stays for the store, outgoing APNs connections, files being served and logs.
    public static func connections(under limit: Int) -> Int {
        max(16, limit - max(128, limit / 8))
    }
}
