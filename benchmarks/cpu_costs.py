"""The offline pair's cost table on this CPU, as mode ``auto`` measures it, written to a file to keep.

    .venv/bin/python benchmarks/cpu_costs.py --out benchmarks/results/cpu-costs-avx512-bf16.json
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 \\
        .venv/bin/python benchmarks/cpu_costs.py --dtype float32 --label "AVX2 only, emulated" \\
        --out benchmarks/results/cpu-costs-avx2emu-fp32.json

T(R, n) of the 1.5B target and of the 0.5B draft (``planning.costs.profile`` on the grids ``auto`` uses,
3 repeats a point), in the dtype ``auto`` would load (bf16 where the CPU has avx512_bf16, else float32) and
the draft as ``auto`` runs it (int8 on a CPU, unless ``--draft-precision none``). The file holds the table in
``CostTable.to_json``'s form beside the machine's facts; notebook 11 reads it to say when the step layer pays
on this CPU kind. Time it on a quiet machine: every point is a median of wall-clock forwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="auto", help="auto: bfloat16 where the CPU has avx512_bf16, else float32")
    ap.add_argument("--draft-precision", default="auto", choices=["auto", "none"],
                    help="auto: the draft in dynamic int8, as mode auto runs it on a CPU")
    ap.add_argument("--label", default=None, help="what this machine is, for the record (e.g. an emulation)")
    args = ap.parse_args(argv)
    import torch

    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.models.hardware import cpu_flags
    from lookahead_reasoning.models.placement import cpu_supports_bf16
    from lookahead_reasoning.planning.costs import DRAFT_GRID, TARGET_GRID, CostTable, profile

    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if cpu_supports_bf16() else "float32")
    gen = LookaheadGenerator(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype=dtype,
                             precision={"draft": None if args.draft_precision == "none" else "auto"})
    start = time.perf_counter()
    table = CostTable(profile(gen.target, TARGET_GRID, repeats=3, label="target"),
                      profile(gen.draft, DRAFT_GRID, repeats=3, label="draft"))
    flags = sorted((cpu_flags() or set()) & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    caps = {k: v for k, v in os.environ.items() if k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                                                         "MKL_ENABLE_INSTRUCTIONS")}
    record = {"table": table.to_json(), "dtype": dtype, "draft_precision": gen.draft_quantize or "as loaded",
              "machine": {"cpu": platform.processor() or platform.machine(), "cpu_flags": flags, "caps": caps,
                          "threads": torch.get_num_threads(), "label": args.label},
              "torch": torch.__version__, "measure_s": round(time.perf_counter() - start, 1),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
    t = table.target
    print(f"wrote {args.out}: T(1, 1) {t(1, 1) * 1e3:.1f} ms, T(2, 1) {t(2, 1) * 1e3:.1f}, T(1, 13) {t(1, 13) * 1e3:.1f}; "
          f"draft T_d(1, 1) {table.draft(1, 1) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
