#!/usr/bin/env bash
# scripts/haproxy-config.sh PORT NODE_PORT...: HAProxy's configuration for nodes on loopback, as
# docs/scaling.md gives it (make cluster and make bench's cluster section; the tests' is
# LoadBalancer.configuration, in Swift): any connection to any ready node, WebSockets through,
# /readyz checked every 500 ms.
set -euo pipefail
port=$1; shift
printf 'global\n    maxconn 4000\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n    timeout server 60s\n'
printf '    timeout tunnel 1h\n    timeout http-request 10s\n\nfrontend switchboard\n    bind 127.0.0.1:%s\n    default_backend nodes\n\n' "$port"
printf 'backend nodes\n    balance leastconn\n    option httpchk GET /readyz\n    http-check expect status 200\n'
printf '    default-server inter 500ms fall 1 rise 1\n'
number=1
for node_port in "$@"; do printf '    server node%s 127.0.0.1:%s check\n' "$number" "$node_port"; number=$((number + 1)); done
