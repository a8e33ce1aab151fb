# The idle connections section of make bench (sourced by scripts/bench.sh): memory per
# authenticated WebSocket, connect rate and keepalive CPU, Switchboard against the Python
# websockets relay, the server on core 0 and the connections (bench/wsload.c) from core 1; then
# as many connections as this machine lets one process hold, at the default ping interval and
# at the interval that gives 50,000 connections' pings per second.
idle="${IDLE_CONNECTIONS:-10000}"
idle_max="${IDLE_MAX_CONNECTIONS:-17000}"
# The ping interval that gives $idle_max connections the pings per second of 50,000 at 20 s.
fast_interval=$(( (20 * idle_max + 49999) / 50000 ))
hold="${IDLE_HOLD_SECONDS:-45}"
ulimit -n "$(ulimit -Hn)"

idle_run() {  # idle_run NAME PID PORT KEY SECRET: $idle connections held $hold seconds
  local name=$1 pid=$2 port=$3 key=$4 secret=$5
  local before; before=$(rss_kib "$pid")
  local generator
  hold_idle "$port" "$key" "$secret" "$hold"
  local connected; connected=$(rss_kib "$pid")
  local start_ticks; start_ticks=$(cpu_ticks "$pid")
  wait "$generator"
  local end_ticks; end_ticks=$(cpu_ticks "$pid")
  python3 bench/idle_row.py "$name" "$out/idle.out" "$before" "$connected" "$((end_ticks - start_ticks))" "$hold" >>"$out/idle.jsonl"
}

# IDLE_BEFORE_BIN: the directory of another build's switchboard, run the same way beside this
# one (an A/B of a keepalive change).
for run in $(seq 1 "$runs"); do
  start_switchboard "$out/idle-$run"
  idle_run switchboard "$server" "$port" "$key" "$secret"
  stop "$server"

  if [ -n "${IDLE_BEFORE_BIN:-}" ]; then
    this_bin=$bin bin=$IDLE_BEFORE_BIN
    start_switchboard "$out/idle-before-$run"
    idle_run before "$server" "$port" "$key" "$secret"
    stop "$server"
    bin=$this_bin
  fi

  start_reference 18393
  idle_run websockets "$server" 18393 none none
  stop "$server"

  # 50,000 connections do not fit here (a process may hold 20,000 descriptors, and the server
  # keeps an eighth of its limit for the store and logs: 17,500 connections); $idle_max do, at
  # the default ping interval and at $fast_interval s, which gives them about the pings per
  # second of 50,000 connections at the default (keepalive does nothing else per second).
  for interval in 20 "$fast_interval"; do
    idle=$idle_max start_switchboard "$out/idle-max-$interval-$run" --ping-interval-seconds "$interval"
    idle=$idle_max idle_run "max-$interval" "$server" "$port" "$key" "$secret"
    stop "$server"
  done
done
cat "$out/idle.jsonl"
write_section "## Idle connections:" idle_report.py "$out/idle.jsonl" "$runs" "$idle" "$hold" "$idle_max" "$fast_interval"
