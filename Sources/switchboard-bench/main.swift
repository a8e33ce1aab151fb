// The load generator of `make bench` (see scripts/bench.sh and BENCHMARKS.md): one subcommand
// per benchmark, each in its own file (PushBenchmark.swift, RelayBenchmark.swift, …) with its
// command line and the JSON line it prints; what they share is in Shared.swift.

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "push":
    try await benchPush(Array(arguments.dropFirst()))
case "relay":
    try await benchRelay(Array(arguments.dropFirst()))
case "idle":
    try await benchIdle(Array(arguments.dropFirst()))
case "calls":
    try await benchCalls(Array(arguments.dropFirst()))
case "churn":
    try await benchChurn(Array(arguments.dropFirst()))
case "store":
    try benchStore(Array(arguments.dropFirst()))
default:
    fail("usage: switchboard-bench push --url URL --ca-file PEM [--count N] [--concurrency C] [--connections K]\n"
        + "       switchboard-bench relay --server ws://HOST:PORT --api-key K --api-secret S [--pairs N] [--messages M] [--window W | --rate PER_SECOND] [--receiver-server ws://HOST:PORT]\n"
        + "       switchboard-bench idle --server ws://HOST:PORT --api-key K --api-secret S [--connections N] [--parallel P] [--hold SECONDS]\n"
        + "       switchboard-bench calls --server ws://HOST:PORT --api-key K --api-secret S [--rate PER_SECOND] [--seconds N] [--callers C] [--callees D] [--ring-timeout S] [--callee-server ws://HOST:PORT] [--cancel-at-end]\n"
        + "       switchboard-bench churn --server ws://HOST:PORT --api-key K --api-secret S [--seconds N] [--parallel P] [--join-rooms N]\n"
        + "       switchboard-bench store --data-dir DIR | --store-url URL [--seconds N] [--mode queued|queued-code|single] [--commit-delay-ms N]")
}
