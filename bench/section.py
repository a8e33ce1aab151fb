"""Replaces one `## Title:` section of BENCHMARKS.md (or appends it) with the text on stdin.

A paragraph of the old section that begins with "Earlier runs" (written by hand: what earlier
runs of the section measured) is kept, at the end of the new one, so a run adds to the
section's history instead of erasing it."""

import os
import sys

title = sys.argv[1]  # e.g. "## Push:"
section = sys.stdin.read()
path = "BENCHMARKS.md"
header = "# Benchmarks\n\n`make bench` writes this file; each section is replaced by the run that measured it.\n\n"
text = open(path).read() if os.path.exists(path) else header


def earlier_runs(old):
    """The old section's "Earlier runs" paragraph, from the line that begins it to the next blank line."""
    at = old.find("\nEarlier runs")
    if at < 0:
        return ""
    end = old.find("\n\n", at + 1)
    return old[at + 1:end if end >= 0 else len(old)].rstrip("\n")


start = text.find(title)
if start >= 0:
    end = text.find("\n## ", start + 1)
    kept = earlier_runs(text[start:end if end >= 0 else len(text)])
    if kept and "\nEarlier runs" not in "\n" + section:
        section = section.rstrip("\n") + "\n\n" + kept + "\n\n"
    text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
else:
    text = text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text)
print(section)
