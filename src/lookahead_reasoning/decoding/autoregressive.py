"""The plain loop every speculative method is measured against: one token per target forward.

``decode_rows`` is the batched form (B rows, each with its own stop condition, finished rows fed
pads until all are done). Lookahead Reasoning uses it for the target's k+1 branches. ``generate``
is the one-prompt front door: prefill, then one token per forward with the cache. On the compiled path
greedy decoding runs with the host a token behind the device (``decode_rows_ahead``): the same tokens.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ..presets import DEFAULT_MAX_NEW_TOKENS
from ..runtime.lm import LM
from ..runtime.session import Session
from ..sampling import SamplingConfig, make_generator, next_token
from ..stopping import StopChecker, StopCondition, StopHit
from .results import GenerationResult
from .progress import OnText, stream_for


OnDone = Callable[[int], Sequence[int]]


def first_checks(session: Session, starts: Sequence[int], checkers: Sequence[StopChecker],
                 on_done: OnDone | None) -> list[StopHit | None]:
    """Check the tokens each row already has after its start (a zero budget, or tokens placed there by
    the caller); a row that already stops is cut at its stop, and ``on_done`` hears it."""
    hits = [checker.check(session.rows[b][starts[b]:]) for b, checker in enumerate(checkers)]
    if any(h is not None and h.keep < len(session.rows[b]) - starts[b] for b, h in enumerate(hits)):
        session.set_rows([row[:starts[b] + h.keep] if h is not None else row
                          for b, (row, h) in enumerate(zip(session.rows, hits))])
    notify_done(session, starts, hits, [b for b, h in enumerate(hits) if h is not None], on_done)
    return hits


def notify_done(session: Session, starts: Sequence[int], hits: list[StopHit | None], rows: Sequence[int],
                on_done: OnDone | None) -> None:
    """Tell ``on_done`` that ``rows`` finished; cancel the rows it returns (they stop where they are)."""
    if on_done is None:
        return
    for b in rows:
        for c in on_done(b) or ():
            if hits[c] is None:
                hits[c] = StopHit(len(session.rows[c]) - starts[c], "cancelled")


def take_tokens(session: Session, starts: Sequence[int], checkers: Sequence[StopChecker], hits: list[StopHit | None],
                tokens: Sequence[int], on_token: Callable[[int, list[int]], None] | None) -> list[int]:
    """Append ``tokens[b]`` to every row b still running, check its stop and tell ``on_token``; returns the rows
    that stopped."""
    finished = []
    for b in range(session.batch_size):
        if hits[b] is None:
            session.extend(b, [tokens[b]])
            hits[b] = checkers[b].check(session.rows[b][starts[b]:])
            if on_token is not None:
                on_token(b, session.rows[b][starts[b]:])
            finished += [b] if hits[b] is not None else []
    return finished


def decode_rows(
    session: Session,
    starts: Sequence[int],
    checkers: Sequence[StopChecker],
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    on_token: Callable[[int, list[int]], None] | None = None,
    on_done: OnDone | None = None,
) -> list[StopHit]:
    """Extend every row of ``session`` one token per forward until each row's checker stops it.

    Row b's new text is ``session.rows[b][starts[b]:]``. Returns each row's StopHit; on return the
    rows end exactly at their stop. ``on_token(b, new_tokens)`` is called after each row's step;
    ``on_done(b)`` when row b stops, and may return rows to cancel (reason "cancelled").
    """
    if sampling.greedy and session.reads_ahead:
        return decode_rows_ahead(session, starts, checkers, on_token, on_done)
    hits = first_checks(session, starts, checkers, on_done)
    while any(h is None for h in hits):
        active = [h is None for h in hits]
        # 1. one forward over all active rows; 2. pick each row's next token; 3. check its stop
        # greedy: the argmax alone leaves the device (computed in the compiled path's graph)
        out = session.feed(active=active, greedy=sampling.greedy)[:, -1]
        tokens = (out if sampling.greedy else next_token(out, sampling, generator)).tolist()
        notify_done(session, starts, hits, take_tokens(session, starts, checkers, hits, tokens, on_token), on_done)
    return [h for h in hits if h is not None]


def decode_rows_ahead(session: Session, starts: Sequence[int], checkers: Sequence[StopChecker],
                      on_token: Callable[[int, list[int]], None] | None = None,
                      on_done: OnDone | None = None) -> list[StopHit]:
    """Greedy :func:`decode_rows` with the host one token behind the device (:meth:`Session.argmax_ahead`).

    Each forward is fed the previous forward's argmax where it lies, on the device, and is queued before the
    host reads that argmax; the host then learns a token while the next forward runs, and the device never
    waits for the host's stop checks. A row that stops at the token just read (EOS, a stop string, a cancel)
    was fed it all the same: its column is given back, so the rows, the cache and the stops are
    :func:`decode_rows`' (tested); a row whose budget ends with the token being read is not fed it.
    """
    hits = first_checks(session, starts, checkers, on_done)
    pending = session.argmax_ahead([h is None for h in hits]) if any(h is None for h in hits) else None
    while pending is not None:
        # 1. queue the next forward, fed these tokens (not to a row whose budget ends with them)
        fed = [h is None and len(session.rows[b]) + 1 - starts[b] < checkers[b].condition.max_new_tokens
               for b, h in enumerate(hits)]
        following = session.argmax_ahead(fed, after=pending) if any(fed) else None
        # 2. read these tokens (the host's one wait); 3. check each row's stop
        notify_done(session, starts, hits, take_tokens(session, starts, checkers, hits, pending.read(), on_token),
                    on_done)
        for b in range(session.batch_size):  # a row that stopped was fed its last token ahead: give it back
            if fed[b] and hits[b] is not None:
                session.uncache_last(b)
        pending = following if any(h is None for h in hits) else None  # past the last stop: never read
    return [h for h in hits if h is not None]


def generate(
    lm: LM,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    sampling: SamplingConfig | None = None,
    stop_strings: Sequence[str] = (),
    seed: int | None = 0,
    on_text: OnText | None = None,
) -> GenerationResult:
    """Autoregressive generation for one prompt (token ids, chat template already applied).

    Stops on EOS, on any of ``stop_strings`` (checked on decoded text) or after ``max_new_tokens``.
    ``on_text`` receives the text as it grows (deltas), for streaming.
    """
    sampling = sampling or SamplingConfig()
    checker = StopChecker(StopCondition(lm.eos_ids, tuple(stop_strings), max_new_tokens), lm.decode)
    streamer = stream_for(on_text, lm.decode)
    generator = make_generator(seed)
    session = lm.session([list(prompt_ids)])
    calls_before = lm.stats.calls
    start = time.perf_counter()
    [hit] = decode_rows(session, [len(prompt_ids)], [checker], sampling, generator,
                        on_token=(lambda b, new: streamer.update(new)) if streamer else None)
    wall = time.perf_counter() - start
    new = session.rows[0][len(prompt_ids):]
    if streamer:
        streamer.finish(new)
    return GenerationResult(new, lm.decode(new), list(prompt_ids), hit.reason,
                            lm.stats.calls - calls_before, wall, mode="ar")
