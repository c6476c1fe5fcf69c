"""Speculative acceptance without a model: the closed form of the first emitted token equals p
for any draft q (zeros included), sampled frequencies match p, greedy matching cuts at the first
disagreement, a deterministic (n-gram) draft is a one-hot q, and gamma = 0 is a plain draw from p."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_reasoning.decoding.speculative import (
    Acceptance, acceptance_probability, first_token_distribution, greedy_accept, residual_distribution,
    speculative_accept,
)


@st.composite
def distributions(draw, size: int) -> torch.Tensor:
    """A float32 distribution over ``size`` tokens, often with exact zeros and sometimes one-hot."""
    weights = draw(st.lists(st.one_of(st.just(0), st.integers(1, 1000)), min_size=size, max_size=size))
    if sum(weights) == 0:
        weights[draw(st.integers(0, size - 1))] = 1
    t = torch.tensor(weights, dtype=torch.float64)
    return (t / t.sum()).float()


@st.composite
def pq_pairs(draw):
    v = draw(st.integers(2, 8))
    return draw(distributions(v)), draw(distributions(v))


@settings(max_examples=1500, deadline=None)
@given(pair=pq_pairs())
def test_first_token_distribution_is_p(pair):
    p, q = pair
    got = first_token_distribution(p, q)
    assert (got - p).abs().max() < 1e-6
    # and the pieces are what the paper says
    a = acceptance_probability(p, q)
    assert bool(((a >= 0) & (a <= 1)).all())
    r = residual_distribution(p, q)
    assert abs(float(r.sum()) - 1) < 1e-6 and bool((r >= 0).all())


def first_token_distribution64(p: list[float], q: list[float]) -> list[float]:
    """The same closed form written out in plain Python (the slow reference)."""
    a = [min(1.0, pi / qi) if qi > 0 else float(pi > 0) for pi, qi in zip(p, q)]
    accept_mass = sum(qi * ai for qi, ai in zip(q, a))
    res = [max(0.0, pi - qi) for pi, qi in zip(p, q)]
    total = sum(res)
    r = [x / total for x in res] if total > 0 else list(p)
    return [qi * ai + (1 - accept_mass) * ri for qi, ai, ri in zip(q, a, r)]


@settings(max_examples=300, deadline=None)
@given(pair=pq_pairs())
def test_closed_form_matches_plain_python(pair):
    p, q = pair
    ref = first_token_distribution64(p.double().tolist(), q.double().tolist())
    assert max(abs(a - b) for a, b in zip(first_token_distribution(p, q).tolist(), ref)) < 1e-6


def test_acceptance_probability_and_residual_by_hand():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.25, 0.6, 0.0, 0.15])
    assert acceptance_probability(p, q).tolist() == pytest.approx([1.0, 0.5, 1.0, 0.0])
    # max(0, p - q) = (0.25, 0, 0.2, 0) -> normalised (5/9, 0, 4/9, 0)
    assert residual_distribution(p, q).tolist() == pytest.approx([5 / 9, 0.0, 4 / 9, 0.0])
    # p == q: nothing to correct, the residual falls back to p
    assert residual_distribution(p, p).tolist() == pytest.approx(p.tolist())


def test_a_drafted_token_the_target_rules_out_is_never_accepted():
    """p(x) = 0 must reject x whatever q says, even q(x) = 0 (a draft outside q's support)."""
    p = torch.tensor([[0.0, 0.6, 0.4], [0.2, 0.3, 0.5]])
    for q in (torch.tensor([[0.0, 0.5, 0.5]]), torch.tensor([[0.9, 0.05, 0.05]]), None):
        for seed in range(50):
            acc = speculative_accept([0], q, p, torch.Generator().manual_seed(seed))
            assert acc.n_accepted == 0 and acc.next_token in (1, 2)


def emitted_frequencies(p, q, gamma, n, seed=0):
    """Counts of the first emitted token over n runs of speculative_accept with a fixed draft."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(p.shape[-1])
    for _ in range(n):
        # draw the drafted token from q, as a draft model would
        x = int(torch.multinomial(q, 1, generator=gen))
        acc = speculative_accept([x] * gamma, q.expand(gamma, -1), p.expand(gamma + 1, -1), gen)
        counts[x if acc.n_accepted >= 1 else acc.next_token] += 1
    return counts / n


def test_sampled_first_token_follows_p():
    """20,000 runs with gamma = 1: the emitted token's frequencies are within eps of p.

    Dvoretzky-Kiefer-Wolfowitz (Massart's constant): P(sup_x |F_n(x) - F(x)| > eps) <= 2 exp(-2 n eps^2).
    With n = 20,000 and eps = 0.0265, that bound is 2 exp(-28.1) < 1.3e-12. Each point probability is a
    difference of two CDF values, so |freq - p| <= 2 eps = 0.053 holds with the same probability; the
    test asserts the stronger CDF statement. A sampler that ignored the residual (drawing the correction
    from p instead) would emit token 0 with probability 0.34 instead of 0.45, far beyond eps.
    """
    p = torch.tensor([0.45, 0.05, 0.3, 0.0, 0.2])
    q = torch.tensor([0.05, 0.5, 0.15, 0.2, 0.1])
    n, eps = 20_000, 0.0265
    freq = emitted_frequencies(p, q, 1, n)
    assert float((freq.cumsum(0) - p.cumsum(0)).abs().max()) <= eps
    assert float(freq[3]) == 0.0  # p(3) = 0: never emitted, although q drafts it 20% of the time


def test_sampled_acceptance_count_follows_alpha():
    """With identical p and q every draft is accepted; with disjoint supports none is."""
    p = torch.tensor([0.1, 0.2, 0.7])
    gen = torch.Generator().manual_seed(3)
    for _ in range(200):
        xs = torch.multinomial(p, 3, replacement=True, generator=gen).tolist()
        acc = speculative_accept(xs, p.expand(3, -1), p.expand(4, -1), gen)
        assert acc.n_accepted == 3
    q = torch.tensor([1.0, 0.0, 0.0])
    p2 = torch.tensor([0.0, 0.4, 0.6])
    for _ in range(200):
        acc = speculative_accept([0, 0], q.expand(2, -1), p2.expand(3, -1), gen)
        assert acc.n_accepted == 0 and acc.next_token in (1, 2)


def test_one_hot_draft_q_none():
    """q = None is a deterministic draft: accept x with probability p(x), correct from p without x."""
    p = torch.tensor([0.25, 0.75, 0.0])
    n, gen = 20_000, torch.Generator().manual_seed(1)
    accepted, corrections = 0, torch.zeros(3)
    for _ in range(n):
        acc = speculative_accept([0], None, p.expand(2, -1), gen)
        if acc.n_accepted:
            accepted += 1
        else:
            corrections[acc.next_token] += 1
    # Hoeffding: P(|rate - 0.25| >= 0.02) <= 2 exp(-2 * 20000 * 0.0004) = 2 exp(-16) < 3e-7
    assert abs(accepted / n - 0.25) < 0.02
    assert corrections[0] == 0 and corrections[2] == 0  # the residual of a one-hot q excludes x
    # q = None equals passing the one-hot explicitly, draw for draw
    one_hot = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    p3 = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.3, 0.3, 0.4]])
    for seed in range(30):
        a = speculative_accept([1, 0], None, p3, torch.Generator().manual_seed(seed))
        b = speculative_accept([1, 0], one_hot, p3, torch.Generator().manual_seed(seed))
        assert a == b


def test_gamma_zero_draws_a_bonus_from_p():
    """No drafts: one token drawn from p[0]. Hoeffding bound as above (< 3e-7 per token)."""
    p = torch.tensor([[0.6, 0.0, 0.4]])
    gen = torch.Generator().manual_seed(2)
    draws = [speculative_accept([], None, p, gen) for _ in range(20_000)]
    assert all(d.n_accepted == 0 for d in draws)
    freq = torch.bincount(torch.tensor([d.next_token for d in draws]), minlength=3).float() / len(draws)
    assert abs(float(freq[0]) - 0.6) < 0.02 and float(freq[1]) == 0.0


def test_all_accepted_bonus_comes_from_the_last_p():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    acc = speculative_accept([1, 2], None, p, torch.Generator().manual_seed(0))
    assert acc == Acceptance(2, 0)


@pytest.mark.parametrize("draft, target, expected", [
    ([], [5], Acceptance(0, 5)),
    ([1, 2, 3], [1, 2, 3, 4], Acceptance(3, 4)),
    ([1, 2, 3], [9, 2, 3, 4], Acceptance(0, 9)),
    ([1, 2, 3], [1, 7, 3, 4], Acceptance(1, 7)),
    ([1, 2, 3], [1, 2, 8, 4], Acceptance(2, 8)),
    ([4, 4], [4, 4, 4], Acceptance(2, 4)),
])
def test_greedy_accept(draft, target, expected):
    assert greedy_accept(draft, target) == expected
    assert greedy_accept(draft, torch.tensor(target)) == expected


@settings(max_examples=300)
@given(data=st.data())
def test_greedy_accept_is_longest_matching_prefix(data):
    draft = data.draw(st.lists(st.integers(0, 3), max_size=7))
    target = data.draw(st.lists(st.integers(0, 3), min_size=len(draft) + 1, max_size=len(draft) + 1))
    acc = greedy_accept(draft, target)
    n = 0
    while n < len(draft) and draft[n] == target[n]:
        n += 1
    assert acc == Acceptance(n, target[n])


def test_greedy_is_the_zero_temperature_limit_of_sampling():
    """With one-hot p (greedy target) and one-hot q, rejection sampling reduces to greedy matching."""
    target = [2, 0, 1, 1]
    p = torch.nn.functional.one_hot(torch.tensor(target), 3).float()
    for draft in ([2, 0, 1], [2, 1, 1], [0, 0, 0], [2, 0]):
        acc = speculative_accept(draft, None, p[:len(draft) + 1], torch.Generator().manual_seed(0))
        assert acc == greedy_accept(draft, target)
    assert math.isclose(float(first_token_distribution(p[0], p[1]).sum()), 1.0)
