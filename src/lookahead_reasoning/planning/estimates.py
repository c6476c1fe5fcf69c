"""What the run has learned about its pair: acceptance rates as Beta posteriors, step lengths, overheads.

Every rate starts from a prior (from earlier runs of the same pair when a saved book exists) and is
updated after every SD iteration and every LR cycle:

* token level (:class:`TokenBook`): acceptance counted per band of the draft's confidence, which gives the
  :class:`~lookahead_reasoning.theory.TokenRates` (sigma, alpha_sure, alpha_unsure) of any confidence stop;
* step level (:class:`StepBook`): alpha1 (the verifier accepts a drafted step), and per band of the
  *agreement* of a drafted step (the share of its tokens the target accepted token by token in the
  scoring pass, known before any row runs) the acceptance in that band: the step-level analogue of
  the draft stop, used to drop rows whose drafted step the evidence says will be rejected;
* lengths (tokens of a target step, of a drafted step, the head start) and overheads (seconds per SD
  iteration and per cycle that no forward accounts for), as running means.

A posterior's weight is capped when it is saved (``MAX_SAVED_WEIGHT`` pseudo-observations), so a
new run can still move a rate learned on another kind of problem.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import require
from ..presets import DRAFT_STOP_BELOW
from ..theory import StepRates, TokenRates

log = logging.getLogger(__name__)

MAX_SAVED_WEIGHT = 40.0
AGREEMENT_BANDS = (0.0, 0.3, 0.6, 0.85, 1.0)  # upper edges of the agreement bands; 1.0 is its own band


@dataclass
class Beta:
    """A Beta(a, b) posterior of a probability."""

    a: float
    b: float

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    @property
    def weight(self) -> float:
        return self.a + self.b

    def add(self, yes: float, no: float) -> None:
        self.a += yes
        self.b += no

    def capped(self) -> "Beta":
        scale = min(1.0, MAX_SAVED_WEIGHT / self.weight)
        return Beta(self.a * scale, self.b * scale)


@dataclass
class Mean:
    """A running mean that starts from a prior worth ``weight`` observations."""

    value: float
    weight: float = 2.0

    def add(self, x: float, n: float = 1.0) -> None:
        self.value = (self.value * self.weight + x * n) / (self.weight + n)
        self.weight += n

    def capped(self) -> "Mean":
        return Mean(self.value, min(self.weight, MAX_SAVED_WEIGHT))


CONFIDENCE_BINS = 20  # bin i holds drafted tokens whose draft top probability is in [i/20, (i+1)/20)
MAX_SAVED_TOKENS = 400.0  # drafted (and judged) tokens a saved token book keeps, at most


def _edge(draft_stop_below: float) -> int:
    """The first bin of the tokens a draft stop keeps drafting after (confidence >= draft_stop_below)."""
    return min(CONFIDENCE_BINS, max(0, round(draft_stop_below * CONFIDENCE_BINS)))


def _mids() -> list[float]:
    return [(i + 0.5) / CONFIDENCE_BINS for i in range(CONFIDENCE_BINS)]


@dataclass
class TokenBook:
    """Token-level acceptance of the draft model, learned per SD iteration, per band of the draft's
    confidence (its top probability for the token it drafted).

    ``seen[i]``: drafted tokens in confidence bin i; ``accepted[i]`` / ``rejected[i]``: those the
    target judged (tokens after the first rejection never are) and accepted / rejected. From these
    :meth:`model` gives the :class:`~lookahead_reasoning.theory.TokenRates` of *any* confidence stop:
    sigma is the share of drafted tokens at or above the stop, alpha_sure and alpha_unsure the
    acceptance above and below it. So one run, whatever stop it drafted with, prices every stop
    (positions i.i.d., as the model assumes). The priors are worth a few tokens: acceptance equal to
    the draft's confidence, 70% of tokens at or above 0.4.
    """

    seen: list[float] = field(default_factory=lambda: [3.0 / 8 if i < 8 else 7.0 / 12 for i in range(CONFIDENCE_BINS)])
    accepted: list[float] = field(default_factory=_mids)
    rejected: list[float] = field(default_factory=lambda: [1.0 - m for m in _mids()])
    iteration_overhead: Mean = field(default_factory=lambda: Mean(0.003))

    @classmethod
    def from_rates(cls, sigma: float, alpha_sure: float, alpha_unsure: float,
                   draft_stop_below: float = DRAFT_STOP_BELOW, weight: float = 50.0) -> "TokenBook":
        """A book whose :meth:`model` at ``draft_stop_below`` is exactly (sigma, alpha_sure, alpha_unsure),
        worth ``weight`` tokens on each side of the stop (uniform over the bins of each side)."""
        edge = _edge(draft_stop_below)
        require(0 < edge < CONFIDENCE_BINS, f"draft_stop_below must lie inside (0, 1), got {draft_stop_below!r}")
        bins = [(sigma, alpha_sure, CONFIDENCE_BINS - edge) if i >= edge else (1 - sigma, alpha_unsure, edge)
                for i in range(CONFIDENCE_BINS)]  # per bin: its side's share of tokens, acceptance and bins
        return cls([2 * weight * share / n for share, _, n in bins], [weight * rate / n for _, rate, n in bins],
                   [weight * (1 - rate) / n for _, rate, n in bins])

    def record(self, sure: Sequence[bool] | None, drafted: int, accepted: int,
               confidence: Sequence[float] | None = None) -> None:
        """One SD iteration of one row: each drafted token's confidence (or, without it, whether the
        draft was sure of it), and how many the target accepted (the leading ones)."""
        for j in range(drafted):
            if confidence is not None:
                b = min(CONFIDENCE_BINS - 1, max(0, int(confidence[j] * CONFIDENCE_BINS)))
            else:
                b = CONFIDENCE_BINS - 1 if sure is None or sure[j] else 0
            self.seen[b] += 1
            if j < accepted:
                self.accepted[b] += 1
            elif j == accepted:
                self.rejected[b] += 1

    def model(self, draft_stop_below: float | None = None) -> TokenRates:
        """The token model of drafting with confidence stop ``draft_stop_below`` (None: no stop, sigma = 1)."""
        def rate(lo: int, hi: int) -> float:
            yes, no = sum(self.accepted[lo:hi]), sum(self.rejected[lo:hi])
            return min(yes / (yes + no), 0.995) if yes + no > 0 else 0.5

        edge = 0 if draft_stop_below is None else _edge(draft_stop_below)
        if edge == 0:
            return TokenRates.plain(rate(0, CONFIDENCE_BINS))
        total = sum(self.seen)
        sigma = sum(self.seen[edge:]) / total if total > 0 else 1.0
        sure = rate(edge, CONFIDENCE_BINS) if edge < CONFIDENCE_BINS else rate(0, CONFIDENCE_BINS)
        return TokenRates(sigma, sure, rate(0, edge))

    def capped(self) -> "TokenBook":
        """A copy worth at most ``MAX_SAVED_TOKENS`` drafted and judged tokens (shares kept)."""
        seen_scale = min(1.0, MAX_SAVED_TOKENS / max(sum(self.seen), 1e-9))
        judged_scale = min(1.0, MAX_SAVED_TOKENS / max(sum(self.accepted) + sum(self.rejected), 1e-9))
        return TokenBook([x * seen_scale for x in self.seen], [x * judged_scale for x in self.accepted],
                         [x * judged_scale for x in self.rejected], self.iteration_overhead.capped())


@dataclass
class StepBook:
    """Step-level acceptance, lengths and costs of the pair and its verifier."""

    alpha1: Beta = field(default_factory=lambda: Beta(2.5, 2.5))
    bands: list[Beta] = field(default_factory=lambda: [Beta(1.0, 3.0), Beta(1.5, 2.5), Beta(2.0, 2.0),
                                                       Beta(2.5, 1.5), Beta(9.0, 1.0)])
    target_tokens: Mean = field(default_factory=lambda: Mean(40.0))
    draft_tokens: Mean = field(default_factory=lambda: Mean(40.0))
    agreement: Mean = field(default_factory=lambda: Mean(0.4))
    verify_s: Mean = field(default_factory=lambda: Mean(0.02))
    cycle_overhead: Mean = field(default_factory=lambda: Mean(0.02))

    @staticmethod
    def band(agreement: float) -> int:
        """The band of an agreement share in [0, 1]: 1.0 (the target would write the step as drafted) is its own."""
        if agreement >= 1.0:
            return len(AGREEMENT_BANDS) - 1
        return next(i for i, edge in enumerate(AGREEMENT_BANDS[1:]) if agreement < edge)

    def accept_probability(self, agreement: float) -> float:
        """P(the verifier accepts a drafted step | its agreement share), the band's posterior mean."""
        return self.bands[self.band(agreement)].mean

    def record_verdict(self, agreement: float, accepted: bool) -> None:
        self.alpha1.add(accepted, not accepted)
        self.bands[self.band(agreement)].add(accepted, not accepted)

    def model(self) -> StepRates:
        lt, ld = max(1.0, self.target_tokens.value), max(1.0, self.draft_tokens.value)
        head = min(ld, max(0.0, self.agreement.value * ld))
        return StepRates(min(self.alpha1.mean, 0.995), lt, ld, head, max(0.0, self.verify_s.value))


