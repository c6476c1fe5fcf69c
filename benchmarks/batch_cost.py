"""What a batched target step costs here: the beta of ``theory.f_sync_batched``, measured.

Lookahead Reasoning's target writes R = k + 1 steps at once, one row each. The paper's formulas assume
that costs the same as one row (free parallelism, a GPU with room to spare). This script times one
forward of the target with R rows after a shared cached prompt, each row feeding n new tokens:

- n = 1: the rows decode token by token (mode ``lr``);
- n = gamma + 1: every row checks gamma drafted tokens (mode ``lr-sd``, token SD inside the steps).

and prints beta(R) = time(R rows) / time(1 row) for each n, with the break-even step acceptance
``beta + c1 - 1`` above which one drafted step per cycle (k = 1) beats the target alone
(``theory.lookahead_pays``). Medians over repeats, in one process; the machine should be idle.

    .venv/bin/python benchmarks/batch_cost.py --rows 1,2,3 --tokens 1,13 --c1 0.15
"""

from __future__ import annotations

import argparse

from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.runtime.pair import as_lm
from lookahead_reasoning.planning.costs import forward_seconds
from lookahead_reasoning.theory import lookahead_pays


def batched_forward_ms(session: Session, rows: int, n: int, repeats: int) -> float:
    """Median ms of one forward over ``rows`` forks of ``session``, each feeding ``n`` new tokens
    (logits at all ``n``), after one untimed warm-up call of the shape."""
    forward_seconds(session.lm, session, rows, n, 1, keep=n)
    return forward_seconds(session.lm, session, rows, n, repeats, keep=n) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--rows", default="1,2,3", help="row counts R (comma-separated; 1 is the reference)")
    ap.add_argument("--tokens", default="1,13", help="new tokens per row n (1: lr; gamma + 1: lr-sd)")
    ap.add_argument("--prompt-tokens", type=int, default=300, help="length of the shared cached prefix")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--c1", type=float, default=0.15, help="draft/target step cost for the break-even column")
    args = ap.parse_args()
    rows = sorted({int(r) for r in args.rows.split(",")} | {1})
    tokens = [int(n) for n in args.tokens.split(",")]
    lm = as_lm(args.model, dtype=args.dtype)
    session = Session(lm, [list(range(2000, 2000 + args.prompt_tokens))])
    session.logits()  # the shared prefix, cached once
    print(f"{lm.name}, {next(lm.model.parameters()).dtype}, prefix {args.prompt_tokens} tokens, c1 = {args.c1}")
    print("| n per row | rows R | ms | beta(R) | alpha1 needed for k = R - 1 = 1 to pay |")
    print("|---|---|---|---|---|")
    for n in tokens:
        one = batched_forward_ms(session, 1, n, args.repeats)
        for r in rows:
            ms = one if r == 1 else batched_forward_ms(session, r, n, args.repeats)
            beta = ms / one
            need = "-" if r != 2 else f"> {max(0.0, beta + args.c1 - 1):.2f}"
            if r == 2:
                need += " (0.5 pays)" if lookahead_pays(0.5, args.c1, beta) else " (0.5 does not pay)"
            print(f"| {n} | {r} | {ms:.0f} | {beta:.2f} | {need} |")


if __name__ == "__main__":
    main()
