"""The relay section of BENCHMARKS.md on stdout, from the runs' JSON lines (bench/relay.sh: per
run, Switchboard and the Python reference from bench/run_row.py, the C ceiling from
bench/loopback_row.py).

    relay_report.py RUNS_JSONL RUNS PAIRS WINDOW MESSAGES
"""

import sys

from benchlib import measured, median, pick, read_jsonl

rows = read_jsonl(sys.argv[1])
runs, pairs, window, messages = sys.argv[2:6]


def throughput(name):
    return median(pick(rows, name=name), "messages_per_second")


def share(name, key):
    return median(pick(rows, name=name), lambda r: r[key] / r["seconds"])


def each(name):
    return ", ".join(f"{r['messages_per_second']:,.0f} ({r.get('steal_share', 0):.0%})" for r in pick(rows, name=name))


ours, peer, ceiling = throughput("switchboard"), throughput("websockets"), throughput("loopback")
print(f"""## Relay: signals per second through one server core

{measured()}
{pairs} pairs of WebSocket clients, each pair alone in a room; each sender keeps {window} `signal`
messages of ~300 bytes in flight to its partner and sends one more for each `ok` reply
({int(messages):,} signals per Switchboard run, a fifth as many for the reference). Every signal is one frame in and two out (the signal to the
receiver, the `ok` to the sender). The server runs on core 0, the load generator
(`bench/wsload.c relay`: C on one epoll loop, masked frames, each connection's frames written
once per turn of its loop) on core 1. Medians of {runs} runs.

| server | signals/s | server CPU | load generator CPU |
|---|---|---|---|
| Switchboard (libwebsockets, simdjson, Swift) | **{ours:,.0f}** | {share('switchboard', 'server_cpu_seconds'):.0%} | {share('switchboard', 'client_cpu_seconds'):.0%} |
| Python `websockets` 15 relay (`bench/websockets_relay.py`), reference | {peer:,.0f} | {share('websockets', 'server_cpu_seconds'):.0%} | {share('websockets', 'client_cpu_seconds'):.0%} |
| C epoll echo (`bench/loopback.c`), ceiling | {ceiling:,.0f} round trips/s | {share('loopback', 'server_cpu_seconds'):.0%} | |

Ratio to the peer relay: **{ours / peer:.1f}×**; share of the loopback ceiling: **{ours / ceiling:.0%}**.
Targets: ≥ 50,000 signals/s on one core and ≥ 25% of the ceiling; since the redesign, ≥ 50% of it.
Each run, with the share of the machine's CPU time the hypervisor gave to other guests during
it (steal): Switchboard {each('switchboard')}; the reference {each('websockets')}; the ceiling
{each('loopback')}.

The ceiling keeps as many messages in flight ({int(pairs) * int(window)}) on as many connections,
one each, so that it pays one read and one write per message, as a relay does per frame; with
{window} messages pipelined per connection the echo coalesces them into one system call per
{int(window) * 300:,} bytes and is no longer a per-message figure. It bounds a relay that pays
a system call per frame, not one that reads several frames at once and writes each connection's
queued frames together, as Switchboard does with its pipelined senders: on 2026-12-06 the echo
made 104-121k round trips/s, and Switchboard relayed more signals than that (on 2026-12-04, on
another host, the echo made 131-235k and Switchboard 113-119k). A share above 100% says that
this host's system calls cost more than its relay's other work, not that the relay beat a limit.

What profiling the server (`perf record -g` on the relay run) found and what each change bought,
in signals/s on this machine: the first measurement gave 14,527, with Foundation's `JSONDecoder`
at 42% of the server's CPU (a `JSONValue` is decoded by trying each kind, and every miss throws)
and `JSONEncoder` at 18%. Atomic message counters and reading the signal from the parsed message
once: 17,676. Decoding strings and objects first: 19,101. Parsing incoming messages with jansson:
20,907. Writing outgoing messages with jansson: ~35,000, and the load generator became the
limit (96% of its core, each message hopping between threads); running it in event handlers on
its loop thread made the server the bottleneck again (~100%). Moving the event loop from
libwebsockets' poll() to libev on epoll (so that 10,000 idle connections cost nothing per
wakeup; see the latency section) cost some throughput here (~29,000: one `epoll_ctl` per
write-interest change). Then the frames queued for one connection leave in one `send()`, each
with its own header, instead of one system call per frame (the kernel's TCP path had been a
third of the server's CPU): ~60,000. Since then the ceiling's rule of one system call per
message no longer binds Switchboard (it writes whatever has queued for a connection at once),
so its share of the ceiling compares costs; it is not a bound. Then signals are read with
simdjson instead of jansson, whose byte-at-a-time lexer took ~9 µs of a 300-byte signal (a C
loop: 8.9 µs against simdjson's 0.16 µs): the server's CPU per paced signal fell by a third
(77% to 53% of its core at 15,000/s), and the pipelined figure became bound by the load
generator (`switchboard-bench relay`, Swift), at 99% of its core near 47,000-58,000 signals/s.
The generator is now C (`bench/wsload.c`) and needs about a quarter of its core at the
server's saturation (the table's last column), so the figure above is the server's: on
2026-12-03, alternating on one server, the C generator drove 98,000-104,000 signals/s with
0.22 s user + 0.86 s system CPU per 4 s, the Swift one 43,000-58,000 at 100% of its core.
""")
