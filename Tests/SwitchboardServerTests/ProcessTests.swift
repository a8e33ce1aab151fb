import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardTesting
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
        #expect(claims.iat.map { claims.exp - $0 } == 120)

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

@Suite struct PushCommandTests {
    @Test func switchboardPushAgainstTheSandboxPrintsStatusAndAPNsID() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let key = try ECPrivateKey.generate()
        try key.pem.write(toFile: directory + "/AuthKey_KEY1234567.p8", atomically: true, encoding: .utf8)

        let sandbox = Process()
        sandbox.executableURL = URL(fileURLWithPath: productsDirectory + "/switchboard")
        sandbox.arguments = [
            "apns-sandbox", "--port", "0", "--admin-port", "0", "--key", "KEY1234567=\(directory)/AuthKey_KEY1234567.p8",
            "--dir", directory + "/sandbox",
        ]
        let output = Pipe()
        sandbox.standardOutput = output
        sandbox.standardError = FileHandle.nullDevice
        try sandbox.run()
        defer { sandbox.terminate() }
        var printed = ""
        let deadline = ContinuousClock.now + .seconds(10)
        while !printed.contains("admin API:") || !printed.contains("Try:") {
            guard ContinuousClock.now < deadline else { throw Timeout(what: "the sandbox to start") }
            printed += String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        }
        let url = String(try #require(printed.firstMatch(of: /APNs sandbox: (https:\/\/[0-9.:]+)/)?.1))
        let certificate = String(try #require(printed.firstMatch(of: /certificate:\s+(\S+)/)?.1))
        let admin = String(try #require(printed.firstMatch(of: /admin API:\s+(http:\/\/[0-9.:]+)/)?.1))

        let token = String(repeating: "5a", count: 32)
        let arguments = [
            "push", token, "--topic", "com.example.chat", "--key-file", directory + "/AuthKey_KEY1234567.p8", "--key-id",
            "KEY1234567", "--team-id", "TEAM123456", "--url", url, "--ca-file", certificate,
        ]
        let environment = ["XDG_CACHE_HOME": directory + "/cache"]
        let first = try runTool("switchboard", arguments, environment: environment)
        #expect(first.status == 0, "\(first.output) \(first.errors)")
        #expect(first.output.contains("status: 200"))
        let apnsID = String(try #require(first.output.firstMatch(of: /apns-id: ([0-9a-f-]{36})/)?.1))
        #expect(first.output.contains("topic: com.example.chat.voip"))

        // A second run reuses the provider token: Apple would throttle a new one so soon.
        let second = try runTool("switchboard", arguments + ["--type", "alert", "--payload", #"{"aps":{"alert":"hi"}}"#, "--topic", "com.example.chat"], environment: environment)
        #expect(second.status == 0, "\(second.output)")

        let recorded = try await HTTPClient.request("GET", admin + "/pushes")
        let pushes = try #require(try JSONDecoder().decode(JSONValue.self, from: Data(recorded.body))["pushes"])
        guard case .array(let list) = pushes else { throw Timeout(what: "a list of pushes") }
        #expect(list.count == 2)
        #expect(list.first?["apns_id"]?.stringValue == apnsID)
        #expect(list.first?["push_type"] == "voip")
        #expect(list.last?["push_type"] == "alert")
        let stats = try await HTTPClient.request("GET", admin + "/stats")
        #expect(stats.text.contains(#""token_updates":0"#))

        _ = try await HTTPClient.request("PUT", admin + "/tokens/\(token)", body: Array(#"{"state":"bad"}"#.utf8))
        let refused = try runTool("switchboard", arguments, environment: environment)
        #expect(refused.status == 1)
        #expect(refused.output.contains("status: 400"))
        #expect(refused.output.contains("reason: BadDeviceToken"))
    }
}

@Suite struct PhoneProcessTests {
    /// Two `switchboard phone` processes go through a call, with the APNs sandbox ringing the
    /// callee's phone by VoIP push as well as over its connection.
    @Test func twoScriptedPhonesGoThroughACall() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let directory = fixture.directory
        try "wait incoming 15\nwait push 15\nanswer\nwait ended 15\nhistory\nquit\n".write(toFile: directory + "/bob.txt", atomically: true, encoding: .utf8)
        try "call bob\nwait connected 15\nsleep 0.3\nstatus\nhangup\nwait ended 5\nquit\n".write(
            toFile: directory + "/alice.txt", atomically: true, encoding: .utf8)

        func phone(_ identity: String) throws -> (Process, Pipe) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: productsDirectory + "/switchboard")
            process.arguments = [
                "phone", "--identity", identity, "--server", fixture.server.baseURL, "--data-dir", fixture.server.dataDirectory,
                "--api-key", fixture.server.app.apiKey, "--sandbox-admin", "http://127.0.0.1:\(fixture.sandbox.adminPort)",
                "--script", directory + "/\(identity).txt",
            ]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            return (process, output)
        }
        let (bob, bobOutput) = try phone("bob")
        defer { if bob.isRunning { bob.terminate() } }
        var bobText = ""
        let deadline = ContinuousClock.now + .seconds(15)
        while !bobText.contains("ready:") && ContinuousClock.now < deadline {
            bobText += String(decoding: bobOutput.fileHandleForReading.availableData, as: UTF8.self)
        }
        #expect(bobText.contains("ready: bob"))
        #expect(bob.isRunning, "the ready line came through a pipe while the phone runs: each line is flushed, not buffered")
        let (alice, aliceOutput) = try phone("alice")
        defer { if alice.isRunning { alice.terminate() } }

        let finished = Task.detached {
            alice.waitUntilExit()
            bob.waitUntilExit()
        }
        try await within(.seconds(40), "both phones to finish their scripts") { await finished.value }
        bobText += String(decoding: bobOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let aliceText = String(decoding: aliceOutput.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        print("alice:\n\(aliceText)\nbob:\n\(bobText)")
        #expect(alice.terminationStatus == 0)
        #expect(bob.terminationStatus == 0)
        #expect(bobText.contains("push: VoIP"), "the sandbox rang bob's phone")
        #expect(bobText.components(separatedBy: "event: incoming").count == 2, "push and WebSocket invite are one call")
        #expect(bobText.contains("event: connected"))
        #expect(bobText.contains("(remoteEnded)"))
        #expect(bobText.contains("history: incoming with alice: completed"))
        #expect(aliceText.contains("(by you)"))
        #expect(aliceText.contains("event: connected"))
        #expect(aliceText.contains("status: ") && aliceText.contains("(up)"))
        #expect(!aliceText.contains("violation") && !bobText.contains("violation"))
    }
}
