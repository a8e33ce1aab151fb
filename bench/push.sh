# The push section of make bench (sourced by scripts/bench.sh): VoIP pushes per second over one
# HTTP/2 connection with 40 ms added latency, Switchboard's APNs client against aioapns, each
# sending to `switchboard apns-sandbox` from core 1 with the sandbox on core 0.
start_sandbox 0 "$out/sandbox"
count="${PUSH_COUNT:-20000}"
concurrency="${PUSH_CONCURRENCY:-1000}"

push_run() {  # push_run NAME COMMAND...: runs it on core 1 with 40 ms latency, appends JSON + CPU seconds
  local name=$1; shift
  curl -s -X POST "$sandbox_admin/reset" >/dev/null
  curl -s -X POST -d '{"kind":"latency","ms":40}' "$sandbox_admin/faults" >/dev/null
  local start_ticks; start_ticks=$(cpu_ticks "$sandbox_pid")
  /usr/bin/env time -f "%U %S" -o "$out/time" taskset -c 1 "$@" >"$out/result"
  local end_ticks; end_ticks=$(cpu_ticks "$sandbox_pid")
  python3 bench/run_row.py "$name" "$out/result" --client-cpu "$(awk '{print $1+$2}' "$out/time")" \
    --sandbox-ticks "$((end_ticks - start_ticks))" >>"$out/push.jsonl"
}

for _ in $(seq 1 "$runs"); do
  push_run switchboard "$bin/switchboard-bench" push --url "$sandbox_url" --ca-file "$sandbox_cert" \
    --count "$count" --concurrency "$concurrency"
  push_run aioapns "$venv/bin/python" bench/aioapns_push.py --port "${sandbox_url##*:}" --ca-file "$sandbox_cert" \
    --count "$count" --concurrency "$concurrency"
done
kill "$sandbox_pid" 2>/dev/null || true
cat "$out/push.jsonl"
write_section "## Push:" push_report.py "$out/push.jsonl" "$runs" "$count" "$concurrency"
