"""transformers' ``generate`` running Lookahead Reasoning on a GPU: one command, one JSON file, about a minute.

The ``custom_generate`` entry (the folder and the callable, :mod:`lookahead_reasoning.integrations.hf_generate`)
is tested on CPUs. On a GPU a model handed to it runs on the compiled path by default (CUDA graphs over a
static cache), so this checks there, with tiny float32 models over a tokenizer of one token per character
(the draft a perturbed copy of the target):

* greedy, every mode through both doors writes the tokens of ``model.generate``'s own greedy loop, with the
  compiled path (the default on CUDA) and with the eager one (``fast_path="off"``);
* the run summary that comes back shows the library's loop ran (drafted steps judged in ``lr``);
* ``return_dict_in_generate`` gives a ``GenerateDecoderOnlyOutput`` whose ids are on the model's device.

    python benchmarks/gpu_generate.py --out gpu-generate.json        # a CUDA machine
    python benchmarks/gpu_generate.py --device cpu --out rehearsal.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import transformers

from lookahead_reasoning.integrations.hf_generate import CUSTOM_GENERATE, decoding
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.steps import StepConfig
from lookahead_reasoning.testing import perturbed_copy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from lr_helpers import exact, tiny_lm  # noqa: E402 - one token per character: the same text is the same tokens

QUESTION = "Ann has 3 apples and buys 4 more. How many apples does she have?"
NEW = 96
MODES = ("ar", "sd", "lr", "lr-sd", "auto")


def check(model: Any, draft: Any, tok: Any, inputs: dict, greedy: torch.Tensor, steps: StepConfig,
          door: str, mode: str, fast_path: str) -> dict:
    """One generate call through ``door``; whether its ids are greedy generate's, and its summary."""
    # the verifier keeps a drafted step only when its text is the target's, character for character
    own = {"mode": mode, "steps": steps, "verifier": exact(), "fast_path": fast_path}
    start = time.perf_counter()
    if door == "folder":
        out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, custom_generate=CUSTOM_GENERATE,
                             trust_remote_code=True, assistant_model=draft, tokenizer=tok,
                             return_dict_in_generate=True, **own)
    else:
        out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True,
                             custom_generate=decoding(draft, tokenizer=tok, **own))
    seconds = time.perf_counter() - start
    [summary] = out["lookahead"]
    return {"same_tokens": bool(torch.equal(out.sequences.cpu(), greedy.cpu())),
            "device": str(out.sequences.device), "output": type(out).__name__, "s": round(seconds, 2),
            "judged_pairs": summary.get("judged_pairs"), "accepted_pairs": summary.get("accepted_pairs"),
            "alpha_judged": summary.get("alpha_judged"), "new_tokens": summary.get("new_tokens")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-generate.json")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = torch.device(args.device)
    result: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "runs": {}}
    cpu = tiny_lm(0)
    model, tok = cpu.model.to(device), cpu.tokenizer
    target = LM(model, tok, name=cpu.name)
    draft = perturbed_copy(target, 0.2, seed=1).model
    inputs = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    inputs = {name: value.to(device) for name, value in inputs.items()}
    greedy = model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
    text = tok.decode(greedy[0, inputs["input_ids"].shape[1]:])
    steps = StepConfig(delimiters=tuple(c for c, _ in Counter(text).most_common(3)))  # short steps: many judged
    paths = ("auto", "off") if device.type == "cuda" else ("off",)
    for fast_path in paths:
        for door in ("folder", "callable"):
            for mode in MODES:
                label = f"{door}/{mode}/fast_path={fast_path}"
                try:
                    result["runs"][label] = check(model, draft, tok, inputs, greedy, steps, door, mode, fast_path)
                except Exception as exc:  # noqa: BLE001 - one failing call must not hide the others
                    result["runs"][label] = {"error": f"{type(exc).__name__}: {exc}",
                                             "traceback": traceback.format_exc()[-2000:]}
                print(label, result["runs"][label], flush=True)
    runs = result["runs"].values()
    result["all_same"] = all(run.get("same_tokens") for run in runs)
    result["lr_judged"] = all((run.get("judged_pairs") or 0) > 0 for label, run in result["runs"].items()
                              if "/lr/" in label)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(f"all the same: {result['all_same']}; lr judged drafted steps: {result['lr_judged']}; wrote {args.out}")


if __name__ == "__main__":
    main()
