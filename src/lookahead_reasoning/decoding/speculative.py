"""Token-level speculative decoding (SD): draft gamma tokens, check them in ONE target forward.

One iteration, for every active row:
  1. the drafter proposes up to gamma tokens x_1..x_gamma (with q, or one-hot);
  2. the target scores [uncached tokens, x_1..x_gamma] in one forward: p_1..p_{gamma+1};
  3. rejection sampling (or greedy matching) keeps x_1..x_n and adds one target token;
  4. the rows move to the accepted text: the caches of target and draft drop the rejected tail.
A stop (EOS, stop string, budget) inside an accepted block ends the row exactly there.

``decode_rows_sd`` is batched like ``decode_rows`` so Lookahead Reasoning can run SD inside the
target's k+1 branches; ``generate_sd`` is the one-prompt front door.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ..errors import require
from ..lm import LM
from ..sampling import SamplingConfig, make_generator, probs_from_logits
from ..stopping import StopChecker, StopCondition, StopHit
from .autoregressive import OnDone, first_checks, notify_done
from .drafters import Drafter, ModelDrafter
from .rejection import greedy_accept, speculative_accept
from .results import GenerationResult, SDStats
from .session import Session
from .streaming import TextStreamer


def decode_rows_sd(
    session: Session,
    starts: Sequence[int],
    checkers: Sequence[StopChecker],
    sampling: SamplingConfig,
    drafter: Drafter,
    gamma: int,
    generator: torch.Generator | None = None,
    stats: SDStats | None = None,
    on_token: Callable[[int, list[int]], None] | None = None,
    on_done: OnDone | None = None,
    overshoot: bool = False,
) -> list[StopHit]:
    """Like ``decode_rows`` but each target forward checks up to gamma drafted tokens per row.

    ``overshoot``: when a stop string ends inside an accepted block, keep the block's tokens after it
    too (they are the target's own, verified like the rest); the row then stops with reason
    "overshoot". EOS and the token budget still cut exactly.
    """
    require(isinstance(gamma, int) and gamma >= 1, f"gamma (drafted tokens per iteration) must be >= 1, got {gamma!r}")
    stats = stats if stats is not None else SDStats()
    stats.gamma = max(stats.gamma, gamma)
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
        new_rows = [list(r) for r in session.rows]
        finished = []
        for b in range(session.batch_size):
            if not active[b]:
                continue
            # 3. accept a prefix of the draft, plus one target token
            m = len(drafts[b])
            row_logits = logits[b, keep - (m + 1):]
            if sampling.greedy:
                acc = greedy_accept(drafts[b], row_logits.argmax(dim=-1).tolist())
            else:
                p = probs_from_logits(row_logits, sampling)
                q = _align_vocab(proposal.q[b][:m], p.shape[-1]) if proposal.q[b] is not None else None
                acc = speculative_accept(drafts[b], q, p, generator)
            stats.record(m, acc.n_accepted, proposal.sure[b][:m] if proposal.sure is not None else None,
                         proposal.confidence[b][:m] if proposal.confidence is not None else None)
            committed = session.rows[b][:len(session.rows[b]) - m]
            new = committed + drafts[b][:acc.n_accepted] + [acc.next_token]
            hit = checkers[b].check(new[starts[b]:])
            if hit is not None and overshoot and hit.reason == "stop_string":
                hit = _past_stop(new[starts[b]:], hit, checkers[b])
            if hit is not None:
                new = new[:starts[b] + hit.keep]
                hits[b] = hit
                finished.append(b)
            new_rows[b] = new
        # 4. move target (and, on its next call, the drafter) to the accepted text
        session.set_rows(new_rows)
        if on_token is not None:
            for b in range(session.batch_size):
                if active[b]:
                    on_token(b, session.rows[b][starts[b]:])
        notify_done(session, starts, hits, finished, on_done)
    return [h for h in hits if h is not None]


def generate_sd(
    target: LM,
    prompt_ids: Sequence[int],
    drafter: Drafter | LM,
    *,
    gamma: int = 4,
    max_new_tokens: int = 256,
    sampling: SamplingConfig | None = None,
    stop_strings: Sequence[str] = (),
    seed: int | None = 0,
    on_text: Callable[[str], None] | None = None,
    draft_stop_below: float | None = None,
) -> GenerationResult:
    """Speculative decoding for one prompt. ``drafter`` is a Drafter, or a draft LM (-> ModelDrafter,
    which stops a draft early after a token it gave less than ``draft_stop_below`` probability)."""
    from .drafters import check_same_vocabulary

    require(isinstance(gamma, int) and gamma >= 1, f"gamma (drafted tokens per iteration) must be >= 1, got {gamma!r}")
    sampling = sampling or SamplingConfig()
    generator = make_generator(seed)
    if isinstance(drafter, LM):
        check_same_vocabulary(drafter, target)
        drafter = ModelDrafter(drafter, sampling, generator, stop_below=draft_stop_below)
    draft_lm = getattr(drafter, "lm", None)
    checker = StopChecker(StopCondition(target.eos_ids, tuple(stop_strings), max_new_tokens), target.decode)
    streamer = TextStreamer(target.decode, on_text) if on_text else None
    session = Session(target, [list(prompt_ids)])
    stats = SDStats(gamma=gamma)
    t_calls, t_secs = target.stats.calls, target.stats.seconds
    d_calls, d_secs = (draft_lm.stats.calls, draft_lm.stats.seconds) if draft_lm else (0, 0.0)
    start = time.perf_counter()
    [hit] = decode_rows_sd(session, [len(prompt_ids)], [checker], sampling, drafter, gamma, generator, stats,
                           on_token=(lambda b, new: streamer.update(new)) if streamer else None)
    wall = time.perf_counter() - start
    stats.target_forwards = target.stats.calls - t_calls
    stats.target_seconds = target.stats.seconds - t_secs
    if draft_lm is not None:
        stats.draft_forwards = draft_lm.stats.calls - d_calls
        stats.draft_seconds = draft_lm.stats.seconds - d_secs
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
