"""Lookahead Reasoning over any step writer: the seam between the algorithm and what runs the models.

The cycle here needs one thing of a model: *write one step after each of these prefixes* (token ids),
ending at a delimiter, EOS or a token cap. :class:`StepModel` is that protocol. Two runtimes implement
it: ``decoding.reference.LocalSteps`` (this library's PyTorch loops, one fresh session per prefix, the
plain form of the paper's Algorithm 1) and ``lookahead_reasoning.engines.EngineSteps`` (an OpenAI-compatible
server: the prefixes go out as concurrent requests that the engine batches over its prefix cache).

One cycle from the accepted prefix x builds a *tree* of drafted steps, ``k`` deep and ``width`` wide
(width 1 is the paper's chain s^_1..s^_k): each node's children are drafted from x + the steps on
the path to it, the first with the run's sampling, the others as sampled alternatives. The target
writes its own step after x and after every node whose step ends on a delimiter and leaves budget
(its *row*). Walking from the root, the verifier judges the children of the current node against that
node's row, in order; the first accepted child is kept and the walk goes on from it; where none is
accepted, the row's step is kept (the target's correction) and the cycle ends. A node with no children
left gives its row's step as a bonus.

Two schedules, same text:

* ``sync``  draft the whole tree, then send every row at once (Algorithm 1; f_sync in the theory);
* ``async`` a row is sent as soon as its prefix exists, while the draft goes on writing deeper
            (f_async): the target's work overlaps the draft's. Drafting stops early once the rows
            that finished already decide the walk.

With greedy decoding and the exact verifier both schedules keep exactly the target's own steps, so the
text is the target's greedy text whatever k, width and schedule. (The local PyTorch runtime runs the
rows of an ``async`` cycle one after another: there the schedule changes nothing but the order of
work; the overlap pays where rows run elsewhere, on an engine.)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..errors import require
from ..plan import CyclePlan
from ..presets import DEFAULT_MAX_NEW_TOKENS, mode_k
from ..steps import Step, StepModel, StepRequest, closing
from ..verifiers.base import Verdict, Verifier
from ..verifiers.likelihood import TokenScores, uses_scores, verify_pairs
from .driver import CyclePolicy, FixedK, Position, drive
from .results import CycleTrace, GenerationResult, LRStats, PlanNote
from .streaming import OnText, stream_for

# ---------------------------------------------------------------------------------------- the tree

@dataclass
class Node:
    """A drafted step in the cycle's tree (the root holds no step: it stands for x itself)."""

    context: tuple[int, ...]  # the ids before this node's step (x + the path's steps)
    step: Step | None = None
    used: int = 0  # tokens of the path up to and including this node's step
    children: list["Node"] = field(default_factory=list)
    row: "asyncio.Task[Step] | None" = None  # the target's step after this node
    scores: "asyncio.Task[TokenScores] | None" = None  # the target's scores of this node's step (likelihood verifiers)

    @property
    def after(self) -> tuple[int, ...]:
        """The ids after this node's step: the prefix of its row and of its children."""
        return self.context + tuple(self.step.ids) if self.step is not None else self.context

    def opens(self, budget: int) -> bool:
        """Whether text may follow this node in this cycle: it ends on a delimiter and leaves budget."""
        return (self.step is None or self.step.boundary) and self.used < budget


