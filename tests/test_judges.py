"""The paper's judge verifiers on tiny models: paper-judge (exact match, then "[aligned" read from one
token), target-score (a 0-9 digit from the target's next-token distribution), and the HTTP judge
against a local server that runs a tiny random model, checked against the local judge on the same
model. The models are random: these tests check the mechanics (prompts, prefill, which token ids
are read, thresholds, failure counts), not the quality of the judgements."""

from __future__ import annotations

import http.server
import json
import math
import threading

import pytest
import torch
from model_engine import QuietJSONHandler
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from lookahead_reasoning.errors import ConfigError, VerifierError
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.testing import tiny_model
from lookahead_reasoning.verifiers import (ALIGNED_QUESTION, CascadeVerifier, JudgeOptions, LLMJudgeVerifier,
                                           OpenAIJudgeVerifier, TargetScoreVerifier, make_verifier,
                                           paper_judge)

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
STEPS = ["MATCH x = 3", "x is 3", "x = 4", "x = 5", "the total is 12 apples", "Total: 12 apples"]


def word_tokenizer() -> PreTrainedTokenizerFast:
    """Word-level tokenizer over the aligned question's words, the test steps and both answer words."""
    text = " ".join([ALIGNED_QUESTION.format(draft="", target="", yes="aligned", no="unaligned"), *STEPS,
                     "yes no Yes No user assistant Aligned Unaligned"])
    words = {w for w, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text)}
    vocab = {w: i for i, w in enumerate(SPECIALS + sorted(words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>",
                                 additional_special_tokens=["<|im_start|>"])
    hf.chat_template = CHATML
    return hf


def word_lm(seed: int = 0) -> LM:
    tok = word_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         pad_token_id=tok.pad_token_id, initializer_range=0.5)
    return LM(LlamaForCausalLM(config).eval().requires_grad_(False), tok, name=f"tiny-word-{seed}")


def favour_answers(lm: LM, prompts: list[str]) -> LM:
    """Make the answer words the model's top token on some prompts (in place): the output rows of the
    two tokens most often on top after ``prompts`` are copied, doubled, onto "aligned" and "unaligned"."""
    from collections import Counter

    with torch.no_grad():
        tops = [int(lm.model(torch.tensor([lm.encode(p)])).logits[0, -1].argmax()) for p in prompts]
        (first, _), (second, _) = Counter(tops).most_common(2)
        weight = lm.model.get_output_embeddings().weight
        for word, source in (("aligned", first), ("unaligned", second)):
            weight[lm.tokenizer.convert_tokens_to_ids(word)] = 2 * weight[source]
    return lm


class AlignedScript(LM):
    """Scripted judge: rows holding MATCH answer "aligned", rows holding "4" answer "unaligned",
    other rows put their top token on "the" (neither answer). Records every forward's rows."""

    def __init__(self):
        tok = word_tokenizer()
        super().__init__(word_lm().model, tok, name="aligned-script")
        self.calls = []
        self.ids = {w: tok.convert_tokens_to_ids(w) for w in ("aligned", "unaligned", "MATCH", "4", "the", "[")}

    def forward(self, input_ids, state=None, new_mask=None, keep=1, greedy=False):
        assert not greedy  # a judge reads logits
        rows = [input_ids[b][new_mask[b] == 1].tolist() for b in range(input_ids.shape[0])]
        self.calls.append(rows)
        logits = torch.full((len(rows), 1, self.vocab_size), -20.0)
        for b, row in enumerate(rows):
            yes, no, other = self.ids["aligned"], self.ids["unaligned"], self.ids["the"]
            logits[b, 0, yes], logits[b, 0, no] = math.log(0.2), math.log(0.1)  # a P(aligned) share of 2/3
            answer = yes if self.ids["MATCH"] in row else no if self.ids["4"] in row else other
            logits[b, 0, answer] = 0.0
        return logits, None


# ------------------------------------------------------------------------------------------ paper-judge


def test_paper_judge_exact_match_first_then_one_token_from_the_judge():
    lm = AlignedScript()
    v = make_verifier("paper-judge", judge=lm)
    assert isinstance(v, CascadeVerifier) and v.name == "paper-judge"
    pairs = [("X = 3", "x=3"), ("MATCH x = 3", "x is 3"), ("x = 4", "x = 5"),
             ("the total is 12 apples", "Total: 12 apples")]
    got = v.verify(pairs)
    assert [g.accepted for g in got] == [True, True, False, False]
    assert [g.verifier for g in got] == ["exact", "judge", "judge", "judge"]
    # one forward for the three pairs exact match rejected; every prompt ends on the prefilled "["
    [rows] = lm.calls
    assert len(rows) == 3 and all(row[-1] == lm.ids["["] for row in rows)
    assert got[1].score == pytest.approx(1 / 1.1, abs=1e-4)  # the share is recorded, the top token decided
    # the last pair: the top token is neither answer word -> unclear, rejected, counted
    assert got[3].error == "unclear" and got[3].score is None
    assert got[2].error is None and v.failures == 1


def test_paper_judge_prompt_asks_for_aligned_or_unaligned():
    v = paper_judge(judge=AlignedScript())
    text = v.then.prompt("  MATCH x = 3\n", "x is 3")
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n[")
    assert "Step A:\nMATCH x = 3\n" in text and "Step B:\nx is 3" in text
    assert "[aligned] or [unaligned]" in text
    tok = word_tokenizer()
    assert v.then.yes_ids == {tok.convert_tokens_to_ids("aligned"), tok.convert_tokens_to_ids("Aligned")}
    assert v.then.no_ids == {tok.convert_tokens_to_ids("unaligned"), tok.convert_tokens_to_ids("Unaligned")}


def test_paper_judge_with_a_threshold_reads_the_share():
    lm = AlignedScript()
    pairs = [("x = 4", "x = 5"), ("the total is 12 apples", "Total: 12 apples")]  # shares 0.2 / 1.2, 2/3
    low = paper_judge(judge=lm, threshold=0.6).verify(pairs)
    high = paper_judge(judge=lm, threshold=0.7).verify(pairs)
    assert [g.accepted for g in low] == [False, True]  # row 0: "unaligned" on top, its share is 0.2/1.2
    assert [g.accepted for g in high] == [False, False]
    assert all(g.error is None for g in low + high)


def test_paper_judge_needs_exactly_one_judge():
    with pytest.raises(VerifierError, match="exactly one judge"):
        paper_judge()
    with pytest.raises(VerifierError, match="exactly one judge"):
        paper_judge(judge=AlignedScript(), base_url="http://127.0.0.1:9/v1")


def test_paper_judge_on_a_random_model_reads_its_argmax():
    """On a random model the verdict must follow the model's own top token after the prompt."""
    pairs = [(STEPS[i], STEPS[j]) for i in range(len(STEPS)) for j in range(i + 1, len(STEPS))]
    lm = word_lm(seed=5)
    v = paper_judge(judge=lm)
    judge = v.then
    favour_answers(lm, [judge.prompt(d, t) for d, t in pairs])
    got = v.verify(pairs)
    assert {g.accepted for g in got} == {True, False}  # both answers occur
    for (d, t), verdict in zip(pairs, got):
        ids = torch.tensor([lm.encode(judge.prompt(d, t))])
        top = int(lm.model(ids).logits[0, -1].argmax())
        expected = "yes" if top in judge.yes_ids else "no" if top in judge.no_ids else None
        assert verdict.accepted == (expected == "yes")
        assert (verdict.error == "unclear") == (expected is None)
    assert v.failures == sum(g.error is not None for g in got)


# ------------------------------------------------------------------------------------------ target-score


@pytest.fixture(scope="module")
def tiny_target():
    loaded = tiny_model("qwen2", seed=4)
    return LM(loaded.model, loaded.tokenizer, name="tiny-target")


def reference_digit_probs(lm, text, digit_ids):
    """P(d) for d = 0..9 after ``text``, from an unbatched, unpadded forward."""
    with torch.no_grad():
        probs = torch.softmax(lm.model(torch.tensor([lm.encode(text)])).logits[0, -1].float(), dim=-1)
    return [float(probs[ids].max()) for ids in digit_ids]


def test_target_score_reads_the_digits_and_applies_the_threshold(tiny_target):
    pairs = [("48 / 2 = 24", "half of 48 is 24"), ("x = 3", "x = 4"), ("the end.", "so the answer is 7.\n\n")]
    scorer = TargetScoreVerifier(tiny_target, threshold=0, min_mass=0.0)
    tok = tiny_target.tokenizer
    assert scorer.digit_ids == [[tok.convert_tokens_to_ids(str(d))] for d in range(10)]
    text = scorer.prompt(*pairs[0])
    assert "Proposed step:\n48 / 2 = 24" in text and "Reference step:\nhalf of 48 is 24" in text
    assert text.endswith("<|im_start|>assistant\n")
    got = scorer.verify(pairs)
    scores = []
    for (d, t), verdict in zip(pairs, got):
        p = reference_digit_probs(tiny_target, scorer.prompt(d, t), scorer.digit_ids)
        scores.append(max(range(10), key=lambda i: p[i]))
        assert verdict.score == scores[-1] and verdict.accepted and verdict.error is None
    for threshold in sorted(set(scores) | {9}):  # each side of every score seen
        strict = TargetScoreVerifier(tiny_target, threshold=threshold, min_mass=0.0).verify(pairs)
        assert [g.accepted for g in strict] == [s >= threshold for s in scores]


def test_target_score_uses_counters_of_its_own_and_counts_unclear_answers(tiny_target):
    calls = tiny_target.stats.calls
    scorer = TargetScoreVerifier(tiny_target, min_mass=0.999999)  # no digit can hold that much here
    got = scorer.verify([("a", "b"), ("c", "d")])
    assert tiny_target.stats.calls == calls and scorer.judge.stats.calls == 1  # one forward, not the target's
    assert [g.error for g in got] == ["unclear", "unclear"] and scorer.failures == 2
    assert not any(g.accepted for g in got)


@pytest.mark.parametrize("threshold", [10, -1, 8.5, True])
def test_target_score_threshold_is_an_integer_score(tiny_target, threshold):
    with pytest.raises(ConfigError, match="integer score in \\[0, 9\\]"):
        TargetScoreVerifier(tiny_target, threshold=threshold)


def test_target_score_by_name_needs_the_target(tiny_target):
    with pytest.raises(VerifierError, match="target=LM"):
        make_verifier("target-score")
    v = make_verifier("score", target=tiny_target, threshold=7)
    assert isinstance(v, TargetScoreVerifier) and v.threshold == 7


# ------------------------------------------------------------------------------------------ HTTP judge on a tiny model


class ModelServer(http.server.ThreadingHTTPServer):
    """/v1/models and /v1/completions (max_tokens=1) answered by a tiny model: every token's logprob."""

    def __init__(self, lm: LM):
        super().__init__(("127.0.0.1", 0), _ModelHandler)
        self.lm, self.bodies = lm, []

    def complete(self, body: dict) -> dict:
        self.bodies.append(body)
        tok, choices = self.lm.tokenizer, []
        for i, prompt in enumerate(body["prompt"]):
            with torch.no_grad():
                logits = self.lm.model(torch.tensor([self.lm.encode(prompt)])).logits[0, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            top = {tok.convert_ids_to_tokens(j): float(logp[j]) for j in range(len(tok))}
            best = max(top, key=top.get)
            choices.append({"index": i, "text": best, "logprobs": {"tokens": [best], "top_logprobs": [top]}})
        return {"object": "text_completion", "model": body["model"], "choices": choices}


class _ModelHandler(QuietJSONHandler):
    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "tiny-judge", "object": "model"}]})

    def do_POST(self):
        self._send(self.server.complete(json.loads(self.rfile.read(int(self.headers["Content-Length"])))))


