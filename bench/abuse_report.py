"""The abuse section of BENCHMARKS.md on stdout, from the runs' JSON lines (bench/abuse.sh, via
bench/abuse_row.py): per attack, the well-behaved client's latency, the server's CPU, whether
it was healthy after, and what the attacker did in the median run.

    abuse_report.py RUNS_JSONL RUNS SECONDS
"""

import sys

from benchlib import measured, median, pick, read_jsonl

rows = read_jsonl(sys.argv[1])
runs, seconds = sys.argv[2:4]


def ms(attack, key):
    return f"{median(pick(rows, attack=attack), key) / 1000:.2f}"


def attacker(attack):
    # What the attacker did and what the server let through, from the median run by p99.
    by_p99 = sorted(pick(rows, attack=attack), key=lambda r: r["p99_us"])
    stats = dict(by_p99[len(by_p99) // 2]["attacker"])
    stats.pop("attack", None)
    return ", ".join(f"{k.replace('_', ' ')} {v:,}" if isinstance(v, int) else f"{k.replace('_', ' ')} {v}" for k, v in stats.items()) or "—"


described = {
    "none": ("none (baseline)", "—"),
    "slowloris": ("slowloris: 1,000 connections sending a request head one header a second, reopened when cut", "`http_timeout_seconds` (10 s)"),
    "ping-flood": ("ping flood: 20 WebSockets writing ping frames as fast as the sockets take them, reconnecting when dropped", "`max_receive_bytes_per_second` (1 MiB/s, bursts of 4 s: dropped), `connects_per_identity_per_minute` (60)"),
    "invite-storm": ("invite storm: one caller pipelining `call.create` to 16 callees, reconnecting when dropped", "`invites_per_minute` (30), `invites_per_pair_per_minute` (10), `messages_per_second` (50), `max_receive_bytes_per_second`, `connects_per_identity_per_minute`"),
    "registration-spam": ("registration spam: one user's token, 8 keep-alive connections of `PUT /v1/devices/{new id}`", "`max_devices_per_user` (20, then `409 conflict`)"),
    "nested-json": ("deeply nested JSON: 10 WebSockets sending 60 KB of `[[[…]]]` (30,000 levels), reconnecting when dropped", "nesting (`malformed_json`), `messages_per_second`, `max_receive_bytes_per_second`, `connects_per_identity_per_minute`"),
    "oversized": ("oversized messages: 10 WebSockets sending 1 MiB messages, reconnecting", "`max_message_bytes` (64 KiB, close 1009), `connects_per_identity_per_minute` (60)"),
}
order = [a for a in described if pick(rows, attack=a)]
table = "\n".join(
    f"| {described[a][0]} | {described[a][1]} | {attacker(a)} | {ms(a, 'p50_us')} | **{ms(a, 'p99_us')}** | {ms(a, 'p999_us')} | "
    f"{median(pick(rows, attack=a), lambda r: r['server_cpu_seconds'] / r['seconds']):.0%} | {'yes' if all(r['healthz'] == 200 for r in pick(rows, attack=a)) else 'NO'} |"
    for a in order)
print(f"""## Abuse: a well-behaved client's latency during each attack

{measured()}
A fresh server with the default limits for each attack. The well-behaved client is 10 pairs
relaying 400 signals/s in all (`switchboard-bench relay --rate`, {seconds} s; latency is send to
delivery); the attacker (`bench/abuse.py`) starts a second earlier and stops after it. The server
runs on core 0; the client (nice −5) and the attacker (nice 10) share core 1, so an attacker
that keeps core 1 busy also slows the client's own sending. Medians of {runs} runs; the
attacker's figures are from the median run.

| attack | limit that bounds it | attacker sent / server let through | p50 ms | p99 ms | p99.9 ms | server CPU | `/healthz` after |
|---|---|---|---|---|---|---|---|
{table}
""")
