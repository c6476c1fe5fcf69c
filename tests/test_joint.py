"""The joint LR x SD formula against the joint simulation, and where the product of the two layers'
speedups (``h_combined``) holds.

Tolerance: the simulation's own noise, 5 standard errors (``SimResult.agrees``; a correct formula
fails with probability below 1e-6 per point). The product is held to the same tolerance to show
where it fails it: it is always optimistic, and on most of the grid by more than the noise.
"""

from __future__ import annotations

import itertools

import pytest

from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.theory import LRSDPlay, h_combined, simulate_lr_sd
from lookahead_reasoning.theory.joint import gain_pmf, h_joint, iterations_cdf, step_length_pmf

# target steps' token counts: spread like reasoning steps (a few short lines, some long paragraphs)
LENGTHS = (6, 9, 12, 16, 20, 24, 30, 38, 47, 60, 75, 96)
GRID = list(itertools.product((2, 4), (1, 5, 13), (0.4, 0.8), (0.6, 0.9)))  # k1, k2, alpha1, alpha2


def test_an_iterations_tokens_and_the_iterations_a_step_needs():
    assert gain_pmf(3, 0.5).tolist() == pytest.approx([0, 0.5, 0.25, 0.125, 0.125])
    assert iterations_cdf(5, 0, 0.7).tolist() == pytest.approx([0, 0, 0, 0, 0, 1])  # no drafts: one token each
    cdf = iterations_cdf(4, 3, 1.0 - 1e-9)  # every draft accepted: 4 tokens in one iteration
    assert cdf[1] == pytest.approx(1.0)
    assert step_length_pmf([10, 10, 20]) == pytest.approx({10: 2 / 3, 20: 1 / 3})
    with pytest.raises(ConfigError, match="at least one token"):
        step_length_pmf(0)


@pytest.mark.parametrize("lengths", [40, LENGTHS], ids=["one length", "spread lengths"])
def test_the_joint_formula_agrees_with_the_joint_simulation_and_the_product_does_not(lengths):
    c1, c2 = 0.2, 0.1
    product_misses = 0
    for k1, k2, alpha1, alpha2 in GRID:
        play = LRSDPlay(mode="sync", cycles=20_000, seed=11, step_tokens=lengths)
        joint = simulate_lr_sd(k1, k2, alpha1, c1, alpha2, c2, play)
        formula = h_joint(k1, k2, alpha1, c1, alpha2, c2, lengths)
        product = float(h_combined(k1, k2, alpha1, c1, alpha2, c2, "sync"))
        assert joint.agrees(formula), (k1, k2, alpha1, alpha2, formula, joint)
        assert product >= joint.speedup - 5 * joint.stderr, (k1, k2, alpha1, alpha2)  # never pessimistic
        product_misses += not joint.agrees(product)
    assert product_misses >= len(GRID) // 2  # the product is off by more than the noise on most of the grid


def test_with_one_step_length_and_no_token_sd_the_product_is_exact():
    for k1, alpha1 in ((1, 0.5), (3, 0.7), (5, 0.9)):
        assert h_joint(k1, 1, alpha1, 0.2, 0.8, 0.1, 30) == pytest.approx(float(h_combined(k1, 1, alpha1, 0.2, 0.8, 0.1, "sync")))
