"""Record (or check) the greedy token ids of every decoding mode on a few GSM8K problems.

The file this writes, ``tests/fixtures/greedy_outputs.json``, is what every version of the code must
reproduce token for token: ``pytest -m slow tests/test_recorded_outputs.py`` reruns the same settings
and compares. Float32 on the CPU, so that the lossless modes are exactly reproducible.

    .venv/bin/python scripts/record_outputs.py            # write the fixture
    .venv/bin/python scripts/record_outputs.py --check    # compare against it
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "greedy_outputs.json"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"

SETTINGS = {
    "target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b", "dtype": "float32",
    "verifier": "embedding-numbers", "k": 2, "gamma": 12, "draft_stop_below": 0.4, "draft_quantize": "auto",
    "max_new_tokens": 128, "problems": [0, 1, 2], "modes": ["ar", "sd", "sd-ngram", "lr", "lr-sd"],
}


def run(settings: dict) -> dict[str, dict[str, list[int]]]:
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.settings import Settings, TokenSD
    from lookahead_reasoning.prompts import math_messages

    knobs = Settings.preset(k=settings["k"], gamma=settings["gamma"], draft_stop_below=settings["draft_stop_below"],
                            token_sd=TokenSD(target="draft", draft="ngram", gamma=settings["gamma"]))  # every mode's
    gen = LookaheadGenerator(target=settings["target"], draft=settings["draft"], verifier=settings["verifier"],
                             settings=knobs, precision={"draft": settings["draft_quantize"]}, dtype=settings["dtype"])
    lines = GSM8K.read_text(encoding="utf-8").splitlines()
    out: dict[str, dict[str, list[int]]] = {}
    for index in settings["problems"]:
        question = json.loads(lines[index])["question"]
        out[str(index)] = {}
        for mode in settings["modes"]:
            gamma = 6 if mode == "sd-ngram" else None
            result = gen.generate(math_messages(question), mode=mode, max_new_tokens=settings["max_new_tokens"],
                                  gamma=gamma)
            out[str(index)][mode] = result.token_ids
            print(f"problem {index} {mode}: {result.num_tokens} tokens", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixture instead of writing it")
    args = parser.parse_args()
    if args.check:
        recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
        now = run(recorded["settings"])
        bad = [(p, m) for p in now for m in now[p] if now[p][m] != recorded["outputs"][p][m]]
        print("identical" if not bad else f"differ: {bad}")
        return 1 if bad else 0
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({"settings": SETTINGS, "outputs": run(SETTINGS)}) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
