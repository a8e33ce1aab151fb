"""The call setup section of BENCHMARKS.md on stdout, from the calls runs' JSON lines (bench/calls.sh,
via bench/calls_row.py) and the store runs' (`switchboard-bench store`'s result with its engine
and mode). Runs `psql --version` when PostgreSQL was measured.

    calls_report.py CALLS_JSONL STORE_JSONL RUNS RATE PEAK_RATE SECONDS STORE_SECONDS
"""

import re
import subprocess
import sys

import benchlib
from benchlib import measured, pick, read_jsonl

rows = read_jsonl(sys.argv[1])
stores = read_jsonl(sys.argv[2])
runs, rate, peak, seconds, store_seconds = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
engines = sorted({r["engine"] for r in rows}, key=["sqlite", "postgres"].index)
names = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def median(engine, target, key):
    return benchlib.median(pick(rows, target_rate=target, engine=engine), key)


failed = sum(r["failed"] for r in rows if r["target_rate"] == rate)
pg = re.search(r"\d+\.\d+", subprocess.run(["psql", "--version"], capture_output=True, text=True).stdout).group(0) if "postgres" in engines else ""


def row(engine, target, label):
    def m(key):
        return median(engine, target, key)
    per_commit = m("store_writes") / max(1, m("store_commits"))
    return (f"| {names[engine]} | {label} | {m('calls_per_second'):,.0f} | {m('setup_p50_ms'):.2f} | "
            f"**{m('setup_p99_ms'):.2f}** | {m('setup_p999_ms'):.2f} | "
            f"{m('reply_p50_us') / 1000:.2f} / {m('reply_p99_us') / 1000:.2f} | {m('server_cpu_share'):.0%} | {per_commit:.1f} |")


table = "\n".join(row(e, t, l) for e in engines for t, l in ((rate, f"{rate:,}/s for {seconds} s"), (peak, f"{peak:,}/s for 10 s (saturation)")))
each_run = "\n".join(
    f"- {names[e]}: " + ", ".join(f"{r['setup_p99_ms']:.2f} ms ({r.get('steal_share', 0):.0%})" for r in pick(rows, engine=e, target_rate=rate))
    for e in engines)


def store_median(engine, mode, key):
    return benchlib.median(pick(stores, engine=engine, mode=mode), key)


store_rows = "\n".join(
    f"| {names[e]} | {store_median(e, 'queued', 'writes_per_second'):,.0f} "
    f"({store_median(e, 'queued', 'writes') / max(1, store_median(e, 'queued', 'commits')):,.0f} per commit) | "
    f"{store_median(e, 'queued-code', 'writes_per_second'):,.0f} | "
    f"{store_median(e, 'single', 'writes_per_second'):,.0f} | "
    f"{store_median(e, 'queued', 'writes_per_second') / store_median(e, 'single', 'writes_per_second'):.0f}× |"
    for e in engines)
pg_line = (f"PostgreSQL {pg} runs on loopback with its default durability (every commit flushed to the disk),"
           " on core 1 with the generator; a database of its own per run.") if pg else "No PostgreSQL in this run."
print(f"""## Call setup: invites per second, pushes through the APNs sandbox

{measured()}
500 callees each register an iPhone with a VoIP token; 50 callers (`switchboard-bench calls`)
start calls over their WebSockets at a steady rate, round robin, each ringing one callee (a
VoIP push to `switchboard apns-sandbox`, which accepts it) until the run ends. The server runs
on core 0; the generator and the sandbox on core 1 (the generator reads only the id of each `ok`
reply, and the sandbox checks a payload with jansson, so that they leave that core to the
store). {pg_line} The server's share is its own
`switchboard_call_setup_seconds` summary: from the invite arriving to the push handed to the
APNs connection and the call's record written to the store, whichever is last; the reply to the
caller comes once the record is written (since 2026-12-06). Medians of {runs}
runs per engine, each on a fresh server and store after a warm-up second (each run's store is
dropped after it, so that no run pays for an earlier one's upkeep: PostgreSQL's autovacuum, the
kernel writing back its pages); calls failed at
{rate:,}/s in all runs: {failed} (at saturation the excess is refused `503` by
`max_pending_call_setups`, as it should be).

| store | offered rate | calls/s | server share p50 ms | p99 ms | p99.9 ms | reply to caller p50 / p99 ms | server CPU | store writes per commit |
|---|---|---|---|---|---|---|---|---|
{table}

Each run's server share p99 at {rate:,}/s, with the share of the machine's CPU time the
hypervisor gave to other guests during it (steal, from `/proc/stat`; the tail follows it):

{each_run}

Target: server share p99 ≤ 10 ms at 500 setups/s, on each engine. What this benchmark found and
fixed: the busy check walked every live call for each callee (46% of the server's CPU with
20,000 calls ringing; now an index of answered calls per user), and `serve` waited for SIGTERM
with a semaphore on a thread of Swift's cooperative pool, leaving push tasks waiting for a
thread (p99 730 ms with the server on one core; it now suspends, and the p99 is above). On
a durable PostgreSQL the slow setups wait for their record's commit, each a WAL flush: writes
nobody waits for (trace entries, later states) now wait up to `store_commit_delay_ms` to join
the next record's commit (about 1.2 commits per call instead of 1.9), and a setup reads the
callees' block lists and devices in one query instead of two. A request's `data` is decoded
from the value jansson read instead of being parsed again by `JSONDecoder` (4% less server CPU
at 500/s, alternating builds), and the push client reads response headers from libcurl's bytes
(Foundation's trimming was 4.5% of a sender's CPU). On SQLite most of what was left was the
WAL's checkpoint: SQLite's automatic checkpoint runs inside the commit that grows the WAL past
1,000 pages, copying it into the database file and syncing both, and every write queued
behind that commit waited for it. A thread of the store's own now checkpoints (on 2026-12-06,
by hand, this section's SQLite row alternating with the build before, two runs each: server
share p99 1.66 and 1.65 ms against 8.64 and 8.36 ms). That day a call's reply also began to
wait for its record's commit, so that a caller told of a call finds it after a `kill -9` (the
events and pushes do not wait): in the same runs reply p99 2.36 and 2.23 ms against 1.92 and
1.90 ms on SQLite, and on a durable PostgreSQL, whose every commit is a flush of the WAL to the
disk, reply p50 1.93 and 2.20 ms against 0.90 and 0.84 ms, p99 5.5 and 9.7 ms against 2.8 and
3.9 ms. What is left is the machine: the tail follows the hypervisor's steal, above.

### The store's writes per second

`switchboard-bench store` writes trace entries (a call's most frequent write, 130 bytes) for
{store_seconds} s on core 0 against a fresh store: queued as the server queues them (1,000 at a time,
then waiting for them; the writes queued while one transaction commits go together in the next,
and on PostgreSQL are sent together, one round trip per 256, through libpq's pipeline mode); the
same batches with each statement its own round trip (what the pipeline saves); and one
transaction each, waited for (what a write costs alone: one commit, flushed). Medians of {runs}
runs.

| store | queued writes/s | queued, a round trip each | one per transaction | queued / one per transaction |
|---|---|---|---|---|
{store_rows}
""")
