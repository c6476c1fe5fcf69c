"""Check every speedup formula of lookahead_reasoning.theory numerically; exit 1 on any failure.

Run from the repository root with the package installed:  python theory/check.py

Checks: the paper's sanity values; the identities E[ceil((X+1)/g)] and E[X mod g] against sampled
geometric run lengths; the token-SD bound S <= 1/(1-alpha) on a dense grid; each closed form against its
Monte Carlo simulator (|closed - simulated| <= 4 standard errors + 0.5%); Lemma 2's shape of f_async; the
budget split of the combined layers.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from lookahead_reasoning.theory import (
    async_depth, best_split, expected_ceil, expected_mod, f_async, f_sync, g_token, h_combined, sample_run_lengths,
    sd_ceiling, sd_speedup, simulate_lr_async, simulate_lr_sd, simulate_lr_sync, simulate_sd,
)

FAILURES: list[str] = []


def check(name: str, ok: bool, detail: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    if not ok:
        FAILURES.append(name)


def close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol


def sanity_values() -> None:
    v = float(f_sync(4, 0.5, 0.1))
    check("f_sync(4) at alpha1=.5, c1=.1", close(v, 1.44, 0.005), f"{v:.4f} (paper 1.44)")
    v = float(f_async(4, 0.5, 0.1))
    check("f_async(4) at alpha1=.5, c1=.1", close(v, 1.75, 0.005), f"{v:.4f} (paper 1.75)")
    v = float(f_async(int(async_depth(0.1)), 0.5, 0.1))
    check("S1 at alpha1=.5, c1=.1", close(v, 1.82, 0.005), f"{v:.4f} (paper 1.82)")
    split = best_split(0.6, 0.2, 0.7, 0.1, 16, "async")
    b = split.best
    check("best split, alpha1=.6 c1=.2 alpha2=.7 c2=.1 M=16 async", (b.k1, b.k2) == (4, 4) and close(b.speedup, 3.66, 0.01),
          f"(k1, k2) = ({b.k1}, {b.k2}), {b.speedup:.3f}x (paper (4,4), 3.66x)")
    check("  SD only", close(split.sd_only.speedup, 1.98, 0.01), f"{split.sd_only.speedup:.3f}x (paper 1.98x)")
    check("  LR only", close(split.lr_only.speedup, 1.92, 0.01), f"{split.lr_only.speedup:.3f}x (paper 1.92x)")
    check("  regime", str(split.regime) == "hybrid", f"{split.regime}")


def identities() -> None:
    for alpha in (0.3, 0.6, 0.85):
        x = sample_run_lengths(alpha, 400_000, seed=1)
        for g in (1, 3, 7):
            got_c, want_c = float(np.ceil((x + 1) / g).mean()), float(expected_ceil(alpha, g))
            got_m, want_m = float((x % g).mean()), float(expected_mod(alpha, g))
            tol_c = 4 * np.ceil((x + 1) / g).std() / np.sqrt(len(x)) + 1e-3
            tol_m = 4 * (x % g).std() / np.sqrt(len(x)) + 1e-3
            check(f"E[ceil((X+1)/{g})], alpha={alpha}", close(got_c, want_c, tol_c), f"sampled {got_c:.4f} vs {want_c:.4f}")
            check(f"E[X mod {g}], alpha={alpha}", close(got_m, want_m, tol_m), f"sampled {got_m:.4f} vs {want_m:.4f}")


def ceiling_bound() -> None:
    alphas = np.linspace(0.0, 0.99, 100)
    worst = -np.inf
    for gamma in range(1, 65):
        for c in (0.0, 0.01, 0.05, 0.1, 0.3, 1.0):
            s = np.asarray(sd_speedup(alphas, gamma, c))
            worst = max(worst, float((s - np.asarray(sd_ceiling(alphas))).max()))
    check("S(alpha, gamma, c) <= 1/(1-alpha) on 100 x 64 x 6 grid", worst <= 1e-12, f"max(S - ceiling) = {worst:.2e}")


def simulations() -> None:
    def agree(name: str, closed: float, sim) -> None:
        tol = 4 * sim.stderr + 0.005 * closed
        check(name, close(sim.speedup, closed, tol), f"closed {closed:.4f}, simulated {sim.speedup:.4f} +- {sim.stderr:.4f}")

    for alpha, gamma, c in ((0.8, 4, 0.1), (0.6, 2, 0.3), (0.9, 7, 0.05)):
        agree(f"token SD alpha={alpha} gamma={gamma} c={c}", float(sd_speedup(alpha, gamma, c)),
              simulate_sd(alpha, gamma, c, cycles=60_000, seed=2))
    for k1, a1, c1 in ((4, 0.5, 0.1), (3, 0.7, 0.3), (6, 0.8, 0.2)):
        agree(f"sync LR k1={k1} alpha1={a1} c1={c1}", float(f_sync(k1, a1, c1)),
              simulate_lr_sync(k1, a1, c1, cycles=60_000, seed=3))
        agree(f"async LR k1={k1} alpha1={a1} c1={c1}", float(f_async(k1, a1, c1)),
              simulate_lr_async(k1, a1, c1, cycles=60_000, seed=4))
    agree("async LR past ceil(1/c1): k1=12 alpha1=.5 c1=.1", float(f_async(12, 0.5, 0.1)),
          simulate_lr_async(12, 0.5, 0.1, cycles=60_000, seed=5))
    agree("LR+SD async k1=4 k2=4", float(h_combined(4, 4, 0.6, 0.2, 0.7, 0.1, "async")),
          simulate_lr_sd(4, 4, 0.6, 0.2, 0.7, 0.1, mode="async", cycles=60_000, seed=6))
    agree("LR+SD sync k1=3 k2=5", float(h_combined(3, 5, 0.6, 0.2, 0.7, 0.1, "sync")),
          simulate_lr_sd(3, 5, 0.6, 0.2, 0.7, 0.1, mode="sync", cycles=60_000, seed=7))


def lemma2_shape() -> None:
    ok, worst = True, ""
    for a1 in np.linspace(0.05, 0.95, 19):
        for c1 in (0.05, 0.1, 0.2, 0.3, 0.5):
            depth = int(async_depth(c1))
            values = [float(f_async(k, a1, c1)) for k in range(1, depth + 6)]
            rising = all(b >= a - 1e-12 for a, b in zip(values, values[1:]))
            flat = all(abs(v - values[depth - 1]) < 1e-12 for v in values[depth - 1:])
            above_sync = all(float(f_async(k, a1, c1)) >= float(f_sync(k, a1, c1)) - 1e-12 for k in range(1, depth + 6))
            if not (rising and flat and above_sync):
                ok, worst = False, f"alpha1={a1:.2f}, c1={c1}"
    check("f_async non-decreasing, flat from ceil(1/c1), >= f_sync (19 x 5 grid)", ok, worst or "holds everywhere")


def budget() -> None:
    ok = True
    for a1, c1, a2, c2, m in ((0.6, 0.2, 0.7, 0.1, 16), (0.55, 0.3, 0.75, 0.15, 32), (0.7, 0.1, 0.6, 0.05, 24)):
        for mode in ("sync", "async"):
            s = best_split(a1, c1, a2, c2, m, mode)
            ok &= s.best.parallel <= m and s.best.speedup >= max(s.sd_only.speedup, s.lr_only.speedup) - 1e-12
            ok &= close(s.best.speedup, float(h_combined(s.best.k1, s.best.k2, a1, c1, a2, c2, mode)), 1e-9)
    check("budget optimum within budget, at least each single layer", bool(ok), "3 settings x 2 modes")
    g = float(g_token(5, 0.7, 0.1))
    check("g(k2) equals S(alpha2, k2 - 1, c2)", close(g, float(sd_speedup(0.7, 4, 0.1)), 1e-12), f"{g:.4f}")


def main() -> int:
    start = time.perf_counter()
    for part in (sanity_values, identities, ceiling_bound, simulations, lemma2_shape, budget):
        part()
    print(f"\n{len(FAILURES)} failed checks, {time.perf_counter() - start:.1f} s")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