PLAN_KINDS = ("ar", "sd", "lr", "lr-sd")
BOOK_FORMAT = 2  # 2: token acceptance per band of the draft's confidence
CALIBRATED_BY = "time"  # how record_cycle weighs cycles (books without the field weighed them by tokens)


def plan_kind(label: str) -> str:
    """"sd@g12" -> "sd", "lr-sd@k1g8" -> "lr-sd", "ar@c256" -> "ar", "lr@k2-async" -> "lr-async": what a
    calibration factor is kept for (an async cycle's rows overlap its drafts, which no sync cycle shows)."""
    kind = label.partition("@")[0]
    return kind + "-async" if label.endswith("-async") else kind


@dataclass
class Book:
    """All a run has learned (what the planner reads), saved between runs of the same pair.

    ``calibration[kind]``: realised over predicted speed of the cycles of that kind of plan, weighted
    by their time (:meth:`record_cycle`). The formulas miss some costs (a batch waits for its slowest
    row, a fork copies a cache, Python's time between forwards); this factor learns what they miss,
    per kind of plan.
    """

    token: TokenBook = field(default_factory=TokenBook)
    step: StepBook = field(default_factory=StepBook)
    calibration: dict[str, Mean] = field(default_factory=lambda: {k: Mean(1.0, 3.0) for k in PLAN_KINDS})

    def record_cycle(self, label: str, tokens: int, seconds: float, predicted_rate: float) -> None:
        """One cycle's realised speed against its plan's predicted speed.

        The ratios are weighted by the cycle's *time* (in steps the predicted speed writes in that
        time), not by its tokens: a run's speed is its tokens over the sum of its cycles' times, so
        the factor that makes predicted and realised time agree is the time-weighted mean ratio
        (realised tokens over the tokens predicted for the time taken). Weighting by tokens would
        favour the fast cycles and leave the run's prediction optimistic.
        """
        if tokens <= 0 or seconds <= 0 or predicted_rate <= 0:
            return
        ratio = min(max(tokens / seconds / predicted_rate, 0.2), 5.0)
        weight = seconds * predicted_rate / max(1.0, self.step.target_tokens.value)  # about one per step
        self.calibration.setdefault(plan_kind(label), Mean(1.0, 3.0)).add(ratio, weight)

    def factor(self, label: str) -> float:
        mean = self.calibration.get(plan_kind(label))
        return mean.value if mean is not None else 1.0

    def rates_only(self) -> "Book":
        """A copy that keeps what the model pair and its verifier decide (how often drafted tokens and
        steps are accepted, how long steps are) and forgets what the machine's cost regime decides (the
        overheads, the verifier's latency, the calibration of each kind of plan): the prior of a pair
        in a cost regime it has not run in yet (another dtype, kernel or precision of the same models)."""
        rates, fresh = copy.deepcopy(self), Book()
        rates.token.iteration_overhead = fresh.token.iteration_overhead
        rates.step.verify_s, rates.step.cycle_overhead = fresh.step.verify_s, fresh.step.cycle_overhead
        rates.calibration = fresh.calibration
        return rates

    def token_rates_only(self) -> "Book":
        """What :meth:`rates_only` keeps of the token layer alone (how often the draft's tokens are
        accepted, which no verifier decides), with the step layer's priors: the start of a verifier
        new to the pair."""
        rates = self.rates_only()
        rates.step = StepBook()
        return rates

    def to_json(self) -> dict[str, Any]:
        def dump(obj: Any) -> Any:
            if isinstance(obj, (int, float)):
                return obj
            if isinstance(obj, (TokenBook, Beta, Mean)):
                obj = obj.capped()
            if isinstance(obj, list):
                return [dump(x) for x in obj]
            return {name: dump(value) for name, value in (obj if isinstance(obj, dict) else vars(obj)).items()}
        return {"format": BOOK_FORMAT, "token": dump(self.token), "step": dump(self.step),
                "calibration": dump(self.calibration), "calibrated_by": CALIBRATED_BY}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Book":
        if data.get("format") != BOOK_FORMAT:
            raise ValueError(f"book format {data.get('format')!r}, this version writes {BOOK_FORMAT}")

        def load(template: Any, raw: Any) -> Any:
            if isinstance(template, (int, float)):
                return float(raw)
            if isinstance(template, list):
                if len(raw) != len(template):
                    raise ValueError("wrong number of bands")
                return [load(t, r) for t, r in zip(template, raw)]
            return type(template)(**{name: load(value, raw[name]) for name, value in vars(template).items()})
        calibration = {str(kind): load(Mean(1.0), raw) for kind, raw in data.get("calibration", {}).items()}
        if data.get("calibrated_by") != CALIBRATED_BY:  # factors of another weighting: learn them again
            log.info("book calibrated by %s, this version by %s: its calibration starts again",
                     data.get("calibrated_by", "tokens"), CALIBRATED_BY)
            calibration = {}
        return cls(load(TokenBook(), data["token"]), load(StepBook(), data["step"]),
                   {**{k: Mean(1.0, 3.0) for k in PLAN_KINDS}, **calibration})


def load_book(path: Path) -> Book:
    """The saved book at ``path`` (which exists), or a fresh one with a warning when the file is unreadable."""
    try:
        return Book.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # json errors are ValueErrors
        log.warning("acceptance book %s is unreadable (%s); starting from the priors", path, exc)
        return Book()


def write_json(data: Any, path: Path) -> None:
    """Write ``data`` as JSON atomically (a torn write never leaves a half file behind): the planner's
    books and cost tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["AGREEMENT_BANDS", "BOOK_FORMAT", "CONFIDENCE_BINS", "Beta", "Book", "Mean", "PLAN_KINDS", "StepBook",
           "TokenBook", "load_book", "plan_kind", "write_json"]
