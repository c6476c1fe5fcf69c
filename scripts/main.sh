#!/usr/bin/env bash
# The main job: install, then one real Lookahead Reasoning run on the offline pair
# (Qwen2.5-Coder 0.5B drafts, 1.5B verifies, MiniLM embedding verifier with the numbers check) on a GSM8K problem,
# with the autoregressive run of the same target in the same process for the speedup.
# Extra arguments go to `lookahead-reasoning lr` (e.g. --index 3, --mode lr-sd, -k 4).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
data=../shared/data/gsm8k/train.jsonl
if [ -f "$data" ]; then set -- --dataset "$data" "$@"; fi
exec .venv/bin/lookahead-reasoning lr --color "$@"