@pytest.fixture
def model_server():
    lm = word_lm(seed=2)
    pairs = [(STEPS[i], STEPS[j]) for i in range(len(STEPS)) for j in range(len(STEPS)) if i != j]
    favour_answers(lm, [paper_judge(judge=lm).then.prompt(d, t) for d, t in pairs])
    server = ModelServer(lm)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", server, lm
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_http_judge_equals_the_local_judge_on_the_same_model(model_server):
    """Same model, same prompt text: the server's answer read over HTTP gives the local judge's score."""
    url, server, lm = model_server
    pairs = [(STEPS[i], STEPS[j]) for i, j in [(0, 1), (2, 3), (4, 5), (1, 4)]]
    scores = sorted(v.score for v in LLMJudgeVerifier(lm, JudgeOptions(min_mass=0.0)).verify(pairs))
    middle = (scores[1] + scores[2]) / 2  # a threshold that accepts two pairs and rejects two
    options = JudgeOptions(min_mass=0.0, threshold=middle)
    local = LLMJudgeVerifier(lm, options).verify(pairs)
    remote = OpenAIJudgeVerifier(url, None, options, format_prompt=lm.chat_prompt)
    got = remote.verify(pairs)
    assert [g.score for g in got] == pytest.approx([g.score for g in local], abs=1e-5)
    assert [g.accepted for g in got] == [g.accepted for g in local] and sum(g.accepted for g in got) == 2
    assert remote.model == "tiny-judge"  # model=None: the server's only model
    [body] = server.bodies
    assert body["prompt"][0] == LLMJudgeVerifier(lm).prompt(*pairs[0]) and body["max_tokens"] == 1


