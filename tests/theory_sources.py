"""The sources of every figure theory/README.md states in its prose (``test_readme_figures`` holds them, as it
holds the README's): a citation, a constant of the code, a formula of the theory module computed, a parameter of the test
it describes, or a committed cost table. A figure without a source fails, and so does one whose source now
computes another. (Figures inside code, inline code and formulas are the formulas themselves, checked by
``theory/check.py``.)"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

from bench_log import cost_points, h100_machine, held, pair_rates, pair_step_rates
from figure_check import Source, line_figures

from lookahead_reasoning.planning import CostTable
from lookahead_reasoning.planning.costs import PAD_GAIN
from lookahead_reasoning.theory.breakeven import Machine, best_alone, break_even, break_even_k1
from lookahead_reasoning.theory.budget import best_split

ROOT = Path(__file__).resolve().parents[1]
THEORY = (ROOT / "theory" / "README.md").read_text(encoding="utf-8")


def prose_figures(text: str) -> list[tuple[str, str]]:
    """(figure, its line) for every figure outside code blocks, inline code, link targets and citations."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    for line in text.splitlines():
        if line.startswith("    "):  # an indented formula block
            continue
        found += [(figure, line) for figure in line_figures(line)]
    return found


@functools.cache
def check_output() -> str:
    """What ``theory/check.py`` prints (run once for every test that reads it)."""
    return subprocess.run([sys.executable, str(ROOT / "theory" / "check.py")], capture_output=True, text=True,
                          timeout=600, cwd=ROOT).stdout


def _mean_rows_overstate() -> list[float]:
    """How far, in percent, check.py finds the mean-rows closed form of an LR cycle with SD rows above the joint
    process that waits for the slowest row."""
    return [float(x) for x in re.findall(r"the mean-rows closed form overstates by ([0-9.]+)%", check_output())]


def _beta(name: str, n: int) -> float:
    """beta(2) at n new tokens a row: T(2, n) / T(1, n)."""
    return cost_points(name)[2][n] / cost_points(name)[1][n]


def _test_parameters() -> tuple[list[str], str]:
    """The alphas ``tests/test_speculative.py`` draws its geometric iterations at, and its tolerance."""
    text = (ROOT / "tests" / "test_speculative.py").read_text(encoding="utf-8")
    [alphas] = re.findall(r'parametrize\("alpha", \[([^\]]*)\]\)\ndef test_the_theorys_alpha', text)
    [tolerance] = re.findall(r"stats\.alpha == pytest\.approx\(alpha, abs=([0-9.]+)\)", text)
    return [a.strip() for a in alphas.split(",")], tolerance


def _unjudged_bias(alpha: float, gamma: int) -> float:
    """What accepted / drafted tends to at ``alpha`` with ``gamma`` tokens drafted every iteration."""
    return alpha * (1 - alpha ** gamma) / (gamma * (1 - alpha))


@functools.cache
def break_evens(machine: str) -> dict[str, float]:
    """Section 9's figures for one machine, as notebook 11 computes them at the offline pair's rates and 300 cached
    tokens: beta(2, 1), c1, the paper's beta + c1 - 1, one drafted step's break-even against ``ar`` (closed form),
    the best plan without drafted steps (its gamma, its speed over ``ar``) and the break-even against it.
    ``machine``: "cpu-bf16" (cpu-costs-avx512-bf16.json) or "<points|eager_points> <H100 target shape>"."""
    if machine == "cpu-bf16":
        t = CostTable.from_json(json.loads((ROOT / "benchmarks" / "results" / "cpu-costs-avx512-bf16.json")
                                           .read_text(encoding="utf-8"))["table"])
        m = Machine(lambda r, n: t.target.seconds(r, n, 300), lambda r, n: t.draft.seconds(r, n, 300))
    else:
        key, target = machine.split()
        m = h100_machine(target, key)
    step, token = pair_step_rates()
    beta, c1 = m.target(2, 1) / m.target(1, 1), m.draft(1, 1) / m.target(1, 1)
    ar = best_alone(step, token, m, (0,))[1]
    gamma, best = best_alone(step, token, m)
    return dict(beta=beta, c1=c1, paper=beta + c1 - 1, ar=break_even_k1(ar, 0, step, token, m), gamma=gamma,
                over_ar=best / ar, best=break_even(step, token, m, ks=(1,)).alpha1[1])


C32, C7, E7 = "points qwen2.5-32b", "points qwen2.5-7b", "eager_points qwen2.5-7b"  # compiled 32B, 7B; eager 7B


def _be(machine: str, what: str):
    return lambda: break_evens(machine)[what]


