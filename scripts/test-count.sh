#!/usr/bin/env bash
# Runs a test command, shows its output, and fails when it ran fewer test cases than the floor
# kept in Tests/test-counts, or skipped a test Tests/allowed-skips does not name (with its reason):
#   scripts/test-count.sh NAME COMMAND...
# NAME is `swift` (Swift Testing's event stream: every case of a parameterized test counts, a
# skipped test does not) or `interop` (pytest's "N passed", its -rs "SKIPPED" lines). A skip the
# list allows still counts toward the floor, so a machine that cannot run it passes; with
# SWITCHBOARD_TEST_NO_SKIPS=1 (CI) nothing may skip. Raise the floor in the same commit that adds
# tests; lower it only with the removed tests named.
set -euo pipefail
name=${1:?usage: test-count.sh swift|interop COMMAND...}
shift
cd "$(dirname "$0")/.."
floor=$(sed -n "s/^$name \([0-9]*\)$/\1/p" Tests/test-counts)
[ -n "$floor" ] || { echo "test-count: no floor for $name in Tests/test-counts" >&2; exit 1; }
allowed=$(mktemp)
[ "${SWITCHBOARD_TEST_NO_SKIPS:-0}" = 1 ] || sed -n "s/^$name\t//p" Tests/allowed-skips >"$allowed"
log=$(mktemp) events=$(mktemp)
trap 'rm -f "$log" "$events" "$allowed"' EXIT
extra=()
[ "$name" = swift ] && extra=(--event-stream-output-path "$events" --event-stream-version 0)
set +e
"$@" ${extra[@]+"${extra[@]}"} 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || exit "$status"
# Prints "RAN ALLOWED_SKIPS" and one line per skip not allowed (test, then its reason).
case $name in
swift) result=$(python3 - "$events" "$allowed" <<'PY'
import json, sys
allowed = [line.rstrip("\n").split("\t", 1) for line in open(sys.argv[2]) if "\t" in line]
tests, ran, excused, refused, ended = {}, 0, 0, [], False
for line in open(sys.argv[1]):
    record = json.loads(line)
    event = record["payload"]
    if record["kind"] == "test":
        tests[event["id"]] = event
        continue
    kind, test = event["kind"], tests.get(event.get("testID"), {})
    if kind == "runEnded":
        ended = True
    elif kind == "testCaseEnded" or (kind == "testEnded" and test.get("kind") == "function" and not test.get("isParameterized")):
        ran += 1
    elif kind in ("testSkipped", "testCancelled", "testCaseCancelled"):
        if kind != "testSkipped":
            ran -= 1  # it started (and will end) but did not run to its end
        if test.get("kind") == "suite":
            continue  # its tests are each reported skipped too
        reason = " ".join(event.get("_comments") or [m["text"] for m in event.get("messages", [])])
        if any(event["testID"].startswith(t) and reason.startswith(r) for t, r in allowed):
            excused += max(1, len(test.get("_testCases") or []))
        else:
            refused.append(f'{kind}: {event["testID"]}: "{reason}"')
if not ended:
    refused.append("the event stream has no end: the run was cut short, or wrote no stream")
print(ran, excused)
print("\n".join(refused))
PY
) ;;
interop)
  ran=$({ grep -aoE '(^|[^0-9])[0-9]+ passed' "$log" || true; } | grep -oE '[0-9]+' | tail -1 || true)
  refused=$({ grep -aE '^SKIPPED \[[0-9]+\] ' "$log" || true; } | sed -E 's/^SKIPPED \[[0-9]+\] //' | while IFS= read -r skip; do
    file=${skip%%:*} reason=${skip#*: }
    awk -F'\t' -v f="$file" -v r="$reason" 'index(f, $1) == 1 && index(r, $2) == 1 { ok = 1 } END { exit !ok }' "$allowed" \
      || echo "skipped: $skip"
  done)
  excused=$(( $(grep -aoE '[0-9]+ skipped' "$log" | grep -oE '[0-9]+' | tail -1 || echo 0) - $(printf '%s' "$refused" | grep -c . || true) ))
  result="${ran:-} $excused"$'\n'"$refused" ;;
*) echo "test-count: unknown suite $name" >&2; exit 1 ;;
esac
read -r ran excused <<<"$(head -1 <<<"$result")"
refused=$(tail -n +2 <<<"$result" | sed '/^$/d')
[ -n "${ran:-}" ] || { echo "test-count: could not tell how many $name tests ran" >&2; exit 1; }
if [ -n "$refused" ]; then
  echo "test-count: $name skipped what Tests/allowed-skips does not allow:" >&2
  echo "$refused" >&2
  exit 1
fi
if [ $(( ran + excused )) -lt "$floor" ]; then
  echo "test-count: $name ran $ran test cases (+$excused allowed skips), fewer than the $floor it ran before (Tests/test-counts)" >&2
  exit 1
fi
echo "test-count: $name ran $ran test cases, $excused skipped as allowed (floor $floor)"
