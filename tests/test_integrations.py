"""Lookahead Reasoning through transformers' ``generate`` (``custom_generate``: the folder and the callable)
and through lm-evaluation-harness, on tiny float32 models.

Greedy, with a verifier that keeps a drafted step only when its text is the target's (``exact`` also
forgives case and spacing, which steps of one or two characters of random text often differ by), every
mode writes what ``model.generate`` writes greedily; the run summary that comes back shows the library's
loop ran (drafted steps judged). Options the loops cannot honour are refused by name.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import unavailable
from lr_helpers import exact, tiny_lm

from lookahead_reasoning import StepConfig
from lookahead_reasoning.errors import ConfigError, TokenizerMismatchError
from lookahead_reasoning.integrations.hf_generate import CUSTOM_GENERATE, decoding
from lookahead_reasoning.testing import perturbed_copy, tiny_model, tiny_tokenizer

QUESTION = "Ann has 3 apples and buys 4 more. How many apples does she have?"
NEW = 48
SAME_TEXT = exact()  # keeps a drafted step whose text is the target's step, character for character


@pytest.fixture(scope="module")
def models():
    """A tiny target, a draft that mostly agrees with it, the prompt, greedy ``generate``'s answer, and a
    step delimiter its greedy text uses often (so that steps end and drafted steps are judged)."""
    target = tiny_lm(0)  # one token per character: the same text is the same tokens
    model, tok = target.model, target.tokenizer
    draft = perturbed_copy(target, 0.2, seed=1).model
    inputs = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    greedy = model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
    text = tok.decode(greedy[0, inputs["input_ids"].shape[1]:])
    delimiter = max(sorted(set(text)), key=text.count)
    return model, tok, draft, inputs, greedy, StepConfig(delimiters=(delimiter,))


@pytest.mark.parametrize("mode", ["lr", "lr-sd", "sd", "auto"])
def test_the_folder_runs_the_library_and_writes_greedy_generates_tokens(models, mode):
    model, tok, draft, inputs, greedy, steps = models
    stepwise = {"steps": steps, "verifier": SAME_TEXT} if mode != "sd" else {}  # sd judges no steps: it takes none
    out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, custom_generate=CUSTOM_GENERATE,
                         trust_remote_code=True, assistant_model=draft, tokenizer=tok, mode=mode,
                         return_dict_in_generate=True, **stepwise)
    assert torch.equal(out.sequences, greedy)
    [summary] = out["lookahead"]
    assert summary["mode"] == mode and summary["new_tokens"] == greedy.shape[1] - inputs["input_ids"].shape[1]
    if mode == "lr":
        assert summary["judged_pairs"] > 0  # the library's cycles ran: drafted steps were judged
    if mode == "sd":
        assert summary["alpha_judged"] > 0  # the draft's tokens were checked and kept


def test_the_callable_runs_the_library_and_writes_greedy_generates_tokens(models):
    model, tok, draft, inputs, greedy, steps = models
    out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True,
                         custom_generate=decoding(draft, tokenizer=tok, mode="lr", steps=steps, verifier=SAME_TEXT))
    assert torch.equal(out.sequences, greedy)
    assert out["lookahead"][0]["judged_pairs"] > 0



def test_every_setting_reaches_the_loops_and_an_unknown_keyword_is_refused_by_name(models):
    model, tok, draft, inputs, greedy, steps = models
    out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True,
                         custom_generate=decoding(draft, tokenizer=tok, mode="lr", k=3, steps=steps, verifier=SAME_TEXT))
    assert torch.equal(out.sequences, greedy) and out["lookahead"][0]["k"] == 3  # lr's own default is 2
    out = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, custom_generate=CUSTOM_GENERATE,
                         trust_remote_code=True, assistant_model=draft, tokenizer=tok, mode="lr", k=1, steps=steps,
                         verifier=SAME_TEXT, return_dict_in_generate=True)
    assert out["lookahead"][0]["k"] == 1
    with pytest.raises(ConfigError, match="frobnicate: not an option of Lookahead Reasoning's"):
        decoding(draft, tokenizer=tok, frobnicate=1)
    with pytest.raises(ConfigError, match="draft_stop_below"):  # checked where the callable is made
        decoding(draft, tokenizer=tok, draft_stop_below=1.5)

def test_a_batch_runs_row_by_row_and_a_streamer_hears_the_prompt_then_the_answer(models):
    model, tok, draft, inputs, greedy, steps = models
    prompts = [QUESTION, "Tom has 12 pens and gives away 5. How many are left?"]
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
             for q in prompts]
    tok.padding_side = "left"
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**batch, max_new_tokens=NEW, do_sample=False, custom_generate=CUSTOM_GENERATE,
                         trust_remote_code=True, assistant_model=draft, tokenizer=tok, mode="lr", steps=steps,
                         verifier=SAME_TEXT)
    width = batch["input_ids"].shape[1]
    assert torch.equal(out[:, :width], batch["input_ids"])
    for row, text in enumerate(texts):
        alone = tok([text], return_tensors="pt", add_special_tokens=False)
        expected = model.generate(**alone, max_new_tokens=NEW, do_sample=False)[0, alone["input_ids"].shape[1]:].tolist()
        new = out[row, width:].tolist()
        assert new[:len(expected)] == expected and set(new[len(expected):]) <= {tok.pad_token_id}

    class Recorder:
        def __init__(self):
            self.chunks, self.ended = [], False

        def put(self, value):
            self.chunks.append(value.reshape(-1).tolist())

        def end(self):
            self.ended = True

    heard = Recorder()
    streamed = model.generate(**inputs, max_new_tokens=NEW, do_sample=False, custom_generate=CUSTOM_GENERATE,
                              trust_remote_code=True, assistant_model=draft, tokenizer=tok, mode="sd",
                              streamer=heard)
    assert heard.ended and heard.chunks[0] == inputs["input_ids"][0].tolist() and len(heard.chunks) > 2
    assert sum(heard.chunks, []) == streamed[0].tolist()


def test_sampling_follows_the_generation_config_and_torch_seed(models):
    model, tok, draft, inputs, greedy, steps = models
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        runs.append(model.generate(**inputs, max_new_tokens=NEW, do_sample=True, temperature=1.5, top_k=0,
                                   custom_generate=CUSTOM_GENERATE, trust_remote_code=True, assistant_model=draft,
                                   tokenizer=tok, mode="lr-sd", steps=steps))
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], greedy)


@pytest.mark.parametrize("option, message", [
    ({"num_beams": 2}, "num_beams"),
    ({"num_return_sequences": 2, "do_sample": True}, "num_return_sequences"),
    ({"repetition_penalty": 1.2}, "repetition_penalty"),
    ({"frobnicate": 3}, "frobnicate"),
    ({"timeout_s": 5.0}, "timeout_s: not an option"),  # an engine's setting: the caller's model is in this process
    ({"mode": "fastest"}, "unknown mode 'fastest'"),
    ({"k": -1}, "k \\(drafted steps per cycle\\) must be an integer >= 0"),
    ({"mode": "auto", "gamma": 4}, "gamma: not read by mode auto"),
    ({"mode": "sd", "k": 2}, "k: not read by mode sd"),
    ({"stop_strings": ["\n"]}, "stop_strings"),
])
def test_an_option_the_loops_cannot_honour_is_refused_by_name(models, option, message):
    model, tok, draft, inputs, _, _ = models
    with pytest.raises(ConfigError, match=message):
        model.generate(**inputs, max_new_tokens=8, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
                       assistant_model=draft, tokenizer=tok, **option)


def test_a_draft_of_another_vocabulary_is_refused_for_token_sd(models):
    model, tok, draft, inputs, _, _ = models
    other = tiny_tokenizer()  # byte-level BPE: another vocabulary than the models' characters
    with pytest.raises(TokenizerMismatchError, match="tokenize text differently"):
        model.generate(**inputs, max_new_tokens=8, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
                       assistant_model=draft, tokenizer=tok, assistant_tokenizer=other, mode="sd")
    with pytest.raises(ConfigError, match="needs a draft model"):
        model.generate(**inputs, max_new_tokens=8, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
                       tokenizer=tok, mode="lr")


# ---------------------------------------------------------------------------------------------- the harness
@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    try:
        from lookahead_reasoning.integrations import harness
    except ImportError:
        unavailable("lm-eval is not installed (pip install '.[eval]')")
    folder = tmp_path_factory.mktemp("tiny-target")
    loaded = tiny_model("qwen2", seed=0)
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return harness, folder


def test_the_harness_model_scores_with_the_targets_forward(harness):
    module, folder = harness
    lm = module.LookaheadLM(target=str(folder), draft=str(folder), mode="lr", device="cpu")

    class Request:
        def __init__(self, *args):
            self.args = args

    [(logprob, greedy)] = lm.loglikelihood([Request("Ann has 3", " apples")])
    target = lm.gen.target
    ids = target.encode("Ann has 3") + target.encode(" apples")
    with torch.no_grad():
        logp = torch.log_softmax(target.model(torch.tensor([ids])).logits[0].float(), dim=-1)
    n = len(target.encode(" apples"))
    expected = sum(float(logp[len(ids) - n - 1 + i, ids[len(ids) - n + i]]) for i in range(n))
    assert logprob == pytest.approx(expected, abs=1e-4)
    assert greedy == all(int(logp[len(ids) - n - 1 + i].argmax()) == ids[len(ids) - n + i] for i in range(n))
    [answer] = lm.generate_until([Request("Ann has 3 apples.", {"until": ["a"], "max_gen_toks": 24})])
    assert "a" not in answer and lm.summaries[-1]["mode"] == "lr"


def test_the_harness_runs_the_local_gsm8k_task_on_the_library(harness, tmp_path, monkeypatch):
    module, folder = harness
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    out = tmp_path / "results"
    module.main(["--model", "lookahead", "--model_args", f"target={folder},draft={folder},mode=lr-sd",
                 "--tasks", module.TASK, "--limit", "2", "--gen_kwargs", "max_gen_toks=16", "--device", "cpu",
                 "--output_path", str(out), "--log_samples"])
    [results] = list(out.rglob("results_*.json"))
    scores = json.loads(results.read_text())["results"][module.TASK]
    assert {"exact_match,boxed", "exact_match,last-number"} <= set(scores)  # graded, by both filters
    [samples] = list(out.rglob("samples_*.jsonl"))
    assert len({json.loads(line)["doc_id"] for line in samples.read_text().splitlines()}) == 2


def test_the_harness_s_own_models_stay_reachable_beside_this_one(harness):
    """The harness fills its table of models only while it is empty: registering ``lookahead`` first must not
    hide ``hf`` (the target alone, the baseline of every comparison through the harness)."""
    from lm_eval.api.registry import get_model

    assert get_model("lookahead") is harness[0].LookaheadLM
    assert get_model("hf").__name__ == "HFLM"


def test_the_harness_refuses_a_model_arg_it_does_not_know(harness):
    module, folder = harness
    with pytest.raises(ConfigError, match="temperature: not a model_arg"):
        module.LookaheadLM(target=str(folder), temperature=0.5)


def test_the_harness_takes_the_command_line_s_options_and_refuses_a_bad_one_by_its_model_arg(harness):
    """model_args are the options of ``lookahead-reasoning lr`` by name: they reach the generator's spec (the
    likelihood verifier with its threshold, k, width, the step cap), and a bad value is refused by its model_arg
    before any model loads."""
    module, _ = harness
    spec = module.harness_spec({"target": "t", "draft": "d", "mode": "lr", "k": 3, "width": 2, "verifier": "likelihood",
                                "threshold": 0.3, "max_step_tokens": 40, "delimiter": "\n"})
    assert (spec.mode, spec.draft, spec.verifier.name, spec.verifier.threshold) == ("lr", "d", "likelihood", 0.3)
    assert module.harness_spec({"target": "t", "draft": None, "mode": "ar"}).draft is None  # lm-eval's "none"
    with pytest.raises(ConfigError, match="^draft none"):  # no draft model, for a mode that drafts: refused
        module.harness_spec({"target": "t", "draft": None, "mode": "lr"})
    assert (spec.settings.k, spec.settings.width, spec.settings.steps) == (3, 2, StepConfig(("\n",), 40))
    assert module.harness_spec({}).mode == "auto"
    for args, name in (({"k": -1}, "k"), ({"max_step_tokens": 0}, "max_step_tokens"), ({"mode": "fast"}, "mode"),
                       ({"verifier": "likelihood", "threshold": 2}, "threshold")):
        with pytest.raises(ConfigError, match=f"^{name} "):
            module.harness_spec(args)


@pytest.mark.real
@pytest.mark.slow
def test_the_offline_pair_through_generate_writes_greedy_generates_tokens():
    """The real pair in float32 (the model's own generation config samples with a repetition penalty:
    greedy, without it, is asked for on both sides)."""
    from conftest import real_lm

    from lookahead_reasoning.prompts import math_messages

    target, draft = real_lm("qwen2.5-coder-1.5b", "float32"), real_lm("qwen2.5-coder-0.5b", "float32")
    inputs = target.tokenizer.apply_chat_template(math_messages(QUESTION), add_generation_prompt=True,
                                                  return_tensors="pt", return_dict=True)
    plain = {"max_new_tokens": 96, "do_sample": False, "repetition_penalty": 1.0}
    greedy = target.model.generate(**inputs, **plain)
    out = target.model.generate(**inputs, **plain, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
                                assistant_model=draft.model, tokenizer=target.tokenizer, mode="lr", verifier=SAME_TEXT,
                                return_dict_in_generate=True)
    assert torch.equal(out.sequences, greedy)
    assert out["lookahead"][0]["judged_pairs"] > 0
