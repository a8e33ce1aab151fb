// store: how many writes a second a store takes, written as the server writes them.
//
//   switchboard-bench store --data-dir DIR | --store-url URL [--seconds N]
//       [--mode queued|queued-code|single] [--commit-delay-ms N]
//
// Writes trace entries (the store's most frequent write) to SQLite in DIR or to PostgreSQL at
// URL for N seconds (5): queued (the default: as the server writes, 1,000 queued then waited
// for, the writes queued while one commits going in the next transaction, sent together),
// queued as code (`queued-code`: the same batches, each statement its own round trip) or one
// transaction each, waited for (`single`); --commit-delay-ms is the store's
// `store_commit_delay_ms` (5). Prints one JSON line:
// {"writes_per_second": …, "writes": …, "commits": …, "seconds": …}

import Foundation
import SwitchboardServer
import SwitchboardSupport
import SwitchboardSystem

func benchStore(_ arguments: [String]) throws {
    let seconds = Double(option("seconds", in: arguments) ?? "5") ?? 5
    let single = option("mode", in: arguments) == "single"
    let asCode = option("mode", in: arguments) == "queued-code"
    let metrics = Metrics()
    let limits = Store.Limits(commitDelayMillis: Int(option("commit-delay-ms", in: arguments) ?? "5") ?? 5)
    let store: Store
    if let url = option("store-url", in: arguments) {
        store = try Store(postgres: url, metrics: metrics, limits: limits)
    } else if let directory = option("data-dir", in: arguments) {
        store = try Store(directory: directory, metrics: metrics, limits: limits)
    } else {
        fail("--data-dir or --store-url is required")
    }
    defer { store.close() }
    let detail = #"{"apns_status":200,"apns_id":"a3c8e4f0-1b2d-4c5e-8f90-123456789abc"}"#
    /// A trace entry as the server writes one for a push APNs accepted.
    func entry(_ index: Int) -> SQLStatement {
        Store.traceEntry(
            callID: "c\(index / 4)", user: "callee-\(index % 500)", device: "phone", channel: "voip_push", event: "apns_accepted",
            atMillis: 1_800_000_000_000 + Int64(index), detail: detail)
    }
    let started = ContinuousClock.now
    var written = 0
    while (ContinuousClock.now - started).seconds < seconds {
        if single {
            let statement = entry(written)
            _ = try store.write { database in try database.query(statement.sql, statement.parameters) }
            written += 1
        } else {
            for index in written..<(written + 1_000) {
                let statement = entry(index)
                if asCode {
                    store.enqueue("bench") { database in try database.query(statement.sql, statement.parameters) }
                } else {
                    store.enqueue("bench", statements: [statement])
                }
            }
            store.flush()
            written += 1_000
        }
    }
    let elapsed = (ContinuousClock.now - started).seconds
    let commits = Int(metrics.counter("switchboard_store_commits_total"))
    print(#"{"writes_per_second": \#(Int(Double(written) / elapsed)), "writes": \#(written), "commits": \#(commits), "seconds": \#(String(format: "%.3f", elapsed))}"#)
}
