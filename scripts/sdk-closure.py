"""What an iOS app builds when it adds the SwitchboardKit product: the targets the product
reaches on iOS, from `swift package dump-package` (the manifest as SwiftPM reads it, platform
conditions included). Fails when one of them is a system library or holds C, C++ or
Objective-C sources: the server's C libraries (libwebsockets, libcurl, OpenSSL, SQLite, libpq,
hiredis, jansson, simdjson) are SwitchboardKit's dependency on Linux only.

    swift package dump-package | python3 scripts/sdk-closure.py [PRODUCT] [PLATFORM]
"""

import json
import os
import sys

manifest = json.load(sys.stdin)
product = sys.argv[1] if len(sys.argv) > 1 else "SwitchboardKit"
platform = sys.argv[2] if len(sys.argv) > 2 else "ios"
targets = {t["name"]: t for t in manifest["targets"]}


def dependencies(target):
    """The names of the targets `target` depends on when building for `platform`."""
    for dependency in target["dependencies"]:
        kind, value = next(iter(dependency.items()))
        name, condition = value[0], value[-1] if len(value) > 1 else None
        if kind == "product":
            sys.exit(f"sdk closure: {target['name']} depends on another package's product {name}")
        if condition and platform not in (condition.get("platformNames") or [platform]):
            continue
        yield name


reached, waiting = set(), [t for p in manifest["products"] if p["name"] == product for t in p["targets"]]
if not waiting:
    sys.exit(f"sdk closure: no product {product}")
while waiting:
    name = waiting.pop()
    if name not in reached:
        reached.add(name)
        waiting.extend(dependencies(targets[name]))

problems = []
for name in sorted(reached):
    target = targets[name]
    if target["type"] != "regular":
        problems.append(f"{name} is a {target['type']} target")
        continue
    folder = target.get("path") or os.path.join("Sources", name)
    for root, _, files in os.walk(folder):
        problems += [f"{name} holds {os.path.join(root, f)}" for f in files if not f.endswith((".swift", ".md"))]
if problems:
    sys.exit(f"sdk closure: {product} built for {platform} would build:\n  " + "\n  ".join(problems))
print(f"sdk closure: {product} built for {platform} (an app adding the package) builds {len(reached)} Swift targets and no C library: "
      + ", ".join(sorted(reached)))
