#!/usr/bin/env bash
# Fuzzing of every parser of outside input (docs/security.md).
#   scripts/fuzz.sh replay BINARY   replays the seeds and the committed regression inputs
#                                   through a normal build of switchboard-fuzz (make test)
#   scripts/fuzz.sh run             builds switchboard-fuzz with libFuzzer and AddressSanitizer
#                                   and fuzzes each target FUZZ_SECONDS (default 60) (make fuzz)
# A crash leaves its input in fuzz/regressions/TARGET/: commit it with the fix, and make test
# replays it from then on. FUZZ_TARGETS=a,b limits the run to those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(websocket-message access-token device-registration call-creation apns-response voip-push)
if [ -n "${FUZZ_TARGETS:-}" ]; then IFS=, read -r -a targets <<<"$FUZZ_TARGETS"; fi

case "${1:-}" in
replay)
  binary=${2:?usage: scripts/fuzz.sh replay BINARY}
  for target in "${targets[@]}"; do
    "$binary" replay "$target" "fuzz/seeds/$target" "fuzz/regressions/$target"
  done
  ;;
run)
  seconds="${FUZZ_SECONDS:-60}"
  scratch=.build/fuzz
  swift build --product switchboard-fuzz --scratch-path "$scratch" \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld
  binary="$scratch/debug/switchboard-fuzz"
  failed=()
  for target in "${targets[@]}"; do
    corpus=".build/fuzz-corpus/$target"
    mkdir -p "$corpus" "fuzz/regressions/$target"
    echo "== $target: ${seconds}s"
    if ! SWITCHBOARD_FUZZ_TARGET="$target" "$binary" -max_total_time="$seconds" -max_len=16384 -timeout=10 \
        -rss_limit_mb=4096 -artifact_prefix="fuzz/regressions/$target/" -print_final_stats=1 \
        "$corpus" "fuzz/seeds/$target" 2>"$corpus.log"; then
      failed+=("$target")
      tail -40 "$corpus.log"
    fi
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$corpus.log" | sed "s/^/  /" || true
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzzing found crashes in: ${failed[*]} (inputs in fuzz/regressions/)" >&2
    exit 1
  fi
  echo "fuzzing: no crash in ${#targets[@]} targets, ${seconds}s each"
  ;;
*)
  echo "usage: scripts/fuzz.sh replay BINARY | run" >&2
  exit 2
  ;;
esac
