"""One server's churn runs as a JSON line on stdout, from the two minutes' `switchboard-bench
churn` results: connects per second in each, failures, the server's CPU share in the first, and
its open descriptors and resident memory at the start and after each minute.

    churn_row.py NAME FIRST_RESULT SECOND_RESULT "FD0 RSS0 FD1 RSS1 FD2 RSS2" SERVER_TICKS
"""

import json
import sys

from benchlib import last_json

name, first, second, numbers, ticks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
fd0, rss0, fd1, rss1, fd2, rss2 = map(int, numbers.split())
a = last_json(first)
b = last_json(second)
print(json.dumps({"name": name, "connects_per_second": a["connects_per_second"], "second_minute": b["connects_per_second"],
                  "failed": a["failed"] + b["failed"], "server_cpu_share": ticks / 100 / a["seconds"],
                  "fds": [fd0, fd1, fd2], "rss_kib": [rss0, rss1, rss2]}))
