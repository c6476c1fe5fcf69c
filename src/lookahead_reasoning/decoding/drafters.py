"""Drafters: who proposes the gamma tokens that the target checks in one pass, and learns what it kept.

A drafter (:class:`Drafter`) is anything with ``propose(rows, gamma, active) -> Proposal``: up to gamma drafted
tokens per row after its committed token ids (prompt and accepted text), with their draft probabilities q when
it has them; and ``update(outcome)``: what the target accepted of them (:class:`DraftOutcome`), where a drafter
of one's own may adapt (:class:`NGramDrafter` and :class:`ModelDrafter`, the two here, have nothing to adapt;
who learns acceptance rates reads the run's counters, ``SDStats.log``). A drafter keeps any other state in step
with the rows by itself: the model drafter syncs its KV cache to the rows on every call (keeping the longest
common prefix, so accepted drafted tokens are never recomputed and rejected ones are dropped), the n-gram
drafter keeps none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from ..errors import require
from ..presets import NGRAM_MAX, NGRAM_MIN, check_draft_stop_below
from ..runtime.lm import LM
from ..runtime.session import Session
from ..sampling import SamplingConfig, next_token, probs_from_logits, sample


@dataclass
class Proposal:
    """Drafted tokens per row (lists may be shorter than gamma, or empty) and, per row, their q.

    ``q[b]`` is (len(tokens[b]), V) float32, or None for a deterministic drafter (q one-hot).
    """

    tokens: list[list[int]]
    q: list[torch.Tensor | None]
    sure: list[list[bool]] | None = None  # per drafted token: the draft's top probability >= its stop
    confidence: list[list[float]] | None = None  # per drafted token: the draft's top probability


@dataclass(frozen=True)
class RowOutcome:
    """What the target made of one row's drafts in one SD iteration.

    ``drafted`` (m): the drafted tokens the target checked (the proposal's, cut to the row's budget);
    ``accepted`` (n <= m): the leading ones it kept; ``sure`` / ``confidence``: the proposal's
    per-token lists for those m tokens, or None where the drafter gave none.
    """

    row: int
    drafted: int
    accepted: int
    sure: list[bool] | None = None
    confidence: list[float] | None = None


@dataclass(frozen=True)
class DraftOutcome:
    """One SD iteration's verdict on the last proposal: a :class:`RowOutcome` for every row the target
    checked (the active ones; a row may have drafted nothing), in row order."""

    rows: tuple[RowOutcome, ...]


class Drafter(Protocol):
    """Proposes up to gamma tokens for each active row, then hears what the target accepted of them."""

    def propose(self, rows: Sequence[Sequence[int]], gamma: int, active: Sequence[bool]) -> Proposal: ...

    def update(self, outcome: DraftOutcome) -> None: ...  # optional: a drafter without it is not told


class ModelDrafter:
    """Drafts with a small LM that shares the target's vocabulary.

    It holds its own :class:`Session` over the same rows. ``propose`` first moves that session to
    the given rows (a crop of what was rejected, the target's correction token appended) and then
    runs up to gamma single-token forwards. ``sampling`` must be the target's, so q and p are comparable.

    ``draft_stop_below``: a row stops drafting after a token whose draft probability (the top probability
    of the draft's distribution, before sampling) is below this value. Unsure drafts are the ones the
    target rejects, so this spends fewer draft forwards on them and lets gamma be large for the easy
    stretches. Output is unchanged: the stop depends only on the draft's own distribution, and every
    drafted token still goes through the acceptance test. ``draft_stop_below`` may change between calls
    (mode ``auto`` picks it per cycle); ``confidence=True`` reports every drafted token's top
    probability even without a stop (what the planner learns the best stop from).
    """

    def __init__(self, lm: LM, sampling: SamplingConfig, generator: torch.Generator | None = None,
                 draft_stop_below: float | None = None, confidence: bool = False):
        check_draft_stop_below(draft_stop_below)
        self.lm, self.sampling, self.generator = lm, sampling, generator
        self.draft_stop_below, self.confidence = draft_stop_below, confidence
        self.session: Session | None = None

    def attach(self, session: Session) -> None:
        """Start from an existing draft session (e.g. one forked from a prefix the draft has cached)."""
        self.session = session

    def update(self, outcome: DraftOutcome) -> None:
        """Nothing to adapt: how many tokens to draft is the loop's gamma."""

    def propose(self, rows: Sequence[Sequence[int]], gamma: int, active: Sequence[bool]) -> Proposal:
        if self.session is None or self.session.batch_size != len(rows):
            self.session = self.lm.session(rows)
        else:
            self.session.set_rows(rows)
        bsz = len(rows)
        drafted: list[list[int]] = [[] for _ in range(bsz)]
        tops: list[list[float]] = [[] for _ in range(bsz)]
        qs: list[list[torch.Tensor]] = [[] for _ in range(bsz)]
        # only ids the tokenizer knows: a padded embedding (more rows than tokens) must not propose an
        # id the target cannot embed; q is then a distribution over those ids, as acceptance needs
        proposable = min(len(self.lm.tokenizer), self.lm.vocab_size)
        drafting = list(active)
        stop, measure = self.draft_stop_below, self.draft_stop_below is not None or self.confidence
        for _ in range(gamma):
            if not any(drafting):
                break
            if self.sampling.greedy and not measure and proposable == self.lm.vocab_size:
                tokens, q, top = self.session.argmax(active=drafting)[:, -1].tolist(), None, None  # the ids alone
            else:
                logits = self.session.logits(active=drafting)[:, -1, :proposable]  # (B, V)
                if self.sampling.greedy:
                    tokens = next_token(logits, self.sampling).tolist()
                    q = None
                    top = torch.softmax(logits.float(), dim=-1).amax(dim=-1).tolist() if measure else None
                else:
                    q = probs_from_logits(logits, self.sampling)
                    tokens = sample(q, self.generator).tolist()
                    top = q.amax(dim=-1).tolist() if measure else None
            for b in range(bsz):
                if drafting[b]:
                    drafted[b].append(tokens[b])
                    self.session.extend(b, [tokens[b]])
                    if q is not None:
                        qs[b].append(q[b])
                    if top is not None:
                        tops[b].append(top[b])
                        drafting[b] = stop is None or top[b] >= stop
        q_out = [torch.stack(qs[b]) if qs[b] else None for b in range(bsz)]
        sure = [[t >= stop for t in row] for row in tops] if stop is not None else None
        return Proposal(drafted, q_out, sure, tops if measure else None)


class NGramDrafter:
    """Prompt lookup: find the last n tokens earlier in the row and propose what followed them.

    Tries n = max_n down to min_n; the most recent earlier match wins. q is one-hot (None).
    """

    def __init__(self, max_n: int = NGRAM_MAX, min_n: int = NGRAM_MIN):
        require(isinstance(min_n, int) and min_n >= 1, f"n-gram min_n must be >= 1, got {min_n!r}")
        require(isinstance(max_n, int) and max_n >= min_n,
                f"n-gram sizes need min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n = max_n, min_n

    def lookup(self, row: Sequence[int], gamma: int) -> list[int]:
        """Up to gamma tokens that followed the latest earlier occurrence of the row's last n tokens."""
        row = list(row)
        for n in range(min(self.max_n, len(row) - 1), self.min_n - 1, -1):
            tail = row[-n:]
            for start in range(len(row) - n - 1, -1, -1):
                if row[start:start + n] == tail:
                    return row[start + n:start + n + gamma]
        return []

    def propose(self, rows: Sequence[Sequence[int]], gamma: int, active: Sequence[bool]) -> Proposal:
        tokens = [self.lookup(r, gamma) if a else [] for r, a in zip(rows, active)]
        return Proposal(tokens, [None] * len(rows))

    def update(self, outcome: DraftOutcome) -> None:
        """Nothing to adapt: what prompt lookup proposes depends only on the rows."""
