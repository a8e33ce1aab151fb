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

func runTool(_ name: String, _ arguments: [String], environment: [String: String] = [:]) async throws -> Run {
    let process = try ToolProcess(arguments, executable: name, environment: environment)
    let status = try await process.waitForExit(timeout: .seconds(60))
    return Run(status: status, output: process.standardOutput, errors: process.standardError)
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct ProcessTests {
    @Test func appCreateAndTokenWorkFromTheCommandLine() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let created = try await runTool("switchboard", ["app", "create", "--name", "Chat", "--bundle-id", "com.example.chat", "--data-dir", directory])
        #expect(created.status == 0, "\(created.errors)")
        let app = try JSONDecoder().decode(JSONValue.self, from: Data(created.output.utf8))
        let apiKey = try #require(app["api_key"]?.stringValue)
        let secret = try #require(app["api_secret"]?.stringValue)
        #expect(app["bundle_id"] == "com.example.chat")

        let token = try await runTool(
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

        let listed = try await runTool("switchboard", ["app", "list", "--data-dir", directory])
        #expect(listed.status == 0)
        #expect(listed.output.contains(apiKey))
        #expect(!listed.output.contains(secret), "app list never prints a secret")

        // A rotation prints the new secret once; the old one verifies until its grace ends, then
        // only the new one does. Extra bundle ids are set, and never a malformed one.
        let rotated = try await runTool("switchboard", ["app", "rotate-secret", "--api-key", apiKey, "--grace-seconds", "0", "--data-dir", directory])
        #expect(rotated.status == 0, "\(rotated.errors)")
        let after = try JSONDecoder().decode(JSONValue.self, from: Data(rotated.output.utf8))
        let newSecret = try #require(after["api_secret"]?.stringValue)
        #expect(newSecret != secret && newSecret.count == 43)
        #expect(!rotated.output.contains(secret), "the old secret is never printed")
        let store = try Store(directory: directory)
        let app2 = try #require(store.app(apiKey: apiKey))
        #expect(app2.acceptedSecrets() == [newSecret], "no grace: the old secret is refused at once")
        store.close()
        let bundles = try await runTool(
            "switchboard", ["app", "bundle-ids", "--api-key", apiKey, "--extra-bundle-ids", "com.example.chat.lite", "--data-dir", directory])
        #expect(bundles.status == 0, "\(bundles.errors)")
        #expect(bundles.output.contains("com.example.chat.lite") && !bundles.output.contains(newSecret))
        let malformed = try await runTool(
            "switchboard", ["app", "bundle-ids", "--api-key", apiKey, "--extra-bundle-ids", "com.x\r\ny: z", "--data-dir", directory])
        #expect(malformed.status == 2)
    }

    @Test func commandLineMistakesAreExplained() async throws {
        let unknownGrant = try await runTool("switchboard", ["token", "--identity", "a", "--grant", "everything", "--data-dir", "/tmp/none"])
        #expect(unknownGrant.status == 2)
        #expect(unknownGrant.errors.contains("unknown grant"))
        let badPort = try await runTool("switchboard", ["serve", "--port", "99999"])
        #expect(badPort.status == 1)
        #expect(badPort.errors.contains("invalid value '99999' for port"))
        let badEnvironment = try await runTool("switchboard", ["serve"], environment: ["SWITCHBOARD_MAX_MESSAGE_BYTES": "lots"])
        #expect(badEnvironment.errors.contains("max_message_bytes"))
        for command in ["serve", "app", "token"] {
            let help = try await runTool("switchboard", [command, "--help"])
            #expect(help.status == 0)
            #expect(help.output.contains("USAGE: switchboard \(command)"))
        }
    }

    @Test func serveShutsDownGracefullyOnSIGTERM() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let serve = try ToolProcess(["serve", "--port", "0", "--data-dir", directory, "--web-root", repositoryRoot + "/web"])
        defer { serve.stopNow() }
        // The port is in the "listening" log line; the development app is printed on stdout.
        let listening = try await serve.waitForPort()
        _ = try await serve.waitFor(/(Switchboard is running)/, inOutput: true, what: "the running line")
        let apiKey = try await serve.waitFor(/API key\s+(sbk_\w+)/, inOutput: true, what: "the development app's key")
        let secret = try await serve.waitFor(/API secret\s+(\w+)/, inOutput: true, what: "the development app's secret")

        let claims = AccessTokenIssuer.claims(apiKey: apiKey, identity: "carol", name: nil, grants: Grants(), ttlSeconds: 60)
        let token = AccessTokenVerifier.sign(claims, secret: secret)
        let client = try await TestClient.connect("ws://127.0.0.1:\(listening)/v1/ws?access_token=\(token)")
        _ = try await client.nextEnvelope()

        kill(serve.pid, SIGTERM)  // as a service manager sends
        #expect(try await client.closeCode() == 1001)
        #expect(try await serve.waitForExit() == 0)
        let log = serve.standardError
        #expect(log.contains("msg=stopped"))
        #expect(!log.contains(secret), "the secret is never logged")
        #expect(!log.contains(token), "tokens are never logged")

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
            let torture = try ToolProcess([directory], executable: "store-torture")
            _ = try await torture.waitForLines(20 + round * 37, what: "committed writes")
            torture.kill9()
            #expect(torture.endedBySignal)
            // Only whole lines were printed after a commit.
            let text = torture.standardOutput
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

extension ProcessTests {
    /// `kill -9` in the middle of the store's queued writes (the path of call records, history
    /// and traces): every batch the store had finished is there whole, and the file is sound.
    @Test func killDuringQueuedWritesLosesNothingTheStoreFinished() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var finished: [String] = []
        for round in 0..<5 {
            let torture = try ToolProcess([directory, "queued"], executable: "store-torture")
            _ = try await torture.waitForLines(10 + round * 23, what: "finished batches")
            torture.kill9()
            #expect(torture.endedBySignal)
            let text = torture.standardOutput
            let lines = text.split(separator: "\n", omittingEmptySubsequences: true)
            finished += (text.hasSuffix("\n") ? lines : lines.dropLast()).map(String.init)
        }
        #expect(finished.count >= 50)
        let store = try Store(directory: directory)
        defer { store.close() }
        #expect(try store.integrityCheck() == "ok")
        var partial: [String] = []
        for batch in finished where try store.trace(callID: batch).count != 10 { partial.append(batch) }
        #expect(partial.isEmpty, "batches lost or cut after the store finished them: \(partial.prefix(5))")
    }
}

@Suite(.timeLimit(.minutes(3))) struct PushCommandTests {
    @Test func switchboardPushAgainstTheSandboxPrintsStatusAndAPNsID() async throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let key = try ECPrivateKey.generate()
        try key.pem.write(toFile: directory + "/AuthKey_KEY1234567.p8", atomically: true, encoding: .utf8)

        let sandbox = try ToolProcess([
            "apns-sandbox", "--port", "0", "--admin-port", "0", "--key", "KEY1234567=\(directory)/AuthKey_KEY1234567.p8",
            "--dir", directory + "/sandbox",
        ])
        defer { sandbox.stopNow() }
        _ = try await sandbox.waitFor(/(Try:)/, inOutput: true, what: "the sandbox to start")
        let printed = sandbox.standardOutput
        let url = String(try #require(printed.firstMatch(of: /APNs sandbox: (https:\/\/[0-9.:]+)/)?.1))
        let certificate = String(try #require(printed.firstMatch(of: /certificate:\s+(\S+)/)?.1))
        let admin = String(try #require(printed.firstMatch(of: /admin API:\s+(http:\/\/[0-9.:]+)/)?.1))

        let token = String(repeating: "5a", count: 32)
        let arguments = [
            "push", token, "--topic", "com.example.chat", "--key-file", directory + "/AuthKey_KEY1234567.p8", "--key-id",
            "KEY1234567", "--team-id", "TEAM123456", "--url", url, "--ca-file", certificate,
        ]
        let environment = ["XDG_CACHE_HOME": directory + "/cache"]
        let first = try await runTool("switchboard", arguments, environment: environment)
        #expect(first.status == 0, "\(first.output) \(first.errors)")
        #expect(first.output.contains("status: 200"))
        let apnsID = String(try #require(first.output.firstMatch(of: /apns-id: ([0-9a-f-]{36})/)?.1))
        #expect(first.output.contains("topic: com.example.chat.voip"))

        // A second run reuses the provider token: Apple would throttle a new one so soon.
        let second = try await runTool("switchboard", arguments + ["--type", "alert", "--payload", #"{"aps":{"alert":"hi"}}"#, "--topic", "com.example.chat"], environment: environment)
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
        let refused = try await runTool("switchboard", arguments, environment: environment)
        #expect(refused.status == 1)
        #expect(refused.output.contains("status: 400"))
        #expect(refused.output.contains("reason: BadDeviceToken"))
    }
}

@Suite(.timeLimit(.minutes(3))) struct PhoneProcessTests {
    /// Two `switchboard phone` processes go through a call, with the APNs sandbox ringing the
    /// callee's phone by VoIP push as well as over its connection.
    @Test func twoScriptedPhonesGoThroughACall() async throws {
        let fixture = try CallFixture()
        defer { fixture.stop() }
        let directory = fixture.directory
        try "wait incoming 15\nwait push 15\nanswer\nwait ended 15\nhistory\nquit\n".write(toFile: directory + "/bob.txt", atomically: true, encoding: .utf8)
        try "call bob\nwait connected 15\nsleep 0.3\nstatus\nhangup\nwait ended 5\nquit\n".write(
            toFile: directory + "/alice.txt", atomically: true, encoding: .utf8)

        func phone(_ identity: String) throws -> ToolProcess {
            try ToolProcess([
                "phone", "--identity", identity, "--server", fixture.server.baseURL, "--data-dir", fixture.server.dataDirectory,
                "--api-key", fixture.server.app.apiKey, "--sandbox-admin", "http://127.0.0.1:\(fixture.sandbox.adminPort)",
                "--script", directory + "/\(identity).txt",
            ])
        }
        let bob = try phone("bob")
        defer { bob.stopNow() }
        _ = try await bob.waitFor(/(ready: bob)/, inOutput: true, what: "bob's phone to be ready")
        #expect(bob.isRunning, "the ready line came through a pipe while the phone runs: each line is flushed, not buffered")
        let alice = try phone("alice")
        defer { alice.stopNow() }
        let aliceStatus = try await alice.waitForExit(timeout: .seconds(40))
        let bobStatus = try await bob.waitForExit(timeout: .seconds(40))
        let aliceText = alice.standardOutput + alice.standardError
        let bobText = bob.standardOutput + bob.standardError
        print("alice:\n\(aliceText)\nbob:\n\(bobText)")
        #expect(aliceStatus == 0)
        #expect(bobStatus == 0)
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
