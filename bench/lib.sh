# The shell helpers of make bench's sections (sourced by scripts/bench.sh before them). They use
# the driver's $bin (the binaries), $venv (the Python environment) and $out (the run's scratch
# directory), and the caller's variables where a comment says so.

# BENCH=relay or BENCH=push,relay runs only those.
want() { [ "${BENCH:-all}" = all ] || [[ ",${BENCH}," == *",$1,"* ]]; }
cpu_ticks() { awk '{print $14+$15}' /proc/"$1"/stat; }
# The machine's steal and total ticks (all cores): the share of time the hypervisor gave to
# other guests, which no change to the server can make up for.
steal_ticks() { awk '/^cpu / {print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
rss_kib() { awk '/^VmRSS/ {print $2}' /proc/"$1"/status; }
fds() { ls /proc/"$1"/fd | wc -l; }
wait_for() {  # wait_for FILE PATTERN
  for _ in $(seq 1 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; return 1
}
stop() {  # stop PID...: ends the processes and waits for them
  kill "$@"; wait "$@" 2>/dev/null || true
}
json_field() {  # json_field FILE KEY: a top-level field of a JSON file
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# write_section TITLE REPORT_WRITER ARGS...: bench/REPORT_WRITER's section replaces the one
# headed TITLE in BENCHMARKS.md; a writer that fails leaves the file as it was.
write_section() {
  local title=$1 writer=$2; shift 2
  python3 "bench/$writer" "$@" >"$out/section.md"
  python3 bench/section.py "$title" <"$out/section.md"
}

start_reference() {  # start_reference PORT: the Python websockets relay (the reference server) on core 0; sets server
  taskset -c 0 "$venv/bin/python" bench/websockets_relay.py --port "$1" >"$out/py.out" 2>&1 &
  server=$!
  wait_for "$out/py.out" listening
}

create_app() {  # create_app STORE_ARGS...: an app in that store; sets key, secret
  "$bin/switchboard" app create --name Bench --bundle-id com.example.bench "$@" >"$out/app.json"
  key=$(json_field "$out/app.json" api_key)
  secret=$(json_field "$out/app.json" api_secret)
}

# A prefix for the server and the relay generator (the latency section's real-time runs).
priority=()
start_server() {  # start_server SERVE_ARGS...: switchboard serve on core 0 on a free port; sets server, port
  "${priority[@]}" taskset -c 0 "$bin/switchboard" serve --port 0 "$@" >"$out/serve.out" 2>"$out/serve.err" &
  server=$!
  wait_for "$out/serve.err" "msg=listening"
  port=$(sed -n 's/.*msg=listening .*port=\([0-9]*\).*/\1/p' "$out/serve.err" | head -1)
}

start_switchboard() {  # start_switchboard DATA_DIR [SERVE_ARGS...]: a fresh app and server on core 0; sets key, secret, server, port
  local data=$1; shift
  create_app --data-dir "$data"
  start_server --data-dir "$data" "$@"
}

start_sandbox() {  # start_sandbox CORE DIR: switchboard apns-sandbox on CORE; sets sandbox_pid, sandbox_url, sandbox_admin, sandbox_cert
  taskset -c "$1" "$bin/switchboard" apns-sandbox --port 0 --admin-port 0 --accept-any-key --dir "$2" \
    >"$out/sandbox.out" 2>"$out/sandbox.err" &
  sandbox_pid=$!
  wait_for "$out/sandbox.out" "admin API"
  sandbox_url=$(sed -n 's/^APNs sandbox: \(https:[^ ]*\).*/\1/p' "$out/sandbox.out")
  sandbox_admin=$(sed -n 's/^admin API: *\(http:[^ ]*\).*/\1/p' "$out/sandbox.out")
  sandbox_cert=$(sed -n 's/^certificate: *\(.*\)$/\1/p' "$out/sandbox.out")
}

# The load generator (bench/wsload.c): C on one epoll loop, so that it is not what saturates.
cc -O2 -Wall -o "$out/wsload" bench/wsload.c -lcrypto
cc -O2 -Wall -o "$out/loopback" bench/loopback.c

hold_idle() {  # hold_idle PORT KEY SECRET HOLD_SECONDS: $idle idle connections from core 1; sets generator once they are in
  taskset -c 1 "$out/wsload" idle --port "$1" --key "$2" --secret "$3" \
    --connections "$idle" --hold "$4" >"$out/idle.out" &
  generator=$!
  for _ in $(seq 1 1200); do grep -q '"connected"' "$out/idle.out" 2>/dev/null && return 0; sleep 0.1; done
  echo "the idle connections did not open in 120 s" >&2; return 1
}
