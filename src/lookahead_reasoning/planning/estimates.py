"""What the run has learned about its pair: acceptance rates as Beta posteriors, step lengths, overheads.

Every rate starts from a prior (from earlier runs of the same pair when a saved book exists) and is
updated after every SD iteration and every LR cycle:

* token level (:class:`TokenBook`), the :class:`~lookahead_reasoning.theory.TokenModel` of the draft
  model with its confidence stop: sigma (the draft is sure of a token and drafts on), alpha_sure and
  alpha_unsure (the target accepts a sure / an unsure drafted token);
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

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..theory import StepModel, TokenModel

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

    def capped(self, limit: float = MAX_SAVED_WEIGHT) -> "Beta":
        scale = min(1.0, limit / self.weight)
        return Beta(self.a * scale, self.b * scale)


@dataclass
class Mean:
    """A running mean that starts from a prior worth ``weight`` observations."""

    value: float
    weight: float = 2.0

    def add(self, x: float, n: float = 1.0) -> None:
        self.value = (self.value * self.weight + x * n) / (self.weight + n)
        self.weight += n

    def capped(self, limit: float = MAX_SAVED_WEIGHT) -> "Mean":
        return Mean(self.value, min(self.weight, limit))


@dataclass
class TokenBook:
    """Token-level acceptance of the draft model (with its confidence stop), learned per iteration."""

    sigma: Beta = field(default_factory=lambda: Beta(7.0, 3.0))
    alpha_sure: Beta = field(default_factory=lambda: Beta(8.0, 2.0))
    alpha_unsure: Beta = field(default_factory=lambda: Beta(3.0, 5.0))
    iteration_overhead: Mean = field(default_factory=lambda: Mean(0.003))

    def record(self, sure: Sequence[bool] | None, drafted: int, accepted: int) -> None:
        """One SD iteration of one row: the draft's sureness of each drafted token, and how many the
        target accepted (the leading ones). Tokens after the first rejection were never judged."""
        if drafted == 0:
            return
        flags = list(sure) if sure is not None else [True] * drafted
        for j, flag in enumerate(flags[:drafted]):
            self.sigma.add(flag, not flag)
            if j > accepted:
                continue
            rate = self.alpha_sure if flag else self.alpha_unsure
            rate.add(j < accepted, j == accepted)

    def model(self) -> TokenModel:
        return TokenModel(self.sigma.mean, min(self.alpha_sure.mean, 0.995), min(self.alpha_unsure.mean, 0.995))


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

    def model(self) -> StepModel:
        lt, ld = max(1.0, self.target_tokens.value), max(1.0, self.draft_tokens.value)
        head = min(ld, max(0.0, self.agreement.value * ld))
        return StepModel(min(self.alpha1.mean, 0.995), lt, ld, head, max(0.0, self.verify_s.value))


PLAN_KINDS = ("ar", "sd", "lr", "lr-sd")


def plan_kind(label: str) -> str:
    """"sd@g12" -> "sd", "lr-sd@k1g8" -> "lr-sd": what a calibration factor is kept for."""
    return label.partition("@")[0]


@dataclass
class Book:
    """All a run has learned (what the planner reads), saved between runs of the same pair.

    ``calibration[kind]``: realised over predicted speed of the cycles of that kind of plan, weighted
    by their tokens. The formulas miss some costs (a batch waits for its slowest row, a fork copies a
    cache, Python's time between forwards); this factor learns what they miss, per kind of plan.
    """

    token: TokenBook = field(default_factory=TokenBook)
    step: StepBook = field(default_factory=StepBook)
    calibration: dict[str, Mean] = field(default_factory=lambda: {k: Mean(1.0, 3.0) for k in PLAN_KINDS})

    def record_cycle(self, label: str, tokens: int, seconds: float, predicted_rate: float) -> None:
        """One cycle's realised speed against its plan's predicted speed."""
        if tokens <= 0 or seconds <= 0 or predicted_rate <= 0:
            return
        ratio = min(max(tokens / seconds / predicted_rate, 0.2), 5.0)
        weight = tokens / max(1.0, self.step.target_tokens.value)  # about one per step
        self.calibration.setdefault(plan_kind(label), Mean(1.0, 3.0)).add(ratio, weight)

    def factor(self, label: str) -> float:
        mean = self.calibration.get(plan_kind(label))
        return mean.value if mean is not None else 1.0

    def to_json(self) -> dict[str, Any]:
        def dump(obj: Any) -> Any:
            if isinstance(obj, Beta):
                return {"a": obj.capped().a, "b": obj.capped().b}
            if isinstance(obj, Mean):
                return {"value": obj.value, "weight": obj.capped().weight}
            if isinstance(obj, list):
                return [dump(x) for x in obj]
            if isinstance(obj, dict):
                return {key: dump(value) for key, value in obj.items()}
            return {name: dump(value) for name, value in vars(obj).items()}
        return {"format": 1, "token": dump(self.token), "step": dump(self.step), "calibration": dump(self.calibration)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Book":
        if data.get("format") != 1:
            raise ValueError(f"book format {data.get('format')!r}")

        def load(template: Any, raw: Any) -> Any:
            if isinstance(template, Beta):
                return Beta(float(raw["a"]), float(raw["b"]))
            if isinstance(template, Mean):
                return Mean(float(raw["value"]), float(raw["weight"]))
            if isinstance(template, list):
                if len(raw) != len(template):
                    raise ValueError("wrong number of agreement bands")
                return [load(t, r) for t, r in zip(template, raw)]
            return type(template)(**{name: load(value, raw[name]) for name, value in vars(template).items()})
        calibration = {str(kind): Mean(float(raw["value"]), float(raw["weight"]))
                       for kind, raw in data.get("calibration", {}).items()}
        return cls(load(TokenBook(), data["token"]), load(StepBook(), data["step"]),
                   {**{k: Mean(1.0, 3.0) for k in PLAN_KINDS}, **calibration})


def load_book(path: Path | None) -> Book:
    """The saved book at ``path``, or a fresh one (with a warning when the file is unreadable)."""
    if path is None or not path.exists():
        return Book()
    try:
        return Book.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # json errors are ValueErrors
        log.warning("acceptance book %s is unreadable (%s); starting from the priors", path, exc)
        return Book()


def save_book(book: Book, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(book.to_json(), indent=1), encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["AGREEMENT_BANDS", "Beta", "Book", "Mean", "PLAN_KINDS", "StepBook", "TokenBook", "load_book", "plan_kind",
           "save_book"]
