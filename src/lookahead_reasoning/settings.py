"""What a generation runs with, in one frozen object: :class:`Settings` (and :class:`TokenSD`, token-level
SD inside steps).

The generator, the step-level driver, :func:`~.decoding.tools.make_tools` and the token-level loops all
read their knobs from a ``Settings``; it is checked once, when it is made, and its defaults are the ones
in :mod:`lookahead_reasoning.presets`. Single knobs (``k=3``, ``max_new_tokens=64``, ...) change one with
:meth:`Settings.with_overrides`; the front doors that take them as keywords (``LookaheadGenerator.generate``,
:func:`~.decoding.speculative.generate_sd`) forward them there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from .errors import require
from .presets import (
    ALT_TEMPERATURE,
    DEFAULT_MAX_NEW_TOKENS,
    DRAFT_STOP_BELOW,
    ENGINE_RETRIES,
    ENGINE_TIMEOUT_S,
    NGRAM_MAX,
    NGRAM_MIN,
    SCHEDULE,
    SCHEDULES,
    TOKEN_GAMMA,
    check_draft_stop_below,
    check_k,
    mode_k,
)
from .sampling import SamplingConfig
from .steps import StepConfig


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class TokenSD:
    """Token-level SD inside steps. ``target``: None | "ngram" | "draft"; ``draft``: None | "ngram"."""

    target: str | None = None
    draft: str | None = None
    gamma: int = TOKEN_GAMMA
    ngram_max: int = NGRAM_MAX
    ngram_min: int = NGRAM_MIN

    def __post_init__(self) -> None:
        require(self.target in (None, "ngram", "draft"), "TokenSD target (who drafts tokens for the target's rows) "
                f"must be None, 'ngram' or 'draft', got {self.target!r}")
        require(self.draft in (None, "ngram"), "TokenSD draft (who drafts tokens inside the draft's steps) must be "
                f"None or 'ngram', got {self.draft!r}")
        require(isinstance(self.gamma, int) and self.gamma >= 1,
                f"TokenSD gamma must be an integer >= 1, got {self.gamma!r}")


@dataclass(frozen=True)
class Settings:
    """The knobs of one generation (p = target, q = draft).

    ``k``: drafted steps per cycle (None: the mode's preset); ``gamma``: drafted tokens per SD
    iteration (None: the mode's preset); ``width``: drafts per position W (W - 1 alternatives, sampled
    at ``alt_temperature`` when decoding is greedy); ``steps``: the step segmenter; ``sampling``:
    temperature / top-k / top-p (0: greedy); ``token_sd``: token-level SD inside steps (None: off);
    ``draft_stop_below``: the draft stops drafting after a token it gave less than this probability
    (None, in a bare ``Settings``: never; :meth:`preset`, which the generator and mode ``auto`` start
    from, takes :data:`~lookahead_reasoning.presets.DRAFT_STOP_BELOW`); ``max_new_tokens``: the
    answer's budget; ``seed``: of the run's ``torch.Generator`` (over an engine: of its sampled
    requests); ``schedule``: "sync" or "async" LR cycles (async pays only where rows run elsewhere, over
    an engine; this process's loops refuse it); ``timeout_s``, ``retries``: per engine request.
    """

    k: int | None = None
    gamma: int | None = None
    width: int = 1
    steps: StepConfig = field(default_factory=StepConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    token_sd: TokenSD | None = None
    alt_temperature: float = ALT_TEMPERATURE
    draft_stop_below: float | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    seed: int | None = 0
    schedule: str = SCHEDULE
    timeout_s: float = ENGINE_TIMEOUT_S
    retries: int = ENGINE_RETRIES

    def __post_init__(self) -> None:
        check_k(self.k)
        require(self.gamma is None or _positive_int(self.gamma),
                f"gamma (drafted tokens per iteration) must be an integer >= 1, got {self.gamma!r}")
        require(_positive_int(self.width), f"width (drafts per position) must be an integer >= 1, got {self.width!r}")
        require(isinstance(self.max_new_tokens, int) and not isinstance(self.max_new_tokens, bool)
                and self.max_new_tokens >= 0, f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        require(isinstance(self.alt_temperature, (int, float)) and self.alt_temperature > 0,
                f"alt_temperature must be a number > 0, got {self.alt_temperature!r}")
        check_draft_stop_below(self.draft_stop_below)
        require(self.schedule in SCHEDULES, f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        require(isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0,
                f"timeout_s (seconds one engine request may take) must be > 0, got {self.timeout_s!r}")
        require(isinstance(self.retries, int) and not isinstance(self.retries, bool) and self.retries >= 0,
                f"retries (of one engine request) must be an integer >= 0, got {self.retries!r}")

    @classmethod
    def preset(cls, **fields_: Any) -> "Settings":
        """The settings the generator and mode ``auto`` start from: the presets' stop for the draft."""
        return cls(**{"draft_stop_below": DRAFT_STOP_BELOW, **fields_})

    @property
    def drafted_steps(self) -> int:
        """k for a fixed-k LR run: the given one, else the preset of mode ``lr``."""
        return mode_k("lr", self.k)

    @property
    def token_gamma(self) -> int:
        """gamma for a token-level loop: the given one, else :data:`~lookahead_reasoning.presets.TOKEN_GAMMA`."""
        return TOKEN_GAMMA if self.gamma is None else self.gamma

    def with_overrides(self, **changes: Any) -> "Settings":
        """A copy with the given fields changed (None keeps the field unless None is a value it can
        take: ``draft_stop_below``, ``token_sd``, ``seed``, ``k``, ``gamma``); unknown names raise."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        require(not unknown, f"unknown setting(s): {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        keep_none = {"draft_stop_below", "token_sd", "seed", "k", "gamma"}
        changes = {name: value for name, value in changes.items() if value is not None or name in keep_none}
        return replace(self, **changes) if changes else self


__all__ = ["Settings", "TokenSD", "check_draft_stop_below"]