THEORY_SOURCES: list[Source] = [
    ("Thm 3.8", "3.8", lambda: "3.8"),  # Leviathan et al.'s theorem number: a citation
    # section 2: the committed cost tables of the offline 1.5B target
    ("the price of a second row that decodes token by token", "0.95", lambda: f"{_beta('avx512-bf16', 1):.2f}"),
    ("there plain LR pays for about", "1.96", lambda: f"{_beta('avx2emu-fp32', 1):.2f}"),
    ("second row costs almost a whole forward", "0.96", lambda: f"{_beta('avx2emu-fp32', 1) - 1:.2f}"),
    ("is 1.25 and 1.41", "1.25", lambda: f"{_beta('avx512-bf16', 13):.2f}"),
    ("is 1.25 and 1.41", "1.41", lambda: f"{_beta('avx2emu-fp32', 13):.2f}"),
    # section 4: the paper's example, which best_split reproduces, and the sync case of its box
    ("Both match the paper's", "3.66x", lambda: f"{best_split(.6, .2, .7, .1, 16).best.speedup:.2f}x"),
    ("Both match the paper's", "1.98x", lambda: f"{best_split(.6, .2, .7, .1, 16).sd_only.speedup:.2f}x"),
    ("the sync optimum is token-only", "4.86x", lambda: f"{best_split(.52, .333, .8, 0, 16, 'sync').best.speedup:.2f}x"),
    # section 5: what accepted / drafted tends to
    ("alpha 0.9 and gamma 12", "0.9", lambda: "0.9"),  # the example's input
    ("alpha 0.9 and gamma 12", "0.54", lambda: f"{_unjudged_bias(0.9, 12):.2f}"),
    # section 5: the test that recovers alpha (its parameters)
    ("draws geometric iterations", "0.5", lambda: _test_parameters()[0][0]),
    ("and recovers alpha within", "0.8", lambda: _test_parameters()[0][1]),
    ("and recovers alpha within", "0.93", lambda: _test_parameters()[0][2]),
    ("and recovers alpha within", "0.01", lambda: _test_parameters()[1]),
    # section 8
    ("a pass over 13 new tokens costs", "2.82", lambda: f"{cost_points('avx2emu-fp32')[1][13] / cost_points('avx2emu-fp32')[1][1]:.2f}"),
    ("1.16 in bf16 with native kernels", "1.16", lambda: f"{cost_points('avx512-bf16')[1][13] / cost_points('avx512-bf16')[1][1]:.2f}"),
    ("undercuts", "5%", lambda: f"{PAD_GAIN:.0%}"),
    ("at the rates of this project's pair; `theory/check.py` reports it", "2.8",
     lambda: f"{min(_mean_rows_overstate()):.1f}"),
    ("at the rates of this project's pair; `theory/check.py` reports it", "4.8%",
     lambda: f"{max(_mean_rows_overstate()):.1f}%"),
    ("it says 1.25 where the run needs", "1.25", lambda: f"{(2 + 0.5) / 2:.2f}"),  # the token-weighted mean of r
    # section 9: the break-even, against ar and against the best plan, as notebook 11 computes it
    *held("At the offline pair's rates (token alpha", {"0.93": lambda: pair_rates()[0]}),
    *held("a second row is nearly free, beta(2, 1) =", {"0.97": _be("cpu-bf16", "beta"),
                                                        "0.95": lambda: _beta("avx512-bf16", 1)}),
    *held("which the table prices per row), and c1 =", {"0.12": _be("cpu-bf16", "c1")}),
    *held("But token SD at gamma 8 writes", {"0.118": _be("cpu-bf16", "ar"), "0.089": _be("cpu-bf16", "paper"),
                                            "3.48x": _be("cpu-bf16", "over_ar")}),
    *held("one drafted step pays only above", {"0.73": _be("cpu-bf16", "best"), "0.235": _be(C32, "ar")}),
    *held("against token SD at gamma 12", {"0.234": _be(C32, "paper"), "0.57": _be(C32, "best"),
                                          "3.08x": _be(C32, "over_ar")}),
    *held("7B target: c1", {"0.77": _be(E7, "c1"), "0.48": _be(C7, "c1")}),
    *held("the eager line is the higher against", {"1.03x": _be(E7, "over_ar"), "1.45x": _be(C7, "over_ar"),
                                                   "0.83": _be(E7, "ar"), "0.62": _be(C7, "ar")}),
    *held("lower against the best plan (", {"0.70": _be(E7, "best"), "0.82": _be(C7, "best")}),
]
