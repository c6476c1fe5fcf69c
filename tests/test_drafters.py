"""Drafters that learn what the target kept: ``update(outcome)`` after every SD iteration.

The loop tells the drafter, once per iteration, how many tokens each checked row drafted (m) and how
many the target accepted (n), with the proposal's per-token confidences for those m tokens; that is
exactly what the run's counters record (``SDStats.log``, which each LR cycle's trace carries).
"""

from __future__ import annotations

import pytest

from lookahead_reasoning.decoding.autoregressive import generate
from lookahead_reasoning.decoding.drafters import (DraftOutcome, ModelDrafter, NGramDrafter, Proposal, RowOutcome)
from lookahead_reasoning.decoding.driver import FixedPolicy, drive, prepare
from lookahead_reasoning.decoding.results import SDStats
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.settings import Settings, TokenSD
from lookahead_reasoning.decoding.speculative import TokenSDRun, decode_rows_sd, generate_sd
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.stopping import StopChecker, StopCondition
from lookahead_reasoning.verifiers import ExactMatchVerifier
from lookahead_reasoning.runtime.pair import model_pair

from conftest import ORDINARY_IDS, set_eos, tiny_lm


class ScriptedDrafter:
    """Proposes the target's own greedy continuation for ``script[i]`` tokens in iteration i, then one
    token the target does not write, each with a made-up confidence; keeps every proposal and outcome."""

    def __init__(self, answer: list[int], start: int, script: list[int]):
        self.answer, self.start, self.script = answer, start, script
        self.proposed: list[tuple[list[int], list[float], int]] = []  # tokens, confidences, how many are right
        self.outcomes: list[DraftOutcome] = []

    def propose(self, rows, gamma, active):
        done = len(rows[0]) - self.start
        right = self.script[len(self.proposed) % len(self.script)]
        follow = self.answer[done + right] if done + right < len(self.answer) else 0
        tokens = (self.answer[done:done + right] + [(follow + 1) % len(ORDINARY_IDS)])[:gamma]
        confidence = [round(0.9 - 0.1 * j, 2) for j in range(len(tokens))]
        self.proposed.append((tokens, confidence, min(right, len(tokens))))
        return Proposal([tokens], [None], confidence=[confidence])

    def update(self, outcome):
        self.outcomes.append(outcome)


