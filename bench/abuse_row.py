"""One run of the abuse section as a JSON line on stdout: the well-behaved client's paced relay
result, with the attack, the attacker's last line (bench/abuse.py: what it sent and what got
through), the server's CPU ticks (as seconds) and /healthz's status after the attack.

    abuse_row.py ATTACK RESULT_FILE ATTACK_OUTPUT SERVER_TICKS HEALTHZ_STATUS
"""

import json
import sys

from benchlib import last_json

attack, result_path, attack_path, ticks, healthy = sys.argv[1:6]
result = last_json(result_path)
result.update(attack=attack, attacker=last_json(attack_path),
              server_cpu_seconds=int(ticks) / 100, healthz=int(healthy))
print(json.dumps(result))
