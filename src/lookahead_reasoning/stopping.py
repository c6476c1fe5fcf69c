"""When to stop generating: end-of-sequence tokens, stop strings and a token budget.

Stop strings are checked on decoded text, not only on token ids: the step delimiter "\\n\\n" is often
part of a larger token (".\\n\\n"), and a string can also be split over two tokens. The rule is: the
generation ends with the first token after which the decoded new text contains a stop string; that
token is kept, nothing after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .errors import require
from .presets import DEFAULT_MAX_NEW_TOKENS

# A stop string must fit in this many tokens: the window of text searched at each new token.
_WINDOW = 32


@dataclass(frozen=True)
class StopCondition:
    """EOS ids, stop strings and the budget of new tokens."""

    eos_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS

    def __post_init__(self) -> None:
        require(isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 0,
                f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        require(all(isinstance(s, str) and s for s in self.stop_strings),
                f"stop strings must be non-empty strings, got {self.stop_strings!r}")


@dataclass(frozen=True)
class StopHit:
    """Generation must end after the first ``keep`` new tokens, for ``reason`` (eos|stop_string|budget)."""

    keep: int
    reason: str


@dataclass
class StopChecker:
    """Scans new tokens as they arrive; ``check`` reports the first stop among them."""

    condition: StopCondition
    decode: object  # callable: list[int] -> str
    _checked: int = field(default=0, init=False)
    _seen: list[int] = field(default_factory=list, init=False, repr=False)

    def check(self, generated: Sequence[int]) -> StopHit | None:
        """Look at the tokens of ``generated`` not seen before; None if generation may go on.

        ``generated`` holds only the new tokens (no prompt). It may have changed since the last call
        (a rollback, possibly followed by other tokens): the scan restarts where it differs from
        what was seen.
        """
        cond = self.condition
        start = common_prefix(self._seen, generated, self._checked)
        for i in range(start, len(generated)):
            if i >= cond.max_new_tokens:  # tokens placed past the budget by the caller
                return StopHit(cond.max_new_tokens, "budget")
            if generated[i] in cond.eos_ids:
                return StopHit(i + 1, "eos")
            if cond.stop_strings and self._completes_stop_string(generated, i):
                return StopHit(i + 1, "stop_string")
            if i + 1 >= cond.max_new_tokens:
                return StopHit(i + 1, "budget")
        self._seen = list(generated)
        self._checked = len(generated)
        if cond.max_new_tokens == 0:
            return StopHit(0, "budget")
        return None

    def _completes_stop_string(self, generated: Sequence[int], i: int) -> bool:
        lo = max(0, i - _WINDOW)
        after = self.decode(list(generated[lo:i + 1]))
        if not any(s in after for s in self.condition.stop_strings):
            return False
        before = self.decode(list(generated[lo:i])) if i > lo else ""
        return not any(s in before for s in self.condition.stop_strings)


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """Length of the common prefix of a and b, at most ``limit``."""
    n = min(len(a), len(b), limit)
    if list(a[:n]) == list(b[:n]):
        return n
    return next(i for i in range(n) if a[i] != b[i])
