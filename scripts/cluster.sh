#!/usr/bin/env bash
# make cluster: a cluster on loopback for a local demo, under scripts/with-postgres.sh (which
# starts PostgreSQL and sets SWITCHBOARD_TEST_POSTGRES_URL): Redis, three `switchboard serve`
# nodes and HAProxy in front of them on PORT (8080). Ctrl-C stops them all.
#   scripts/with-postgres.sh scripts/cluster.sh SWITCHBOARD_BINARY
set -euo pipefail
binary="${1:?usage: cluster.sh SWITCHBOARD_BINARY}"
port="${PORT:-8080}"
store="${SWITCHBOARD_TEST_POSTGRES_URL:?run under scripts/with-postgres.sh}"
dir="$(mktemp -d /tmp/switchboard-cluster.XXXXXX)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
  echo "cluster: stopped"
}
trap stop EXIT
trap 'exit 0' INT TERM

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log" &
pids+=($!)
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.1; done
echo "cluster: Redis on 127.0.0.1:$redis_port"

nodes=()
for number in 1 2 3; do
  node_port="$(free_port)"
  mkdir -p "$dir/node-$number"
  "$binary" serve --port "$node_port" --node-id "node-$number" --data-dir "$dir/node-$number" --web-root ./web --dev-tokens \
    --store-url "$store" --cluster-redis-url "redis://127.0.0.1:$redis_port/0" \
    --public-url "http://127.0.0.1:$port/" >"$dir/node-$number.out" 2>"$dir/node-$number.log" &
  pids+=($!)
  # One at a time: the first creates the development app the others then find.
  until curl -sf "http://127.0.0.1:$node_port/readyz" >/dev/null; do
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$dir/node-$number.log" >&2; exit 1; }
    sleep 0.1
  done
  nodes+=("$node_port")
  echo "cluster: node-$number on 127.0.0.1:$node_port (log $dir/node-$number.log)"
done

scripts/haproxy-config.sh "$port" "${nodes[@]}" >"$dir/haproxy.cfg"
haproxy -f "$dir/haproxy.cfg" -db >"$dir/haproxy.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
  kill -0 "${pids[-1]}" 2>/dev/null || { cat "$dir/haproxy.log" >&2; exit 1; }
  sleep 0.1
done
grep -h -A5 'Created a development app' "$dir"/node-*.out || true
echo
echo "Switchboard cluster: open http://127.0.0.1:$port/  (HAProxy in front of node-1..3; Ctrl-C to stop)"
echo "  switchboard phone --server http://127.0.0.1:$port --identity bob --dev-token"
wait
