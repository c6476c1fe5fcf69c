"""Check every speedup formula numerically; print PASS/FAIL with the numbers; exit 1 on any failure.

    python theory/check.py          (from the repository root, with the package installed)

What is checked (the derivations are in theory/README.md):

1. the paper's sanity values, to the two decimals it prints;
2. token SD on dense grids: S <= 1/(1 - alpha), S non-decreasing in alpha, g(k2) = S(alpha, k2 - 1, c),
   best_gamma equal to a brute-force argmax;
3. the two geometric identities against their series, and against samples;
4. the step layer on dense grids: f_async >= f_sync, f_async monotone then flat (Lemma 2), the two
   async branches meeting where 1/c1 is whole; the async event loop equal to the per-cycle schedule;
5. every closed form against its seeded Monte Carlo simulation: pass when within 5 standard errors;
6. the budget split: the optimum fits the budget and beats every feasible split; the closed-form
   regime conditions agree with the exact optimum; the paper's example box gives a hybrid async optimum;
7. predict() on a mapping reproduces the formulas.

Runs in a few seconds (the simulations use 100k cycles each).
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from lookahead_reasoning.theory import (
    LRSDPlay, Regime, async_depth, async_event_timeline, async_s1, async_s2, async_schedule, best_gamma, best_split,
    expected_ceil, expected_mod, f_async, f_sync, f_sync_batched, g_token, h_combined, hybrid_conditions, paper_hybrid_box,
    predict, regime, sample_run_lengths, sd_ceiling, sd_speedup, simulate_lr_async, simulate_lr_sd,
    simulate_lr_sync, simulate_sd, speedup_grid,
)
from lookahead_reasoning.theory import (  # noqa: E402 - the costed part
    CostedPlay, StepRates, TokenRates, f_sync_costed, lr_cycle, sd_rate, simulate_costed_lr, simulate_costed_sd,
)

Z = 5.0  # simulation tolerance, in standard errors
CYCLES = 100_000
RESULTS: list[bool] = []


def report(ok: bool, name: str, detail: str) -> None:
    RESULTS.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")


def info(text: str) -> None:
    print(f"INFO  {text}")


def section(title: str) -> None:
    print(f"\n== {title}")


def sanity_values() -> None:
    section("1. the paper's sanity values (|value - paper| <= 0.005, the paper rounds to 2 decimals)")
    split = best_split(0.6, 0.2, 0.7, 0.1, 16, mode="async")
    cases = [
        ("f_sync(4), alpha1=.5 c1=.1", f_sync(4, 0.5, 0.1), 1.44),
        ("f_async(4), alpha1=.5 c1=.1 (S2 branch: 4 < ceil(1/.1) = 10)", f_async(4, 0.5, 0.1), 1.75),
        ("S1, alpha1=.5 c1=.1", async_s1(0.5, 0.1), 1.82),
        (f"best split M=16 async: h({split.best.k1},{split.best.k2})", split.best.speedup, 3.66),
        (f"SD only: max g(k2), k2<=16 -> k2={split.sd_only.k2}", split.sd_only.speedup, 1.98),
        (f"LR only: max f_async(k1), k2=1 -> k1={split.lr_only.k1}", split.lr_only.speedup, 1.92),
    ]
    for name, value, paper in cases:
        report(abs(value - paper) <= 0.005, name, f"{value:.4f} vs paper {paper:.2f}")
    report((split.best.k1, split.best.k2) == (4, 4) and split.best.parallel <= 16,
           "best split is (4, 4) within the budget",
           f"(k1, k2) = ({split.best.k1}, {split.best.k2}), PD_f * k2 = {split.best.parallel} <= 16")
    info("3.66 = f_async(4) g(4) = 1.880 * 1.948 with PD_f(4) = min(ceil(1/.2), 4) = 4 and 4 * 4 <= 16; "
         "1.98 = g(5) (k1 = 1); 1.92 = S1 = f_async(k1 >= 5) (k2 = 1)")


def token_level() -> None:
    section("2. token SD on a dense grid (alpha 0..0.995 x gamma 0..64 x c 0..2)")
    alpha = np.linspace(0.0, 0.995, 200)[:, None, None]
    gamma = np.arange(0, 65)[None, :, None]
    c = np.linspace(0.0, 2.0, 41)[None, None, :]
    s = sd_speedup(alpha, gamma, c)
    ceiling = sd_ceiling(alpha)
    over = int((s > ceiling * (1 + 1e-12)).sum())
    report(over == 0, "S <= 1/(1 - alpha)", f"{s.size} points, {over} above the ceiling, "
           f"max S (1 - alpha) = {float((s / ceiling).max()):.6f}")
    drops = int((np.diff(s, axis=0) < -1e-12 * s[1:]).sum())
    report(drops == 0, "S non-decreasing in alpha", f"{drops} decreases along alpha")
    k2 = np.arange(1, 66)
    diff = float(np.abs(g_token(k2[None, :], alpha[:, 0, :], 0.1) - sd_speedup(alpha[:, 0, :], k2[None, :] - 1, 0.1)).max())
    report(diff < 1e-12, "g(k2) = S(alpha, k2 - 1, c)", f"max |difference| {diff:.1e}")
    worst = 0
    for a in np.linspace(0.0, 0.97, 40):
        for cost in np.linspace(0.01, 2.0, 40):
            top = int(math.ceil(a / ((1 - a) * cost))) + 2
            values = sd_speedup(a, np.arange(top + 1), cost)
            worst = max(worst, float(values.max() - values[best_gamma(a, cost)]))
    report(worst <= 1e-12, "best_gamma is the argmax of S over gamma", f"1600 (alpha, c) points, "
           f"largest shortfall {worst:.1e}")


def identities() -> None:
    section("3. E[ceil((X+1)/g)] = 1/(1 - alpha^g) and E[X mod g] for geometric X")
    x = np.arange(0, 20_000)
    worst = 0.0
    for a in np.linspace(0.0, 0.98, 50):
        p = (1 - a) * a ** x
        for g in range(1, 33):
            worst = max(worst, abs(float((p * np.ceil((x + 1) / g)).sum()) - expected_ceil(a, g)),
                        abs(float((p * (x % g)).sum()) - expected_mod(a, g)))
    report(worst < 1e-9, "identities against their series", f"50 alpha x 32 g, max |difference| {worst:.1e}")
    for a, g in ((0.5, 3), (0.8, 4), (0.93, 7)):
        x_s = sample_run_lengths(a, 400_000, seed=17)
        for label, values, closed in (("ceil", np.ceil((x_s + 1) / g), expected_ceil(a, g)),
                                      ("mod", x_s % g, expected_mod(a, g))):
            se = values.std() / math.sqrt(values.size)
            z = abs(values.mean() - closed) / se
            report(z <= Z, f"E[{label}] alpha={a} g={g} vs 400k samples",
                   f"closed {closed:.5f}, sampled {values.mean():.5f} +- {se:.5f} ({z:.1f} SE)")


def step_level() -> None:
    section("4. the step layer on a dense grid (alpha1 0..0.98 x c1 0..1 x k1 1..40)")
    a = np.linspace(0.0, 0.98, 100)[:, None, None]
    c1 = np.linspace(0.0, 1.0, 41)[None, :, None]
    k1 = np.arange(1, 41)[None, None, :]
    fa, fs = f_async(k1, a, c1), f_sync(k1, a, c1)
    below = int((fa < fs * (1 - 1e-12)).sum())
    report(below == 0, "f_async >= f_sync", f"{fa.size} points, {below} below, "
           f"largest gain f_async/f_sync {float((fa / fs).max()):.3f}")
    drops = int((np.diff(fa, axis=2) < -1e-12 * fa[:, :, 1:]).sum())
    report(drops == 0, "f_async non-decreasing in k1 (Lemma 2)", f"{drops} decreases")
    off = 0
    for j, cost in enumerate(c1[0, :, 0]):
        depth = async_depth(cost)
        if depth <= 40:
            flat = fa[:, j, int(depth) - 1:]
            off += int((np.abs(flat - async_s1(a[:, 0, :], cost)) > 1e-12).sum())
    report(off == 0, "f_async = S1 for every k1 >= ceil(1/c1) (Lemma 2)", f"{off} points off the plateau")
    gap = max(abs(async_s2(d, al, 1 / d) - async_s1(al, 1 / d)) for d in range(1, 30) for al in np.linspace(0, .98, 50))
    report(gap < 1e-12, "S2 = S1 at k1 = 1/c1 when 1/c1 is whole (the branches meet)", f"max gap {gap:.1e}")
    runs = sample_run_lengths(0.75, 3000, seed=5)
    verdicts = [v for x in runs for v in [True] * int(x) + [False]]
    for k, cost in ((3, 0.15), (8, 0.15), (1, 0.5)):
        steps, total = async_event_timeline(verdicts, k, cost)
        table = float(async_schedule(k, cost, int(runs.max()) + 1).settled[runs].sum())
        report(steps == int((runs + 1).sum()) and abs(total - table) <= 1e-9 * table,
               f"async event loop = per-cycle schedule (k1={k}, c1={cost})",
               f"{steps} steps, time {total:.4f} vs {table:.4f}")


def compare(name: str, closed: float, sim) -> None:
    z = abs(sim.speedup - closed) / max(sim.stderr, 1e-300)
    report(sim.agrees(closed, Z), name,
           f"closed {closed:.4f}, simulated {sim.speedup:.4f} +- {sim.stderr:.4f} ({z:.1f} SE)")


def simulations() -> None:
    section(f"5. closed form vs Monte Carlo ({CYCLES} cycles each, pass within {Z:g} standard errors)")
    for i, (a, g, c) in enumerate(((0.8, 4, 0.05), (0.6, 2, 0.2), (0.9, 12, 0.02), (0.3, 6, 0.5))):
        compare(f"token SD S(alpha={a}, gamma={g}, c={c})", sd_speedup(a, g, c), simulate_sd(a, g, c, iterations=CYCLES, seed=100 + i))
    for i, (k, a, c) in enumerate(((4, 0.5, 0.1), (6, 0.8, 0.2), (2, 0.9, 0.4))):
        compare(f"sync LR f_sync(k1={k}; alpha1={a}, c1={c})", f_sync(k, a, c),
                simulate_lr_sync(k, a, c, cycles=CYCLES, seed=200 + i))
    for i, (k, a, c, b) in enumerate(((2, 0.4, 0.2, 1.3), (3, 0.6, 0.15, 1.6))):
        compare(f"sync LR, batch not free: f_sync_batched(k1={k}; alpha1={a}, c1={c}, beta={b})",
                f_sync_batched(k, a, c, b), simulate_lr_sync(k, a, c, cycles=CYCLES, seed=250 + i, beta=b))
    for i, (k, a, c) in enumerate(((4, 0.5, 0.1), (10, 0.5, 0.1), (3, 0.8, 0.2), (5, 0.8, 0.2), (7, 0.9, 0.05),
                                   (40, 0.9, 0.05))):
        branch = "S1" if k >= async_depth(c) else "S2"
        compare(f"async LR f_async(k1={k}; alpha1={a}, c1={c}) [{branch}]", f_async(k, a, c),
                simulate_lr_async(k, a, c, cycles=CYCLES, seed=300 + i))
    for i, mode in enumerate(("sync", "async")):
        compare(f"LR+SD h(4, 4) {mode}, alpha1=.6 c1=.2 alpha2=.7 c2=.1 (the composition h assumes)",
                h_combined(4, 4, 0.6, 0.2, 0.7, 0.1, mode),
                simulate_lr_sd(4, 4, 0.6, 0.2, 0.7, 0.1,
                               LRSDPlay(mode=mode, cycles=CYCLES, seed=400 + i, step_tokens=None)))
    for k1, k2, tokens in ((2, 5, 40), (4, 4, 40), (4, 4, 100), (2, 9, 40)):
        joint = simulate_lr_sd(k1, k2, 0.6, 0.2, 0.7, 0.1, LRSDPlay(mode="sync", cycles=CYCLES // 5, seed=450,
                                                                    step_tokens=tokens))
        h = h_combined(k1, k2, 0.6, 0.2, 0.7, 0.1, "sync")
        info(f"h({k1}, {k2}) = f g = {h:.3f} vs the joint process (rows wait for the slowest, steps of {tokens} "
             f"tokens) {joint.speedup:.3f} +- {joint.stderr:.3f}: h overstates by {100 * (h / joint.speedup - 1):.1f}%")


def costed() -> None:
    section("8. speeds priced by measured costs T(R, n) (theory.costed) against their simulators")
    target = lambda r, n: 0.3 * (1 + 0.35 * (r - 1)) * (1 + 0.05 * (n - 1))  # noqa: E731 - CPU-like: rows and tokens cost
    draft = lambda r, n: 0.04 * (1 + 0.1 * (r - 1)) * (1 + 0.3 * (n - 1))  # noqa: E731
    for i, (gamma, model) in enumerate(((0, TokenRates.plain(0.7)), (4, TokenRates.plain(0.7)),
                                        (12, TokenRates(0.8, 0.85, 0.4)), (16, TokenRates(0.6, 0.9, 0.3)))):
        compare(f"sd_rate(gamma={gamma}, {model})", sd_rate(gamma, model, target, draft),
                simulate_costed_sd(gamma, model, target, draft, iterations=CYCLES // 4, seed=800 + i))
    step = StepRates(0.5, 40, 38, 12, 0.02)
    for i, k in enumerate((1, 2, 3)):
        compare(f"lr_cycle(k={k}, plain rows; alpha1=.5, L_t=40, L_d=38, H=12)", lr_cycle(k, 0, step, TokenRates.plain(0.7),
                target, draft).rate, simulate_costed_lr(k, 0, step, TokenRates.plain(0.7), target, draft,
                                                        CostedPlay(cycles=CYCLES // 10, seed=850 + i)))
    token = TokenRates(0.8, 0.85, 0.4)
    for k, gamma in ((1, 6), (2, 6), (2, 12)):
        closed = lr_cycle(k, gamma, step, token, target, draft).rate
        joint = simulate_costed_lr(k, gamma, step, token, target, draft, CostedPlay(cycles=CYCLES // 20, seed=870))
        info(f"lr_cycle(k={k}, gamma={gamma}) = {closed:.3f} tok/s vs the joint rows {joint.speedup:.3f} +- "
             f"{joint.stderr:.3f}: the mean-rows closed form overstates by {100 * (closed / joint.speedup - 1):.1f}%")
    for i, (k, a, c) in enumerate(((2, 0.5, 0.1), (3, 0.8, 0.05), (4, 0.3, 0.2))):
        # the cycle played out, its target pass priced at T(k1, 1) seconds against T(1, 1) for a plain step
        compare(f"f_sync_costed(k1={k}; alpha1={a}, c1={c}, T as above) vs sync cycles priced by T",
                f_sync_costed(k, a, c, target), simulate_lr_sync(k, a, c, cycles=CYCLES // 4, seed=880 + i,
                                                                 beta=target(k, 1) / target(1, 1)))
    report(f_sync_batched(1, 0.5, 0.2, 1.7) == 1.0, "f_sync_batched(k1 = 1) is 1 whatever beta (one row is no batch)",
           f"{f_sync_batched(1, 0.5, 0.2, 1.7)}")


def budget() -> None:
    section("6. the budget split PD_f(k1) * k2 <= M")
    rng = np.random.default_rng(6)
    bad_budget = bad_max = 0
    for _ in range(300):
        a1, a2 = rng.uniform(0, 0.95, 2)
        c1, c2 = rng.uniform(0, 1), rng.uniform(0, 0.5)
        m, mode = int(rng.integers(1, 40)), ("sync", "async")[int(rng.integers(2))]
        split = best_split(a1, c1, a2, c2, m, mode)
        bad_budget += split.best.parallel > m
        bad_max += split.best.speedup < np.nanmax(speedup_grid(a1, c1, a2, c2, m, mode)) * (1 - 1e-12)
    report(bad_budget == 0 and bad_max == 0, "the maximiser fits the budget and beats every feasible split",
           f"300 random settings, {bad_budget} over budget, {bad_max} not maximal")

    decided = disagree = 0
    counts: dict[str, int] = {}
    for a1 in np.linspace(0.05, 0.95, 10):
        for a2 in np.linspace(0.05, 0.95, 10):
            for c1 in (0.0, 0.05, 0.2, 0.5, 0.9):
                for c2 in (0.0, 0.05, 0.2):
                    for m in (1, 4, 16, 64):
                        for mode in ("sync", "async"):
                            claim = hybrid_conditions(a1, c1, a2, c2, m, mode)
                            if claim is None:
                                continue
                            decided += 1
                            actual = regime(a1, c1, a2, c2, m, mode)
                            disagree += actual is not claim
                            counts[str(claim)] = counts.get(str(claim), 0) + 1
    report(disagree == 0, "hybrid_conditions agree with the exact optimum",
           f"{decided} settings decided in closed form ({counts}), {disagree} disagreements")

    total = hybrid = 0
    eps = 1e-6
    for a1 in np.linspace(0.52 + eps, 0.8 - eps, 8):
        for a2 in np.linspace(0.52 + eps, 0.8 - eps, 8):
            for c1 in np.linspace(0.0, 1 / 3 - eps, 6):
                for c2 in np.linspace(0.0, 0.2 - eps, 6):
                    for m in (16, 17, 24, 64):
                        assert paper_hybrid_box(a1, c1, a2, c2, m)
                        total += 1
                        hybrid += regime(a1, c1, a2, c2, m, "async") is Regime.HYBRID
    report(hybrid == total, "paper's box (0.52 < alpha1, alpha2 < 0.8, c1 < 1/3, c2 < 1/5, M >= 16) -> hybrid, async",
           f"{hybrid}/{total} grid points hybrid, corners included")
    split = best_split(0.52 + eps, 0.333, 0.8 - eps, 0.0, 16, "sync")
    info(f"the same box does not guarantee a hybrid optimum for sync: alpha1=.52, c1=.333, alpha2=.8, c2=0, "
         f"M=16 gives {split.regime} ({split.best.k1}, {split.best.k2}) = {split.best.speedup:.3f}")


def prediction() -> None:
    section("7. predict()")
    p = predict({"alpha": 0.7, "gamma": 4, "c": 0.1, "alpha1": 0.5, "c1": 0.1, "k": 3})
    ok = (p.k1 == 4 and abs(p.lr_sync - f_sync(4, 0.5, 0.1)) < 1e-12 and abs(p.lr_async - f_async(4, 0.5, 0.1)) < 1e-12
          and abs(p.sd - sd_speedup(0.7, 4, 0.1)) < 1e-12 and abs(p.lr_sd - p.lr_sync * p.sd) < 1e-12)
    report(ok, "predict(k=3 drafted steps -> k1=4)", f"sd {p.sd:.3f}, lr_sync {p.lr_sync:.3f}, lr_async "
           f"{p.lr_async:.3f}, lr_sd {p.lr_sd:.3f}, lr_sd_async {p.lr_sd_async:.3f}")
    costs = lambda r, n: 0.3 * (1.35 if r > 1 else 1.0)  # noqa: E731 - a batch of rows costs 1.35 rows
    q = predict({"alpha": 0.7, "gamma": 4, "c": 0.1, "alpha1": 0.5, "c1": 0.1, "k": 1}, costs=costs)
    report(abs(q.lr_sync - f_sync_batched(2, 0.5, 0.1, 1.35)) < 1e-12,
           "predict(..., costs=T) prices the batch (beta = T(k1, 1) / T(1, 1))", f"lr_sync {q.lr_sync:.3f} "
           f"vs free parallelism {predict({'alpha1': 0.5, 'c1': 0.1, 'k': 1}).lr_sync:.3f}")


def main() -> int:
    start = time.perf_counter()
    for part in (sanity_values, token_level, identities, step_level, simulations, budget, prediction, costed):
        part()
    failed = RESULTS.count(False)
    print(f"\n{len(RESULTS)} checks, {failed} failed, {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
