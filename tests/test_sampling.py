"""``SamplingConfig`` and ``probs_from_logits``: greedy is a one-hot, temperature divides the
logits, top-k keeps the k largest, top-p keeps the smallest set reaching p; checked against
plain-Python references in float64."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.sampling import SamplingConfig, make_generator, next_token, probs_from_logits, sample

# distinct logits at least 1e-3 apart: no ties, so "the k largest" is one set
logit_lists = st.lists(st.integers(-20_000, 20_000), min_size=2, max_size=12, unique=True).map(
    lambda xs: [x / 1000 for x in xs])
temperatures = st.floats(0.05, 5.0)


def softmax64(xs: list[float]) -> list[float]:
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    s = sum(e)
    return [v / s for v in e]


def check_distribution(probs: torch.Tensor) -> None:
    assert probs.dtype == torch.float32
    assert bool((probs >= 0).all())
    assert torch.allclose(probs.sum(-1), torch.ones(probs.shape[:-1]), atol=1e-5)


@given(logits=logit_lists)
def test_greedy_is_one_hot_argmax(logits):
    t = torch.tensor(logits)
    probs = probs_from_logits(t, SamplingConfig())
    best = max(range(len(logits)), key=logits.__getitem__)
    assert probs.tolist() == [1.0 if i == best else 0.0 for i in range(len(logits))]
    assert int(next_token(t, SamplingConfig())) == best
    assert SamplingConfig().greedy and not SamplingConfig(temperature=0.7).greedy


@settings(max_examples=200)
@given(logits=logit_lists, temperature=temperatures)
def test_temperature_scales_the_logits(logits, temperature):
    probs = probs_from_logits(torch.tensor(logits), SamplingConfig(temperature=temperature))
    check_distribution(probs)
    expected = softmax64([x / temperature for x in logits])
    assert max(abs(a - b) for a, b in zip(probs.tolist(), expected)) < 1e-5


def test_temperature_orders_sharpness():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    top = [float(probs_from_logits(logits, SamplingConfig(temperature=t))[0]) for t in (0.25, 0.5, 1.0, 2.0, 8.0)]
    assert top == sorted(top, reverse=True)
    assert abs(top[-1] - 0.25) < 0.1  # a hot temperature is close to uniform


@settings(max_examples=200)
@given(logits=logit_lists, temperature=temperatures, data=st.data())
def test_top_k_keeps_the_k_largest(logits, temperature, data):
    k = data.draw(st.integers(1, len(logits) + 3))
    probs = probs_from_logits(torch.tensor(logits), SamplingConfig(temperature=temperature, top_k=k))
    check_distribution(probs)
    largest = sorted(sorted(range(len(logits)), key=lambda i: -logits[i])[:k])
    # outside the k largest exactly 0; inside, the softmax renormalised over them
    # (a kept token may still underflow to 0 in float32 at a low temperature, hence no "p > 0" test)
    assert all(float(probs[i]) == 0.0 for i in range(len(logits)) if i not in largest)
    sub = softmax64([logits[i] / temperature for i in largest])
    for i, p in zip(largest, sub):
        assert abs(float(probs[i]) - p) < 1e-5


def test_top_k_zero_or_none_is_off():
    logits = torch.tensor([1.0, 2.0, 3.0])
    full = probs_from_logits(logits, SamplingConfig(temperature=1.0))
    assert torch.equal(probs_from_logits(logits, SamplingConfig(temperature=1.0, top_k=0)), full)
    assert bool((full > 0).all())


def nucleus64(probs: list[float], top_p: float) -> set[int]:
    """Smallest set of the most likely tokens whose mass reaches top_p (plain Python)."""
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    kept, mass = set(), 0.0
    for i in order:
        kept.add(i)
        mass += probs[i]
        if mass >= top_p:
            break
    return kept


@settings(max_examples=300)
@given(logits=logit_lists, temperature=temperatures, top_p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_reaching_p(logits, temperature, top_p):
    full = softmax64([x / temperature for x in logits])
    # stay away from float32 rounding at the boundary: no prefix mass within 1e-4 of top_p
    order = sorted(full, reverse=True)
    assume(all(abs(sum(order[:j]) - top_p) > 1e-4 for j in range(1, len(order) + 1)) or top_p == 1.0)
    probs = probs_from_logits(torch.tensor(logits), SamplingConfig(temperature=temperature, top_p=top_p))
    check_distribution(probs)
    expected = nucleus64(full, top_p) if top_p < 1.0 else set(range(len(logits)))
    mass = sum(full[i] for i in expected)
    for i in range(len(logits)):
        if i in expected:
            assert float(probs[i]) == pytest.approx(full[i] / mass, abs=1e-5)
        else:
            assert float(probs[i]) == 0.0


def test_top_p_tiny_keeps_only_the_best():
    probs = probs_from_logits(torch.tensor([0.1, 3.0, 0.2]), SamplingConfig(temperature=1.0, top_p=1e-6))
    assert probs.tolist() == [0.0, 1.0, 0.0]


def test_top_k_then_top_p_batched():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 5.0, 5.0]])
    probs = probs_from_logits(logits, SamplingConfig(temperature=1.0, top_k=3, top_p=0.5))
    check_distribution(probs)
    # row 0: top-3 -> {0, 1, 2}; renormalised p(0) = e^4/(e^4+e^3+e^2) = 0.665 >= 0.5 -> {0}
    assert (probs[0] > 0).tolist() == [True, False, False, False, False]
    # row 1: two tied best tokens of mass 1/2 each (after top-k they hold nearly all mass)
    assert (probs[1] > 0).sum() >= 1 and float(probs[1, :3].sum()) < 1e-3


@pytest.mark.parametrize("kwargs", [
    {"temperature": -0.1}, {"temperature": -1}, {"top_p": 0.0}, {"top_p": 1.01}, {"top_p": -0.5},
    {"top_k": -1}, {"top_k": 2.5}, {"temperature": "hot"},
])
def test_bad_values_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        SamplingConfig(**kwargs)


def test_sample_reproducible_with_a_seed():
    probs = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(0)), dim=-1)
    a = [sample(probs, make_generator(7)).tolist() for _ in range(2)]
    b = sample(probs, make_generator(8)).tolist()
    assert a[0] == a[1]
    draws = [sample(probs, make_generator(s)).tolist() for s in range(9)]
    assert len({tuple(d) for d in draws}) > 1 and b in draws
    assert sample(probs, make_generator(1)).shape == (4,)


def test_sample_frequencies_follow_the_probabilities():
    """20k draws from (0.5, 0.3, 0.2): each frequency within 0.02 of its probability.

    By Hoeffding, P(|freq - p| >= 0.02) <= 2 exp(-2 * 20000 * 0.02^2) = 2 exp(-16) < 3e-7 per token.
    """
    probs = torch.tensor([0.5, 0.3, 0.2])
    draws = sample(probs.expand(20_000, 3), make_generator(0))
    freq = torch.bincount(draws, minlength=3).float() / 20_000
    assert (freq - probs).abs().max() < 0.02
