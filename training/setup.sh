#!/usr/bin/env bash
# Creates training/.venv once. torch is pinned to 2.13.0: that CPU build lies on this machine's
# disk, any other version pulls a multi-GB CUDA build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
stamp="$venv/.caper-installed"
if [ -f "$stamp" ] && cmp -s "$here/requirements.txt" "$stamp"; then exit 0; fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q torch==2.13.0
"$venv/bin/python" -m pip install -q -r "$here/requirements.txt"
cp "$here/requirements.txt" "$stamp"
