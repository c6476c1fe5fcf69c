"""Token-level speculative decoding (SD): draft gamma tokens, check them in ONE target forward.

One iteration, for every active row:
  1. the drafter proposes up to gamma tokens x_1..x_gamma (with q, or one-hot);
  2. the target scores [uncached tokens, x_1..x_gamma] in one forward: p_1..p_{gamma+1};
  3. rejection sampling (or greedy matching) keeps x_1..x_n and adds one target token; the drafter
     hears (m, n) of every checked row (``drafter.update``), the run's counters record them;
  4. the rows move to the accepted text: the caches of target and draft drop the rejected tail.
A stop (EOS, stop string, budget) inside an accepted block ends the row exactly there.

``decode_rows_sd`` is batched like ``decode_rows`` so Lookahead Reasoning can run SD inside the
target's k+1 branches; ``generate_sd`` is the one-prompt front door.

Step 3 is the acceptance rule, written first below as pure functions (Leviathan et al. 2023; Chen et
al. 2023). Sampled: drafted token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the
first rejection the next token is drawn from the residual norm(max(0, p_i - q_i)); if all gamma pass, a
bonus token is drawn from p_{gamma+1}. The emitted token then has exactly the distribution p, whatever
q is: that is what makes the method lossless. Greedy is its own path: accept while the target's argmax
equals the drafted token; the next token is the target's argmax at the first disagreement (or after
the last draft).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..errors import require
from ..presets import TOKEN_GAMMA
from ..runtime.lm import LM
from ..runtime.vocab import check_same_tokenizer
from ..runtime.session import Session
from ..sampling import SamplingConfig, make_generator, on_generator, probs_from_logits
from ..stopping import StopChecker, StopCondition, StopHit
from .autoregressive import OnDone, first_checks, notify_done
from .drafters import Drafter, DraftOutcome, ModelDrafter, Proposal, RowOutcome
from .results import GenerationResult, SDStats
from ..settings import Settings
from .progress import OnText, stream_for


# ---------------------------------------------------------------- the acceptance rule (step 3)
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


# ---------------------------------------------------------------------------------- the loop
@dataclass
class TokenSDRun:
    """How :func:`decode_rows_sd` speculates: who drafts, how many tokens per iteration (gamma), how
    tokens are drawn, where the counters go.

    ``overshoot``: when a stop string ends inside an accepted block, keep the block's tokens after it
    too (they are the target's own, verified like the rest); the row then stops with reason
    "overshoot". EOS and the token budget still cut exactly.
    """

    sampling: SamplingConfig
    drafter: Drafter
    gamma: int
    generator: torch.Generator | None = None
    stats: SDStats | None = None
    overshoot: bool = False

    def __post_init__(self) -> None:
        require(isinstance(self.gamma, int) and self.gamma >= 1,
                f"gamma (drafted tokens per iteration) must be >= 1, got {self.gamma!r}")
        self.stats = self.stats if self.stats is not None else SDStats()
        self.stats.gamma = max(self.stats.gamma, self.gamma)

    def accept(self, b: int, start: int, checker: StopChecker, row: list[int], draft: list[int],
               row_logits: torch.Tensor, proposal: Proposal) -> tuple[list[int], StopHit | None, RowOutcome]:
        """Step 3 for row b (its answer from ``start``, stopped by ``checker``; ``row`` ends with the m tokens
        of ``draft``): its tokens after one iteration (the accepted prefix of ``draft`` and one target token),
        its stop if it stops, and its outcome (recorded in the run's counters). ``row_logits``: (m + 1, V), the
        target at every drafted position."""
        m = len(draft)
        if self.sampling.greedy:
            acc = greedy_accept(draft, row_logits.argmax(dim=-1).tolist())
        else:
            p = probs_from_logits(row_logits, self.sampling)
            q = _align_vocab(proposal.q[b][:m], p.shape[-1]) if proposal.q[b] is not None else None
            acc = speculative_accept(draft, q, p, self.generator)
        outcome = RowOutcome(b, m, acc.n_accepted, proposal.sure[b][:m] if proposal.sure is not None else None,
                             proposal.confidence[b][:m] if proposal.confidence is not None else None)
        self.stats.record(outcome.drafted, outcome.accepted, outcome.sure, outcome.confidence)
        new = row[:len(row) - m] + draft[:acc.n_accepted] + [acc.next_token]
        hit = checker.check(new[start:])
        if hit is not None and self.overshoot and hit.reason == "stop_string":
            hit = _past_stop(new[start:], hit, checker)
        return (new if hit is None else new[:start + hit.keep]), hit, outcome


def decode_rows_sd(session: Session, starts: Sequence[int], checkers: Sequence[StopChecker], run: TokenSDRun,
                   on_token: Callable[[int, list[int]], None] | None = None,
                   on_done: OnDone | None = None) -> list[StopHit]:
    """Like ``decode_rows`` but each target forward checks up to ``run.gamma`` drafted tokens per row."""
    drafter, gamma = run.drafter, run.gamma
    hits = first_checks(session, starts, checkers, on_done)
    while any(h is None for h in hits):
        active = [h is None for h in hits]
        # 1. draft: budget-aware, never draft past a row's remaining token budget
        room = [checkers[b].condition.max_new_tokens - (len(session.rows[b]) - starts[b]) for b in range(len(hits))]
        wanted = min(gamma, max(room[b] - 1 for b in range(len(hits)) if active[b]))  # no draft forwards to waste
        proposal = drafter.propose(session.rows, max(0, wanted), active)
        drafts = [d[:max(0, min(gamma, room[b] - 1))] if active[b] else [] for b, d in enumerate(proposal.tokens)]
        keep = max(len(d) for d in drafts) + 1
        # 2. verify all drafts in one target forward
        logits = session.logits(extra=drafts, keep=keep, active=active)
        new_rows, live = [list(r) for r in session.rows], [b for b in range(session.batch_size) if active[b]]
        outcomes = []
        for b in live:  # 3. accept a prefix of the draft, plus one target token
            m = len(drafts[b])
            new_rows[b], hits[b], outcome = run.accept(b, starts[b], checkers[b], session.rows[b], drafts[b],
                                                       logits[b, keep - (m + 1):], proposal)
            outcomes.append(outcome)
        update = getattr(drafter, "update", None)  # a drafter written with propose alone learns nothing
        if update is not None:
            update(DraftOutcome(tuple(outcomes)))  # what the target made of the proposal
        # 4. move target (and, on its next call, the drafter) to the accepted text
        session.set_rows(new_rows)
        for b in live if on_token is not None else ():
            on_token(b, session.rows[b][starts[b]:])
        notify_done(session, starts, hits, [b for b in live if hits[b] is not None], on_done)
    return [h for h in hits if h is not None]


def generate_sd(target: LM, prompt_ids: Sequence[int], drafter: Drafter | LM, settings: Settings | None = None, *,
                stop_strings: Sequence[str] = (), on_text: OnText | None = None,
                **overrides: Any) -> GenerationResult:
    """Speculative decoding for one prompt. ``drafter`` is a Drafter, or a draft LM (-> ModelDrafter,
    which stops a draft early after a token it gave less than ``settings.draft_stop_below``
    probability). ``settings``: gamma (default :data:`~lookahead_reasoning.presets.TOKEN_GAMMA`),
    sampling, budget, seed and the stop. ``overrides`` are forwarded to
    :meth:`Settings.with_overrides <..settings.Settings.with_overrides>` (any of its fields to change:
    ``gamma=8``, ``max_new_tokens=64``, ...; an unknown name raises)."""
    settings = (settings or Settings()).with_overrides(**overrides)
    gamma, sampling = TOKEN_GAMMA if settings.gamma is None else settings.gamma, settings.sampling
    generator = make_generator(settings.seed)
    if isinstance(drafter, LM):
        check_same_tokenizer(drafter, target)
        drafter = ModelDrafter(drafter, sampling, generator, draft_stop_below=settings.draft_stop_below)
    draft_lm = getattr(drafter, "lm", None)
    checker = StopChecker(StopCondition(target.eos_ids, tuple(stop_strings), settings.max_new_tokens), target.decode)
    streamer = stream_for(on_text, target.decode)
    session = target.session([list(prompt_ids)])
    stats = SDStats(gamma=gamma)
    t_before = target.stats.copy()
    d_before = draft_lm.stats.copy() if draft_lm is not None else None
    start = time.perf_counter()
    [hit] = decode_rows_sd(session, [len(prompt_ids)], [checker], TokenSDRun(sampling, drafter, gamma, generator, stats),
                           on_token=(lambda b, new: streamer.update(new)) if streamer else None)
    wall = time.perf_counter() - start
    t_used = target.stats.since(t_before)
    stats.target_forwards, stats.target_seconds = t_used.calls, t_used.seconds
    if draft_lm is not None:
        d_used = draft_lm.stats.since(d_before)
        stats.draft_forwards, stats.draft_seconds = d_used.calls, d_used.seconds
    new = session.rows[0][len(prompt_ids):]
    if streamer:
        streamer.finish(new)
    mode = "sd" if draft_lm is not None else "sd-ngram"
    return GenerationResult(new, target.decode(new), list(prompt_ids), hit.reason,
                            stats.target_forwards, wall, mode=mode, stats=stats)


def _past_stop(generated: list[int], hit: StopHit, checker: StopChecker) -> StopHit:
    """Where a row that overshoots its stop string ends: the whole block, cut at EOS or the budget."""
    keep = len(generated)
    eos = next((i for i in range(hit.keep, keep) if generated[i] in checker.condition.eos_ids), None)
    if eos is not None:
        return StopHit(eos + 1, "eos") if eos + 1 > hit.keep else hit
    keep = min(keep, checker.condition.max_new_tokens)
    return StopHit(keep, "overshoot") if keep > hit.keep else hit


def _align_vocab(q: torch.Tensor, size: int) -> torch.Tensor:
    """Pad (with zeros) or cut the draft's (m, V_q) probabilities to the target's vocabulary size.

    A cut is not renormalised: q(x) must stay the probability with which x was drafted, or the
    acceptance test min(1, p(x)/q(x)) and the residual max(0, p - q) no longer give exactly p.
    """
    if q.shape[-1] == size:
        return q
    if q.shape[-1] > size:
        return q[..., :size]
    return torch.nn.functional.pad(q, (0, size - q.shape[-1]))
