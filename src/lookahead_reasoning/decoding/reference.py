"""The paper's Algorithm 1, written plainly: one synchronous Lookahead Reasoning cycle with no tricks.

This is the slow oracle that the one cycle, :func:`.lookahead.run_cycle`, is checked against on every
runtime. It talks to the models only through the step-writer seam (:class:`~..steps.StepModel`):
:class:`LocalSteps` is this library's PyTorch implementation of it (a fresh session per step), and an engine's
(``lookahead_reasoning.runtime.engine.steps.EngineSteps``) plugs in the same way. From an accepted prefix x
(token ids, prompt included), with the target p and the draft q sharing one tokenizer:

  1. draft:  q writes k steps one after another, s^_1 from x, s^_2 from x + s^_1, ...;
  2. target: p writes its own step s_j on each row context x + s^_1..s^_{j-1}, j = 1..k+1, every
             row on its own: a fresh :class:`~..runtime.session.Session`, a prefill of the whole
             context, token by token;
  3. verify: the verifier judges (s^_1, s_1), (s^_2, s_2), ... in order, up to the first rejection;
  4. accept: keep s^_1..s^_m (m accepted), then the target's s_{m+1}: its correction at the rejected
             position, or, when all drafted steps pass, the last row's step as a free bonus.

EOS or the token budget inside a kept step ends generation exactly there. Three rules of the library
hold here as in ``run_cycle`` (they decide which text comes out, so both must follow them): nothing is
drafted after a step that does not end on a delimiter, nor when the accepted text itself does not end
on one (what follows would not start a step); a drafted step cut at the step cap is never accepted
(the target rewrites it); a row is only written on a context that ends on a delimiter and leaves
budget.

What ``run_cycle`` adds on this process's runtime (:mod:`.torch_verbs`), and why none of it changes the
text (greedy decoding, one vocabulary):

* *one shared KV cache*: its rows start from copies of x's cache instead of prefilling x again.
  Attention over cached keys and values is the same computation, so the logits are the same up to
  float rounding, and so are the greedy tokens;
* *one batched forward for all rows*: rows of different lengths are padded, the pads are masked out of
  attention and position ids count real tokens only, so each row sees what it would see alone;
* *the head start* (``score_chain``): one target forward over x + all drafted tokens finds, for each
  row, the longest prefix of s^_j whose every token is the target's own argmax. Those are exactly the
  tokens the row would generate itself, so starting the row after them skips forwards, not text;
* *early judging*: rows are judged as they finish and a rejection cancels the rows after it. Those
  rows could never be used (only the first rejected row's step is kept), so only the time changes.

Left out entirely: width W > 1 (an alternative draft may stand in for the target's correction: that
*does* change the text, and is off by default), the row gate, token-level SD inside steps (lossless),
and drafts with another tokenizer (steps passed as text). With sampling the reference still runs
Algorithm 1, but draws its random numbers in another order than ``run_cycle``, so the two agree in
distribution, not token for token.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import require
from ..presets import ALT_TEMPERATURE, mode_k
from ..sampling import SamplingConfig, make_generator, token_scores
from ..stopping import StopChecker, StopCondition
from ..verifiers.base import Verdict, Verifier
from ..verifiers.likelihood import TokenScores, uses_scores, verify_pairs
from .autoregressive import decode_rows
from ..runtime.vocab import check_same_tokenizer
from .results import CycleTrace, GenerationResult, CycleStats
from ..settings import Settings
from ..steps import Step, StepConfig, StepModel, StepRequest

from .progress import Laps


class LocalSteps:
    """:class:`~..steps.StepModel` over this library's PyTorch loops: every step on a fresh
    :class:`~..runtime.session.Session` (a prefill of the whole prefix, then token by token), no cache from anywhere else.

    ``sampling`` is the run's; alternative drafts (``StepRequest.alternative`` > 0) sample at
    ``alt_temperature`` when the run is greedy. ``generator``: share one between models (default: own,
    from ``seed``).
    """

    def __init__(self, lm, steps: StepConfig | None = None, sampling: SamplingConfig | None = None,
                 seed: int | None = 0, generator: torch.Generator | None = None, alt_temperature: float = ALT_TEMPERATURE):
        self.lm, self.steps = lm, steps or StepConfig()
        self.sampling = sampling or SamplingConfig()
        self.alt_sampling = self.sampling if not self.sampling.greedy else SamplingConfig(temperature=alt_temperature)
        self.generator = generator if generator is not None else make_generator(seed)
        self.name = getattr(lm, "name", "local")

    def decode(self, ids: Sequence[int]) -> str:
        return self.lm.decode(list(ids))

    def write_one(self, request: StepRequest) -> Step:
        """One step after ``request.context``, at most ``request.budget`` tokens."""
        context = list(request.context)
        session = self.lm.session([context])
        condition = (StopCondition(self.lm.eos_ids, (), request.budget) if request.free
                     else self.steps.stop_condition(self.lm.eos_ids, request.budget))
        checker = StopChecker(condition, self.lm.decode)
        sampling = self.alt_sampling if request.alternative else self.sampling
        [hit] = decode_rows(session, [len(context)], [checker], sampling, self.generator)
        ids = session.rows[0][len(context):]
        return Step(ids, self.lm.decode(ids), hit.reason)

    def write(self, requests: Sequence[StepRequest]) -> list[Step]:
        return [self.write_one(r) for r in requests]

    def score(self, context: Sequence[int], ids: Sequence[int]) -> TokenScores:
        """The model's probability and rank of each of ``ids`` written after ``context`` (one forward)."""
        session = self.lm.session([list(context)])
        logits = session.logits(extra=[list(ids)], keep=len(ids) + 1)[0]  # (len(ids) + 1, V)
        return TokenScores.of(*token_scores(logits[:len(ids)], list(ids)))

    async def ascore(self, context: Sequence[int], ids: Sequence[int]) -> TokenScores:
        return self.score(context, ids)

    async def awrite(self, request: StepRequest) -> Step:
        return self.write_one(request)


