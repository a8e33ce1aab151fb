# The cluster section of make bench (sourced by scripts/bench.sh, under scripts/with-postgres.sh):
# CPU per signal relayed between room members on two nodes of a cluster, against members on one
# node, at the same paced rate, in the same run. Needs Redis (redis-server) and PostgreSQL.
store="${SWITCHBOARD_TEST_POSTGRES_URL:?make bench runs under scripts/with-postgres.sh}"
cluster_rate="${CLUSTER_RATE:-4000}"
cluster_pairs="${CLUSTER_PAIRS:-20}"
cluster_messages=$((cluster_rate * ${CLUSTER_SECONDS:-10}))
cluster_pipelined_messages="${CLUSTER_PIPELINED_MESSAGES:-400000}"
# CLUSTER_PARTS=setup,takeover runs only those parts (relay, connects, setup, takeover) and
# prints their JSON lines; BENCHMARKS.md is written only from a run of every part.
part() { [ -z "${CLUSTER_PARTS:-}" ] || [[ ",${CLUSTER_PARTS}," == *",$1,"* ]]; }
redis_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
taskset -c 0 redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$out" --logfile "$out/redis.log" &
redis_pid=$!
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.1; done
"$bin/switchboard" app create --name Bench --bundle-id com.example.bench --store-url "$store" >"$out/cluster-app.json"
cluster_key=$(json_field "$out/cluster-app.json" api_key)
cluster_secret=$(json_field "$out/cluster-app.json" api_secret)

start_node() {  # start_node NAME [SERVE_ARGS...]: a node on core 0 on the shared store; sets node_pid, node_port
  local name=$1; shift
  taskset -c 0 "$bin/switchboard" serve --port 0 --data-dir "$out/$name" --store-url "$store" \
    --messages-per-second 100000 --message-burst 100000 "$@" >"$out/$name.out" 2>"$out/$name.err" &
  node_pid=$!
  wait_for "$out/$name.err" "msg=listening"
  node_port=$(sed -n 's/.*msg=listening .*port=\([0-9]*\).*/\1/p' "$out/$name.err" | head -1)
  until curl -sf "http://127.0.0.1:$node_port/readyz" >/dev/null; do sleep 0.05; done
}

cluster_relay() {  # cluster_relay NAME SENDER_PORT RECEIVER_PORT PIDS...: the relay (bench/wsload.c) from core 1; CPU of PIDS
  # Paced at $cluster_rate, or, for a NAME ending in -pipelined, as fast as it goes with 20
  # signals in flight per pair (as in the relay section).
  local name=$1 sender=$2 receiver=$3; shift 3
  local load=(--messages "$cluster_messages" --rate "$cluster_rate")
  [[ "$name" == *-pipelined ]] && load=(--messages "$cluster_pipelined_messages" --refill-on-delivery)
  local before=0 after=0 pid
  for pid in "$@"; do before=$((before + $(cpu_ticks "$pid"))); done
  local start_steal; start_steal=$(steal_ticks)
  taskset -c 1 "$out/wsload" relay --port "$sender" --receiver-port "$receiver" --key "$cluster_key" \
    --secret "$cluster_secret" --pairs "$cluster_pairs" "${load[@]}" >"$out/cluster-result"
  for pid in "$@"; do after=$((after + $(cpu_ticks "$pid"))); done
  local end_steal; end_steal=$(steal_ticks)
  python3 bench/run_row.py "$name" "$out/cluster-result" --server-ticks "$((after - before))" \
    --steal "$start_steal" "$end_steal" >>"$out/cluster.jsonl"
}

cluster_args=(--cluster-redis-url "redis://127.0.0.1:$redis_port/0")
if part relay; then for run in $(seq 1 "$runs"); do
  # One node: both members of each room on it.
  start_node "single-$run"
  single=$node_pid
  cluster_relay one-node "$node_port" "$node_port" "$single"
  cluster_relay one-node-pipelined "$node_port" "$node_port" "$single"
  stop "$single"

  # Two nodes: each room runs on the receivers' node; every signal crosses from the sender's
  # node through Redis. The CPU counted is both nodes' and Redis'.
  start_node "a-$run" "${cluster_args[@]}" --node-id "bench-a-$run"
  node_a=$node_pid port_a=$node_port
  start_node "b-$run" "${cluster_args[@]}" --node-id "bench-b-$run"
  node_b=$node_pid port_b=$node_port
  cluster_relay two-nodes "$port_a" "$port_b" "$node_a" "$node_b" "$redis_pid"
  cluster_relay two-nodes-pipelined "$port_a" "$port_b" "$node_a" "$node_b" "$redis_pid"
  stop "$node_a" "$node_b"
done; fi

# Connects per second to a node of the cluster, straight and through HAProxy (its configuration
# as docs/scaling.md gives it, one backend), alternating, the same node in the same run.
ulimit -n "$(ulimit -Hn)"
if part connects; then
connect_seconds="${CLUSTER_CONNECT_SECONDS:-15}"
start_node "connects" "${cluster_args[@]}" --node-id "bench-connects"
connect_node=$node_pid
haproxy_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
scripts/haproxy-config.sh "$haproxy_port" "$node_port" >"$out/haproxy.cfg"
taskset -c 0 haproxy -f "$out/haproxy.cfg" -db >"$out/haproxy.log" 2>&1 &
haproxy_pid=$!
until curl -sf "http://127.0.0.1:$haproxy_port/readyz" >/dev/null; do sleep 0.1; done
for run in $(seq 1 "$runs"); do
  for way in straight haproxy; do
    target=$node_port
    [ "$way" = haproxy ] && target=$haproxy_port
    taskset -c 1 "$bin/switchboard-bench" churn --server "ws://127.0.0.1:$target" --api-key "$cluster_key" \
      --api-secret "$cluster_secret" --seconds "$connect_seconds" >"$out/connects-result"
    python3 bench/run_row.py "connects-$way" "$out/connects-result" >>"$out/cluster.jsonl"
  done
