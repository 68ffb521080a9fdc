#!/usr/bin/env bash
# Creates training/.venv once, and brings it up to date when requirements.txt changes. torch is
# pinned to 2.13.0: that CPU build lies on this machine's disk, any other version pulls a
# multi-GB CUDA build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
# One stamp per requirements content: several checkouts (git worktrees) may share one environment
# through a symlink, and one checkout's stamp must not send another's into a reinstall.
hash="$(sha256sum "$here/requirements.txt" | cut -c1-16)"
stamp="$venv/.caper-installed-$hash"
if [ -f "$stamp" ]; then exit 0; fi
if [ -f "$venv/.caper-installed" ] && cmp -s "$here/requirements.txt" "$venv/.caper-installed"; then
  touch "$stamp"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
fi
"$venv/bin/python" -m pip install -q torch==2.13.0
"$venv/bin/python" -m pip install -q -r "$here/requirements.txt"
touch "$stamp"
