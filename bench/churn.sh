# The churn section of make bench (sourced by scripts/bench.sh): authenticated connects per
# second for a minute, twice, then the server's open files and memory; Switchboard against the
# Python websockets relay, the server on core 0 and the load on core 1.
churn_seconds="${CHURN_SECONDS:-60}"
ulimit -n "$(ulimit -Hn)"

churn_run() {  # churn_run NAME PID URL KEY SECRET: two minutes of churn; fds and RSS at start and after each
  local name=$1 pid=$2 url=$3 key=$4 secret=$5
  local fd0 rss0 fd1 rss1 fd2 rss2 ticks0 ticks1
  fd0=$(fds "$pid"); rss0=$(rss_kib "$pid"); ticks0=$(cpu_ticks "$pid")
  taskset -c 1 "$bin/switchboard-bench" churn --server "$url" --api-key "$key" --api-secret "$secret" \
    --seconds "$churn_seconds" >"$out/churn1"
  ticks1=$(cpu_ticks "$pid")
  sleep 5; fd1=$(fds "$pid"); rss1=$(rss_kib "$pid")
  taskset -c 1 "$bin/switchboard-bench" churn --server "$url" --api-key "$key" --api-secret "$secret" \
    --seconds "$churn_seconds" >"$out/churn2"
  sleep 5; fd2=$(fds "$pid"); rss2=$(rss_kib "$pid")
  python3 bench/churn_row.py "$name" "$out/churn1" "$out/churn2" "$fd0 $rss0 $fd1 $rss1 $fd2 $rss2" "$((ticks1 - ticks0))" >>"$out/churn.jsonl"
}

start_switchboard "$out/churn"
churn_run switchboard "$server" "ws://127.0.0.1:$port" "$key" "$secret"
stop "$server"
start_reference 18395
churn_run websockets "$server" "ws://127.0.0.1:18395" none none
stop "$server"
cat "$out/churn.jsonl"
write_section "## Churn:" churn_report.py "$out/churn.jsonl" "$churn_seconds"
