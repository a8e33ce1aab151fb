#!/usr/bin/env bash
# Type-checks the Apple-only code on Linux: SwitchboardKit (with its CallKit, PushKit, audio
# session and Recents bridges) and every Swift file of Examples/iOS, in Swift 6 mode with
# complete concurrency checking, against hand-written stub modules of Apple's frameworks
# (Tests/AppleStubs; `SWITCHBOARD_APPLE_STUBS` stands in for `os(iOS)`). Then three checks:
#   strict  - the stubs' Objective-C optional requirements made required: what the SDK and the
#             example leave unimplemented must be exactly Tests/AppleStubs/unimplemented.txt,
#             so a delegate method whose signature misses its requirement (it would compile, and
#             never be called on a device) fails here;
#   misspelt - the strict check itself fails on a copy of the SDK with one delegate method
#             misspelt;
#   macOS   - with the frameworks importable but not building for iOS (as on a Mac), none of the
#             Apple-only types is compiled (CallKit's call types are unavailable on macOS).
# First, scripts/sdk-closure.py: an iOS app adding SwitchboardKit builds Swift targets only.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.build/apple-typecheck
stubs=Tests/AppleStubs
rm -rf "$out"
mkdir -p "$out"
flags=(-swift-version 6 -strict-concurrency=complete -parse-as-library)

# Stub modules, in dependency order, into $1 (with extra flags after).
build_stubs() {
  local into=$1; shift
  mkdir -p "$into"
  for module in AppleFoundation AVFoundation CallKit LiveCommunicationKit PushKit StoreKit UserNotifications Intents UIKit; do
    swiftc -emit-module "${flags[@]}" -module-name "$module" -I "$into" -emit-module-path "$into/$module.swiftmodule" \
      "$@" "$stubs/$module"/*.swift
  done
}

# SwitchboardKit from $2 (a folder of its sources) against stubs $1, into $3; more flags after.
build_kit() {
  local with=$1 sources=$2 into=$3; shift 3
  mkdir -p "$into"
  swiftc -emit-module "${flags[@]}" -module-name SwitchboardKit -I "$out/protocol" -I "$with" \
    -D SWITCHBOARD_TYPECHECK_URLSESSION "$@" -emit-module-path "$into/SwitchboardKit.swiftmodule" "$sources"/*.swift
}

started=$(date +%s)
# What an iOS app adding the package builds: SwitchboardKit's targets on iOS, Swift only (the
# C libraries are its dependency on Linux only). The same check on Linux must find them.
swift package dump-package >"$out/package.json"
python3 scripts/sdk-closure.py SwitchboardKit ios <"$out/package.json"
if python3 scripts/sdk-closure.py SwitchboardKit linux <"$out/package.json" >/dev/null 2>&1; then
  echo "apple typecheck: the closure check found no C library in SwitchboardKit's Linux build: it checks nothing" >&2
  exit 1
fi
mkdir -p "$out/protocol"
swiftc -emit-module "${flags[@]}" -module-name SwitchboardSupport -emit-module-path "$out/protocol/SwitchboardSupport.swiftmodule" \
  Sources/SwitchboardSupport/*.swift
swiftc -emit-module "${flags[@]}" -module-name SwitchboardProtocol -emit-module-path "$out/protocol/SwitchboardProtocol.swiftmodule" \
  Sources/SwitchboardProtocol/*.swift

# 1. The SDK and the example against the stubs.
build_stubs "$out/stubs"
build_kit "$out/stubs" Sources/SwitchboardKit "$out/kit" -D SWITCHBOARD_APPLE_STUBS
swiftc -typecheck -swift-version 6 -strict-concurrency=complete -I "$out/protocol" -I "$out/stubs" -I "$out/kit" \
  Examples/iOS/SwitchboardDemo/*.swift
echo "apple typecheck: SwitchboardKit and Examples/iOS type-check against the stubs (Swift 6, complete concurrency checking)"

# 1b. As an older Xcode sees it (the iOS 18 SDK: no PKVoIPPushMetadata, no allowBluetoothHFP,
# PushKit's completion handlers not @Sendable): the package must build all the same.
older=(-D SWITCHBOARD_SDK_BEFORE_26_4 -D SWITCHBOARD_SDK_BEFORE_26)
build_stubs "$out/older-stubs" "${older[@]}" -D PUSHKIT_PLAIN_COMPLETIONS
build_kit "$out/older-stubs" Sources/SwitchboardKit "$out/older-kit" -D SWITCHBOARD_APPLE_STUBS "${older[@]}"
swiftc -typecheck -swift-version 6 -strict-concurrency=complete -I "$out/protocol" -I "$out/older-stubs" -I "$out/older-kit" \
  Examples/iOS/SwitchboardDemo/*.swift
echo "apple typecheck: SwitchboardKit and Examples/iOS type-check as an SDK before iOS 26 has it (the 26.4 delegate method compiled out)"

# 2. Strict: every optional requirement required; list what is not implemented.
build_stubs "$out/strict-stubs" -D STRICT_DELEGATES
missing() {  # missing KIT_SOURCES [STUBS KIT FLAGS...]: the requirements the SDK and the example leave out, one per line
  local kit_out; kit_out=$(mktemp -d)
  local sources=$1 stubs_dir=${2:-$out/strict-stubs} kit_dir=${3:-$out/kit}
  shift; [ $# -gt 0 ] && shift; [ $# -gt 0 ] && shift
  {
    build_kit "$stubs_dir" "$sources" "$kit_out" -D SWITCHBOARD_APPLE_STUBS "$@" 2>&1 || true
    # The example, against the SDK built normally (its own conformances are what is checked).
    swiftc -typecheck -swift-version 6 -I "$out/protocol" -I "$stubs_dir" -I "$kit_dir" \
      Examples/iOS/SwitchboardDemo/*.swift 2>&1 || true
  } | tee "$kit_out/log" | sed -n -e "s/.*protocol requires \(function\|property\) '\([^']*\)'.*/\2/p" \
        -e "s/.*multiple matching \(functions\|properties\) named '\([^']*\)'.*/\2/p" | sort -u
  # The strict build may fail only on conformances; any other error is a broken build, not a finding.
  if grep ': error: ' "$kit_out/log" | grep -vqE 'does not conform to protocol|required by protocol|multiple matching'; then
    echo "apple typecheck: the strict build failed for another reason:" >&2
    grep ': error: ' "$kit_out/log" | grep -vE 'does not conform to protocol|required by protocol|multiple matching' >&2
    rm -rf "$kit_out"; exit 1
  fi
  rm -rf "$kit_out"
}
allowed=$(grep -v '^#' "$stubs/unimplemented.txt" | sed 's/[[:space:]]*#.*//' | sed '/^$/d' | sort -u)
found=$(missing Sources/SwitchboardKit)
if [ "$found" != "$allowed" ]; then
  echo "apple typecheck: the delegate requirements left unimplemented differ from $stubs/unimplemented.txt" >&2
  diff <(echo "$allowed") <(echo "$found") >&2 || true
  echo "(< listed but implemented now; > not implemented: a misspelt method, or one to list with its reason)" >&2
  exit 1
