#!/usr/bin/env bash
# Creates training/.venv once, and brings it up to date when requirements.txt changes.
#
# torch is pinned to 2.13.0. Where pip finds a CPU build of it (a local wheel directory, as on the
# project's CI machine) plain `pip install torch==2.13.0` is the fast path and nothing else is
# needed. Elsewhere, on Linux, PyPI's torch is the multi-GB CUDA build; the CPU build comes from
# PyTorch's own index:
#
#   bash training/setup.sh --cpu                       # = --torch-index https://download.pytorch.org/whl/cpu
#   bash training/setup.sh --torch-index URL           # any index (a mirror, a CUDA variant)
#   CAPER_TORCH_INDEX=URL bash training/setup.sh       # the same from the environment (caper train, CI)
#   bash training/setup.sh --dry-run [...]             # print the commands, run nothing
#
# The index is used for torch alone (--index-url), so the other requirements still come from the
# usual index. CAPER_VENV=DIR puts the environment elsewhere (default training/.venv).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${CAPER_VENV:-$here/.venv}"
torch_index="${CAPER_TORCH_INDEX:-}"
dry=0
CPU_INDEX="https://download.pytorch.org/whl/cpu"
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) torch_index="$CPU_INDEX" ;;
    --torch-index)
      [ $# -ge 2 ] || { echo "setup.sh: --torch-index needs a URL" >&2; exit 2; }
      torch_index="$2"
      shift
      ;;
    --torch-index=*) torch_index="${1#--torch-index=}" ;;
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument \"$1\" (--cpu, --torch-index URL, --dry-run)" >&2; exit 2 ;;
  esac
  shift
done

run() {
  if [ "$dry" = 1 ]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# One stamp per requirements content: several checkouts (git worktrees) may share one environment
# through a symlink, and one checkout's stamp must not send another's into a reinstall.
hash="$(sha256sum "$here/requirements.txt" | cut -c1-16)"
stamp="$venv/.caper-installed-$hash"
if [ -f "$stamp" ]; then
  [ "$dry" = 1 ] && echo "up to date: $stamp"
  exit 0
fi
if [ -f "$venv/.caper-installed" ] && cmp -s "$here/requirements.txt" "$venv/.caper-installed"; then
  run touch "$stamp"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  run python3 -m venv "$venv"
  run "$venv/bin/python" -m pip install -q --upgrade pip
fi
torch_args=(torch==2.13.0)
if [ -n "$torch_index" ]; then torch_args+=(--index-url "$torch_index"); fi
run "$venv/bin/python" -m pip install -q "${torch_args[@]}"
# torch is installed by now, and 2.13.0+cpu satisfies requirements.txt's torch==2.13.0.
run "$venv/bin/python" -m pip install -q -r "$here/requirements.txt"
run touch "$stamp"
