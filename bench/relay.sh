# The relay section of make bench (sourced by scripts/bench.sh): signals per second through one
# server core (core 0), Switchboard next to the Python websockets relay and the C epoll echo
# (the ceiling), the load on core 1.
pairs="${RELAY_PAIRS:-50}"
window="${RELAY_WINDOW:-20}"
messages="${RELAY_MESSAGES:-1000000}"
# The Python reference carries a fifteenth as many a second: a fifth as many signals.
reference_messages="${RELAY_REFERENCE_MESSAGES:-$((messages / 5))}"
relay_run() {  # relay_run NAME PID PORT KEY SECRET MESSAGES: the load (bench/wsload.c) on core 1 against the server PID on core 0
  local name=$1 pid=$2 port=$3 key=$4 secret=$5 messages=$6
  local start_ticks; start_ticks=$(cpu_ticks "$pid")
  local start_steal; start_steal=$(steal_ticks)
  /usr/bin/env time -f "%U %S" -o "$out/time" taskset -c 1 "$out/wsload" relay --port "$port" \
    --key "$key" --secret "$secret" --pairs "$pairs" --messages "$messages" --window "$window" >"$out/result"
  local end_ticks; end_ticks=$(cpu_ticks "$pid")
  local end_steal; end_steal=$(steal_ticks)
  python3 bench/run_row.py "$name" "$out/result" --client-cpu "$(awk '{print $1+$2}' "$out/time")" \
    --server-ticks "$((end_ticks - start_ticks))" --steal "$start_steal" "$end_steal" >>"$out/relay.jsonl"
}

# The ceiling: C epoll echo on core 0, one read and one write per message, as many messages in
# flight (as many connections, one message each) as the relay runs keep.
loopback_run() {
  taskset -c 0 "$out/loopback" server 18391 >"$out/loop.out" 2>&1 &
  server=$!
  wait_for "$out/loop.out" listening
  local start_ticks; start_ticks=$(cpu_ticks "$server")
  local start_steal; start_steal=$(steal_ticks)
  taskset -c 1 "$out/loopback" client 18391 $((pairs * window)) 1 "$messages" >"$out/result"
  local end_ticks; end_ticks=$(cpu_ticks "$server")
  local end_steal; end_steal=$(steal_ticks)
  python3 bench/loopback_row.py "$out/result" "$((end_ticks - start_ticks))" "$start_steal" "$end_steal" >>"$out/relay.jsonl"
  stop "$server"
}

for run in $(seq 1 "$runs"); do
  # Switchboard, a fresh store each run.
  start_switchboard "$out/relay-$run" --messages-per-second 100000 --message-burst 100000
  relay_run switchboard "$server" "$port" "$key" "$secret" "$messages"
  stop "$server"

  # The peer relay: Python websockets, the same messages and replies.
  start_reference 18390
  relay_run websockets "$server" 18390 none none "$reference_messages"
  stop "$server"

  loopback_run
done
cat "$out/relay.jsonl"
write_section "## Relay:" relay_report.py "$out/relay.jsonl" "$runs" "$pairs" "$window" "$messages"
