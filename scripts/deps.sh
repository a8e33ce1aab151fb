#!/usr/bin/env bash
# Installs the Debian packages Switchboard needs, when they are missing.
#   scripts/deps.sh run    what `make run` needs (build + runtime)
#   scripts/deps.sh test   what `make test` needs (the above + test peers)
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail

runtime=(pkg-config libwebsockets-dev libcurl4-openssl-dev libssl-dev libsqlite3-dev libnghttp2-dev libjansson-dev libsimdjson-dev libpq-dev libhiredis-dev libev-dev)
# Real peers for the tests: coturn, Chromium and its driver, the tools to isolate them,
# PostgreSQL (scripts/with-postgres.sh starts one of its own on loopback, with TLS: openssl makes
# its certificate), Redis and HAProxy (the cluster tests start their own on loopback ports).
testing=(coturn chromium chromium-driver iproute2 util-linux postgresql openssl redis-server redis-tools haproxy curl)

wanted=("${runtime[@]}")
if [ "${1:-run}" = "test" ]; then
  wanted+=("${testing[@]}")
  # A Python that can make virtualenvs (for the PyPI test tools).
  if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    wanted+=(python3 python3-venv)
  fi
fi

missing=()
for package in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

command="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  echo "Installing: ${missing[*]}"
  bash -c "$command"
else
  echo "Switchboard needs these Debian packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  sudo sh -c '$command'" >&2
  exit 1
fi
