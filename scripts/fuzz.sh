#!/usr/bin/env bash
# Fuzzing of every parser of outside input (docs/security.md).
#   scripts/fuzz.sh replay          replays every seed and committed regression input through
#                                   switchboard-fuzz built with AddressSanitizer (make test);
#                                   fails on a missing folder, on a target with nothing to
#                                   replay, and on any crash or memory error
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
  scratch=.build/fuzz-replay
  # --sanitize (not -Xswiftc): SwiftPM passes -fsanitize=address to the C and C++ targets too
  # (CShims, the simdjson signal reader), and links the runtime once.
  swift build --product switchboard-fuzz --scratch-path "$scratch" --sanitize=address >"$scratch.log" 2>&1 \
    || { cat "$scratch.log"; exit 1; }
  binary="$scratch/debug/switchboard-fuzz"
  # Every object of our own C and C++ is instrumented (calls ASan's checks), or the replay fails.
  for object in "$scratch"/debug/CShims.build/*.o "$scratch"/debug/CSimdJSON.build/*.o; do
    nm "$object" | grep -q ' U __asan_' || { echo "fuzz: $object was built without AddressSanitizer" >&2; exit 1; }
  done
  # Every target the harness has is replayed, and only those.
  listed=$({ "$binary" 2>&1 || true; } | sed -n 's/^targets: //p' | tr -d ' ' | tr ',' '\n' | sort)
  [ "$listed" = "$(printf '%s\n' "${targets[@]}" | sort)" ] || { echo "fuzz: the harness has targets ($listed) this script does not list" >&2; exit 1; }
  for target in "${targets[@]}"; do
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "$binary" replay "$target" "fuzz/seeds/$target" "fuzz/regressions/$target"
  done
  ;;
run)
  seconds="${FUZZ_SECONDS:-60}"
  scratch=.build/fuzz
  swift build --product switchboard-fuzz --scratch-path "$scratch" \
    -Xswiftc -sanitize=fuzzer,address -Xcc -fsanitize=fuzzer-no-link,address -Xswiftc -DFUZZING -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld
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
  echo "usage: scripts/fuzz.sh replay | run" >&2
  exit 2
  ;;
esac
