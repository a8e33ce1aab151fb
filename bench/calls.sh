# The call setup section of make bench (sourced by scripts/bench.sh, under
# scripts/with-postgres.sh when PostgreSQL is measured): invites per second with the APNs
# sandbox accepting the pushes, on SQLite and PostgreSQL; then the store's writes per second alone.
calls_rate="${CALLS_RATE:-500}"
calls_seconds="${CALLS_SECONDS:-20}"
calls_peak="${CALLS_PEAK_RATE:-2000}"
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$out/push-key.p8"
start_sandbox 1 "$out/calls-sandbox"

# PostgreSQL: the one make bench starts (scripts/with-postgres.sh, every commit flushed to the
# disk), on core 1 with the generator; a database of its own per run.
pg_url="${SWITCHBOARD_TEST_POSTGRES_URL:-}"
engines="sqlite"
if [ -n "$pg_url" ]; then
  engines="sqlite postgres"
  for pid in "$SWITCHBOARD_TEST_POSTGRES_PID" $(pgrep -P "$SWITCHBOARD_TEST_POSTGRES_PID"); do taskset -pc 1 "$pid" >/dev/null; done
else
  echo "bench: no PostgreSQL (run through make bench): call setup measured on SQLite only" >&2
fi
store_args() {  # store_args ENGINE NAME: the options that put a command on that engine's store
  if [ "$1" = postgres ]; then
    psql -q "$pg_url" -c "CREATE DATABASE $2" >/dev/null
    echo "--data-dir $out/$2 --store-url ${pg_url%/*}/$2"
  else
    echo "--data-dir $out/$2"
  fi
}

drop_store() {  # drop_store ENGINE NAME: a finished run's store goes, so that no later run pays for
  # its upkeep (PostgreSQL's autovacuum of its tables, the kernel writing back its dirty pages)
  if [ "$1" = postgres ]; then
    psql -q "$pg_url" -c "DROP DATABASE $2 WITH (FORCE)" >/dev/null
  fi
  rm -rf "${out:?}/$2"
}

calls_run() {  # calls_run ENGINE RUN RATE SECONDS: a fresh server; prints the generator's line plus the server's figures
  local engine=$1 run=$2 rate=$3 seconds=$4
  local store; store=$(store_args "$engine" "calls_${engine}_${run}_${rate}")
  # shellcheck disable=SC2086
  create_app $store
  # (a key id of its own: the sandbox, like APNs, refuses a key whose token changes too often)
  # shellcheck disable=SC2086
  "$bin/switchboard" app push-key --api-key "$key" --key-file "$out/push-key.p8" --team-id TEAM123456 \
    --key-id "$(printf 'K%09d' $((run * 100000 + rate + ${#engine})))" $store >/dev/null
  # shellcheck disable=SC2086
  start_server $store --apns-url "$sandbox_url" --apns-ca-file "$sandbox_cert" \
    --invites-per-minute 10000 --invites-per-pair-per-minute 10000
  # Warm up: the APNs connection and provider token.
  taskset -c 1 "$bin/switchboard-bench" calls --server "ws://127.0.0.1:$port" --api-key "$key" --api-secret "$secret" \
    --rate 100 --seconds 1 --callers 5 --callees 5 >/dev/null \
    || { echo "bench: the warm-up failed; the server $(kill -0 "$server" 2>/dev/null && echo runs || echo is gone); its log:" >&2
         tail -40 "$out/serve.err" >&2; return 1; }
  local start_ticks; start_ticks=$(cpu_ticks "$server")
  local start_steal; start_steal=$(steal_ticks)
  taskset -c 1 "$bin/switchboard-bench" calls --server "ws://127.0.0.1:$port" --api-key "$key" --api-secret "$secret" \
    --rate "$rate" --seconds "$seconds" >"$out/result"
  local end_ticks; end_ticks=$(cpu_ticks "$server")
  local end_steal; end_steal=$(steal_ticks)
  curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics"
  stop "$server"
  drop_store "$engine" "calls_${engine}_${run}_${rate}"
  python3 bench/calls_row.py "$out/result" "$out/metrics" "$((end_ticks - start_ticks))" "$rate" "$engine" "$start_steal" "$end_steal"
}

for engine in $engines; do
  for run in $(seq 1 "$runs"); do
    calls_run "$engine" "$run" "$calls_rate" "$calls_seconds" >>"$out/calls.jsonl"
    calls_run "$engine" "$run" "$calls_peak" 10 >>"$out/calls.jsonl"
  done
done
kill "$sandbox_pid" 2>/dev/null || true
cat "$out/calls.jsonl"

# The store alone: trace entries written as the server queues them, and one transaction each.
store_seconds="${STORE_SECONDS:-5}"
for engine in $engines; do
  for mode in queued queued-code single; do
    for run in $(seq 1 "$runs"); do
      store=$(store_args "$engine" "store_${engine}_${mode//-/_}_${run}")
      # shellcheck disable=SC2086
      taskset -c 0 "$bin/switchboard-bench" store $store --seconds "$store_seconds" --mode "$mode" \
        | python3 -c 'import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); r.update(engine=sys.argv[1], mode=sys.argv[2]); print(json.dumps(r))' "$engine" "$mode" \
        >>"$out/store.jsonl"
      drop_store "$engine" "store_${engine}_${mode//-/_}_${run}"
    done
  done
done
cat "$out/store.jsonl"
write_section "## Call setup:" calls_report.py "$out/calls.jsonl" "$out/store.jsonl" "$runs" "$calls_rate" "$calls_peak" "$calls_seconds" "$store_seconds"