def test_http_paper_judge_prefills_the_bracket_and_matches_the_local_one(model_server):
    url, server, lm = model_server
    pairs = [(STEPS[i], STEPS[j]) for i in range(len(STEPS)) for j in range(len(STEPS))]
    local = paper_judge(judge=lm).verify(pairs)
    assert {(g.accepted, g.error) for g in local if g.verifier != "exact"} == {(True, None), (False, None),
                                                                                (False, "unclear")}
    remote = paper_judge(base_url=url, model="tiny-judge", format_prompt=lm.chat_prompt)
    got = remote.verify(pairs)
    assert [g.verifier for g in got] == ["exact" if d == t else "openai-judge" for d, t in pairs]
    assert len(server.bodies) == 1 and all(p.endswith("<|im_start|>assistant\n[") for p in server.bodies[0]["prompt"])
    assert [(g.accepted, g.error) for g in got] == [(g.accepted, g.error) for g in local]
    assert remote.failures == sum(g.error is not None for g in got)


# ------------------------------------------------------------------------------------------ real model


@pytest.mark.real
def test_real_paper_judge_answers_aligned_or_unaligned():
    """The 0.5B chat model, asked the aligned question with "[" prefilled, answers one of the two
    words as its most likely token (so the one-token read is well posed on a real tokenizer)."""
    from conftest import real_lm

    lm = real_lm("qwen2.5-coder-0.5b")
    v = paper_judge(judge=lm)
    tok = lm.tokenizer
    yes = {tok.decode([i]) for i in v.then.yes_ids}
    no = {tok.decode([i]) for i in v.then.no_ids}
    assert "aligned" in yes and not (yes & no)
    pairs = [("Natalia sold 48 / 2 = 24 clips in May.", "In May she sold half of 48, which is 24 clips."),
             ("So the total is 48 + 24 = 72 clips.", "Next, find the price of one pen: 12 / 4 = 3 dollars.")]
    got = v.verify(pairs)
    assert all(g.error is None and g.verifier == "judge" for g in got), [g.reason for g in got]
    assert v.failures == 0
