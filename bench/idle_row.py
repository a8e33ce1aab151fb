"""One run of the idle section as a JSON line on stdout, from `bench/wsload.c idle`'s output
(its first JSON line, once the connections are in, and its last, after the hold): connects per
second, the server's resident memory per connection and its CPU share while holding them.

    idle_row.py NAME IDLE_OUTPUT RSS_KIB_BEFORE RSS_KIB_CONNECTED SERVER_TICKS HOLD_SECONDS
"""

import json
import sys

name, path, before, connected, ticks, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
lines = [json.loads(line) for line in open(path) if line.startswith("{")]
up, held = lines[0], lines[-1]
print(json.dumps({"name": name, "connections": up["connections"], "connects_per_second": up["connects_per_second"],
                  "bytes_per_connection": (connected - before) * 1024 / up["connections"],
                  "keepalive_cpu_share": ticks / 100 / hold, "closed_while_held": held.get("closed_while_held"),
                  "pings_per_second": (held.get("pings_answered") or 0) / hold}))
