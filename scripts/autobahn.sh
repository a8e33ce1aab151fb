#!/usr/bin/env bash
# Runs Autobahn's WebSocket server cases (via kosoku) against /v1/echo of a real server.
# Sections 1-7, 9 and 10. 12 and 13 (compression) are not run: the server does not offer
# permessage-deflate. Cases 2.10 and 2.11 are expected to differ; see docs/protocol.md
# ("Conformance"): RFC 6455 5.5.3 lets an endpoint answer only the most recent of several pings.
set -euo pipefail
binary="${1:?usage: autobahn.sh SWITCHBOARD_BINARY [VENV]}"
venv="${2:-.build/venv}"
work="$(mktemp -d)"
"$binary" serve --port 0 --data-dir "$work/data" --enable-echo --log-level warn 2>"$work/server.log" >"$work/server.out" &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT

port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's|^Switchboard is running: http://[^:]*:\([0-9]*\)/.*|\1|p' "$work/server.out" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "autobahn: the server did not start"; cat "$work/server.log"; exit 1; }

allowed='^  2\.1[01]: '
set +e
"$venv/bin/kosoku" -m fuzzingclient "ws://127.0.0.1:$port/v1/echo" \
  -i '1.*' -i '2.*' -i '3.*' -i '4.*' -i '5.*' -i '6.*' -i '7.*' -i '9.*' -i '10.*' \
  -p 2 -o "$work/reports" >"$work/kosoku.out" 2>&1
status=$?
set -e
cat "$work/kosoku.out"
failures=$(grep -E '^  [0-9]+\.[0-9.]+: ' "$work/kosoku.out" | grep -vE "$allowed" || true)
cases=$(grep -oE 'reports for [0-9]+ cases' "$work/kosoku.out" | grep -oE '[0-9]+' | tail -1)
differing=$(grep -cE '^  2\.1[01]: ' "$work/kosoku.out" || true)
if [ -n "$failures" ]; then
  echo "autobahn: unexpected failures:"; echo "$failures"; exit 1
fi
if [ $status -ne 0 ] && ! grep -qE '^  2\.1[01]: ' "$work/kosoku.out"; then
  echo "autobahn: kosoku failed (exit $status)"; exit 1
fi
kill -0 $server || { echo "autobahn: the server died"; exit 1; }
echo "autobahn: $((cases - differing)) of $cases cases match; ${differing} differ (2.10/2.11, as RFC 6455 5.5.3 allows)"