fi
echo "apple typecheck: strict build: every implemented delegate method satisfies a requirement ($(echo "$found" | wc -l) optional ones deliberately left out)"

# 2b. Strict against both forms of PushKit's completion handlers and against the older SDK: a
# delegate method that only nearly matches one of them would never be called there.
build_stubs "$out/strict-plain-stubs" -D STRICT_DELEGATES -D PUSHKIT_PLAIN_COMPLETIONS
found=$(missing Sources/SwitchboardKit "$out/strict-plain-stubs" "$out/kit")
if [ "$found" != "$allowed" ]; then
  echo "apple typecheck: against PushKit handlers without @Sendable, the delegate methods left unimplemented differ:" >&2
  diff <(echo "$allowed") <(echo "$found") >&2 || true
  exit 1
fi
build_stubs "$out/strict-older-stubs" -D STRICT_DELEGATES "${older[@]}" -D PUSHKIT_PLAIN_COMPLETIONS
found=$(missing Sources/SwitchboardKit "$out/strict-older-stubs" "$out/older-kit" "${older[@]}")
if [ "$found" != "$allowed" ]; then
  echo "apple typecheck: against an SDK before iOS 26, the delegate methods left unimplemented differ:" >&2
  diff <(echo "$allowed") <(echo "$found") >&2 || true
  exit 1
fi
echo "apple typecheck: strict build: the PushKit methods match @Sendable and plain completion handlers, and an SDK before iOS 26"

