#!/usr/bin/env bash
# By hand (not part of make bench): what a call setup across two nodes costs Redis when its
# commands come one at a time, as at 500 setups/s, and when they come as fast as Redis takes
# them (docs/scaling.md's capacity model). Under scripts/with-postgres.sh, after a release build:
#   scripts/with-postgres.sh bench/redis_replay.sh [SETUPS] [RUNS]
# Two nodes on one Redis (core 0), SETUPS (2,000) setups at 500/s from core 1, each call's
# caller on node a and callee on node b, cancelled at the end: Redis's main-thread CPU a setup.
# Then the same setups again with MONITOR recording Redis's commands, replayed RUNS (3) times
# against a fresh Redis on core 0 by bench/redis_replay.py on core 1 (REPLAY_STATS=1: each
# replay's most costly commands after it, from `INFO commandstats`).
set -euo pipefail
cd "$(dirname "$0")/.."
setups=${1:-2000} runs=${2:-3} bin=${BENCH_BIN:-.build/release}
store="${SWITCHBOARD_TEST_POSTGRES_URL:?run under scripts/with-postgres.sh}"
out=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
redis_main_cpu() {  # redis_main_cpu PORT: the main thread's CPU seconds so far
  redis-cli -p "$1" INFO cpu | awk -F: '/used_cpu_(sys|user)_main_thread/ {s += $2} END {printf "%.6f\n", s}'
}
start_redis() {  # start_redis PORT
  taskset -c 0 redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$out" --logfile "$out/redis-$1.log" &
  pids+=($!)
  until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.1; done
}

redis_port=$(free_port)
start_redis "$redis_port"
"$bin/switchboard" app create --name Replay --bundle-id com.example.replay --store-url "$store" >"$out/app.json"
key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_key"])' "$out/app.json")
secret=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_secret"])' "$out/app.json")
ports=()
for node in a b; do
  taskset -c 0 "$bin/switchboard" serve --port 0 --data-dir "$out/$node" --store-url "$store" --cluster-redis-url "redis://127.0.0.1:$redis_port" \
    --node-id "$node" --invites-per-minute 10000 --invites-per-pair-per-minute 10000 >/dev/null 2>"$out/$node.err" &
  pids+=($!)
  until grep -q "msg=listening" "$out/$node.err"; do
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$out/$node.err" >&2; exit 1; }
    sleep 0.1
  done
  ports+=("$(sed -n 's/.*msg=listening .*port=\([0-9]*\).*/\1/p' "$out/$node.err" | head -1)")
done
calls() {
  taskset -c 1 "$bin/switchboard-bench" calls --server "ws://127.0.0.1:${ports[0]}" --callee-server "ws://127.0.0.1:${ports[1]}" \
    --api-key "$key" --api-secret "$secret" --rate 500 --seconds $((setups / 500)) --cancel-at-end >"$out/calls.json"
}
sleep 1
before=$(redis_main_cpu "$redis_port")
calls
after=$(redis_main_cpu "$redis_port")
python3 -c 'import sys; b, a, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]); print(f"one at a time (500 setups/s): {(a - b) / n * 1e6:.0f} µs of Redis main-thread CPU a setup")' \
  "$before" "$after" "$setups"

redis-cli -p "$redis_port" MONITOR >"$out/monitor.txt" &
monitor=$!
sleep 0.5
# The nodes send a script in full once per connection, by its SHA-1 after: with Redis's scripts
# flushed, each script's next run is refused (NOSCRIPT) and sent in full, so that the recording
# holds every script's body for the fresh Redis of the replay.
redis-cli -p "$redis_port" SCRIPT FLUSH >/dev/null
calls
sleep 1
kill "$monitor"
for _ in $(seq 1 "$runs"); do
  port=$(free_port)
  start_redis "$port"
  taskset -c 1 python3 bench/redis_replay.py "$out/monitor.txt" "$setups" "$port"
  [ -n "${REPLAY_STATS:-}" ] && redis-cli -p "$port" INFO commandstats | grep -E "calls=" | sed "s/,rejected.*//" | sort -t= -k3 -n -r | head -12
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
done
