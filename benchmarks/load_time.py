"""First-load and cached-load times of the offline models.

    python benchmarks/load_time.py                    # the normal cache (first load only if it is cold)
    python benchmarks/load_time.py --cold             # time the first load in a fresh temporary cache
    python benchmarks/load_time.py --cache-dir /data/lr-cache --models qwen2.5-coder-0.5b

Each phase runs in its own child process, so the peak RSS printed is that phase's alone:

* first load: join the GGUF parts while hashing them, then dequantise and save the bf16 safetensors
  copy (``convert_offline``);
* cached load: ``load_model(name, device="cpu")`` from that copy (dtype "auto").
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _child(phase: str, name: str, cache_dir: str) -> dict:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lookahead_reasoning import models

    result: dict = {"phase": phase, "model": name}
    if phase == "first":
        t0 = time.perf_counter()
        models.offline_gguf(name, cache_dir)
        t1 = time.perf_counter()
        models.convert_offline(name, cache_dir)
        t2 = time.perf_counter()
        result.update(join_hash_s=t1 - t0, convert_s=t2 - t1)
    else:
        t0 = time.perf_counter()
        loaded = models.load_model(name, device="cpu", cache_dir=cache_dir)
        result.update(load_s=time.perf_counter() - t0, dtype=str(loaded.dtype).removeprefix("torch."))
    result["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    return result


def _run_child(phase: str, name: str, cache_dir: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", phase, "--models", name, "--cache-dir", str(cache_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"{phase} load of {name} failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=None, help="model cache (default: the library's)")
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b", help="comma-separated names")
    parser.add_argument("--cold", action="store_true", help="time the first load in a fresh temporary cache "
                        "(created next to --cache-dir, removed afterwards)")
    parser.add_argument("--child", choices=["first", "cached"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    from lookahead_reasoning import models

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if args.child:
        print(json.dumps(_child(args.child, names[0], str(args.cache_dir))))
        return 0

    cache = models.cache_root(args.cache_dir)
    tmp = None
    if args.cold:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="load-time-", dir=cache.parent))
        cache = tmp
    print(f"cache: {cache}")
    print(f"{'model':<22} {'join+hash s':>11} {'convert s':>10} {'first RSS GiB':>14} {'cached load s':>14} "
          f"{'dtype':>9} {'cached RSS GiB':>15}")
    try:
        for name in names:
            spec = models.offline_spec(name)
            if spec is None:
                raise SystemExit(f"{name!r} is not an offline model ({', '.join(models.offline_names())})")
            converted = cache / spec.name / models.CONVERTED_SUBDIR
            if models.offline._converted_ok(converted, spec):
                first = None
            else:
                first = _run_child("first", spec.name, cache)
            cached = _run_child("cached", spec.name, cache)
            if first is None:
                head = f"{'(cached already: use --cold)':>38}"
            else:
                head = f"{first['join_hash_s']:>11.1f} {first['convert_s']:>10.1f} {first['peak_rss_gib']:>14.2f}"
            print(f"{spec.name:<22} {head} {cached['load_s']:>14.1f} {cached['dtype']:>9} "
                  f"{cached['peak_rss_gib']:>15.2f}", flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
