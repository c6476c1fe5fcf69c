"""What a generation runs with, in one frozen object: :class:`Settings` (and :class:`TokenSD`, token-level
SD inside steps); and what one cycle of it runs: :class:`CyclePlan`, the one contract between every policy
(each mode's fixed plan, mode ``auto`` in this process or over an engine) and every runtime that runs
cycles; a mode or a plan as a user types it is read by :func:`parse_label`. Symbols as in the paper: k drafted steps
(k1), W drafts per position (``width``), gamma drafted tokens per token-SD iteration inside the target's rows.

The generator, the step-level driver, :func:`~.decoding.tools.make_tools` and the token-level loops all
read their knobs from a ``Settings``; it is checked once, when it is made, and its defaults are the ones
in :mod:`lookahead_reasoning.presets`. Single knobs (``k=3``, ``max_new_tokens=64``, ...) change one with
:meth:`Settings.with_overrides`; the front doors that take them as keywords (``LookaheadGenerator.generate``,
:func:`~.decoding.speculative.generate_sd`) forward them there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

from .errors import ConfigError, require, whole
from .presets import (
    ALT_TEMPERATURE,
    DEFAULT_MAX_NEW_TOKENS,
    DRAFT_STOP_BELOW,
    ENGINE_RETRIES,
    ENGINE_TIMEOUT_S,
    LR_SD_TOKEN_SD,
    MODE_READS,
    NGRAM_MAX,
    NGRAM_MIN,
    SCHEDULE,
    SCHEDULES,
    TOKEN_GAMMA,
    check_draft_stop_below,
    check_k,
    read_by,
)
from .sampling import SamplingConfig
from .steps import StepConfig


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
        require(self.gamma is None or whole(self.gamma, 1),
                f"gamma (drafted tokens per iteration) must be an integer >= 1, got {self.gamma!r}")
        require(whole(self.width, 1), f"width (drafts per position) must be an integer >= 1, got {self.width!r}")
        for name, kind in (("steps", StepConfig), ("sampling", SamplingConfig), ("token_sd", (TokenSD, type(None)))):
            require(isinstance(getattr(self, name), kind), f"{name} must be a {getattr(kind, '__name__', 'TokenSD')}"
                    f"{' or None' if name == 'token_sd' else ''}, got {getattr(self, name)!r}")
        require(self.seed is None or (isinstance(self.seed, int) and not isinstance(self.seed, bool)),
                f"seed must be an integer or None, got {self.seed!r}")
        require(whole(self.max_new_tokens), f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        require(isinstance(self.alt_temperature, (int, float)) and self.alt_temperature > 0,
                f"alt_temperature must be a number > 0, got {self.alt_temperature!r}")
        check_draft_stop_below(self.draft_stop_below)
        require(self.schedule in SCHEDULES, f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        require(isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0,
                f"timeout_s (seconds one engine request may take) must be > 0, got {self.timeout_s!r}")
        require(whole(self.retries), f"retries (of one engine request) must be an integer >= 0, got {self.retries!r}")

    @classmethod
    def preset(cls, **fields_: Any) -> "Settings":
        """The settings the generator and mode ``auto`` start from: the presets' stop for the draft."""
        return cls(**{"draft_stop_below": DRAFT_STOP_BELOW, **fields_})

    def with_overrides(self, **changes: Any) -> "Settings":
        """A copy with the given fields changed (None keeps the field unless None is a value it can
        take: ``draft_stop_below``, ``token_sd``, ``seed``, ``k``, ``gamma``); unknown names raise."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        require(not unknown, f"unknown setting(s): {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        keep_none = {"draft_stop_below", "token_sd", "seed", "k", "gamma"}
        changes = {name: value for name, value in changes.items() if value is not None or name in keep_none}
        return replace(self, **changes) if changes else self


@dataclass(frozen=True)
class CyclePlan:
    """One cycle's plan.

    ``k``: drafted steps (0: the target writes the next step alone); ``width``: drafts per position
    (W >= 1); ``schedule``: "sync" (draft every step, then run every target row) or "async" (a row
    starts as soon as its prefix exists); ``gamma``: drafted tokens per SD iteration in the target's
    rows (None: the runtime's own; 0: the rows decode token by token); ``draft_stop_below``: the
    draft's confidence stop in those iterations; ``overshoot`` (k = 0 only): an SD iteration that runs
    past the step's end keeps what it accepted; ``chunk`` > 0 (k = 0 only): the target writes up to
    ``chunk`` tokens of plain decoding past step ends (fewer requests where nothing speculative pays);
    ``rows`` (k >= 1, sync only): the most target rows the cycle runs (None: one per drafted step that ends
    on a delimiter, plus one); when it cuts rows, the last row it runs is not judged and its step is kept as
    the target's own (``rows=1``: the drafts are written and seen, the target's step from x is kept).
    """

    k: int
    width: int = 1
    schedule: str = "sync"
    gamma: int | None = None
    draft_stop_below: float | None = None
    overshoot: bool = False
    chunk: int = 0
    rows: int | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.k, int) and self.k >= 0, f"k (drafted steps per cycle) must be an integer >= 0, got {self.k!r}")
        require(isinstance(self.width, int) and self.width >= 1,
                f"width (drafts per position) must be an integer >= 1, got {self.width!r}")
        require(self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        require(self.gamma is None or (isinstance(self.gamma, int) and self.gamma >= 0),
                f"gamma (drafted tokens per SD iteration) must be None or an integer >= 0, got {self.gamma!r}")
        check_draft_stop_below(self.draft_stop_below)  # the Settings' rule: a plan runs what Settings let through
        require(isinstance(self.chunk, int) and self.chunk >= 0 and (self.chunk == 0 or self.k == 0),
                f"chunk must be an integer >= 0, and only with k = 0, got chunk {self.chunk!r} with k {self.k!r}")
        require(self.rows is None or (whole(self.rows, 1) and self.k >= 1 and self.schedule == "sync"),
                f"rows (the most target rows a cycle runs) must be None or an integer >= 1, with k >= 1 on the sync "
                f"schedule, got rows {self.rows!r} with k {self.k!r} ({self.schedule})")

    @classmethod
    def parse(cls, text: str) -> "CyclePlan":
        """The plan :attr:`label` printed as ``text`` (:func:`parse_label`'s grammar); ConfigError otherwise."""
        base, knobs = parse_label(text)
        require(base in ("ar", "sd", "lr", "lr-sd"), f"{text!r} names no plan: a plan is ar, sd, lr or lr-sd")
        gamma = knobs.get("gamma") if base in ("sd", "lr-sd") else (0 if base == "ar" else None)
        return cls(knobs.get("k", 0), knobs.get("width", 1), knobs.get("schedule", SCHEDULE), gamma,
                   knobs.get("draft_stop_below"), chunk=knobs.get("chunk", 0), rows=knobs.get("rows"))

    @property
    def label(self) -> str:
        """A short name: "ar", "ar@c256", "sd@g8s0.4", "sd@g8c64", "lr@k2", "lr-sd@k1g8", "lr@k2w2-async", "lr@k1r1" (:meth:`parse`
        reads it)."""
        stop = f"s{self.draft_stop_below:g}" if self.draft_stop_below is not None else ""
        if self.k == 0:
            chunk = f"c{self.chunk}" if self.chunk else ""
            return f"sd@g{self.gamma}{stop}{chunk}" if self.gamma else f"ar@{chunk}" if chunk else "ar"
        head = f"lr-sd@k{self.k}g{self.gamma}{stop}" if self.gamma else f"lr@k{self.k}"
        return (head + (f"w{self.width}" if self.width > 1 else "") + (f"r{self.rows}" if self.rows is not None else "")
                + ("-async" if self.schedule == "async" else ""))


_LABEL = re.compile(r"^(?P<base>[a-z][a-z-]*?)(?:@(?P<knobs>(?:[kgswrc][0-9.]+)+))?(?P<asyn>-async)?$")
_KNOB = re.compile(r"([kgswrc])([0-9.]+)")
KNOB_NAMES = {"k": "k", "g": "gamma", "s": "draft_stop_below", "w": "width", "r": "rows", "c": "chunk"}


def parse_label(text: str) -> tuple[str, dict[str, Any]]:
    """A mode or a plan as a user types it and as :attr:`CyclePlan.label` prints it, ``base[@knobs][-async]``:
    its base and the knobs it gives (``schedule`` "async" when it ends in ``-async``). The knobs are ``kN``
    (drafted steps), ``gN`` (gamma), ``sX`` (the draft's confidence stop), ``wN`` (width), ``rN`` (the most
    target rows) and ``cN`` (chunk), in that order: ``lr-sd@k2g3`` -> ("lr-sd", {"k": 2, "gamma": 3}),
    ``lr@k2w2-async`` -> ("lr", {"k": 2, "width": 2, "schedule": "async"}). ConfigError saying the grammar
    for anything else."""
    match = _LABEL.match(text.strip()) if isinstance(text, str) else None
    knobs = _KNOB.findall(match.group("knobs") or "") if match else []
    letters = "".join(letter for letter, _ in knobs)
    require(match is not None and letters == "".join(c for c in "kgswrc" if c in letters),
            f"bad mode {text!r}: write base[@kN][gN][sX][wN][rN][cN][-async] (e.g. lr-sd@k2g3, sd@g8s0.4, lr@k2-async)")
    values: dict[str, Any] = {"schedule": "async"} if match.group("asyn") else {}
    for letter, number in knobs:
        try:
            values[KNOB_NAMES[letter]] = float(number) if letter == "s" else int(number)
        except ValueError:
            raise ConfigError(f"bad mode {text!r}: {letter}{number} is not a number of the right kind") from None
    return match.group("base"), values


def local_settings(settings: Settings | None) -> Settings:
    """``settings`` (None: ``Settings()``) for a loop of this process. Those loops run a cycle's rows in
    one batched forward, so they refuse the async schedule (it would only reorder work), and they send no
    request, so they refuse a request timeout or retry count other than the defaults (an engine's settings)."""
    settings = settings or Settings()
    require(settings.schedule == "sync", "schedule 'async' runs over engines only: in this process a cycle's rows "
            "run in one batched forward, where async would change nothing but the order of work")
    given = [f"{name} {value!r}" for name, value, default in (("timeout_s", settings.timeout_s, ENGINE_TIMEOUT_S),
                                                            ("retries", settings.retries, ENGINE_RETRIES))
             if value != default]
    require(not given, f"{', '.join(given)}: per request to an engine; a target in this process sends no requests "
            "(give the target as a URL, or leave them out)")
    return settings


def _reads(mode: str, setting: str, settings: Settings) -> str | None:
    """None where ``mode`` reads ``setting`` with ``settings``, else why not (:data:`~.presets.MODE_READS`, and
    the settings some knobs need beside them)."""
    if setting not in MODE_READS[mode]:
        return f"read by {read_by(setting)}"
    rows = (settings.token_sd or TokenSD(target="draft")).target if mode != "sd" else "draft"
    if setting == "alt_temperature" and (settings.width == 1 or not settings.sampling.greedy):
        return "the alternative drafts' temperature: read only with width > 1 and greedy sampling"
    if setting == "gamma" and rows is None:
        return "read only where the target's rows draft tokens (token_sd target 'draft' or 'ngram')"
    if setting == "draft_stop_below" and rows != "draft":
        return "the draft model's stop: read only where it drafts tokens for the target's rows (token_sd target 'draft')"
    return None


KNOBS = ("k", "gamma", "width", "alt_temperature", "draft_stop_below", "token_sd", "steps", "schedule")  # what a mode may not read


def given_settings(settings: Settings) -> dict[str, str]:
    """The knobs of ``settings`` a mode may not read (:data:`~.presets.MODE_READS`' names) that differ from the
    generator's preset, each named as the keyword that sets it; turning off what a mode does not do anyway
    (``draft_stop_below`` None or 0, ``token_sd`` None) is not counted."""
    preset = Settings.preset(token_sd=TokenSD(**LR_SD_TOKEN_SD))
    off = {"draft_stop_below": (None, 0), "token_sd": (None,)}
    return {name: name for name in KNOBS
            if getattr(settings, name) != getattr(preset, name) and getattr(settings, name) not in off.get(name, ())}


def refuse_unread(modes: str | Sequence[str], settings: Settings, given: Mapping[str, str]) -> None:
    """ConfigError naming every option of ``given`` (an option as its entry names it -> the setting it sets, a
    :data:`~.presets.MODE_READS` name) that no mode of ``modes`` reads with ``settings``: an option the run would
    not read is refused, never dropped. Loads nothing."""
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    require(all(mode in MODE_READS for mode in modes), f"unknown mode in {', '.join(map(str, modes))}: the modes are "
            f"{', '.join(MODE_READS)}")
    why = {label: [_reads(mode, setting, settings) for mode in modes] for label, setting in given.items()}
    unread = {label: reasons[0] for label, reasons in why.items() if reasons and None not in reasons}
    require(not unread, "; ".join(f"{label}: not read by mode {', '.join(modes)} ({reason})"
                                  for label, reason in unread.items()) + ": leave it out or pick a mode that reads it")


__all__ = ["KNOBS", "CyclePlan", "Settings", "TokenSD", "check_draft_stop_below", "given_settings", "local_settings",
           "parse_label", "refuse_unread"]
