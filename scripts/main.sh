#!/usr/bin/env bash
# Install, then answer a GSM8K problem (training problem 0 of the 64 shipped with the package) with
# mode auto on the offline pair (Qwen2.5-Coder 0.5B drafts for the 1.5B; a planner measures this machine's forward costs once, then picks every
# cycle's plan: token SD, Lookahead Reasoning or both), with plain decoding of the same target in the
# same process for the speedup.
# Extra arguments go to `lookahead-reasoning lr` (e.g. --index 3, --mode lr-sd, --details).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/lookahead-reasoning lr --color "$@"
