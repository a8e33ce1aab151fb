"""One run as a JSON line on stdout: the load generator's result (the last line of RESULT_FILE)
with the run's name and what was measured around it, added in this order: the generator's CPU
seconds, the APNs sandbox's or the server's CPU ticks (as seconds), and the share of the
machine's time stolen by other guests (from two readings of steal_ticks, bench/lib.sh).

    run_row.py NAME RESULT_FILE [--client-cpu SECONDS] [--sandbox-ticks TICKS]
               [--server-ticks TICKS] [--steal "STEAL0 TOTAL0" "STEAL1 TOTAL1"]

Used by the push, relay, latency and cluster sections."""

import argparse
import json

from benchlib import last_json, steal_share

parser = argparse.ArgumentParser()
parser.add_argument("name")
parser.add_argument("result_file")
parser.add_argument("--client-cpu", type=float)
parser.add_argument("--sandbox-ticks", type=int)
parser.add_argument("--server-ticks", type=int)
parser.add_argument("--steal", nargs=2)
args = parser.parse_args()

result = last_json(args.result_file)
result.update(name=args.name)
if args.client_cpu is not None:
    result.update(client_cpu_seconds=args.client_cpu)
if args.sandbox_ticks is not None:
    result.update(sandbox_cpu_seconds=args.sandbox_ticks / 100)
if args.server_ticks is not None:
    result.update(server_cpu_seconds=args.server_ticks / 100)
if args.steal:
    result.update(steal_share=steal_share(*args.steal))
print(json.dumps(result))
