#!/usr/bin/env bash
# Runs the interop tests (IntegrationTests/interop) against a built switchboard binary: aiortc peers,
# coturn relays and the web client in headless Chromium. As root they run in a private network
# namespace with only loopback (unshare -n), so no test traffic can leave the machine and
# Chromium may use loopback for ICE; otherwise the browser test is skipped, with its reason.
set -euo pipefail
binary="$(realpath "${1:?usage: interop.sh SWITCHBOARD_BINARY [VENV]}")"
venv="$(realpath "${2:-.build/venv}")"
cd "$(dirname "$0")/../IntegrationTests/interop"
export SWITCHBOARD_BIN="$binary"
# Every test is bounded (pytest-timeout): a hang fails it, naming the test, instead of the run.
run=("$venv/bin/pytest" -q -rs -p no:cacheprovider --timeout=300 .)
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null; then
  exec unshare -n sh -c 'ip link set lo up && exec "$@"' sh "${run[@]}"
fi
echo "interop: not root (or no unshare/ip): running outside a private network namespace" >&2
exec "${run[@]}"
