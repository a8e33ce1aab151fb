"""One run of the cluster benchmark as a JSON line: the relay's result, the CPU the servers
(and Redis) spent during it, and the share of the machine's time stolen by other guests.

    cluster_row.py NAME RESULT_FILE SERVER_TICKS "STEAL0 TOTAL0" "STEAL1 TOTAL1"
"""

import json
import sys

name, path, ticks = sys.argv[1], sys.argv[2], int(sys.argv[3])
result = json.loads(open(path).read().strip().splitlines()[-1])
(steal0, total0), (steal1, total1) = map(int, sys.argv[4].split()), map(int, sys.argv[5].split())
result.update(name=name, server_cpu_seconds=ticks / 100, steal_share=(steal1 - steal0) / max(1, total1 - total0))
print(json.dumps(result))
