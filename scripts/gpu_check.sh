#!/usr/bin/env bash
# The GPU check in one command (docs/gpu.md): bash scripts/gpu_check.sh --out DIR [--device cpu --tiny] [...]
# The work is scripts/gpu_check.py; this wrapper only picks the interpreter and installs carried wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
# the repository's venv where there is one (CPU machines); else the machine's python3 (a GPU image's, with torch)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
# wheels carried beside the tree (docs/gpu.md, 'Packages'): into a scratch folder, never into the image's environment
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site .whl/*.whl
    export PYTHONPATH=/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PY" scripts/gpu_check.py "$@"
