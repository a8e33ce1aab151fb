"""What the row and report writers of make bench share: reading a load generator's result and a
section's JSON lines, the steal share of a run, medians, and the sentence that says where and
when a section was measured. Reads /proc/cpuinfo and `swift --version` for that sentence; writes
nothing.

The writers run as `python3 bench/NAME.py`, which puts bench/ on the import path."""

import datetime
import json
import os
import platform
import statistics
import subprocess


def last_json(path):
    """The last line of a file (a load generator's result) as JSON."""
    return json.loads(open(path).read().strip().splitlines()[-1])


def read_jsonl(path):
    """Every line of a JSON-lines file (a section's runs)."""
    return [json.loads(line) for line in open(path)]


def steal_share(start, end):
    """The share of the machine's CPU time the hypervisor gave to other guests between two
    readings of "STEAL TOTAL" ticks (steal_ticks in bench/lib.sh)."""
    (steal0, total0), (steal1, total1) = map(int, start.split()), map(int, end.split())
    return (steal1 - steal0) / max(1, total1 - total0)


def pick(rows, **fields):
    """The rows whose fields have these values, in order."""
    return [r for r in rows if all(r[k] == v for k, v in fields.items())]


def median(rows, key):
    """The median over rows of a field, or of a function of the row."""
    return statistics.median(key(r) if callable(key) else r[key] for r in rows)


def measured():
    """The first sentence of every section: the date, the machine's cores and model, the kernel
    and the Swift compiler."""
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    swift = subprocess.run(["swift", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} × {cpu_model}, Linux {platform.release()}, {swift}."
