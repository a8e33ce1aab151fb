import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
import Testing

/// Calls `body` with `ip`:`port` as a socket address (nil when `ip` is not a literal).
func withAddress<T>(_ ip: String, _ port: Int, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T? {
    if ip.contains(":") {
        var address = sockaddr_in6()
        guard inet_pton(AF_INET6, ip, &address.sin6_addr) == 1 else { return nil }
        (address.sin6_family, address.sin6_port) = (sa_family_t(AF_INET6), in_port_t(UInt16(port).bigEndian))
        return withGeneric(&address, body)
    }
    var address = sockaddr_in()
    guard inet_pton(AF_INET, ip, &address.sin_addr) == 1 else { return nil }
    (address.sin_family, address.sin_port) = (sa_family_t(AF_INET), in_port_t(UInt16(port).bigEndian))
    return withGeneric(&address, body)
}

/// Calls `body` with `address` (a `sockaddr_in` or `sockaddr_in6`) as a `sockaddr` and its size.
private func withGeneric<Address, T>(_ address: inout Address, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
    withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<Address>.size)) }
    }
}

/// Whether a TCP connect to `ip`:`port` is answered (a listener there), within a second.
func canConnect(_ ip: String, _ port: Int) -> Bool {
    let fd = socket(ip.contains(":") ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 1, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    return withAddress(ip, port) { connect(fd, $0, $1) == 0 } ?? false
}

/// Ports held by bound sockets that never listen: a connect to them is refused, and no other
/// process can listen on them, so "nothing answers there" is about the server under test, not
/// about whatever else on the machine picked the same port number.
final class ReservedPort {
    let port: Int
    private var descriptors: [Int32] = []

    /// Reserves one port on every address in `ips` (a port the kernel picks for the first) that
    /// is also free on every address in `freeOn`, where the server under test will bind it.
    convenience init?(on ips: [String], freeOn others: [String]) {
        for _ in 0..<20 {
            guard let candidate = ReservedPort(on: ips) else { return nil }
            if others.allSatisfy({ ip in ReservedPort(on: [ip], port: candidate.port) != nil }) {
                self.init(taking: candidate)
                return
            }
        }
        return nil
    }

    private init(taking other: ReservedPort) {
        port = other.port
        descriptors = other.descriptors
        other.descriptors = []
    }

    /// Reserves one port on every address in `ips` (a port the kernel picks for the first).
    init?(on ips: [String], port wanted: Int = 0) {
        var port = wanted
        for ip in ips {
            let fd = socket(ip.contains(":") ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else {
                descriptors.forEach { close($0) }
                return nil
            }
            descriptors.append(fd)
            guard withAddress(ip, port, { bind(fd, $0, $1) == 0 }) == true else {
                descriptors.forEach { close($0) }
                return nil
            }
            if port == 0 {
                var address = sockaddr_storage()
                var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
                _ = withUnsafeMutablePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
                }
                port = withUnsafePointer(to: &address) { pointer in
                    ip.contains(":")
                        ? pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
                        : pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
                }
            }
        }
        self.port = port
    }

    deinit { descriptors.forEach { close($0) } }
}

/// Whether this machine has IPv6 loopback (some containers turn IPv6 off).
let hasIPv6Loopback: Bool = {
    let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in6()
    address.sin6_family = sa_family_t(AF_INET6)
    inet_pton(AF_INET6, "::1", &address.sin6_addr)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) == 0 }
    }
}()

