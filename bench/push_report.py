"""The push section of BENCHMARKS.md on stdout, from the runs' JSON lines (bench/push.sh, one
per run and sender: bench/run_row.py with the sender's and the sandbox's CPU).

    push_report.py RUNS_JSONL RUNS COUNT CONCURRENCY
"""

import sys

from benchlib import measured, median, pick, read_jsonl

rows = read_jsonl(sys.argv[1])
runs, count, concurrency = sys.argv[2], sys.argv[3], sys.argv[4]


def pushes_per_second(name):
    return median(pick(rows, name=name), "pushes_per_second")


def cpu_share(name):
    return median(pick(rows, name=name), lambda r: r["client_cpu_seconds"] / r["seconds"])


def sandbox_share(name):
    return median(pick(rows, name=name), lambda r: r["sandbox_cpu_seconds"] / r["seconds"])


ours, ref = pushes_per_second("switchboard"), pushes_per_second("aioapns")
failures = sum(r["failures"] for r in rows)
print(f"""## Push: VoIP pushes per second over one HTTP/2 connection

{measured()}
{count} VoIP pushes (payload 71 bytes), {concurrency} in flight, one HTTP/2 connection to
`switchboard apns-sandbox` with 40 ms added to every answer. The sender runs on core 1, the
sandbox on core 0. Medians of {runs} runs; failures in all runs: {failures}.

| sender | pushes/s | sender CPU (share of its core) | sandbox CPU |
|---|---|---|---|
| Switchboard `APNsClient` (libcurl multi, Swift) | **{ours:,.0f}** | {cpu_share('switchboard'):.0%} | {sandbox_share('switchboard'):.0%} |
| aioapns 4.0 (Python, h2), reference | {ref:,.0f} | {cpu_share('aioapns'):.0%} | {sandbox_share('aioapns'):.0%} |

Ratio to the reference: **{ours / ref:.1f}×**. Targets: ≥ 5,000 pushes/s and ≥ 1.5× the reference.

With 40 ms per answer and {concurrency} streams, one connection's ceiling is
{int(concurrency) / 0.040:,.0f} pushes/s; what stops below it is CPU (the sender's, and the
sandbox's, which parses and records every push).
""")
