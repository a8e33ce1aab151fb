"""The churn section of BENCHMARKS.md on stdout, from the two servers' JSON lines (bench/churn.sh,
via bench/churn_row.py).

    churn_report.py RUNS_JSONL SECONDS
"""

import sys

from benchlib import measured, read_jsonl

rows = {r["name"]: r for r in read_jsonl(sys.argv[1])}
seconds = sys.argv[2]
ours, ref = rows["switchboard"], rows["websockets"]


def mib(kib):
    return f"{kib / 1024:.1f}"


print(f"""## Churn: authenticated connects per second, held for a minute

{measured()}
`switchboard-bench churn` on core 1: 64 workers, each opens a WebSocket with a freshly signed
JWT (Switchboard verifies it), closes it, waits for the close, and goes again, for {seconds} s;
then, after 5 s, another {seconds} s. The server runs on core 0. Open files and resident memory
are read at the start, 5 s after the first minute and 5 s after the second: what a leak would
show as growth between the last two. One run each.

| server | connects/s (1st minute) | connects/s (2nd) | server CPU | failed | open fds (start → 1 min → 2 min) | RSS MiB (start → 1 min → 2 min) |
|---|---|---|---|---|---|---|
| Switchboard | **{ours['connects_per_second']:,}** | {ours['second_minute']:,} | {ours['server_cpu_share']:.0%} | {ours['failed']} | {' → '.join(map(str, ours['fds']))} | {' → '.join(mib(v) for v in ours['rss_kib'])} |
| Python `websockets` 15, reference | {ref['connects_per_second']:,} | {ref['second_minute']:,} | {ref['server_cpu_share']:.0%} | {ref['failed']} | {' → '.join(map(str, ref['fds']))} | {' → '.join(mib(v) for v in ref['rss_kib'])} |

Ratio to the reference: **{ours['connects_per_second'] / ref['connects_per_second']:.1f}×**. Target: ≥ 1,000 authenticated connects/s,
no growth in open files or memory after the load. The first minute's memory growth is the
allocator keeping freed pages for reuse; the second minute reuses them. Every connect here is
a new identity, so memory also holds the `connects_per_identity_per_minute` map of the
identities seen in the last few seconds (pruned every 5 s; about 10 MiB at this rate). The
server's open files at rest include its listening socket, a spare descriptor kept for shedding
connections when descriptors run out, and the lock on its data directory.
""")