# 3. The strict check catches a misspelt delegate method.
misspelt=$(mktemp -d)
cp Sources/SwitchboardKit/*.swift "$misspelt"/
sed -i 's/didActivate audioSession: AVAudioSession)/didActivateAudio audioSession: AVAudioSession)/' "$misspelt/CallKitSystem.swift"
grep -q didActivateAudio "$misspelt/CallKitSystem.swift"
if [ "$(missing "$misspelt")" = "$allowed" ] || ! missing "$misspelt" | grep -q 'provider(_:didActivate:)'; then
  echo "apple typecheck: the strict check did not catch a misspelt provider(_:didActivate:)" >&2
  exit 1
fi
rm -rf "$misspelt"
echo "apple typecheck: a misspelt provider(_:didActivate:) is caught by the strict check"

# 4. As on macOS: the frameworks importable, the target not iOS: no Apple-only type compiled.
build_kit "$out/stubs" Sources/SwitchboardKit "$out/kit-macos"
echo "import SwitchboardKit; let probe: Any.Type = SwitchboardClient.self" > "$out/kit-macos/control.swift"
swiftc -typecheck -I "$out/protocol" -I "$out/stubs" -I "$out/kit-macos" "$out/kit-macos/control.swift" \
  || { echo "apple typecheck: the macOS build of SwitchboardKit does not import: the probes below would prove nothing" >&2; exit 1; }
for symbol in CallKitSystem PushKitBridge RecentsCallBack CallAudioSession; do
  probe=$(mktemp -d)
  echo "import SwitchboardKit; let probe: Any.Type = $symbol.self" > "$probe/probe.swift"
  # The control: the same probe compiles against the iOS build (the probe and the paths are sound).
  swiftc -typecheck -I "$out/protocol" -I "$out/stubs" -I "$out/kit" "$probe/probe.swift" \
    || { echo "apple typecheck: the probe for $symbol fails against the iOS build too: the check is broken" >&2; exit 1; }
  if errors=$(swiftc -typecheck -I "$out/protocol" -I "$out/stubs" -I "$out/kit-macos" "$probe/probe.swift" 2>&1); then
    echo "apple typecheck: $symbol is compiled where os(iOS) is false: it would break a Mac build (D1)" >&2
    exit 1
  fi
  # Compiled out is exactly one error, that the name is not there; any other failure is not.
  if [ "$(grep -c ': error: ' <<<"$errors")" -ne 1 ] || ! grep -q ": error: cannot find '$symbol' in scope" <<<"$errors"; then
    echo "apple typecheck: the macOS probe for $symbol failed, but not because $symbol is compiled out:" >&2
    echo "$errors" >&2
    exit 1
  fi
  rm -rf "$probe"
done
echo "apple typecheck: outside iOS the Apple-only code is compiled out"

# 6. Run, not only type-check, the bridges' own logic: the stubs (CallKit's records what it is
# asked), SwitchboardKit (testable) and Tests/AppleBridge linked into one program.
run="$out/run"
mkdir -p "$run"
objects=()
compile_object() {  # compile_object MODULE SOURCES...: a module's object and interface into $run
  local module=$1; shift
  swiftc -c -wmo "${flags[@]}" -module-name "$module" -I "$run" -emit-module -emit-module-path "$run/$module.swiftmodule" \
    -o "$run/$module.o" "$@"
  objects+=("$run/$module.o")
}
for module in AppleFoundation AVFoundation CallKit LiveCommunicationKit PushKit StoreKit UserNotifications Intents UIKit; do
  compile_object "$module" "$stubs/$module"/*.swift
done
compile_object SwitchboardSupport Sources/SwitchboardSupport/*.swift
compile_object SwitchboardProtocol Sources/SwitchboardProtocol/*.swift
compile_object SwitchboardKit -enable-testing -D SWITCHBOARD_TYPECHECK_URLSESSION -D SWITCHBOARD_APPLE_STUBS Sources/SwitchboardKit/*.swift
swiftc -swift-version 6 -strict-concurrency=complete -I "$run" Tests/AppleBridge/main.swift "${objects[@]}" -o "$run/bridge"
"$run/bridge" >"$run/bridge.out" || { cat "$run/bridge.out" >&2; echo "apple typecheck: the bridges' logic failed a check" >&2; exit 1; }
echo "apple typecheck: the CallKit and LiveCommunicationKit bridges' logic runs against recording stubs ($(grep -c '^ok' "$run/bridge.out") checks) ($(( $(date +%s) - started )) s in all)"
