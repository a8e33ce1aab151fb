# The idle connections section of make bench (sourced by scripts/bench.sh): memory per
# authenticated WebSocket, connect rate and keepalive CPU, Switchboard against the Python
# websockets relay, the server on core 0 and the connections from core 1.
idle="${IDLE_CONNECTIONS:-10000}"
hold="${IDLE_HOLD_SECONDS:-45}"
ulimit -n "$(ulimit -Hn)"

idle_run() {  # idle_run NAME PID URL KEY SECRET: $idle connections held $hold seconds
  local name=$1 pid=$2 url=$3 key=$4 secret=$5
  local before; before=$(rss_kib "$pid")
  local generator
  hold_idle "$url" "$key" "$secret" "$hold"
  local connected; connected=$(rss_kib "$pid")
  local start_ticks; start_ticks=$(cpu_ticks "$pid")
  wait "$generator"
  local end_ticks; end_ticks=$(cpu_ticks "$pid")
  python3 bench/idle_row.py "$name" "$out/idle.out" "$before" "$connected" "$((end_ticks - start_ticks))" "$hold" >>"$out/idle.jsonl"
}

for run in $(seq 1 "$runs"); do
  start_switchboard "$out/idle-$run"
  idle_run switchboard "$server" "ws://127.0.0.1:$port" "$key" "$secret"
  stop "$server"

  start_reference 18393
  idle_run websockets "$server" "ws://127.0.0.1:18393" none none
  stop "$server"
done
cat "$out/idle.jsonl"
write_section "## Idle connections:" idle_report.py "$out/idle.jsonl" "$runs" "$idle" "$hold"
