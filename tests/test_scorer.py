"""A scorer: the target's probabilities of drafted tokens from a model in this process, for the likelihood
verifiers over an engine that scores no prompt (llama.cpp's server). Its one cached session must give what
a fresh forward gives, and a run over engines must judge by its scores."""

from __future__ import annotations

import json

import pytest
from lr_helpers import tiny_lm
from test_engine_client import FakeEngine

from lookahead_reasoning import LookaheadGenerator
from lookahead_reasoning.cli import main
from lookahead_reasoning.decoding.reference import LocalSteps
from lookahead_reasoning.errors import ConfigError, TokenizerMismatchError
from lookahead_reasoning.runtime.vocab import PROBE
from lookahead_reasoning.runtime.scorer import SessionScorer
from lookahead_reasoning.steps import TokenScores

TARGET = tiny_lm(0)


def test_the_cached_scorer_gives_a_fresh_forwards_scores_and_forwards_only_what_is_new():
    x = [5, 6, 7, 8, 9]
    calls = [(x, [10, 11, 12]), (x + [10, 11, 12], [13, 14]), (x + [10, 11, 12, 13, 14], [15]),  # a cycle's chain
             (x + [10, 20], [21, 22]),  # the next cycle, after a rejection: back to a shared prefix
             ([40, 41], [42]), (x, [10, 11, 12])]  # another prompt; then the first call again
    scorer, fresh = SessionScorer(TARGET), LocalSteps(TARGET)
    fed: list[int] = []
    with TARGET.metered(lambda t: fed.append(t.n)):
        got = [scorer.score(c, ids) for c, ids in calls]
    for (context, ids), mine in zip(calls, got):
        want = fresh.score(context, ids)
        assert mine.probs == pytest.approx(want.probs, abs=1e-5) and mine.ranks == want.ranks
    assert scorer.calls == len(calls)
    assert fed[:3] == [len(x) + 3, 1 + 2, 1 + 1]  # the chain: its new step and the context's last token again
    assert sum(fed) < sum(len(c) + len(ids) for c, ids in calls)


class Stub:
    """A scorer that gives every drafted token probability ``p`` (and tokenizes as the fake engine does)."""

    def __init__(self, p: float):
        self.p, self.asked = p, []

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def score(self, context, ids) -> TokenScores:
        self.asked.append((tuple(context), tuple(ids)))
        return TokenScores.of([self.p] * len(ids), [0] * len(ids))

    async def ascore(self, context, ids) -> TokenScores:
        return self.score(context, ids)


@pytest.mark.parametrize("p, kept", [(0.9, True), (0.05, False)])
def test_lr_over_llama_cpp_judges_by_the_scorers_probabilities(p, kept):
    stub = Stub(p)
    with FakeEngine() as engine:  # llama.cpp: scores no prompt; its draft writes what its target writes
        gen = LookaheadGenerator(target=engine.url, draft=engine.url, verifier="likelihood", mode="lr", k=2,
                                 scorer=stub)
        result = gen.generate("What is 2 + 2?", max_new_tokens=30)
        gen.close()
    cycles = [c for c in result.stats.cycles if c.drafted]
    assert cycles and stub.asked  # every judged step was scored by the stub, none by the engine
    assert all((c.accepted == len(c.drafted)) == kept for c in cycles)  # min-prob 0.3 decides, not the text
    assert all(v.score == pytest.approx(p) for c in cycles for v in c.verdicts if v.score is not None)


def test_without_a_scorer_llama_cpp_says_it_cannot_and_a_scorer_of_another_vocabulary_is_refused():
    with FakeEngine() as engine:
        gen = LookaheadGenerator(target=engine.url, draft=engine.url, verifier="likelihood", mode="lr", k=2)
        with pytest.raises(ConfigError, match="llama.cpp's server, name a scorer"):  # before any request is sent
            gen.generate("What is 2 + 2?", max_new_tokens=30)
        gen.close()
        with pytest.raises(TokenizerMismatchError, match="scorer"):
            LookaheadGenerator(target=engine.url, draft=engine.url, verifier="likelihood", scorer=SessionScorer(TARGET))


def test_the_bench_names_its_scorer_and_checks_its_vocabulary(tmp_path, capsys):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    out = tmp_path / "r.jsonl"
    argv = ["bench", "--dataset", str(dataset), "--out", str(out), "--modes", "lr@k1", "--max-new-tokens", "16"]
    with FakeEngine() as engine, FakeEngine(flavour="vllm") as scoring, \
            FakeEngine(flavour="vllm", tokens={PROBE: [1, 2, 3]}) as other:
        urls = ["--target-url", engine.url, "--draft-url", engine.url]
        assert main(argv + urls + ["--scorer", other.url]) == 2
        assert "tokenize text differently" in capsys.readouterr().err and out.read_text() == ""
        assert main(argv + urls + ["--scorer", scoring.url]) == 0
    [record] = [json.loads(x) for x in out.read_text().splitlines()]
    assert record["scorer"] == scoring.url and record["verifier"] == "exact"
