"""The idle connections section of BENCHMARKS.md on stdout, from the runs' JSON lines
(bench/idle.sh, via bench/idle_row.py).

    idle_report.py RUNS_JSONL RUNS CONNECTIONS HOLD_SECONDS
"""

import sys

import benchlib
from benchlib import measured, pick, read_jsonl

rows = read_jsonl(sys.argv[1])
runs, count, hold = sys.argv[2:5]


def median(name, key):
    return benchlib.median(pick(rows, name=name), key)


closed = sum(r["closed_while_held"] or 0 for r in rows)
ours, ref = median("switchboard", "bytes_per_connection"), median("websockets", "bytes_per_connection")
print(f"""## Idle connections: memory, connect rate and keepalive

{measured()}
{count} authenticated WebSocket connections (Switchboard checks each one's JWT) opened by
`switchboard-bench idle` on core 1, 64 handshakes at a time, then held {hold} s, through two
rounds of keepalive pings (every 20 s of silence, both servers). Memory is the server's
resident set after connecting minus before. Medians of {runs} runs; connections lost while
held, all runs: {closed}.

| server | bytes per idle connection | connects/s | keepalive CPU (share of a core) |
|---|---|---|---|
| Switchboard | **{ours:,.0f}** | {median('switchboard', 'connects_per_second'):,.0f} | {median('switchboard', 'keepalive_cpu_share'):.1%} |
| Python `websockets` 15, reference | {ref:,.0f} | {median('websockets', 'connects_per_second'):,.0f} | {median('websockets', 'keepalive_cpu_share'):.1%} |

Switchboard uses **{ref / ours:.1f}×** less memory per connection than the reference.
Targets: ≤ 8 KiB (8,192 bytes) per idle connection; ≥ 1,000 authenticated connects/s.

Not measured: 50,000 connections. This machine's hard limit is 20,000 open files per
process, and one client address has 28,232 ephemeral ports. Keepalive was libwebsockets'
validity timer until this benchmark showed each round of 10,000 pings costing 4 s of CPU
(the timers live in one sorted list, walked on every insert); the server now sweeps its
connections once a second itself (0.3 s per round). Each visit also reads the connection's
received-byte count from the kernel (`TCP_INFO`) for `max_receive_bytes_per_second`, the
ping-flood limit: that doubled keepalive CPU, from 2.1% to about 4% of a core at 10,000
connections.
""")
