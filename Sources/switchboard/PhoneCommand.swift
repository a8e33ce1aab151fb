import Foundation
import SwitchboardKit
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem

/// `switchboard phone`: a terminal softphone on SwitchboardKit with a simulated call UI.
enum PhoneCommand {
    static let help = """
        USAGE: switchboard phone --identity USER [--name NAME] [--device DEVICE_ID]
                                 [--server http://127.0.0.1:8080] (--token JWT | --dev-token | --data-dir DIR [--api-key KEY])
                                 [--sandbox-admin http://127.0.0.1:2198] [--region CN] [--script FILE]

        A softphone in the terminal: registers a device for USER, rings on incoming calls (over its
        connection, and from VoIP pushes it receives through the APNs sandbox's device stream), and
        takes commands, interactively or from --script (one per line; # starts a comment):

          call USER [video]     ring USER
          answer                answer the ringing call
          decline               decline it
          hangup                end the current call
          mute | unmute         mute the microphone
          hold | resume         hold the call
          status                the current call and the call UI's state
          history               your last calls
          wait EVENT [SECONDS]  (scripts) wait for: incoming, push, connected, ended, audio (default 10 s)
          sleep SECONDS         (scripts) pause
          quit

        It prints events as they happen and exits 0, or 1 if a wait timed out or the call UI saw
        one of iOS's rules broken.

        OPTIONS:
          --identity USER       Who this phone belongs to.
          --device DEVICE_ID    This install's id (default: USER-phone).
          --token JWT           An access token for USER (call grant).
          --dev-token           Get one from the server's POST /v1/dev/tokens (serve --dev-tokens).
          --data-dir DIR        Mint a token from the app in this store (with --api-key when it has several).
          --sandbox-admin URL   Receive VoIP pushes from `switchboard apns-sandbox` as PushKit would.
          --region CODE         CN registers without CallKit and rings from alert pushes.
          --script FILE         Read commands from FILE (- for standard input) instead of the terminal.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let parsed = try Arguments(
            arguments,
            valued: ["identity", "name", "device", "server", "token", "data-dir", "api-key", "sandbox-admin", "region", "script"])
        if parsed.has("help") {
            print(help)
            return 0
        }
        try parsed.rejectUnknownFlags(["help", "dev-token"])
        let identity = try parsed.required("identity")
        let device = parsed.value("device") ?? identity + "-phone"
        guard let server = URL(string: parsed.value("server") ?? "http://127.0.0.1:8080") else { throw UsageError("bad --server") }
        let token = try await accessToken(parsed, identity: identity, server: server)
        let phone = try Softphone(server: server, identity: identity, device: device, token: token, region: parsed.value("region"))
        try await phone.start(sandboxAdmin: parsed.value("sandbox-admin").flatMap(URL.init(string:)))

        let lines: AsyncStream<String>
        if let script = parsed.value("script"), script != "-" {
            guard let text = try? String(contentsOfFile: script, encoding: .utf8) else { throw UsageError("cannot read \(script)") }
            lines = AsyncStream { continuation in
                for line in text.split(separator: "\n", omittingEmptySubsequences: false) { continuation.yield(String(line)) }
                continuation.finish()
            }
        } else {
            lines = AsyncStream { continuation in
                Thread {
                    while let line = readLine() { continuation.yield(line) }
                    continuation.finish()
                }.start()
            }
        }
        var ok = true
        for await raw in lines {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init)?
                .trimmingCharacters(in: .whitespaces) ?? ""
            guard !line.isEmpty else { continue }
            if line == "quit" || line == "exit" { break }
            if !(await phone.execute(line)) { ok = false }
        }
        let clean = await phone.stop()
        return ok && clean ? 0 : 1
    }

    static func accessToken(_ parsed: Arguments, identity: String, server: URL) async throws -> String {
        if let token = parsed.value("token") { return token }
        let name = parsed.value("name") ?? identity.capitalized
        if parsed.has("dev-token") {
            let body = try JSONEncoder().encode(["identity": identity, "name": name])
            let response = try await HTTPClient.request("POST", server.appendingPathComponent("v1/dev/tokens").absoluteString, body: Array(body))
            guard response.status == 201, let token = try JSONDecoder().decode(JSONValue.self, from: Data(response.body))["token"]?.stringValue else {
                throw UsageError("the server gave no development token (is it running with --dev-tokens?)")
            }
            return token
        }
        guard let directory = parsed.value("data-dir") else { throw UsageError("give --token, --dev-token or --data-dir") }
        let store = try Store(directory: directory)
        defer { store.close() }
        let apps = try store.allApps()
        guard let app = parsed.value("api-key").flatMap({ store.app(apiKey: $0) }) ?? (apps.count == 1 ? apps.first : nil) else {
            throw UsageError("--api-key is required when the store has \(apps.count) apps")
        }
        let claims = AccessTokenIssuer.claims(
            apiKey: app.apiKey, identity: identity, name: name, grants: Grants(room: "*", roomJoin: true, call: true), ttlSeconds: 24 * 3600)
        return AccessTokenVerifier.sign(claims, secret: app.apiSecret)
    }
}

/// The softphone: the SDK, a simulated call UI, and a line-based console.
actor Softphone {
    let client: SwitchboardClient
    let system = SimulatedCallSystem()
    let manager: CallManager
    let identity: String
    let device: String
    let region: RegionPolicy
    private var current: UUID?
    private var seen: [String] = []
    private var tasks: [Task<Void, Never>] = []
    private let deviceLoop: EventLoop

    init(server: URL, identity: String, device: String, token: String, region: String?) throws {
        self.identity = identity
        self.device = device
        self.region = RegionPolicy.forRegion(region)
        client = try SwitchboardClient(serverURL: server, deviceID: device) { token }
        manager = CallManager(client: client, system: system)
        deviceLoop = try EventLoop(name: "phone-device")
    }

    /// The phone's push tokens: fixed per (user, device), so a restarted phone keeps them.
    var tokens: (voip: Data, apns: Data) {
        let seed = Crypto.sha256(Array("\(identity)/\(device)".utf8))
        return (Data(seed), Data(Crypto.sha256(seed)))
    }

    func start(sandboxAdmin: URL?) async throws {
        manager.start()
        let events = manager.events
        tasks.append(Task { [weak self] in
            for await event in events { await self?.show(event) }
        })
        try await client.connect()
        let (voip, apns) = tokens
        try await DeviceRegistrar(client: client).register(
            voipToken: voip, apnsToken: apns, environment: "sandbox", bundleID: nil, appVersion: "phone",
            policy: region)
        if let sandboxAdmin { try await subscribe(to: sandboxAdmin, voip: voip, apns: apns) }
        say("ready: \(identity) on \(device) (\(region == .callKit ? "CallKit" : "no CallKit"))")
    }

    /// The sandbox's device stream stands in for PushKit (VoIP) and for notifications (alert).
    private func subscribe(to admin: URL, voip: Data, apns: Data) async throws {
        for (token, kind) in [(DeviceRegistrar.hex(voip), "voip"), (DeviceRegistrar.hex(apns), "alert")] {
            var components = URLComponents(url: admin, resolvingAgainstBaseURL: false)!
            components.scheme = "ws"
            components.path = "/devices/\(token)"
            let stream = try await WebSocketClient.connect(to: components.url!, on: deviceLoop)
            let subscribed = AsyncStream<Void>.makeStream()
            tasks.append(Task { [weak self] in
                for await event in stream.events {
                    guard case .text(let text) = event, let self else { continue }
                    if text.contains(#""subscribed":true"#) { subscribed.continuation.yield() } else { await self.push(text, kind: kind) }
                }
                subscribed.continuation.finish()
            })
            // Ready only once the sandbox delivers the token's pushes here (within 10 s).
            let confirmed = await withTaskGroup(of: Bool.self) { group in
                group.addTask { for await _ in subscribed.stream { return true }; return false }
                group.addTask { try? await Task.sleep(for: .seconds(10)); return false }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
            guard confirmed else { throw PhoneError("the APNs sandbox did not confirm the device subscription at \(components.url!)") }
        }
    }

    private func push(_ text: String, kind: String) {
        guard let record = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
            let payload = record["payload"] as? [String: Any]
        else { return }
        if kind == "voip" {
            seen.append("push")
            say("push: VoIP")
            system.deliverVoIPPush(payload) { payload, completion in manager.handleIncomingVoIPPush(payload: payload, completion: completion) }
        } else if payload["missed"] as? Bool == true {
            say("push: missed call")
        } else if region == .noCallKit {
            say("push: incoming call (alert)")
            manager.handleIncomingAlertPush(userInfo: payload)
        }
    }

    private func show(_ event: CallManagerEvent) {
        switch event {
        case .incoming(let id, let update):
            current = id
            seen.append("incoming")
            say("event: incoming \(id.uuidString.lowercased()) from \(update.displayName)\(update.hasVideo ? " (video)" : "")")
        case .outgoingStarted(let id):
            current = id
            say("event: calling \(id.uuidString.lowercased())")
        case .connected(let id):
            seen.append("connected")
            say("event: connected \(id.uuidString.lowercased())")
        case .ended(let id, let reason):
            seen.append("ended")
            if current == id { current = nil }
            say("event: ended \(id.uuidString.lowercased()) (\(reason.rawValue))")
        case .endedLocally(let id):
            seen.append("ended")
            if current == id { current = nil }
            say("event: ended \(id.uuidString.lowercased()) (by you)")
        case .audioActive(let active, _):
            if active { seen.append("audio") }
            say("event: audio \(active ? "active" : "inactive")")
        case .audioNotActivated(let id):
            say("event: no audio for \(id.uuidString.lowercased()) yet (the system did not activate it)")
        case .muted(_, let muted): say("event: \(muted ? "muted" : "unmuted")")
        case .translating(_, let on, let local, let remote): say("event: translation \(on ? "on (\(local)-\(remote))" : "off")")
        case .held(_, let held): say("event: \(held ? "on hold" : "resumed")")
        case .remoteHeld(_, let by, let held): say("event: \(by) \(held ? "put the call on hold" : "resumed the call")")
        case .reportRefused(let id, let error):
            seen.append("filtered")
            say("event: not shown \(id.uuidString.lowercased()) (\(error))")
        }
    }

    /// Writes one line at once (`writeLine`: never behind the lock of standard input, which the
    /// reader thread holds while it waits for a typed line).
    private func say(_ line: String) {
        writeLine(line)
    }

    /// Runs one command; false when it failed.
    func execute(_ line: String) async -> Bool {
        let words = line.split(separator: " ").map(String.init)
        switch words[0] {
        case "call":
            guard words.count >= 2 else { return fail("usage: call USER [video]") }
            do {
                let id = try await manager.startCall(to: [words[1]], video: words.dropFirst(2).contains("video"))
                current = id
                return true
            } catch { return fail("call failed: \(error)") }
        case "answer":
            guard let id = current else { return fail("nothing is ringing") }
            return await system.userAnswers(id) ? true : fail("the answer failed")
        case "decline", "hangup":
            guard let id = current else { return fail("no call") }
            return await system.userEnds(id) ? true : fail("could not end the call")
        case "mute", "unmute":
            guard let id = current else { return fail("no call") }
            return await system.userSetsMuted(id, words[0] == "mute")
        case "hold", "resume":
            guard let id = current else { return fail("no call") }
            return await system.userSetsHeld(id, words[0] == "hold")
        case "status":
            let live = system.liveCalls.map { "\($0.id.uuidString.lowercased()) \($0.outgoing ? "to" : "from") \($0.update.displayName)\($0.answered ? " (up)" : " (ringing)")" }
            say("status: \(live.isEmpty ? "idle" : live.joined(separator: "; "))")
            return true
        case "history":
            guard let token = await client.token else { return fail("not connected") }
            let url = client.serverURL.appendingPathComponent("v1/calls")
            let reply: (status: Int, body: Data)
            do { reply = try await CurlHTTPTransport().get(url, bearer: token) } catch { return fail("history: \(error)") }
            let answer = try? JSONDecoder().decode(JSONValue.self, from: reply.body)
            guard reply.status == 200, case .array(let calls)? = answer?["calls"] else {
                // A load balancer with no node ready answers with a page of its own, not JSON.
                let why = answer?["error"]?["message"]?.stringValue ?? "no history in the answer"
                return fail("history: the server answered \(reply.status): \(why)")
            }
            if calls.isEmpty { say("history: no calls yet") }
            for call in calls.prefix(10) {
                var peers: [String] = []
                if case .array(let list)? = call["peers"] { peers = list.compactMap(\.stringValue) }
                var duration: Int64 = 0
                if case .int(let value)? = call["duration_ms"] { duration = value }
                let outcome = call["outcome"]?.stringValue ?? "in progress (\(call["state"]?.stringValue ?? "live"))"
                say("history: \(call["direction"]?.stringValue ?? "") with \(peers.joined(separator: ", ")): \(outcome) (\(duration / 1000) s)")
            }
            return true
        case "wait":
            guard words.count >= 2 else { return fail("usage: wait EVENT [SECONDS]") }
            let limit = Double(words.count > 2 ? words[2] : "10") ?? 10
            let deadline = Date().addingTimeInterval(limit)
            while Date() < deadline {
                if let index = seen.firstIndex(of: words[1]) {
                    seen.remove(at: index)
                    return true
                }
                try? await Task.sleep(for: .milliseconds(20))
            }
            return fail("no \(words[1]) within \(limit) s")
        case "sleep":
            try? await Task.sleep(for: .milliseconds(Int((Double(words.count > 1 ? words[1] : "1") ?? 1) * 1000)))
            return true
        default:
            return fail("unknown command '\(words[0])' (see switchboard phone --help)")
        }
    }

    private func fail(_ message: String) -> Bool {
        say("error: \(message)")
        return false
    }

    /// Stops; false when the call UI saw a rule broken.
    func stop() async -> Bool {
        let violations = system.violations
        for violation in violations { say("violation: \(violation)") }
        await manager.settle()
        tasks.forEach { $0.cancel() }
        await client.disconnect()
        deviceLoop.stop()
        return violations.isEmpty
    }
}

/// Why the softphone cannot go on, as a sentence.
struct PhoneError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