class Cycle:
    """One cycle over two step models (module docstring); :meth:`arun` returns its :class:`CycleTrace`."""

    def __init__(self, target: StepModel, draft: StepModel, verifier: Verifier, plan: CyclePlan,
                 x: Sequence[int], budget: int):
        self.target, self.draft, self.verifier, self.plan = target, draft, verifier, plan
        self.root, self.budget = Node(tuple(x)), budget
        self.verdicts: dict[tuple[int, int], Verdict] = {}  # (id of parent node, child index) -> verdict
        self.scored = uses_scores(verifier)
        require(not self.scored or (hasattr(target, "ascore") and getattr(target, "can_score", True)),
                f"the {getattr(verifier, 'name', 'verifier')} verifier judges drafted steps by the target's "
                f"probabilities of their tokens, which {getattr(target, 'name', 'this target')} cannot give "
                "(its runtime has no scoring request; over an engine that scores no prompt, such as llama.cpp's "
                "server, name a scorer: --scorer or scorer=, the target's model loaded in this process)")
        self.times = {"draft": 0.0, "target": 0.0, "verify": 0.0}

    def _request_row(self, node: Node) -> None:
        if node.opens(self.budget) and node.row is None:
            budget, chunk = self.budget - node.used, self.plan.chunk if node is self.root else 0
            request = StepRequest(node.after, min(budget, chunk), free=True) if chunk else StepRequest(node.after, budget)
            node.row = asyncio.ensure_future(self.target.awrite(request))

    async def _draft_level(self, level: list[Node]) -> list[Node]:
        """Draft ``width`` children of every open node of ``level`` at once; the next level."""
        parents = [n for n in level if n.opens(self.budget)]
        asks = [(p, StepRequest(p.after, self.budget - p.used, a)) for p in parents for a in range(self.plan.width)]
        if not asks:
            return []
        start = time.perf_counter()
        steps = await asyncio.gather(*(self.draft.awrite(r) for _, r in asks))
        self.times["draft"] += time.perf_counter() - start
        children = []
        for (parent, _), step in zip(asks, steps):
            step.author = "draft"
            child = Node(parent.after, step, parent.used + len(step.ids))
            if self.scored and step.complete:
                child.scores = asyncio.ensure_future(self.target.ascore(child.context, step.ids))
            parent.children.append(child)
            children.append(child)
        return children

    def _decided(self) -> bool:
        """Whether the rows finished so far already fix the walk's end (so drafting deeper is of no use)."""
        node = self.root
        while node.row is not None and node.row.done() and node.children and self._scored(node):
            nxt = self._accepted_child(node)
            if nxt is None:
                return True
            node = nxt
        return False

    def _accepted_child(self, node: Node) -> Node | None:
        """The first child of ``node`` the verifier accepts against ``node``'s finished row (judged once)."""
        theirs = node.row.result()
        for i, child in enumerate(node.children):
            if not child.step.complete:  # cut at the step cap: never accepted
                continue
            key = (id(node), i)
            if key not in self.verdicts:
                start = time.perf_counter()
                scores = [child.scores.result()] if child.scores is not None else None
                [self.verdicts[key]] = verify_pairs(self.verifier, [(child.step.text, theirs.text)], scores)
                self.times["verify"] += time.perf_counter() - start
            if self.verdicts[key].accepted:
                return child
        return None

    @staticmethod
    def _scored(node: Node) -> bool:
        """Whether the scores of ``node``'s children (where asked for) have come back."""
        return all(c.scores is None or c.scores.done() for c in node.children)

    async def _grow(self) -> None:
        level, overlap = [self.root], self.plan.schedule == "async"
        if overlap:
            self._request_row(self.root)
        for _ in range(self.plan.k):
            if overlap and self._decided():
                break
            level = await self._draft_level(level)
            if overlap:
                for node in level:
                    self._request_row(node)
            if not level:
                break
        if not overlap:
            self._request_all(self.root)

    def _request_all(self, node: Node) -> None:
        self._request_row(node)
        for child in node.children:
            self._request_all(child)

    async def _walk(self) -> tuple[list[Node], Step | None]:
        """The accepted path of drafted nodes and the target's step that ends it (None: the path's last
        step ended generation)."""
        path, node = [], self.root
        while True:
            if node.row is None:  # EOS or the budget inside the path's last step: nothing follows
                return path, None
            start = time.perf_counter()
            await node.row
            self.times["target"] += time.perf_counter() - start
            if not self._scored(node):
                start = time.perf_counter()
                await asyncio.gather(*(c.scores for c in node.children if c.scores is not None))
                self.times["verify"] += time.perf_counter() - start
            child = self._accepted_child(node)
            if child is None:
                return path, node.row.result()
            path.append(child)
            node = child

    async def arun(self) -> CycleTrace:
        start = time.perf_counter()
        try:
            await self._grow()
            path, tail = await self._walk()
        finally:
            for task in self._rows() + [n.scores for n in self._nodes() if n.scores is not None]:
                if not task.done():
                    task.cancel()
        return self._trace(path, tail, time.perf_counter() - start)

    def _nodes(self) -> list[Node]:
        """Every node of the tree, the root first."""
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children)
        return out

    def _rows(self) -> list[asyncio.Task]:
        return [n.row for n in self._nodes() if n.row is not None]

    def _trace(self, path: list[Node], tail: Step | None, wall_s: float) -> CycleTrace:
        """The cycle as a :class:`CycleTrace`: the main chain of drafts along the accepted path."""
        nodes = [self.root] + path
        drafted = [n.step for n in path]
        verdicts, alternatives, alt_verdicts = [], [], []
        for node in nodes:
            if not node.children:
                break
            accepted = next((i for i, c in enumerate(node.children) if c in path), None)
            main = accepted if accepted is not None else 0
            if accepted is None:
                drafted.append(node.children[0].step)
            judged = self.verdicts.get((id(node), main))
            if judged is not None:
                verdicts.append(judged)
            alternatives.append([c.step for i, c in enumerate(node.children) if i != main])
            alt_verdicts += [v for (p, i), v in self.verdicts.items() if p == id(node) and i != main]
        target = [n.row.result() for n in nodes if n.row is not None]  # every row on the path was awaited
        rows = len(self._rows())
        tokens = sum(len(n.step.ids) for n in path) + (len(tail.ids) if tail is not None else 0)
        return CycleTrace(drafted, target, verdicts, len(path), tail is not None, self.times["draft"],
                          self.times["target"], self.times["verify"], rows, alternatives=alternatives,
                          alt_verdicts=alt_verdicts, tokens=tokens, wall_s=wall_s)


