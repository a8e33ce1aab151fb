// swift-tools-version:6.0
import PackageDescription

// The layers, lowest first: wire types and support; a socket-free core of value state machines;
// the system layer over the C libraries (each library in its own folder, C imported
// `internal`ly); the push model and client; the server; the SDK; the testing product.
// Non-public API shared between modules is `package`, so tests need no `@testable`.
let package = Package(
    name: "Switchboard",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .executable(name: "switchboard", targets: ["switchboard"]),
        .library(name: "SwitchboardProtocol", targets: ["SwitchboardProtocol"]),
        .library(name: "SwitchboardPush", targets: ["SwitchboardPush"]),
        .library(name: "SwitchboardServer", targets: ["SwitchboardServer"]),
        .library(name: "SwitchboardTesting", targets: ["SwitchboardTesting"]),
        .library(name: "SwitchboardKit", targets: ["SwitchboardKit"]),
    ],
    targets: [
        // C libraries, each imported only by the files of its folder in SwitchboardSystem (the
        // HTTP/2 test server's two by SwitchboardHTTP2Server).
        .systemLibrary(
            name: "CLibWebSockets", pkgConfig: "libwebsockets",
            providers: [.apt(["libwebsockets-dev"]), .brew(["libwebsockets"])]),
        .systemLibrary(
            name: "CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"]), .brew(["curl"])]),
        .systemLibrary(
            name: "CCrypto", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]),
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        // The APNs sandbox's HTTP/2 server: libwebsockets 4.1's h2 role drops request headers it
        // does not know (apns-topic, apns-push-type...), so the sandbox frames HTTP/2 with
        // nghttp2 (the library libcurl uses) over OpenSSL's libssl.
        .systemLibrary(
            name: "CTLS", pkgConfig: "libssl",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]),
        .systemLibrary(
            name: "CNGHTTP2", pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"]), .brew(["nghttp2"])]),
        // The parser of incoming WebSocket messages: Foundation's JSONDecoder spends ~20 µs on a
        // 300-byte signal decoded as a JSONValue, jansson ~6 µs (see BENCHMARKS.md, relay).
        .systemLibrary(
            name: "CJansson", pkgConfig: "jansson",
            providers: [.apt(["libjansson-dev"]), .brew(["jansson"])]),
        // PostgreSQL's own client, for the store on a shared database (issue: the store on
        // PostgreSQL); blocking calls on the store's threads.
        .systemLibrary(
            name: "CLibPQ", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]),
        // Redis 7's client for several nodes (routing, presence, ownership, shared limits):
        // its asynchronous API on the event loop's libev, through its libev adapter. No
        // pkg-config: its only flag (-D_FILE_OFFSET_BITS=64, a no-op on 64-bit) is one SwiftPM
        // refuses, and its headers are under the system's include path.
        .systemLibrary(
            name: "CHiredis",
            providers: [.apt(["libhiredis-dev"]), .brew(["hiredis"])]),
        // The relay's reader of signal requests, in C++ over simdjson with a C face: it
        // validates a 300-byte signal in ~0.2 µs where jansson takes ~9 µs (BENCHMARKS.md,
        // relay); every other message still goes to jansson.
        .target(
            name: "CSimdJSON", cxxSettings: [.define("SIMDJSON_THREADS_ENABLED", to: "1")],
            linkerSettings: [.linkedLibrary("simdjson")]),
        // Macros and variadic C functions Swift cannot call directly.
        .target(name: "CShims", dependencies: ["CCurl", "CSQLite"]),

        // Locks, logging, durations: what every layer uses. No I/O beyond writing log lines.
        .target(name: "SwitchboardSupport"),
        // Wire types: messages, events, error codes, token claims. No I/O.
        .target(name: "SwitchboardProtocol"),
        // Calls, rooms and rate policies as values: events in, effects out. No sockets, no
        // clock reads, no storage.
        .target(name: "SwitchboardCore", dependencies: ["SwitchboardProtocol", "SwitchboardSupport"]),
        // The Swift face of the C libraries: event loop, HTTP/WebSocket server and client,
        // HTTP/2 client, crypto, SQLite, JSON. One folder per library.
        .target(
            name: "SwitchboardSystem",
            dependencies: [
                "SwitchboardProtocol", "SwitchboardSupport", "CLibWebSockets", "CCurl", "CCrypto", "CSQLite", "CJansson", "CSimdJSON",
                "CLibPQ", "CHiredis", "CShims",
            ]),
        // APNs: the notification model, Apple's reasons, provider tokens and the HTTP/2 client.
        .target(name: "SwitchboardPush", dependencies: ["SwitchboardSupport", "SwitchboardSystem"]),
        // The HTTP/2 server the APNs sandbox runs on. No library of the server links it; the
        // `switchboard` executable does, through SwitchboardTesting, for `apns-sandbox`.
        .target(name: "SwitchboardHTTP2Server", dependencies: ["SwitchboardSupport", "SwitchboardSystem", "CTLS", "CNGHTTP2"]),
        .target(
            name: "SwitchboardServer",
            dependencies: ["SwitchboardProtocol", "SwitchboardSupport", "SwitchboardCore", "SwitchboardSystem", "SwitchboardPush"]),
        // The client SDK: signaling client, calls, and the seam to the phone's call UI.
        // On Apple platforms it uses URLSession and CallKit; the C libraries only on Linux.
        .target(
            name: "SwitchboardKit",
            dependencies: [
                "SwitchboardProtocol", "SwitchboardSupport", .target(name: "SwitchboardSystem", condition: .when(platforms: [.linux])),
            ]),
        // Test doubles others need: the local APNs sandbox and the tools' process helpers.
        .target(
            name: "SwitchboardTesting",
            dependencies: [
                "SwitchboardServer", "SwitchboardPush", "SwitchboardProtocol", "SwitchboardSupport", "SwitchboardSystem", "SwitchboardHTTP2Server",
                "CShims",
            ]),
        .executableTarget(
            name: "switchboard",
            dependencies: [
                "SwitchboardServer", "SwitchboardPush", "SwitchboardProtocol", "SwitchboardSupport", "SwitchboardSystem", "SwitchboardTesting",
                "SwitchboardKit",
            ]),
        // The load generator of `make bench`.
        .executableTarget(
            name: "switchboard-bench",
            dependencies: ["SwitchboardServer", "SwitchboardPush", "SwitchboardSupport", "SwitchboardSystem", "SwitchboardProtocol"]),
        // The fuzzing harness (`make fuzz`); built normally it replays inputs (`make test`).
        .executableTarget(
            name: "switchboard-fuzz",
            dependencies: ["SwitchboardServer", "SwitchboardKit", "CShims"]),
        // Writes to a store in a loop so a test can kill -9 it mid-write.
        .executableTarget(
            name: "store-torture",
            dependencies: ["SwitchboardServer", "SwitchboardSystem"],
            path: "Tests/Tools/store-torture"),

        .testTarget(
            name: "SwitchboardProtocolTests",
            dependencies: ["SwitchboardProtocol"]),
        .testTarget(
            name: "SwitchboardCoreTests",
            dependencies: ["SwitchboardCore", "SwitchboardProtocol", "SwitchboardSupport"]),
        .testTarget(
            name: "SwitchboardServerTests",
            dependencies: [
                "SwitchboardServer", "SwitchboardCore", "SwitchboardPush", "SwitchboardProtocol", "SwitchboardSupport", "SwitchboardSystem",
                "SwitchboardTesting", "SwitchboardKit",
            ]),
        .testTarget(
            name: "SwitchboardKitTests",
            dependencies: [
                "SwitchboardKit", "SwitchboardServer", "SwitchboardPush", "SwitchboardProtocol", "SwitchboardSupport", "SwitchboardSystem",
                "SwitchboardTesting",
            ]),
    ],
    swiftLanguageModes: [.v6],
    cxxLanguageStandard: .cxx17
)
