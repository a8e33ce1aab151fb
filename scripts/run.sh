#!/usr/bin/env bash
# Starts `switchboard serve` for development (make run): data in ./data, the web client with
# development tokens, and coturn on loopback for TURN when `turnserver` is installed.
set -euo pipefail
binary="${1:?usage: run.sh SWITCHBOARD_BINARY}"
host="${HOST:-127.0.0.1}"
port="${PORT:-8080}"
turn_port="${TURN_PORT:-3478}"
data="./data"
mkdir -p "$data"

args=(serve --host "$host" --port "$port" --data-dir "$data" --web-root ./web --dev-tokens)

if command -v turnserver >/dev/null; then
  secret_file="$data/turn-secret"
  if [ ! -s "$secret_file" ]; then
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret_file")
  fi
  cat > "$data/turnserver.conf" <<CONF
listening-ip=127.0.0.1
relay-ip=127.0.0.1
listening-port=$turn_port
min-port=49160
max-port=49200
use-auth-secret
static-auth-secret=$(cat "$secret_file")
realm=switchboard.local
allow-loopback-peers
no-tls
no-dtls
no-cli
fingerprint
simple-log
log-file=$data/turnserver.log
pidfile=$data/turnserver.pid
userdb=$data/turndb
CONF
  chmod 600 "$data/turnserver.conf"
  turnserver -c "$data/turnserver.conf" >/dev/null 2>&1 &
  turn_pid=$!
  trap 'kill $turn_pid 2>/dev/null || true' EXIT
  SWITCHBOARD_TURN_SECRET="$(cat "$secret_file")"
  export SWITCHBOARD_TURN_SECRET
  args+=(--turn-urls "turn:127.0.0.1:$turn_port?transport=udp,turn:127.0.0.1:$turn_port?transport=tcp"
         --stun-urls "stun:127.0.0.1:$turn_port")
  echo "coturn: listening on 127.0.0.1:$turn_port (log $data/turnserver.log)"
else
  echo "coturn is not installed: clients get no TURN server (apt-get install coturn to add one)"
fi
echo "development tokens are on (POST /v1/dev/tokens): keep this server on loopback"

"$binary" "${args[@]}"