/// The IPv4 and IPv6 addresses a name resolves to here.
func resolved(_ name: String) -> Set<String> {
    var hints = addrinfo()
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var list: UnsafeMutablePointer<addrinfo>?
    guard getaddrinfo(name, nil, &hints, &list) == 0 else { return [] }
    defer { freeaddrinfo(list) }
    var found: Set<String> = []
    var cursor = list
    while let entry = cursor {
        var text = [CChar](repeating: 0, count: 64)
        getnameinfo(entry.pointee.ai_addr, entry.pointee.ai_addrlen, &text, 64, nil, 0, NI_NUMERICHOST)
        found.insert(text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        cursor = entry.pointee.ai_next
    }
    return found
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct ListenTests {
    func serve(_ extra: [String], directory: String? = nil) throws -> (ToolProcess, String) {
        let dir = try directory ?? makeTemporaryDirectory()
        let process = try ToolProcess(
            ["serve", "--port", "0", "--data-dir", dir, "--web-root", repositoryRoot + "/web", "--log-level", "info"] + extra)
        return (process, dir)
    }

    /// (host asked for, addresses that must answer, addresses that must not, needs IPv6).
    static let hosts: [(String, [String], [String], Bool)] = [
        ("127.0.0.1", ["127.0.0.1"], ["::1"], false),
        ("0.0.0.0", ["127.0.0.1"], ["::1"], false),
        ("::1", ["::1"], ["127.0.0.1"], true),
        ("[::1]", ["::1"], ["127.0.0.1"], true),
        ("::", ["::1", "127.0.0.1"], [], true),
        ("localhost", Array(resolved("localhost")), ["127.0.0.1", "::1"].filter { !resolved("localhost").contains($0) }, false),
    ]

    @Test(arguments: hosts.indices.filter { !hosts[$0].3 })
    func serveListensExactlyWhereAsked(index: Int) async throws {
        try await listensExactlyWhereAsked(index)
    }

    /// A skip Swift Testing reports (and scripts/test-count.sh checks against Tests/allowed-skips).
    @Test(.enabled(if: hasIPv6Loopback, "needs IPv6 loopback, which this machine does not have"), arguments: hosts.indices.filter { hosts[$0].3 })
    func serveListensOnIPv6ExactlyWhereAsked(index: Int) async throws {
        try await listensExactlyWhereAsked(index)
    }

    func listensExactlyWhereAsked(_ index: Int) async throws {
        let (host, answering, silent, _) = Self.hosts[index]
        // The addresses that must stay silent are held on the server's port, so another test's
        // listener cannot answer there by chance.
        let silentHere = silent.filter { !$0.contains(":") || hasIPv6Loopback }
        var reserved: ReservedPort?
        if !silentHere.isEmpty {
            let answeringHere = answering.filter { !$0.contains(":") || hasIPv6Loopback }
            reserved = ReservedPort(on: silentHere, freeOn: answeringHere)
            try #require(reserved != nil, "reserving a port on \(silentHere)")
        }
        let (process, directory) = try serve(["--host", host, "--port", String(reserved?.port ?? 0)])
        defer {
            process.stopNow()
            try? FileManager.default.removeItem(atPath: directory)
        }
        let port = try await process.waitForPort()
        #expect(reserved == nil || reserved?.port == port)
        _ = try await process.waitFor(/(Switchboard is running)/, inOutput: true, what: "the running line")
        for ip in answering where !ip.contains(":") || hasIPv6Loopback {
            #expect(canConnect(ip, port), "--host \(host): \(ip) must answer")
        }
        for ip in silentHere {
            #expect(!canConnect(ip, port), "--host \(host): \(ip) must not answer")
        }
        withExtendedLifetime(reserved) {}
        let healthz = try HTTPClient.perform("GET", "http://\(SocketAddress.urlHost(answering[0])):\(port)/healthz")
        #expect(healthz.status == 200)
    }

    /// (what, extra arguments, words the refusal must contain).
    static let refusals: [(String, [String], String)] = [
        ("an address this machine does not have", ["--host", "192.0.2.1"], "this machine has no such address"),
        ("a name that does not resolve", ["--host", "no-such-host.invalid"], "does not resolve"),
        ("an empty host", ["--host", ""], "invalid value '' for host"),
    ]

    @Test(arguments: refusals.indices)
    func aHostThatCannotBeBoundStopsTheServerBeforeItSaysItIsRunning(index: Int) async throws {
        let (what, arguments, words) = Self.refusals[index]
        let (process, directory) = try serve(arguments)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let status = try await process.waitForExit()
        #expect(status != 0, "\(what)")
        #expect(process.standardError.contains(words), "\(what): \(process.standardError)")
        #expect(!process.standardOutput.contains("Switchboard is running"), "\(what)")
        #expect(!process.standardError.contains("NSCocoaErrorDomain"), "\(what)")
    }

    /// Covers: limit:port
    @Test func aPortInUseStopsTheServerAndASecondServeOnOneDataDirectoryIsRefusedNamingTheFirst() async throws {
        let (first, directory) = try serve([])
        defer {
            first.stopNow()
            try? FileManager.default.removeItem(atPath: directory)
        }
        let port = try await first.waitForPort()

        let (sameport, other) = try serve(["--port", String(port)])
        defer { try? FileManager.default.removeItem(atPath: other) }
        #expect(try await sameport.waitForExit() == 1)
        #expect(sameport.standardError.contains("cannot listen on 127.0.0.1:\(port): the port is in use"), "\(sameport.standardError)")
        #expect(!sameport.standardOutput.contains("Switchboard is running"))

        let (second, _) = try serve([], directory: directory)
        #expect(try await second.waitForExit() == 1)
        #expect(second.standardError.contains("another switchboard serve is using the data directory"), "\(second.standardError)")
        #expect(second.standardError.contains("pid \(first.pid)"), "the refusal names the running server: \(second.standardError)")
        #expect(second.standardError.contains("127.0.0.1:\(port)"), "and where it listens")
        #expect(!second.standardOutput.contains("Switchboard is running"))
        #expect(canConnect("127.0.0.1", port), "the first one is untouched")

        // Once the first is gone, even by kill -9, the directory is free.
        first.kill9()
        let (third, _) = try serve([], directory: directory)
        _ = try await third.waitForPort()
        #expect(try await third.stop() == 0, "\(third.standardError.suffix(2000))")
    }

    @Test func startupErrorsReadAsSentences() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "x".write(toFile: directory + "/file", atomically: true, encoding: .utf8)
        try #"{"port": 1"#.write(toFile: directory + "/broken.json", atomically: true, encoding: .utf8)
        try #"{"prot": 9000}"#.write(toFile: directory + "/typo.json", atomically: true, encoding: .utf8)
        try #"[1]"#.write(toFile: directory + "/array.json", atomically: true, encoding: .utf8)
        let cases: [([String], String)] = [
            (["--data-dir", directory + "/file/data"], "cannot create the directory '\(directory)/file': a file of that name is in the way"),
            (["--data-dir", "/proc/no-such/data"], "cannot create the directory '/proc/no-such'"),
            (["--config", directory + "/broken.json"], "--config \(directory)/broken.json: it is not valid JSON"),
            (["--config", directory + "/typo.json"], "'prot' is not a setting"),
            (["--config", directory + "/array.json"], "it must be one JSON object of settings"),
            (["--config", directory + "/missing.json"], "--config \(directory)/missing.json: no such file"),
        ]
        for (arguments, words) in cases {
            let run = try await runTool("switchboard", ["serve", "--port", "0"] + arguments)
            #expect(run.status != 0, "\(arguments)")
            #expect(run.errors.contains(words), "\(arguments): \(run.errors)")
            #expect(!run.errors.contains("NSCocoaErrorDomain") && !run.errors.contains("Code="), "no Foundation dump: \(run.errors)")
            #expect(!run.output.contains("Switchboard is running"))
        }
    }

    @Test func theAPNsSandboxListensExactlyWhereAskedOrNotAtAll() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let host = hasIPv6Loopback ? "::1" : "127.0.0.1"
        let sandbox = try ToolProcess(
            ["apns-sandbox", "--host", host, "--port", "0", "--admin-port", "0", "--accept-any-key", "--dir", directory])
        defer { sandbox.stopNow() }
        let url = try await sandbox.waitFor(/APNs sandbox: (https:\S+)/, inOutput: true, what: "the sandbox's URL")
        let admin = try await sandbox.waitFor(/admin API:\s+(http:\S+)/, inOutput: true, what: "the admin URL")
        let port = try #require(url.split(separator: ":").last.flatMap { Int($0) })
        let adminPort = try #require(admin.split(separator: ":").last.flatMap { Int($0) })
        #expect(canConnect(host, port) && canConnect(host, adminPort))
        if hasIPv6Loopback {
            #expect(url.hasPrefix("https://[::1]:"))
            #expect(!canConnect("127.0.0.1", port) && !canConnect("127.0.0.1", adminPort), "::1 is IPv6 loopback only")
        }

        let nowhere = try ToolProcess(["apns-sandbox", "--host", "192.0.2.1", "--port", "0", "--admin-port", "0", "--accept-any-key", "--dir", directory])
        #expect(try await nowhere.waitForExit() == 1)
        #expect(nowhere.standardError.contains("this machine has no such address"), "\(nowhere.standardError)")
        let taken = try ToolProcess(
            ["apns-sandbox", "--host", host, "--port", String(port), "--admin-port", "0", "--accept-any-key", "--dir", directory])
        #expect(try await taken.waitForExit() == 1)
        #expect(taken.standardError.contains("the port is in use"), "\(taken.standardError)")
    }

    /// Closing listening sockets (a loop that stops) and then freeing them closes each
    /// descriptor once: the second close used to close whatever the process had opened under
    /// that number since (it was seen closing another server's directory scan mid-way).
    @Test func listeningSocketsAreClosedOnce() throws {
        // Another thread may take the freed number first: try again (a try takes microseconds).
        for _ in 0..<50 {
            var sockets: ListeningSockets? = try ListeningSockets(host: "127.0.0.1", port: 0)
            let number = try #require(sockets?.descriptors.first)
            sockets?.close()
            // Take the freed number (the lowest free one, unless another thread took it first).
            var opened: [Int32] = []
            defer { opened.forEach { _ = Glibc.close($0) } }
            while opened.last != number && opened.count < 64 {
                let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { break }
                opened.append(fd)
            }
            guard opened.last == number else { continue }
            sockets = nil
            withExtendedLifetime(sockets) {}
            #expect(fcntl(number, F_GETFD) != -1, "descriptor \(number), reused after close, was closed again")
            return
        }
        Issue.record("in 50 tries another thread always took the freed descriptor first: nothing was checked")
    }
}
