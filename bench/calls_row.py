"""One run of the call setup section as a JSON line on stdout: `switchboard-bench calls`' result
with the server's own figures from its /metrics (the call setup summary's quantiles, accepted
VoIP pushes, store writes and commits), its CPU share, the engine, the offered rate and the
share of the machine's time stolen by other guests.

    calls_row.py RESULT_FILE METRICS_FILE SERVER_TICKS RATE ENGINE "STEAL0 TOTAL0" "STEAL1 TOTAL1"
"""

import json
import re
import sys

from benchlib import last_json, steal_share

result = last_json(sys.argv[1])
metrics = open(sys.argv[2]).read()


def quantile(q):
    m = re.search(r'^switchboard_call_setup_seconds\{quantile="%s"\} (\S+)$' % q, metrics, re.M)
    return float(m.group(1)) if m else None


def counter(name):
    m = re.search(r'^%s (\S+)$' % name, metrics, re.M)
    return float(m.group(1)) if m else 0


pushes = sum(float(v) for v in re.findall(r'^switchboard_apns_pushes_total\{type="voip",reason="Success"\} (\S+)$', metrics, re.M))
writes = sum(float(v) for v in re.findall(r'^switchboard_store_writes_total\{outcome="ok"\} (\S+)$', metrics, re.M))
result.update(setup_p50_ms=quantile("0.5") * 1000, setup_p99_ms=quantile("0.99") * 1000, setup_p999_ms=quantile("0.999") * 1000,
              server_cpu_share=int(sys.argv[3]) / 100 / result["seconds"], pushes_accepted=pushes, target_rate=int(sys.argv[4]),
              engine=sys.argv[5], store_writes=writes, store_commits=counter("switchboard_store_commits_total"))
result.update(steal_share=steal_share(sys.argv[6], sys.argv[7]))
print(json.dumps(result))