def _local(model) -> StepModel:
    """A step model as it is, or an LM wrapped in a default :class:`LocalSteps`."""
    if hasattr(model, "write_one") or hasattr(model, "awrite"):
        return model
    return LocalSteps(model)


def lr_cycle_reference(target, draft, x: Sequence[int], verifier: Verifier, *, k: int, budget: int,
                       at_boundary: bool = True) -> CycleTrace:
    """One cycle of Algorithm 1 from the accepted prefix ``x`` (prompt + text so far, token ids).

    ``target`` and ``draft`` are step models: :class:`LocalSteps` (with the run's steps, sampling and
    generator), an engine's, or LMs, wrapped in a default ``LocalSteps``. ``budget``: new tokens the
    generation may still add (> 0); ``at_boundary``: whether x ends on a step delimiter (if not,
    nothing is drafted and the target writes the next step alone). Returns the cycle's
    :class:`CycleTrace`; its ``kept_steps`` are what the cycle adds to the text.
    """
    target, draft, laps = _local(target), _local(draft), Laps()
    write = lambda model, context, used: model.write_one(StepRequest(tuple(context), budget - used))  # noqa: E731
    drafted: list[Step] = []  # 1. draft: s^_1 .. s^_k, each continuing x + the steps before it
    with laps("draft"):
        context = list(x)
        while at_boundary and len(drafted) < k and len(context) - len(x) < budget:
            step = write(draft, context, len(context) - len(x))
            step.author = "draft"
            drafted.append(step)
            context += step.ids
            if not step.boundary:  # an EOS or a cut-off step: what would follow does not start a step
                break
    rows = [list(x)]  # 2. target: row j is x + s^_1..s^_{j-1}; it exists while the context ends a step
    for step in drafted:
        if not step.boundary or len(rows[-1]) + len(step.ids) - len(x) >= budget:
            break
        rows.append(rows[-1] + step.ids)
    with laps("target"):
        written = [write(target, row, len(row) - len(x)) for row in rows]
    verdicts: list[Verdict] = []  # 3. verify: the pairs in order, until the first rejection
    with laps("verify"):
        for row, mine, theirs in zip(rows, drafted, written):  # row j is x + s^_1..s^_{j-1}: s^_j's context
            if not mine.complete:  # cut at the step cap: never accepted, the target rewrites it
                break
            scores = [target.score(row, mine.ids)] if uses_scores(verifier) else None
            [verdict] = verify_pairs(verifier, [(mine.text, theirs.text)], scores)
            verdicts.append(verdict)
            if not verdict.accepted:
                break
    m = sum(v.accepted for v in verdicts)  # 4. accept s^_1..s^_m, then s_{m+1} if its row exists
    appended = m < len(rows)  # else the last kept draft ended the generation (EOS or budget)
    kept = drafted[:m] + written[m:m + 1]
    return CycleTrace(drafted, written, verdicts, m, appended, laps["draft"], laps["target"], laps["verify"],
                      len(rows), tokens=sum(len(s.ids) for s in kept), wall_s=laps.total())


def generate_lr_reference(target_lm, draft_lm, prompt_ids: Sequence[int], verifier: Verifier,
                          settings: Settings | None = None) -> GenerationResult:
    """Lookahead Reasoning for one prompt by :func:`lr_cycle_reference`, cycle after cycle.

    ``settings`` (default ``Settings()``): this loop reads its ``k`` (None: 2, mode lr's preset),
    ``max_new_tokens``, ``steps``, ``sampling`` and ``seed``, which mean what they mean for
    :func:`.driver.generate_cycles`; it has none of the rest (it needs one shared tokenizer and has no
    width, no token-level SD, no streaming). Returns the new token ids and text with
    ``mode="lr-reference"`` and a :class:`CycleStats` of the cycles; with greedy decoding they equal those
    of ``generate_cycles``.
    """
    settings = settings or Settings()
    k, max_new_tokens = mode_k("lr", settings.k), settings.max_new_tokens
    require(len(prompt_ids) > 0, "the prompt must hold at least one token")
    check_same_tokenizer(draft_lm, target_lm)
    generator = make_generator(settings.seed)
    target, draft = (LocalSteps(lm, settings.steps, settings.sampling, generator=generator)
                     for lm in (target_lm, draft_lm))
    stats, new, at_boundary, reason = CycleStats(k=k), [], True, None
    calls_before = target_lm.stats.calls
    with Laps() as wall:
        while reason is None and len(new) < max_new_tokens:
            cycle = lr_cycle_reference(target, draft, list(prompt_ids) + new, verifier, k=k,
                                       budget=max_new_tokens - len(new), at_boundary=at_boundary)
            stats.cycles.append(cycle)
            last = cycle.kept_steps[-1]
            new += [t for step in cycle.kept_steps for t in step.ids]
            at_boundary, reason = last.boundary, "eos" if last.end == "eos" else None
    return GenerationResult(new, target_lm.decode(new), list(prompt_ids), reason or "budget",
                            target_lm.stats.calls - calls_before, wall.total(), mode="lr-reference", stats=stats)


__all__ = ["LocalSteps", "generate_lr_reference", "lr_cycle_reference"]