done
stop "$haproxy_pid" "$connect_node"
fi

# Call setup across nodes: callers on one node, their callees' sessions (and phones, through the
# APNs sandbox) on another, at $setup_rate calls/s; beside the same on one node, same store.
setup_rate="${CLUSTER_SETUP_RATE:-500}"
if part setup; then
setup_seconds="${CLUSTER_SETUP_SECONDS:-20}"
[ -f "$out/push-key.p8" ] || openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$out/push-key.p8"
start_sandbox 1 "$out/cluster-sandbox"
setup_args=(--apns-url "$sandbox_url" --apns-ca-file "$sandbox_cert" --invites-per-minute 10000 --invites-per-pair-per-minute 10000)
setup_run() {  # setup_run NAME CALLER_PORT CALLEE_PORT PIDS...: a warm-up, then the calls from core 1; CPU of PIDS
  local name=$1 caller=$2 callee=$3; shift 3
  taskset -c 1 "$bin/switchboard-bench" calls --server "ws://127.0.0.1:$caller" --callee-server "ws://127.0.0.1:$callee" \
    --api-key "$cluster_key" --api-secret "$cluster_secret" --rate 100 --seconds 1 --callers 5 --callees 5 --cancel-at-end >/dev/null
  local before=0 after=0 pid
  for pid in "$@"; do before=$((before + $(cpu_ticks "$pid"))); done
  local start_steal; start_steal=$(steal_ticks)
  # CLUSTER_SETUP_TIMELINES=DIR: each run's replies, when sent and how long each took, in DIR
  local timeline=()
  [ -z "${CLUSTER_SETUP_TIMELINES:-}" ] || timeline=(--timeline "$CLUSTER_SETUP_TIMELINES/$name-$(date +%H%M%S).txt")
  taskset -c 1 "$bin/switchboard-bench" calls --server "ws://127.0.0.1:$caller" --callee-server "ws://127.0.0.1:$callee" \
    --api-key "$cluster_key" --api-secret "$cluster_secret" --rate "$setup_rate" --seconds "$setup_seconds" --cancel-at-end \
    "${timeline[@]}" >"$out/setup-result"
  for pid in "$@"; do after=$((after + $(cpu_ticks "$pid"))); done
  local end_steal; end_steal=$(steal_ticks)
  python3 bench/run_row.py "$name" "$out/setup-result" --server-ticks "$((after - before))" \
    --steal "$start_steal" "$end_steal" >>"$out/cluster.jsonl"
}
push_key() {  # push_key ID: the app's APNs key under a key id of its own (the sandbox refuses a key whose token changes too often)
  "$bin/switchboard" app push-key --api-key "$cluster_key" --key-file "$out/push-key.p8" --team-id TEAM123456 \
    --key-id "$1" --store-url "$store" >/dev/null
}
for run in $(seq 1 "$runs"); do
  push_key "$(printf 'S%09d' "$run")"
  start_node "setup-one-$run" "${setup_args[@]}"
  single=$node_pid
  setup_run setup-one-node "$node_port" "$node_port" "$single"
  stop "$single"

  push_key "$(printf 'C%09d' "$run")"
  start_node "setup-a-$run" "${cluster_args[@]}" --node-id "setup-a-$run" "${setup_args[@]}"
  node_a=$node_pid port_a=$node_port
  start_node "setup-b-$run" "${cluster_args[@]}" --node-id "setup-b-$run" "${setup_args[@]}"
  node_b=$node_pid port_b=$node_port
  setup_run setup-two-nodes "$port_a" "$port_b" "$node_a" "$node_b" "$redis_pid"
  stop "$node_a" "$node_b"
done
stop "$sandbox_pid"
fi

# Takeover: a ringing call's owner killed (SIGKILL); the time until its callee's answer, sent
# again every 100 ms to the other node, is accepted. At the default lease and at 15 s.
if part takeover; then for run in $(seq 1 "$runs"); do
  for lease in 4 15; do
    start_node "takeover-a-$run-$lease" "${cluster_args[@]}" --node-id "takeover-a-$run-$lease" --call-lease-seconds "$lease"
    node_a=$node_pid port_a=$node_port
    start_node "takeover-b-$run-$lease" "${cluster_args[@]}" --node-id "takeover-b-$run-$lease" --call-lease-seconds "$lease"
    node_b=$node_pid port_b=$node_port
    "$venv/bin/python" bench/takeover.py "ws://127.0.0.1:$port_a" "ws://127.0.0.1:$port_b" "$cluster_key" "$cluster_secret" \
      "$node_a" "$lease" >>"$out/cluster.jsonl"
    wait "$node_a" 2>/dev/null || true
    stop "$node_b"
  done
done; fi

stop "$redis_pid"
cat "$out/cluster.jsonl"
[ -n "${CLUSTER_PARTS:-}" ] || write_section "## Cluster:" cluster_report.py "$out/cluster.jsonl" "$runs" "$cluster_rate" "$cluster_pairs" "$cluster_messages" "$setup_rate" "$cluster_pipelined_messages"
