"""One run of the relay section's ceiling (bench/loopback.c, the C epoll echo) as a JSON line on
stdout, in the relay rows' shape: its round trips per second as messages per second, the echo
server's CPU ticks (as seconds) and the share of the machine's time stolen by other guests.

    loopback_row.py RESULT_FILE SERVER_TICKS "STEAL0 TOTAL0" "STEAL1 TOTAL1"
"""

import json
import sys

from benchlib import last_json, steal_share

result = last_json(sys.argv[1])
print(json.dumps({"name": "loopback", "messages_per_second": result["round_trips_per_second"],
                  "seconds": result["seconds"], "server_cpu_seconds": int(sys.argv[2]) / 100, "client_cpu_seconds": 0,
                  "steal_share": steal_share(sys.argv[3], sys.argv[4])}))