class RecordingDrafter(ModelDrafter):
    """A model drafter that keeps what each call asked for, what it drafted and what it heard."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, int]] = []  # (gamma asked, tokens drafted for row 0)
        self.outcomes: list[DraftOutcome] = []

    def propose(self, rows, gamma, active):
        proposal = super().propose(rows, gamma, active)
        self.calls.append((gamma, len(proposal.tokens[0])))
        return proposal

    def update(self, outcome):
        self.outcomes.append(outcome)
        super().update(outcome)


def as_log(outcomes: list[DraftOutcome]) -> list[tuple]:
    return [(r.sure, r.drafted, r.accepted, r.confidence) for o in outcomes for r in o.rows]


# ------------------------------------------------------------------------------------ the loop's calls

def test_update_is_called_once_per_iteration_with_what_the_target_accepted():
    target, prompt, n, gamma = set_eos(tiny_lm("qwen2"), []), [5, 6, 7, 8], 30, 4
    answer = generate(target, prompt, max_new_tokens=n).token_ids
    drafter = ScriptedDrafter(answer, len(prompt), [3, 0, 5, 1, 2])
    result = generate_sd(target, prompt, drafter, gamma=gamma, max_new_tokens=n)
    assert result.token_ids == answer
    assert len(drafter.outcomes) == len(drafter.proposed) == result.stats.iterations == result.target_forwards
    for outcome, (tokens, confidence, right) in zip(drafter.outcomes, drafter.proposed):
        assert outcome == DraftOutcome((RowOutcome(0, len(tokens), right, None, confidence),))
    assert {o.rows[0].accepted for o in drafter.outcomes} >= {0, 1, 2, 3, 4}  # the script reached every count
    assert drafter.outcomes[-1].rows[0].drafted < gamma  # the budget cut the last proposal
    assert as_log(drafter.outcomes) == result.stats.log


def test_update_names_the_rows_the_iteration_checked():
    """Rows of different budgets in one session: a row is in an iteration's outcome while it runs. The
    draft is the target (every token accepted), so a row with budget b runs ceil(b / (gamma + 1)) iterations."""
    target = set_eos(tiny_lm("qwen2"), [])
    rows, budgets, gamma = [[1, 2, 3], list(range(40, 70)), [9], [4, 4, 4, 4, 4, 4]], [15, 4, 20, 9], 3
    drafter = RecordingDrafter(tiny_lm("qwen2"), SamplingConfig())
    session, stats = Session(target, rows), SDStats()
    checkers = [StopChecker(StopCondition(frozenset(), (), b), target.decode) for b in budgets]
    decode_rows_sd(session, [len(r) for r in rows], checkers, TokenSDRun(SamplingConfig(), drafter, gamma, stats=stats))
    runs = [-(-b // (gamma + 1)) for b in budgets]
    assert [[r.row for r in o.rows] for o in drafter.outcomes] == [
        [b for b, n in enumerate(runs) if n > i] for i in range(max(runs))]
    assert all(r.accepted == r.drafted for o in drafter.outcomes for r in o.rows)
    assert as_log(drafter.outcomes) == stats.log


def test_each_lr_trace_carries_its_cycle_s_token_outcomes_in_row_order():
    """LR with SD inside the target's k + 1 rows: each cycle's trace holds the outcomes of that cycle's
    SD iterations (what mode auto's policy learns token rates from), together the run's counters' log,
    and its timed forwards of each model."""
    target, draft, prompt = tiny_lm("qwen2"), tiny_lm("qwen2", seed=1), [5, 6, 7, 8]
    settings = Settings(k=2, max_new_tokens=40, token_sd=TokenSD(target="draft", gamma=4))
    policy = FixedPolicy(2)
    cycles, _ = prepare(model_pair(target, draft), prompt, ExactMatchVerifier(), settings, policy)
    stats = cycles.stats
    drive(cycles, policy, stats)
    result = cycles.result(policy)
    cycles = result.stats.cycles
    assert [o for c in cycles for o in c.token_outcomes] == stats.target_sd.log
    assert len(stats.target_sd.log) > len(cycles) and all(c.sd_iterations == len(c.token_outcomes) for c in cycles)
    assert all(entry[3] is not None for entry in stats.target_sd.log)  # the draft's confidence of every token
    assert all(c.target_forwards and c.draft_forwards for c in cycles)
    assert sum(t.seconds for c in cycles for t in c.target_forwards + c.draft_forwards) == pytest.approx(
        sum(c.forward_s for c in cycles))


def outcome(*rows: tuple[int, int]) -> DraftOutcome:
    return DraftOutcome(tuple(RowOutcome(b, m, n) for b, (m, n) in enumerate(rows)))


# ---------------------------------------------------------------------------------------- n-gram

def test_ngram_drafter_hears_the_outcome_and_proposes_as_before():
    drafter = NGramDrafter(max_n=3, min_n=1)
    rows = [[1, 2, 3, 4, 5, 9, 1, 2, 3], [7, 8, 1, 7, 9, 1, 7]]
    before = drafter.propose(rows, 3, [True, True])
    drafter.update(outcome((3, 0), (3, 3)))
    assert drafter.propose(rows, 3, [True, True]) == before and before.tokens == [[4, 5, 9], [9, 1, 7]]
    target, prompt = tiny_lm("qwen2"), [3, 4, 5, 3, 4, 5, 3, 4]
    result = generate_sd(target, prompt, NGramDrafter(max_n=2), gamma=4, max_new_tokens=30)
    assert result.token_ids == generate(tiny_lm("qwen2"), prompt, max_new_tokens=30).token_ids
    assert result.stats.drafted > 0


def test_a_drafter_with_propose_alone_still_drafts():
    """A drafter written before drafters were told the outcome (``propose`` only) runs as before."""
    target = tiny_lm("qwen2")

    class Lookup:  # prompt lookup, no update
        def __init__(self):
            self.inner = NGramDrafter()

        def propose(self, rows, gamma, active):
            return self.inner.propose(rows, gamma, active)

    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    ours = generate_sd(target, prompt, Lookup(), gamma=4, max_new_tokens=20)
    assert ours.token_ids == generate(target, prompt, max_new_tokens=20).token_ids
    assert ours.stats.drafted > 0
