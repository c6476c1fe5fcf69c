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
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..errors import require
from ..runtime.lm import LM
from ..runtime.vocab import check_same_tokenizer
from ..runtime.session import Session
from ..sampling import SamplingConfig, make_generator, probs_from_logits
from ..stopping import StopChecker, StopCondition, StopHit
from .autoregressive import OnDone, first_checks, notify_done
from .drafters import Drafter, DraftOutcome, ModelDrafter, Proposal, RowOutcome
from .rejection import greedy_accept, speculative_accept
from .results import GenerationResult, SDStats
from ..settings import Settings
from .streaming import OnText, stream_for


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


def decode_rows_sd(session: Session, starts: Sequence[int], checkers: Sequence[StopChecker], run: TokenSDRun,
                   on_token: Callable[[int, list[int]], None] | None = None,
                   on_done: OnDone | None = None) -> list[StopHit]:
    """Like ``decode_rows`` but each target forward checks up to ``run.gamma`` drafted tokens per row."""
    sampling, drafter, gamma, stats = run.sampling, run.drafter, run.gamma, run.stats
    rows = _Rows(starts, checkers, sampling, run.generator, stats, run.overshoot)
    hits = first_checks(session, starts, checkers)
    notify_done(session, starts, hits, [b for b, h in enumerate(hits) if h is not None], on_done)
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
            new_rows[b], hits[b], outcome = rows.accept(b, session.rows[b][:len(session.rows[b]) - m], drafts[b],
                                                        logits[b, keep - (m + 1):], proposal)
            outcomes.append(outcome)
        hear(drafter, DraftOutcome(tuple(outcomes)))  # what the target made of the proposal
        # 4. move target (and, on its next call, the drafter) to the accepted text
        session.set_rows(new_rows)
        for b in live if on_token is not None else ():
            on_token(b, session.rows[b][starts[b]:])
        notify_done(session, starts, hits, [b for b in live if hits[b] is not None], on_done)
    return [h for h in hits if h is not None]


def hear(drafter: Drafter, outcome: DraftOutcome) -> None:
    """Tell ``drafter`` what the target accepted; a drafter written with ``propose`` alone (before
    drafters had ``update``) has nothing to learn and is left alone."""
    update = getattr(drafter, "update", None)
    if update is not None:
        update(outcome)


@dataclass
class _Rows:
    """What step 3 needs to know of every row: where its answer starts, when it stops, how to accept."""

    starts: Sequence[int]
    checkers: Sequence[StopChecker]
    sampling: SamplingConfig
    generator: torch.Generator | None
    stats: SDStats
    overshoot: bool

    def accept(self, b: int, committed: list[int], draft: list[int], row_logits: torch.Tensor,
               proposal: Proposal) -> tuple[list[int], StopHit | None, RowOutcome]:
        """Row b's new tokens after one iteration (the accepted prefix of ``draft`` and one target
        token), its stop if it stops, and its outcome (recorded in the run's counters).
        ``row_logits``: (m + 1, V), the target at every drafted position."""
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
        new = committed + draft[:acc.n_accepted] + [acc.next_token]
        start, checker = self.starts[b], self.checkers[b]
        hit = checker.check(new[start:])
        if hit is not None and self.overshoot and hit.reason == "stop_string":
            hit = _past_stop(new[start:], hit, checker)
        return (new if hit is None else new[:start + hit.keep]), hit, outcome


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
    gamma, sampling = settings.token_gamma, settings.sampling
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
