#!/usr/bin/env bash
# make soak: SOAK_SECONDS (default 600) of mixed load on one server, sampling its open files and
# memory every 10 s (docs/security.md). At once, from switchboard-bench on the other core:
#   - SOAK_IDLE (10,000) authenticated idle WebSockets, held throughout (keepalive pings);
#   - churn: 16 workers connecting, joining one of 32 rooms, and closing, again and again;
#   - relay: 20 pairs in rooms sending 1,000 signals/s;
#   - calls: 20 calls/s to 200 callees with VoIP devices, pushed through the APNs sandbox,
#     each ringing 5 s and then ending as missed.
# Passes when every generator finished without an error, the server answered nothing but the
# intended, and after the first two minutes (warm-up) its memory grew at most SOAK_RSS_GROWTH
# percent (default 10) and its open files at most SOAK_FD_GROWTH (default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${SOAK_SECONDS:-600}"
idle="${SOAK_IDLE:-10000}"
out="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
ulimit -n "$(ulimit -Hn)"

swift build -c release --product switchboard >/dev/null
swift build -c release --product switchboard-bench >/dev/null
bin=.build/release
wait_for() {
  for _ in $(seq 1 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; return 1
}

taskset -c 1 "$bin/switchboard" apns-sandbox --port 0 --admin-port 0 --accept-any-key --dir "$out/sandbox" >"$out/sandbox.out" 2>&1 &
wait_for "$out/sandbox.out" "admin API"
apns_url=$(sed -n 's/^APNs sandbox: \(https:[^ ]*\).*/\1/p' "$out/sandbox.out")
apns_cert=$(sed -n 's/^certificate: *\(.*\)$/\1/p' "$out/sandbox.out")
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$out/key.p8"
"$bin/switchboard" app create --name Soak --bundle-id com.example.soak --data-dir "$out/data" >"$out/app.json"
key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_key"])' "$out/app.json")
secret=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_secret"])' "$out/app.json")
"$bin/switchboard" app push-key --api-key "$key" --key-file "$out/key.p8" --key-id SOAK123456 --team-id TEAM123456 --data-dir "$out/data" >/dev/null
taskset -c 0 "$bin/switchboard" serve --port 0 --data-dir "$out/data" --apns-url "$apns_url" --apns-ca-file "$apns_cert" \
  --messages-per-second 10000 --message-burst 10000 --invites-per-minute 1000 --invites-per-pair-per-minute 100 --log-level warn >"$out/serve.out" 2>"$out/serve.err" &
server=$!
for _ in $(seq 1 100); do grep -q "Switchboard is running" "$out/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*Switchboard is running: http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$out/serve.out")
url="ws://127.0.0.1:$port"
auth=(--server "$url" --api-key "$key" --api-secret "$secret")

sample() { echo "$(date +%s) $(ls /proc/"$server"/fd | wc -l) $(awk '/^VmRSS/ {print $2}' /proc/"$server"/status)"; }
echo "time fds rss_kib" >"$out/samples"
sample >>"$out/samples"

taskset -c 1 "$bin/switchboard-bench" idle "${auth[@]}" --connections "$idle" --hold $((seconds + 30)) >"$out/idle.out" 2>&1 &
idle_pid=$!
for _ in $(seq 1 1200); do grep -q '"connected"' "$out/idle.out" 2>/dev/null && break; sleep 0.1; done
start=$(date +%s)
taskset -c 1 "$bin/switchboard-bench" churn "${auth[@]}" --seconds "$seconds" --parallel 16 --join-rooms 32 >"$out/churn.out" 2>&1 &
churn_pid=$!
taskset -c 1 "$bin/switchboard-bench" relay "${auth[@]}" --pairs 20 --rate 1000 --messages $((seconds * 1000)) >"$out/relay.out" 2>&1 &
relay_pid=$!
taskset -c 1 "$bin/switchboard-bench" calls "${auth[@]}" --rate 20 --seconds "$seconds" --callers 10 --callees 200 --ring-timeout 5 >"$out/calls.out" 2>&1 &
calls_pid=$!
while kill -0 "$churn_pid" 2>/dev/null || kill -0 "$relay_pid" 2>/dev/null || kill -0 "$calls_pid" 2>/dev/null; do
  sleep 10
  sample >>"$out/samples"
done
status=0
for pid in $churn_pid $relay_pid $calls_pid; do wait "$pid" || status=1; done
kill "$idle_pid" 2>/dev/null; wait "$idle_pid" 2>/dev/null || true
sleep 25  # connections close, resume windows (20 s) expire
sample >>"$out/samples"
curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics"

python3 - "$out" "$start" "$status" "${SOAK_RSS_GROWTH:-10}" "${SOAK_FD_GROWTH:-100}" "$seconds" "$idle" <<'PY'
import json, re, sys
out, start, status, rss_limit, fd_limit, seconds, idle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
rows = [list(map(int, line.split())) for line in open(out + "/samples").read().splitlines()[1:]]
def last_json(name):
    lines = [l for l in open(f"{out}/{name}.out") if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}
churn, relay, calls = last_json("churn"), last_json("relay"), last_json("calls")
warm = [r for r in rows if r[0] >= start + 120]
during = [r for r in rows if start <= r[0]]
metrics = open(out + "/metrics").read()
errors = {m.group(1): float(m.group(2)) for m in re.finditer(r'^switchboard_errors_total\{code="([^"]+)"\} (\S+)$', metrics, re.M)}
pushes = {m.group(1): float(m.group(2)) for m in re.finditer(r'^switchboard_apns_pushes_total\{type="voip",reason="([^"]+)"\} (\S+)$', metrics, re.M)}
rss_growth = (max(r[2] for r in warm) - warm[0][2]) / warm[0][2] * 100 if warm else 0
fd_growth = max(r[1] for r in warm) - warm[0][1] if warm else 0
print(f"soak: {seconds} s with {idle} idle connections")
print(f"  churn: {churn.get('connected', 0):,} connections ({churn.get('connects_per_second', 0)}/s), failed {churn.get('failed')}")
print(f"  relay: {relay.get('delivered', 0):,} signals delivered, p99 {relay.get('p99_us', 0) / 1000:.2f} ms")
print(f"  calls: {calls.get('created', 0):,} created, failed {calls.get('failed')}; VoIP pushes {pushes}")
print(f"  server errors by code: {errors or 'none'}")
print(f"  fds: start {rows[0][1]}, after warm-up {warm[0][1] if warm else '-'}, peak {max(r[1] for r in during)}, end {rows[-1][1]}")
print(f"  RSS MiB: start {rows[0][2]/1024:.1f}, after warm-up {warm[0][2]/1024 if warm else 0:.1f}, peak {max(r[2] for r in during)/1024:.1f}, end {rows[-1][2]/1024:.1f}")
print(f"  growth after warm-up: RSS {rss_growth:.1f}% (limit {rss_limit}%), fds {fd_growth} (limit {fd_limit})")
ok = status == 0 and churn.get("failed") == 0 and calls.get("failed") == 0 and not errors and rss_growth <= rss_limit and fd_growth <= fd_limit
print("soak: PASS" if ok else "soak: FAIL")
sys.exit(0 if ok else 1)
PY
