#!/usr/bin/env bash
# Creates the Python virtualenv with the PyPI test tools under the build folder.
set -euo pipefail
venv="${1:-.build/venv}"
requirements="$(dirname "$0")/requirements-test.txt"
stamp="$venv/.requirements"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
