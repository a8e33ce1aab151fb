"""Replaces one `## Title:` section of BENCHMARKS.md (or appends it) with the text on stdin."""

import os
import sys

title = sys.argv[1]  # e.g. "## Push:"
section = sys.stdin.read()
path = "BENCHMARKS.md"
header = "# Benchmarks\n\n`make bench` writes this file; each section is replaced by the run that measured it.\n\n"
text = open(path).read() if os.path.exists(path) else header
start = text.find(title)
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
else:
    text = text.rstrip("\n") + "\n\n" + section
open(path, "w").write(text)
print(section)
