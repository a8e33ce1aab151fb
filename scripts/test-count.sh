#!/usr/bin/env bash
# Runs a test command, shows its output, and fails when it ran fewer tests than the floor kept
# in Tests/test-counts (a suite that silently stops finding its tests must not pass):
#   scripts/test-count.sh NAME COMMAND...
# NAME is `swift` (counts "Test run with N tests") or `interop` (pytest's "N passed"). Raise the
# floor in the same commit that adds tests; lower it only with the removed tests named.
set -euo pipefail
name=${1:?usage: test-count.sh swift|interop COMMAND...}
shift
cd "$(dirname "$0")/.."
floor=$(sed -n "s/^$name \([0-9]*\)$/\1/p" Tests/test-counts)
[ -n "$floor" ] || { echo "test-count: no floor for $name in Tests/test-counts" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || exit "$status"
case $name in
swift) ran=$(grep -aoE 'Test run with [0-9]+ tests' "$log" | grep -oE '[0-9]+' | tail -1) ;;
interop) ran=$(grep -aoE '(^|[^0-9])[0-9]+ passed' "$log" | grep -oE '[0-9]+' | tail -1) ;;
*) echo "test-count: unknown suite $name" >&2; exit 1 ;;
esac
[ -n "${ran:-}" ] || { echo "test-count: could not tell how many $name tests ran" >&2; exit 1; }
if [ "$ran" -lt "$floor" ]; then
  echo "test-count: $name ran $ran tests, fewer than the $floor it ran before (Tests/test-counts)" >&2
  exit 1
fi
echo "test-count: $name ran $ran tests (floor $floor)"