def run_cycle_over(target: StepModel, draft: StepModel, verifier: Verifier, plan: CyclePlan, x: Sequence[int],
                   budget: int) -> CycleTrace:
    """One cycle (module docstring) from the accepted prefix ``x`` with ``budget`` tokens left; sync API."""
    return asyncio.run(Cycle(target, draft, verifier, plan, x, budget).arun())


# ---------------------------------------------------------------------------------------- the run

@dataclass
class StepwiseRun:
    """A generation over step models: the prompt, the text so far and where it stands."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    new: list[int] = field(default_factory=list)
    at_boundary: bool = True
    done: str | None = None

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.new)

    def keep(self, trace: CycleTrace) -> None:
        """Append the cycle's kept steps; EOS inside them, or the budget, ends the run."""
        kept = trace.kept_steps
        self.new += [t for step in kept for t in step.ids][:max(0, self.remaining)]
        if kept:
            self.at_boundary = kept[-1].boundary
            if kept[-1].end == "eos":
                self.done = "eos"
        if self.done is None and self.remaining <= 0:
            self.done = "budget"


class StepCycles:
    """The driver's runtime over two step models (:class:`~.driver.Cycles`): each cycle is a
    :class:`Cycle` from the text so far; its kept steps extend the run. Rows run as the step models
    run them (concurrent requests for an engine), so the driver's ``policy.rows`` is not asked."""

    def __init__(self, target: StepModel, draft: StepModel, verifier: Verifier, run: StepwiseRun, stats: LRStats):
        self.target, self.draft, self.verifier, self.run, self.stats = target, draft, verifier, run, stats

    @property
    def done(self) -> str | None:
        return self.run.done

    def position(self) -> Position:
        run = self.run
        return Position(len(run.new), run.remaining, run.at_boundary, len(run.prompt) + len(run.new))

    async def cycle(self, plan: CyclePlan, policy: CyclePolicy) -> CycleTrace:
        run = self.run
        self.stats.k = max(self.stats.k, plan.k)
        trace = await Cycle(self.target, self.draft, self.verifier, plan, run.prompt + tuple(run.new), run.remaining).arun()
        trace.plan = trace.plan or PlanNote(plan.label, float("nan"), trace.target_rows)
        run.keep(trace)
        return trace


async def agenerate_stepwise(target: StepModel, draft: StepModel, prompt_ids: Sequence[int], verifier: Verifier,
                             policy: CyclePolicy, max_new_tokens: int,
                             on_cycle: Callable[[CycleTrace, StepwiseRun], None] | None = None) -> GenerationResult:
    """The one driver (:func:`~.driver.drive`) over :class:`StepCycles` until EOS or ``max_new_tokens``;
    ``policy`` plans each cycle and learns from it. The models' connections stay open: other runs on the
    same event loop may share them, so whoever runs the loop closes them (:func:`generate_stepwise` does)."""
    require(isinstance(max_new_tokens, int) and max_new_tokens >= 1,
            f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    require(len(prompt_ids) > 0, "the prompt must hold at least one token")
    run, stats, start = StepwiseRun(tuple(prompt_ids), max_new_tokens), LRStats(), time.perf_counter()
    each = (lambda trace: on_cycle(trace, run)) if on_cycle is not None else None
    await drive(StepCycles(target, draft, verifier, run, stats), policy, stats, each)
    wall = time.perf_counter() - start
    return GenerationResult(run.new, target.decode(run.new), list(prompt_ids), run.done, 0, wall,
                            mode="lr-stepwise", stats=stats)


def generate_stepwise(target: StepModel, draft: StepModel, prompt_ids: Sequence[int], verifier: Verifier, *,
                      policy: CyclePolicy | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                      on_text: OnText | None = None) -> GenerationResult:
    """:func:`agenerate_stepwise` for synchronous callers (default policy: sync LR with mode lr's k)."""
    streamer = stream_for(on_text, target.decode)
    on_cycle = (lambda trace, run: streamer.update(run.new)) if streamer else None
    result = asyncio.run(closing(agenerate_stepwise(target, draft, prompt_ids, verifier, policy or FixedK(mode_k("lr")),
                                                    max_new_tokens, on_cycle), target, draft))
    if streamer:
        streamer.finish(result.token_ids)
    return result


__all__ = ["Cycle", "Node", "StepCycles", "StepwiseRun", "agenerate_stepwise", "generate_stepwise", "run_cycle_over"]
