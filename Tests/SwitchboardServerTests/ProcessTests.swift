import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import Testing

/// Runs a built executable and collects its output.
struct Run {
    var status: Int32
    var output: String
    var errors: String
}

func runTool(_ name: String, _ arguments: [String], environment: [String: String] = [:]) throws -> Run {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: productsDirectory + "/" + name)
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    let output = Pipe()
    let errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    try process.run()
    let outputData = output.fileHandleForReading.readDataToEndOfFile()
    let errorData = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return Run(
        status: process.terminationStatus, output: String(decoding: outputData, as: UTF8.self),
        errors: String(decoding: errorData, as: UTF8.self))
}

@Suite(.serialized) struct ProcessTests {
    @Test func appCreateAndTokenWorkFromTheCommandLine() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let created = try runTool("switchboard", ["app", "create", "--name", "Chat", "--bundle-id", "com.example.chat", "--data-dir", directory])
        #expect(created.status == 0, "\(created.errors)")
        let app = try JSONDecoder().decode(JSONValue.self, from: Data(created.output.utf8))
        let apiKey = try #require(app["api_key"]?.stringValue)
        let secret = try #require(app["api_secret"]?.stringValue)
        #expect(app["bundle_id"] == "com.example.chat")

        let token = try runTool(
            "switchboard",
            ["token", "--data-dir", directory, "--api-key", apiKey, "--identity", "alice", "--grant", "call", "--grant", "room=team-*",
             "--grant", "roomJoin", "--ttl", "120"])
        #expect(token.status == 0, "\(token.errors)")
        let claims = try AccessTokenVerifier().verify(token.output.trimmingCharacters(in: .whitespacesAndNewlines)) {
            $0 == apiKey ? secret : nil
        }
        #expect(claims.sub == "alice")
        #expect(claims.grants == Grants(room: "team-*", roomJoin: true, call: true))
        #expect(claims.exp - claims.iat == 120)

        let listed = try runTool("switchboard", ["app", "list", "--data-dir", directory])
        #expect(listed.status == 0)
        #expect(listed.output.contains(apiKey))
        #expect(!listed.output.contains(secret), "app list never prints a secret")
    }

    @Test func commandLineMistakesAreExplained() throws {
        let unknownGrant = try runTool("switchboard", ["token", "--identity", "a", "--grant", "everything", "--data-dir", "/tmp/none"])
        #expect(unknownGrant.status == 2)
        #expect(unknownGrant.errors.contains("unknown grant"))
        let badPort = try runTool("switchboard", ["serve", "--port", "99999"])
        #expect(badPort.status == 1)
        #expect(badPort.errors.contains("invalid value '99999' for port"))
        let badEnvironment = try runTool("switchboard", ["serve"], environment: ["SWITCHBOARD_MAX_MESSAGE_BYTES": "lots"])
        #expect(badEnvironment.errors.contains("max_message_bytes"))
        for command in ["serve", "app", "token"] {
            let help = try runTool("switchboard", [command, "--help"])
            #expect(help.status == 0)
            #expect(help.output.contains("USAGE: switchboard \(command)"))
        }
    }

    @Test func serveShutsDownGracefullyOnSIGTERM() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: productsDirectory + "/switchboard")
        process.arguments = ["serve", "--port", "0", "--data-dir", directory, "--web-root", repositoryRoot + "/web"]
        let errors = Pipe()
        let output = Pipe()
        process.standardError = errors
        process.standardOutput = output
        try process.run()
        defer { if process.isRunning { process.terminate() } }

        // The port is in the "listening" log line; the development app is printed on stdout.
        var log = ""
        var port: Int?
        let deadline = ContinuousClock.now + .seconds(10)
        while port == nil && ContinuousClock.now < deadline {
            log += String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self)
            if let match = log.firstMatch(of: /msg=listening .*port=(\d+)/) { port = Int(match.1) }
        }
        let listening = try #require(port)
        var printed = ""
        while !printed.contains("Switchboard is running") && ContinuousClock.now < deadline {
            printed += String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        }
        let apiKey = try #require(printed.firstMatch(of: /API key\s+(sbk_\w+)/)?.1)
        let secret = try #require(printed.firstMatch(of: /API secret\s+(\w+)/)?.1)

        let claims = AccessTokenIssuer.claims(apiKey: String(apiKey), identity: "carol", name: nil, grants: Grants(), ttlSeconds: 60)
        let token = AccessTokenVerifier.sign(claims, secret: String(secret))
        let client = try await TestClient.connect("ws://127.0.0.1:\(listening)/v1/ws?access_token=\(token)")
        _ = try await client.nextEnvelope()

        process.terminate()  // SIGTERM, as a service manager sends
        #expect(try await client.closeCode() == 1001)
        let exited = Task.detached { process.waitUntilExit() }
        try await within(.seconds(10), "the server to exit") { await exited.value }
        #expect(process.terminationStatus == 0)
        let rest = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(rest.contains("msg=stopped"))
        #expect(!(log + rest).contains(String(secret)), "the secret is never logged")
        #expect(!(log + rest).contains(token), "tokens are never logged")

        // The store it left is whole.
        let store = try Store(directory: directory)
        #expect(try store.integrityCheck() == "ok")
        store.close()
    }

    @Test func killDuringWritesLosesNothingCommitted() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var committed: [String] = []
        for round in 0..<5 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: productsDirectory + "/store-torture")
            process.arguments = [directory]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            var text = ""
            let target = 20 + round * 37
            let deadline = ContinuousClock.now + .seconds(20)
            while text.split(separator: "\n").count < target && ContinuousClock.now < deadline {
                text += String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
            }
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            #expect(process.terminationReason == .uncaughtSignal)
            text += String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            // Only whole lines were printed after a commit.
            let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
            let whole = text.hasSuffix("\n") ? lines : lines.dropLast()
            committed += whole.map(String.init)
        }
        #expect(committed.count >= 100)

        let store = try Store(directory: directory)
        defer { store.close() }
        #expect(try store.integrityCheck() == "ok")
        let stored = Set(try store.allApps().map(\.apiKey))
        let lost = committed.filter { !stored.contains($0) }
        #expect(lost.isEmpty, "lost \(lost.count) committed apps")
    }
}
