"""Speculative acceptance as pure functions: p is the target, q the draft, gamma drafted tokens.

Sampled (Leviathan et al. 2023; Chen et al. 2023): drafted token x_i is accepted with probability
min(1, p_i(x_i) / q_i(x_i)). At the first rejection the next token is drawn from the residual
norm(max(0, p_i - q_i)); if all gamma pass, a bonus token is drawn from p_{gamma+1}. The emitted
token then has exactly the distribution p, whatever q is: that is what makes the method lossless.

Greedy is its own path: accept while the target's argmax equals the drafted token; the next token
is the target's argmax at the first disagreement (or after the last draft).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..sampling import on_generator


@dataclass(frozen=True)
class Acceptance:
    """``n_accepted`` drafted tokens pass; ``next_token`` follows them (correction or bonus)."""

    n_accepted: int
    next_token: int


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """min(1, p(x)/q(x)) for every token x. p, q: (..., V) float32 -> (..., V).

    Where q(x) = 0 (x cannot have been drafted from q) the limit of the ratio is used: 1 if p(x) > 0,
    0 if p(x) = 0, so a token the target rules out is never accepted.
    """
    ratio = torch.where(q > 0, p / q.clamp_min(torch.finfo(q.dtype).tiny), (p > 0).to(p.dtype))
    return ratio.clamp(max=1.0)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): what to sample after a rejection. (..., V) -> (..., V).

    Where p <= q everywhere (only possible when p == q, so a rejection has probability 0), returns p.
    """
    residual = (p - q).clamp_min(0.0)
    total = residual.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(torch.finfo(p.dtype).tiny), p)


def speculative_accept(
    draft_tokens: Sequence[int],
    q: torch.Tensor | None,
    p: torch.Tensor,
    generator: torch.Generator | None = None,
) -> Acceptance:
    """Rejection-sample a block of gamma drafted tokens.

    Args:
        draft_tokens: gamma token ids x_1..x_gamma (gamma may be 0).
        q: (gamma, V) float32 draft probabilities at each drafted position, or None for a
           deterministic drafter (n-gram): q_i is then the one-hot of x_i.
        p: (gamma + 1, V) float32 target probabilities; p[i] is the target's distribution for
           position i (p[gamma] is used for the bonus token).
    """
    gamma = len(draft_tokens)
    p = on_generator(p, generator)  # the draws below happen where the generator lives
    q = None if q is None else on_generator(q, generator)
    if gamma:
        idx = torch.arange(gamma)
        x = torch.as_tensor(list(draft_tokens), dtype=torch.long)
        if q is None:
            q = torch.nn.functional.one_hot(x, p.shape[-1]).to(p.dtype)
        accept_prob = acceptance_probability(p[idx, x], q[idx, x])
        u = torch.rand(gamma, generator=generator)
        rejected = (u >= accept_prob).nonzero()
        if rejected.numel():
            i = int(rejected[0])
            residual = residual_distribution(p[i], q[i])
            return Acceptance(i, int(torch.multinomial(residual, 1, generator=generator)))
    return Acceptance(gamma, int(torch.multinomial(p[gamma], 1, generator=generator)))


def greedy_accept(draft_tokens: Sequence[int], target_argmax: Sequence[int]) -> Acceptance:
    """Accept while the target's argmax equals the draft. target_argmax: gamma + 1 ids."""
    for i, x in enumerate(draft_tokens):
        if int(target_argmax[i]) != int(x):
            return Acceptance(i, int(target_argmax[i]))
    return Acceptance(len(draft_tokens), int(target_argmax[len(draft_tokens)]))


def first_token_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The exact distribution of the first emitted token under the rule above, for one position.

    P(emit y) = q(y) * a(y) + (1 - sum_x q(x) a(x)) * r(y), with a = acceptance_probability(p, q)
    and r = residual_distribution(p, q). Lossless means this equals p; the property tests check it.
    p, q: (V,) -> (V,).
    """
    a = acceptance_probability(p, q)
    accepted = q * a
    return accepted + (1.0 - accepted.sum()) * residual_distribution(p, q)
