// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Switchboard",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .executable(name: "switchboard", targets: ["switchboard"]),
        .library(name: "SwitchboardProtocol", targets: ["SwitchboardProtocol"]),
        .library(name: "SwitchboardServer", targets: ["SwitchboardServer"]),
        .library(name: "SwitchboardTesting", targets: ["SwitchboardTesting"]),
        .library(name: "SwitchboardKit", targets: ["SwitchboardKit"]),
    ],
    targets: [
        // C libraries, each imported by exactly one Swift file in SwitchboardSystem.
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
        // Macros and variadic C functions Swift cannot call directly.
        .target(name: "CShims", dependencies: ["CCurl", "CSQLite"]),

        // Wire types: messages, error codes, token claims. No I/O.
        .target(name: "SwitchboardProtocol"),
        // The Swift face of the C libraries: event loop, HTTP/WebSocket, HTTP client,
        // crypto, SQLite; plus logging and metrics.
        .target(
            name: "SwitchboardSystem",
            dependencies: [
                "SwitchboardProtocol", "CLibWebSockets", "CCurl", "CCrypto", "CSQLite", "CTLS", "CNGHTTP2", "CJansson", "CShims",
            ]),
        .target(
            name: "SwitchboardServer",
            dependencies: ["SwitchboardProtocol", "SwitchboardSystem"]),
        // The client SDK: signaling client, calls, and the seam to the phone's call UI.
        // On Apple platforms it uses URLSession and CallKit; the C libraries only on Linux.
        .target(
            name: "SwitchboardKit",
            dependencies: ["SwitchboardProtocol", .target(name: "SwitchboardSystem", condition: .when(platforms: [.linux]))]),
        // Test doubles others need: the local APNs sandbox.
        .target(
            name: "SwitchboardTesting",
            dependencies: ["SwitchboardServer", "SwitchboardProtocol", "SwitchboardSystem"]),
        .executableTarget(
            name: "switchboard",
            dependencies: ["SwitchboardServer", "SwitchboardProtocol", "SwitchboardSystem", "SwitchboardTesting", "SwitchboardKit"]),
        // The load generator of `make bench`.
        .executableTarget(
            name: "switchboard-bench",
            dependencies: ["SwitchboardServer", "SwitchboardSystem", "SwitchboardProtocol"]),
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
            name: "SwitchboardServerTests",
            dependencies: ["SwitchboardServer", "SwitchboardProtocol", "SwitchboardSystem", "SwitchboardTesting"]),
        .testTarget(
            name: "SwitchboardKitTests",
            dependencies: ["SwitchboardKit", "SwitchboardServer", "SwitchboardProtocol", "SwitchboardSystem", "SwitchboardTesting"]),
    ],
    swiftLanguageModes: [.v6]
)
