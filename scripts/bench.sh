#!/usr/bin/env bash
# make bench: builds in release mode and runs the benchmarks, writing BENCHMARKS.md.
# Not part of make test. Each benchmark runs its system under test and the load on separate
# cores (taskset), repeats, takes medians, and reports ratios to a reference measured in the
# same run on the same machine.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-.build/venv}"
runs="${RUNS:-3}"
out="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

swift build -c release --product switchboard >/dev/null
swift build -c release --product switchboard-bench >/dev/null
bin=.build/release

# ---- Push: VoIP pushes per second over one HTTP/2 connection, 40 ms added latency ----
taskset -c 0 "$bin/switchboard" apns-sandbox --port 0 --admin-port 0 --accept-any-key --dir "$out/sandbox" \
  >"$out/sandbox.out" 2>"$out/sandbox.err" &
for _ in $(seq 1 100); do grep -q "admin API" "$out/sandbox.out" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^APNs sandbox: \(https:[^ ]*\).*/\1/p' "$out/sandbox.out")
admin=$(sed -n 's/^admin API: *\(http:[^ ]*\).*/\1/p' "$out/sandbox.out")
cert=$(sed -n 's/^certificate: *\(.*\)$/\1/p' "$out/sandbox.out")
port=${url##*:}
count="${PUSH_COUNT:-20000}"
concurrency="${PUSH_CONCURRENCY:-1000}"

measure() {  # measure NAME COMMAND...: runs it on core 1 with 40 ms latency, appends JSON + CPU seconds
  local name=$1; shift
  curl -s -X POST "$admin/reset" >/dev/null
  curl -s -X POST -d '{"kind":"latency","ms":40}' "$admin/faults" >/dev/null
  local start_ticks; start_ticks=$(awk '{print $14+$15}' /proc/"$(pgrep -f "apns-sandbox --port 0" | head -1)"/stat)
  /usr/bin/env time -f "%U %S" -o "$out/time" taskset -c 1 "$@" >"$out/result"
  local end_ticks; end_ticks=$(awk '{print $14+$15}' /proc/"$(pgrep -f "apns-sandbox --port 0" | head -1)"/stat)
  local cpu; cpu=$(awk '{print $1+$2}' "$out/time")
  python3 - "$name" "$out/result" "$cpu" "$((end_ticks - start_ticks))" >>"$out/push.jsonl" <<'PY'
import json, sys
name, path, cpu, ticks = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
result = json.loads(open(path).read().strip().splitlines()[-1])
result.update(name=name, client_cpu_seconds=cpu, sandbox_cpu_seconds=ticks / 100)
print(json.dumps(result))
PY
}

for _ in $(seq 1 "$runs"); do
  measure switchboard "$bin/switchboard-bench" push --url "$url" --ca-file "$cert" --count "$count" --concurrency "$concurrency"
  measure aioapns "$venv/bin/python" bench/aioapns_push.py --port "$port" --ca-file "$cert" --count "$count" --concurrency "$concurrency"
done
cat "$out/push.jsonl"

python3 - "$out/push.jsonl" "$runs" "$count" "$concurrency" <<'PY'
import json, os, platform, statistics, subprocess, sys, datetime
rows = [json.loads(line) for line in open(sys.argv[1])]
runs, count, concurrency = sys.argv[2], sys.argv[3], sys.argv[4]
def median(name, key):
    return statistics.median(r[key] for r in rows if r["name"] == name)
ours, ref = median("switchboard", "pushes_per_second"), median("aioapns", "pushes_per_second")
cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
swift = subprocess.run(["swift", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
failures = sum(r["failures"] for r in rows)
def cpu_share(name):
    return statistics.median(r["client_cpu_seconds"] / r["seconds"] for r in rows if r["name"] == name)
def sandbox_share(name):
    return statistics.median(r["sandbox_cpu_seconds"] / r["seconds"] for r in rows if r["name"] == name)
section = f"""## Push: VoIP pushes per second over one HTTP/2 connection

Measured {datetime.date.today().isoformat()} on {os.cpu_count()} × {cpu_model}, Linux {platform.release()}, {swift}.
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
"""
path = "BENCHMARKS.md"
text = open(path).read() if os.path.exists(path) else "# Benchmarks\n\n`make bench` writes this file; each section is replaced by the run that measured it.\n\n"
start = text.find("## Push:")
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
else:
    text = text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text)
print(section)
PY
