"""Reasoning steps: how text is cut into the units that Lookahead Reasoning speculates on.

A step ends with a delimiter ("\\n\\n" by default: reasoning models separate steps by blank lines),
with EOS, or at a per-step token cap. Only a step that ends on a delimiter or EOS is a *complete*
step: a drafted step cut at the cap is never accepted (the target rewrites it), and no step is
drafted after it, since what would follow does not start at a boundary.

:class:`StepModel` is what a Lookahead Reasoning cycle needs of a runtime: *write one step after each
of these prefixes* (token ids), each a :class:`StepRequest`. This process's PyTorch loops and a
serving engine both implement it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Protocol, Sequence, TypeVar

from .errors import require
from .presets import MAX_STEP_TOKENS, STEP_DELIMITERS
from .stopping import StopCondition

T = TypeVar("T")


@dataclass(frozen=True)
class StepConfig:
    """The step segmenter: delimiters (stop strings checked on decoded text) and a token cap per step."""

    delimiters: tuple[str, ...] = STEP_DELIMITERS
    max_step_tokens: int = MAX_STEP_TOKENS

    def __post_init__(self) -> None:
        delims = (self.delimiters,) if isinstance(self.delimiters, str) else tuple(self.delimiters)
        object.__setattr__(self, "delimiters", delims)
        require(len(delims) > 0 and all(isinstance(d, str) and d != "" for d in delims),
                f"step delimiters must be non-empty strings, got {self.delimiters!r}")
        require(isinstance(self.max_step_tokens, int) and self.max_step_tokens >= 1,
                f"max_step_tokens must be an integer >= 1, got {self.max_step_tokens!r}")

    def stop_condition(self, eos_ids: frozenset[int], remaining_budget: int) -> StopCondition:
        """Stop at a delimiter, EOS, the step cap or the generation's remaining budget."""
        return StopCondition(eos_ids, self.delimiters, max(0, min(self.max_step_tokens, remaining_budget)))


COMPLETE_ENDS = ("stop_string", "eos")  # how a step that may be accepted ends (not cut at the cap)


@dataclass
class Step:
    """One step of text, with its ids for the model that wrote it and why it ended.

    ``end`` is "stop_string" (a delimiter), "eos", or "budget" (the step cap or the generation's
    budget). ``complete`` steps end on a delimiter or EOS.
    """

    ids: list[int]
    text: str
    end: str
    author: str = "target"  # "draft" | "target"
    ids_other: list[int] | None = field(default=None, repr=False)  # the same text in the other tokenizer

    @property
    def complete(self) -> bool:
        return self.end in COMPLETE_ENDS

    @property
    def boundary(self) -> bool:
        """True when what follows this step starts a new step (it ended on a delimiter)."""
        return self.end == "stop_string"


@dataclass(frozen=True)
class TokenScores:
    """The target's view of one drafted step: for each of its tokens (in the target's ids) the target's
    probability of that token after everything before it, and its rank among the target's choices
    there (0: the target's most likely token; None where the runtime does not report ranks)."""

    probs: tuple[float, ...]
    ranks: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        require(all(isinstance(p, float) and 0.0 <= p <= 1.0 for p in self.probs),
                f"token probabilities must be floats in [0, 1], got {self.probs!r}")
        require(self.ranks is None or len(self.ranks) == len(self.probs),
                f"{len(self.probs)} probabilities but {len(self.ranks or ())} ranks")

    @classmethod
    def of(cls, probs: Sequence[float], ranks: Sequence[int] | None = None) -> "TokenScores":
        return cls(tuple(min(1.0, max(0.0, float(p))) for p in probs), None if ranks is None else tuple(map(int, ranks)))


@dataclass(frozen=True)
class StepRequest:
    """Write one step after ``context`` (token ids), at most ``budget`` tokens. ``alternative`` > 0
    asks for the alternative draft number ``alternative`` (sampled, with its own seed). ``free``: no
    delimiter, no step cap: write on until EOS or ``budget`` (a chunk of plain decoding)."""

    context: tuple[int, ...]
    budget: int
    alternative: int = 0
    free: bool = False


class StepModel(Protocol):
    """What a cycle needs of a model (see the module docstring)."""

    name: str

    def write(self, requests: Sequence[StepRequest]) -> list[Step]:
        """One step per request, in order; the requests may run at once."""
        ...

    async def awrite(self, request: StepRequest) -> Step:
        """One step, for asyncio (concurrent calls may run at once)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        ...

    # Optional: ``async def ascore(context, ids) -> TokenScores`` (and a sync ``score``), the model's
    # probabilities of given tokens, which a likelihood verifier judges drafted steps by.


async def closing(run: Awaitable[T], *models: Any) -> T:
    """``run``'s result, the step models' connections on this event loop closed after it (where they
    have any: engine step writers share one pool per loop among the runs on it)."""
    try:
        return await run
    finally:
        for model in models:
            if hasattr(model, "aclose"):
                await model.aclose()
