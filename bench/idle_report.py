"""The idle connections section of BENCHMARKS.md on stdout, from the runs' JSON lines
(bench/idle.sh, via bench/idle_row.py).

    idle_report.py RUNS_JSONL RUNS CONNECTIONS HOLD_SECONDS [MAX_CONNECTIONS FAST_PING_INTERVAL]
"""

import sys

import benchlib
from benchlib import measured, pick, read_jsonl

rows = read_jsonl(sys.argv[1])
runs, count, hold = sys.argv[2:5]
most = int(sys.argv[5]) if len(sys.argv) > 5 else 0
fast = int(sys.argv[6]) if len(sys.argv) > 6 else 8


def median(name, key):
    return benchlib.median(pick(rows, name=name), key)


closed = sum(r["closed_while_held"] or 0 for r in rows)
ours, ref = median("switchboard", "bytes_per_connection"), median("websockets", "bytes_per_connection")


def row(name, label):
    if not pick(rows, name=name):
        return ""
    return (f"| {label} | {median(name, 'connections'):,.0f} | {median(name, 'bytes_per_connection'):,.0f} | "
            f"{median(name, 'connects_per_second'):,.0f} | {median(name, 'pings_per_second'):,.0f} | "
            f"{median(name, 'keepalive_cpu_share'):.2%} |\n")


before = row("before", "Switchboard, the build before (`IDLE_BEFORE_BIN`), same run")
largest = row("max-20", "Switchboard, the most this machine holds, pings every 20 s") + row(
    f"max-{fast}", f"the same, pings every {fast} s: the pings per second of {most * 20 // fast:,} connections at 20 s")
print(f"""## Idle connections: memory, connect rate and keepalive

{measured()}
{count} authenticated WebSocket connections (Switchboard checks each one's JWT) opened by
`bench/wsload.c idle` (C, answering pings) on core 1, 64 handshakes at a time, then held {hold} s, through two
rounds of keepalive pings (every 20 s of silence, both servers). Memory is the server's
resident set after connecting minus before. Medians of {runs} runs; connections lost while
held, all runs: {closed}.

| server | connections | bytes per idle connection | connects/s | pings/s | keepalive CPU (share of a core) |
|---|---|---|---|---|---|
| Switchboard | {int(count):,} | **{ours:,.0f}** | {median('switchboard', 'connects_per_second'):,.0f} | {median('switchboard', 'pings_per_second'):,.0f} | **{median('switchboard', 'keepalive_cpu_share'):.2%}** |
{before}| Python `websockets` 15, reference | {int(count):,} | {ref:,.0f} | {median('websockets', 'connects_per_second'):,.0f} | {median('websockets', 'pings_per_second'):,.0f} | {median('websockets', 'keepalive_cpu_share'):.2%} |
{largest}
Memory per connection, Switchboard to the reference: **{ours / ref:.2f}×**.
Targets: ≤ 8 KiB (8,192 bytes) per idle connection; ≥ 1,000 authenticated connects/s.

Memory per connection: most of the 21 KB of the builds before 2026-12-06 was libwebsockets'
receive buffer, which it allocates for every open WebSocket at the size the protocol asks for:
16 KiB then (`heaptrack`, 3,000 idle connections: 36 MB of a 45 MB heap, 16.4 KB each). It is
4 KiB now, what libwebsockets reads from a socket at once anyway (a larger message arrives in
pieces, which the server joins; sends keep their 16 KiB cap), and memory per idle connection
fell to the first row's (the second row is the build before, same run). Pipelined relay, the
two builds alternating three times: 166-169k signals/s before, 174-176k after, with 3-5% less
server CPU. The generator was not the cause, as this section said before: on the build before,
5,000 connections from `bench/wsload.c` and from `switchboard-bench idle` measure 20,936 and
20,981 bytes each (by hand, 2026-12-06). The 7,292 bytes measured on 2026-12-03, with the same
16 KiB buffer, stay unexplained: a buffer's pages count only once written, and how many are
depends on what the heap reused.

Not measured: 50,000 connections. This machine's hard limit is 20,000 open files per
process (raising it needs a capability the sandbox does not give), and one client address has
28,232 ephemeral ports. The keepalive does nothing per second for an idle connection but its
ping (it sits in a timing wheel at the slot of its next ping or drop), so the cost of 50,000
is that of their pings: the last row gives {most:,} connections the pings per second {most * 20 // fast:,}
get at the default interval. Goal: ≤ 2% of a core at the default interval.

Keepalive was libwebsockets' validity timer until this benchmark showed each round of 10,000
pings costing 4 s of CPU (the timers live in one sorted list, walked on every insert); then
the server swept every connection once a second itself, reading each one's received-byte
count from the kernel (`TCP_INFO`) for `max_receive_bytes_per_second`, the ping-flood limit:
3.4% of a core at 10,000 connections, a third of a core at 100,000, with no ping due. Now a
connection is visited when its ping falls due, and read from the kernel then (and every second
while it sends more than a quarter of its allowance).

Since 2026-12-04 a ping is written when the loop's turn ends, as a queued frame is, instead of
asking epoll for the connection's writeable event (two `epoll_ctl` calls and a wakeup more per
ping); the build before in the table above is the one that asked. What is left per ping is its
write and its pong's read, and on loopback the kernel charges a segment's delivery to the
process that writes it, so the server pays for the receiving side of its pings too. The goal of 2% at the ping
rate of 50,000 connections is not met here (the last row); a network card would take the
receiving side off the server's core, which loopback cannot show. Where it goes (`perf`, by
hand on 2026-12-06, 17,000 connections pinged every 7 s, 3.8% of a core): 65% in the kernel,
of which the pings' `sendto` 40% (the client's receive path, charged to the server on
loopback, half of that), the `TCP_INFO` read of the receive allowance 11%, `epoll_wait` 6%,
the pongs' reads 5%; libwebsockets 12%, the server's own code 11%, the Swift runtime 7%. With
none of the server's and libwebsockets' code at all, the kernel's share alone would be 2.5% of
a core.

Since 2026-12-06 a connection's first ping comes later by a random part of half the interval
(so fewer pings fall in the 45 s held above than in the build before, whose first pings all
came at 20 s: the pings/s column), and the wheel's timer is set for its next occupied slot and
no longer wakes libwebsockets after it. Slots of 10 ms instead of 50 were tried the same day
and cost 1.40% of a core at 10,000 connections against the build before's 0.98% in the same
run, with 4.09% at the last row's rate: fewer pings to a wakeup, more wakeups; they were not kept.
""")
