# The latency section of make bench (sourced by scripts/bench.sh): paced signals at half the
# saturation rate with $idle (10,000) idle connections open, the server on core 0 and both
# generators on core 1; and how much of a core the machine itself takes (the stall probe).
idle="${IDLE_CONNECTIONS:-10000}"
# Two rates: half of Switchboard's saturation throughput (LATENCY_RATE), which the reference
# cannot carry, and half of the reference's (LATENCY_COMMON_RATE), run on both. From the relay
# section's medians when it ran, else these defaults.
half_of() {  # half_of NAME: half the median saturation throughput of NAME in relay.jsonl
  python3 -c 'import json,statistics,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; print(int(statistics.median(r["messages_per_second"] for r in rows if r["name"]==sys.argv[2])/2))' "$out/relay.jsonl" "$1"
}
if [ -s "$out/relay.jsonl" ]; then
  LATENCY_RATE="${LATENCY_RATE:-$(half_of switchboard)}"
  LATENCY_COMMON_RATE="${LATENCY_COMMON_RATE:-$(half_of websockets)}"
fi
rate="${LATENCY_RATE:-30000}"
common_rate="${LATENCY_COMMON_RATE:-12500}"
seconds="${LATENCY_SECONDS:-20}"
pairs="${RELAY_PAIRS:-50}"
ulimit -n "$(ulimit -Hn)"

# Host stalls: a probe spins on each core at once, with no connection open and then while the
# server holds the idle connections (the server on core 0, the idle generator on core 1, as in
# the runs below), alternating.
cc -O2 -Wall -o "$out/stall_probe" bench/stall_probe.c
stall_probe() {  # stall_probe LABEL: STALL_SECONDS (10) on each core at once
  local probes=()
  for core in 0 1; do
    taskset -c "$core" "$out/stall_probe" "${STALL_SECONDS:-10}" "$1" "$core" >>"$out/stalls.jsonl" &
    probes+=($!)
  done
  wait "${probes[@]}"
}
# At real-time priority, in 500 ms slices (see the probe), one core at a time: what interrupts
# and the hypervisor take, which no priority outranks.
stall_probe_rt() {
  for core in 0 1; do
    chrt -f 50 taskset -c "$core" "$out/stall_probe" "${STALL_SECONDS:-10}" none-rt "$core" 500 >>"$out/stalls.jsonl"
  done
}
for run in $(seq 1 "$runs"); do
  stall_probe none
  if chrt -f 50 true 2>/dev/null; then stall_probe_rt; fi
  start_switchboard "$out/stalls-$run"
  hold_idle "$port" "$key" "$secret" 3600
  stall_probe idle
  stop "$generator" "$server"
done
cat "$out/stalls.jsonl"

latency_run() {  # latency_run NAME PID PORT KEY SECRET RATE [IDLE [SETTLE]]: IDLE ($idle) idle connections, SETTLE seconds (0), then the paced relay, both on core 1
  local name=$1 pid=$2 port=$3 key=$4 secret=$5 rate=$6 idle=${7:-$idle} settle=${8:-0}
  local generator=
  if [ "$idle" -gt 0 ]; then hold_idle "$port" "$key" "$secret" 3600; sleep "$settle"; fi
  local start_ticks; start_ticks=$(cpu_ticks "$pid")
  local start_steal; start_steal=$(steal_ticks)
  "${priority[@]}" taskset -c 1 "$out/wsload" relay --port "$port" --key "$key" --secret "$secret" \
    --pairs "$pairs" --messages $((rate * seconds)) --rate "$rate" >"$out/result"
  local end_ticks; end_ticks=$(cpu_ticks "$pid")
  local end_steal; end_steal=$(steal_ticks)
  if [ -n "$generator" ]; then stop "$generator"; fi
  python3 bench/run_row.py "$name" "$out/result" --server-ticks "$((end_ticks - start_ticks))" \
    --steal "$start_steal" "$end_steal" >>"$out/latency.jsonl"
}

# The latency reference: the C epoll echo on core 0 at the same paced rate, messages of the
# signal's size round robin over as many connections as the relay's pairs, with as many idle
# connections open to it; the round trip is the reference's latency.
echo_run() {  # echo_run NAME RATE
  local name=$1 rate=$2
  taskset -c 0 "$out/loopback" server 18395 >"$out/echo.out" 2>&1 &
  server=$!
  wait_for "$out/echo.out" listening
  local start_ticks; start_ticks=$(cpu_ticks "$server")
  local start_steal; start_steal=$(steal_ticks)
  taskset -c 1 "$out/loopback" paced 18395 "$pairs" "$rate" $((rate * seconds)) 300 "$idle" >"$out/result"
  local end_ticks; end_ticks=$(cpu_ticks "$server")
  local end_steal; end_steal=$(steal_ticks)
  python3 bench/run_row.py "$name" "$out/result" --server-ticks "$((end_ticks - start_ticks))" \
    --steal "$start_steal" "$end_steal" >>"$out/latency.jsonl"
  stop "$server"
}
ratio_rate="${LATENCY_RATIO_RATE:-10000}"
# The ratio's relay starts once the idle connections have been open this long: their keepalive
# pings, the first of which come 20-30 s after they open, are then as they are for good.
ratio_settle="${LATENCY_SETTLE_SECONDS:-30}"

for run in $(seq 1 "$runs"); do
  # The ratio: Switchboard's relay and the C echo at the same rate, the same idle connections
  # open, one after the other.
  start_switchboard "$out/latency-$run-ratio" --messages-per-second 100000 --message-burst 100000
  latency_run switchboard-ratio "$server" "$port" "$key" "$secret" "$ratio_rate" "$idle" "$ratio_settle"
  stop "$server"
  echo_run echo-ratio "$ratio_rate"

  for each_rate in "$rate" "$common_rate"; do
    start_switchboard "$out/latency-$run-$each_rate" --messages-per-second 100000 --message-burst 100000
    latency_run switchboard "$server" "$port" "$key" "$secret" "$each_rate"
    stop "$server"
  done

  # The same rate with no idle connection open: what the machine's descriptor scan (see the
  # section) adds.
  start_switchboard "$out/latency-$run-bare" --messages-per-second 100000 --message-burst 100000
  latency_run switchboard-bare "$server" "$port" "$key" "$secret" "$rate" 0
  stop "$server"

  # The server and the relay generator at real-time priority, which no other process of the
  # machine preempts: what is left of the tail without the machine's own stalls.
  if chrt -f 10 true 2>/dev/null; then
    priority=(chrt -f 10)
    start_switchboard "$out/latency-$run-rt" --messages-per-second 100000 --message-burst 100000
    latency_run switchboard-rt "$server" "$port" "$key" "$secret" "$rate"
    stop "$server"
    priority=()
  else
    echo "latency: real-time runs skipped: chrt -f needs CAP_SYS_NICE" >&2
  fi

  start_reference 18394
  latency_run websockets "$server" 18394 none none "$common_rate"
  stop "$server"
done
cat "$out/latency.jsonl"
write_section "## Latency:" latency_report.py "$out/latency.jsonl" "$runs" "$idle" "$rate" "$pairs" "$common_rate" "$out/stalls.jsonl" "$ratio_rate" "$ratio_settle"
