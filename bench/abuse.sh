# The abuse section of make bench (sourced by scripts/bench.sh): a well-behaved client's latency
# while one attacker (bench/abuse.py) pushes each limit, a fresh server on core 0 per attack.
seconds="${ABUSE_SECONDS:-10}"
attacks="${ABUSE_ATTACKS:-none slowloris ping-flood invite-storm registration-spam nested-json oversized}"
ulimit -n "$(ulimit -Hn)"

abuse_run() {  # abuse_run ATTACK: a fresh server with default limits; the attacker and the paced relay on core 1
  local attack=$1
  start_switchboard "$out/abuse-$attack-$run"
  taskset -c 1 nice -n 10 "$venv/bin/python" bench/abuse.py --base "http://127.0.0.1:$port" --api-key "$key" \
    --api-secret "$secret" --attack "$attack" --seconds $((seconds + 2)) >"$out/attack.out" 2>"$out/attack.err" &
  local attacker=$!
  sleep 1
  local start_ticks; start_ticks=$(cpu_ticks "$server")
  # 10 pairs at 40 signals/s each: under the default 50 messages/s per connection.
  taskset -c 1 nice -n -5 "$bin/switchboard-bench" relay --server "ws://127.0.0.1:$port" --api-key "$key" --api-secret "$secret" \
    --pairs 10 --messages $((400 * seconds)) --rate 400 >"$out/result"
  local end_ticks; end_ticks=$(cpu_ticks "$server")
  wait "$attacker" || { cat "$out/attack.err" >&2; return 1; }
  local healthy; healthy=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")
  stop "$server"
  python3 bench/abuse_row.py "$attack" "$out/result" "$out/attack.out" "$((end_ticks - start_ticks))" "$healthy" >>"$out/abuse.jsonl"
}

for run in $(seq 1 "$runs"); do
  for attack in $attacks; do abuse_run "$attack"; done
done
cat "$out/abuse.jsonl"
write_section "## Abuse:" abuse_report.py "$out/abuse.jsonl" "$runs" "$seconds"
