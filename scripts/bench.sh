#!/usr/bin/env bash
# make bench: builds in release mode and runs the benchmarks, writing BENCHMARKS.md.
# Not part of make test. Each benchmark runs its system under test and the load on separate
# cores (taskset), repeats, takes medians, and reports ratios to a reference measured in the
# same run on the same machine.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${VENV:-.build/venv}"
runs="${RUNS:-3}"
out="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

# BENCH_BIN: a directory holding another build's switchboard and switchboard-bench (an A/B of
# two builds); otherwise this checkout is built.
if [ -n "${BENCH_BIN:-}" ]; then
  bin=$BENCH_BIN
else
  swift build -c release --product switchboard >/dev/null
  swift build -c release --product switchboard-bench >/dev/null
  bin=.build/release
fi

# shellcheck source=bench/lib.sh
source bench/lib.sh

# The sections, in the order they run: each is bench/<name>.sh, which measures, prints its runs'
# JSON lines and writes its section of BENCHMARKS.md. BENCH=relay or BENCH=push,relay runs only
# those.
# shellcheck source=bench/push.sh
if want push; then source bench/push.sh; fi
# shellcheck source=bench/relay.sh
if want relay; then source bench/relay.sh; fi
# shellcheck source=bench/latency.sh
if want latency; then source bench/latency.sh; fi
# shellcheck source=bench/idle.sh
if want idle; then source bench/idle.sh; fi
# shellcheck source=bench/churn.sh
if want churn; then source bench/churn.sh; fi
# shellcheck source=bench/calls.sh
if want calls; then source bench/calls.sh; fi
# shellcheck source=bench/abuse.sh
if want abuse; then source bench/abuse.sh; fi
# shellcheck source=bench/cluster.sh
if want cluster; then source bench/cluster.sh; fi
