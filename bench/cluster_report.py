"""The cluster section of BENCHMARKS.md on stdout, from the runs' JSON lines (bench/cluster.sh:
the paced relay runs and the connect runs, each via bench/run_row.py).

    cluster_report.py RUNS_JSONL RUNS RATE PAIRS MESSAGES
"""

import sys

import benchlib
from benchlib import measured, pick, read_jsonl

rows = read_jsonl(sys.argv[1])
runs, rate, pairs, messages = sys.argv[2:6]


def per_signal(name):
    """Median server CPU per delivered signal, in microseconds."""
    return benchlib.median(pick(rows, name=name), lambda r: r["server_cpu_seconds"] / r["delivered"] * 1e6)


def median(name, key):
    return benchlib.median(pick(rows, name=name), key)


def each(name):
    return ", ".join(f"{r['server_cpu_seconds'] / r['delivered'] * 1e6:.0f} µs ({r['steal_share']:.0%})" for r in pick(rows, name=name))


one, two = per_signal("one-node"), per_signal("two-nodes")
straight, balanced = median("connects-straight", "connects_per_second"), median("connects-haproxy", "connects_per_second")
connect_runs = ", ".join(
    f"{a['connects_per_second']:,.0f} / {b['connects_per_second']:,.0f}"
    for a, b in zip(pick(rows, name="connects-straight"), pick(rows, name="connects-haproxy")))
print(f"""## Cluster: CPU per signal between members on two nodes

{measured()}
{pairs} pairs of WebSocket clients, each pair alone in a room, relaying {rate} signals/s in all
(`switchboard-bench relay --rate`, {messages} signals per run) from core 1; the servers on core 0.
One node: both members of every room on one `switchboard serve` (PostgreSQL store). Two nodes: a
cluster (`cluster_redis_url`) whose receivers are on node B (each room runs there) and senders
on node A: every signal goes A → Redis → B. The CPU counted is the servers' (both nodes and
Redis for the cluster), per delivered signal. Medians of {runs} runs.

| members | server CPU per signal | p50 | p99 |
|---|---|---|---|
| on one node | {one:.1f} µs | {median('one-node', 'p50_us') / 1000:.2f} ms | {median('one-node', 'p99_us') / 1000:.2f} ms |
| on two nodes (A, B and Redis) | {two:.1f} µs | {median('two-nodes', 'p50_us') / 1000:.2f} ms | {median('two-nodes', 'p99_us') / 1000:.2f} ms |

Ratio, two nodes to one: **{two / one:.2f}×** (goal ≤ 2×). Each run, CPU per signal and the
share of the machine's time stolen by other guests: one node {each('one-node')}; two nodes
{each('two-nodes')}. The latencies share one core among two nodes and Redis (the cluster's
processes compete for core 0); they are shown for the order of magnitude, not as a result.

**Connects per second through HAProxy.** Authenticated WebSocket connects (`switchboard-bench
churn`, 64 at a time, each opening a session and closing) to one node of the cluster, straight
and through HAProxy configured as docs/scaling.md says (HAProxy on the servers' core),
alternating: **{straight:,.0f}/s straight, {balanced:,.0f}/s through HAProxy** ({balanced / straight:.0%}).
Each run, straight / through: {connect_runs}.
""")
