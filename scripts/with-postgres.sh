#!/usr/bin/env bash
# scripts/with-postgres.sh COMMAND...: runs COMMAND with a PostgreSQL 15 of its own, on
# 127.0.0.1 and a free port, its files in a temporary folder; stops and removes it afterwards.
# COMMAND sees SWITCHBOARD_TEST_POSTGRES_URL (a superuser `sb`, database `postgres`) and
# SWITCHBOARD_TEST_POSTGRES_REQUIRED=1 (the PostgreSQL tests fail, not skip, without a server),
# SWITCHBOARD_TEST_POSTGRES_CA, the certificate its TLS presents, and _PID, the server's process.
# PostgreSQL refuses to run as root: as root the server runs as the `postgres` user.
set -euo pipefail
bin="${POSTGRES_BIN:-/usr/lib/postgresql/15/bin}"
[ -x "$bin/initdb" ] || { echo "with-postgres: no PostgreSQL 15 in $bin (scripts/deps.sh test installs it)" >&2; exit 1; }
dir="$(mktemp -d /tmp/switchboard-pg.XXXXXX)"
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$dir"
  as_owner=(runuser -u postgres --)
fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
stop() {
  "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT
"${as_owner[@]}" "$bin/initdb" -D "$dir/data" -A trust -U sb --no-sync >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 1; }
# TLS on (connections choose: libpq's sslmode): a self-signed certificate for 127.0.0.1, which
# is its own root for sslmode=verify-full, and another one that must not be trusted for it.
for name in server other; do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=127.0.0.1" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$dir/$name.key" -out "$dir/$name.crt" 2>/dev/null
done
chmod 600 "$dir/server.key"
[ "$(id -u)" -eq 0 ] && chown postgres "$dir/server.key" "$dir/server.crt"
# fsync off: the tests' data does not outlive the run; durability across a killed server still
# holds (the WAL is in the page cache), a machine crash is not tested. POSTGRES_DURABLE=1 (make
# bench) keeps PostgreSQL's defaults: every commit flushed to the disk.
durability="-c fsync=off"
[ "${POSTGRES_DURABLE:-0}" = 1 ] && durability=""
"${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 $durability -c max_connections=200 -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key -c log_statement=ddl" start >/dev/null \
  || { cat "$dir/server.log" >&2; exit 1; }
export SWITCHBOARD_TEST_POSTGRES_URL="postgres://sb@127.0.0.1:$port/postgres"
export SWITCHBOARD_TEST_POSTGRES_REQUIRED=1
export SWITCHBOARD_TEST_POSTGRES_CA="$dir/server.crt" SWITCHBOARD_TEST_POSTGRES_OTHER_CA="$dir/other.crt"
SWITCHBOARD_TEST_POSTGRES_PID="$(head -1 "$dir/data/postmaster.pid")"
export SWITCHBOARD_TEST_POSTGRES_PID
echo "with-postgres: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port"
status=0
"$@" || status=$?
# Proof the command's stores were on this server: each store opened on a fresh database or schema
# creates its tables here (the server logs DDL). POSTGRES_MIN_STORES (make test) is the floor.
stores=$(grep -c 'CREATE TABLE apps' "$dir/server.log" || true)
echo "with-postgres: $stores stores created their tables on PostgreSQL"
if [ "$status" -eq 0 ] && [ "$stores" -lt "${POSTGRES_MIN_STORES:-0}" ]; then
  echo "with-postgres: fewer than ${POSTGRES_MIN_STORES} stores reached PostgreSQL: its tests ran on something else" >&2
  exit 1
fi
exit "$status"
