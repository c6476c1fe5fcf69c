"""Which of the package's files one ``LookaheadGenerator.generate`` call runs code in, mode by mode.

    .venv/bin/python scripts/files_entered.py                 # modes auto and lr
    .venv/bin/python scripts/files_entered.py ar sd lr auto --list

A reader follows a prompt from the front door to the cycle through these files; fewer of them is a
shorter read. The models are tiny random-weight ones (nothing is downloaded), so the script runs in
seconds on any checkout of the project. Each mode first runs once untraced (mode ``auto`` measures its
cost tables there), then three prompts are traced with ``sys.settrace`` and the files entered by any
of them are counted. Mode ``auto`` picks its plans from timings measured on this machine, so its count
can differ by a file or two between runs; the other modes' counts are fixed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

PROMPTS = ("Tom has 3 apples and buys 4 more. How many?", "Step by step: 12 + 30 = ?", "Why is the sky blue?")


def files_entered(gen, mode: str, package: Path) -> set[str]:
    """The package's files (relative paths) whose functions ran during ``gen.generate`` on each prompt."""
    entered: set[str] = set()

    def tracer(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(str(package)):
            entered.add(str(Path(name).relative_to(package)))

    gen.generate(PROMPTS[0], mode=mode, max_new_tokens=24)  # warm: cost tables, first forwards
    for prompt in PROMPTS:
        sys.settrace(tracer)
        try:
            gen.generate(prompt, mode=mode, max_new_tokens=24)
        finally:
            sys.settrace(None)
    return entered


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modes", nargs="*", default=["auto", "lr"])
    p.add_argument("--list", action="store_true", help="also list the files")
    args = p.parse_args()
    os.environ.setdefault("LOOKAHEAD_REASONING_CACHE", tempfile.mkdtemp())  # cost tables: not the user's cache
    import torch

    import lookahead_reasoning
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.testing import tiny_model
    from lookahead_reasoning.verifiers.text import ExactMatchVerifier

    torch.set_num_threads(1)
    package = Path(lookahead_reasoning.__file__).resolve().parent
    gen = LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=tiny_model("qwen2", seed=1),
                             verifier=ExactMatchVerifier())
    for mode in args.modes:
        entered = files_entered(gen, mode, package)
        print(f"{mode}: {len(entered)} files")
        if args.list:
            print("".join(f"  {name}\n" for name in sorted(entered)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
