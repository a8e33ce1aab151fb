import Dispatch
import Foundation
import SwitchboardProtocol
import SwitchboardServer
import SwitchboardSystem
import SwitchboardSupport

let usage = """
    switchboard: a self-hosted calling platform for iOS apps

    USAGE: switchboard <command> [options]

    COMMANDS:
      serve         Run the server (REST, WebSocket signaling, web client)
      app create    Create an app and print its id, API key and secret as JSON
      app list      List apps (secrets redacted)
      token         Print an access token (JWT) for a user of an app
      store status  Print the store's engine and schema version (reads only)
      store migrate Copy an SQLite store into an empty PostgreSQL database, and check it
      push          Send one VoIP (or alert) push through APNs
      apns-sandbox  Run a local APNs provider API for development and tests
      phone         A terminal softphone (SwitchboardKit with a simulated call UI)
      version       Print the version

    Run `switchboard <command> --help` for a command's options.
    """

let version = "0.1.0"

/// SIGTERM and SIGINT, caught from the moment it is made: arm it before a server starts, so a
/// signal during start-up (a supervisor stopping it early) still ends in a graceful shutdown
/// once the server is up, instead of the default action killing it half-started.
final class Termination: Sendable {
    private struct State {
        var arrived = false
        var waiting: CheckedContinuation<Void, Never>?
    }

    private let state = Locked(State())
    private let sources: Locked<[any DispatchSourceSignal]>

    init() {
        let state = self.state
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                state.withLock { state -> CheckedContinuation<Void, Never>? in
                    state.arrived = true
                    return state.waiting.take()
                }?.resume()
            }
            source.resume()
            sources.append(source)
        }
        self.sources = Locked(sources)
    }

    /// Suspends until SIGTERM or SIGINT (returns at once if one came already). It suspends
    /// rather than blocks: a thread of Swift's cooperative pool held in a wait would leave the
    /// server's push tasks one thread short (measured: call setup p99 from under 1 ms to 730 ms
    /// with the server on one core).
    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.arrived { return true }
                state.waiting = continuation
                return false
            }
            if now { continuation.resume() }
        }
        sources.withLock { $0.forEach { $0.cancel() } }
    }
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

func run(_ arguments: [String]) async -> Int32 {
    guard let command = arguments.first else {
        print(usage)
        return 2
    }
    let rest = Array(arguments.dropFirst())
    do {
        switch command {
        case "serve":
            return try await ServeCommand.run(rest)
        case "app":
            return try AppCommand.run(rest)
        case "token":
            return try TokenCommand.run(rest)
        case "store":
            return try StoreCommand.run(rest)
        case "push":
            return try await PushCommand.run(rest)
        case "apns-sandbox":
            return try await SandboxCommand.run(rest)
        case "phone":
            return try await PhoneCommand.run(rest)
        case "version", "--version":
            print("switchboard \(version)")
            return 0
        case "help", "--help", "-h":
            print(usage)
            return 0
        default:
            printError("switchboard: unknown command '\(command)'\n")
            printError(usage)
            return 2
        }
    } catch let error as UsageError {
        printError("switchboard \(command): \(error)")
        printError("Run `switchboard \(command) --help` for usage.")
        return 2
    } catch {
        printError("switchboard \(command): \(error)")
        return 1
    }
}

exit(await run(Array(CommandLine.arguments.dropFirst())))
