"""The oneDNN linear fast path (kernels.py) against torch's default linear: same numbers, same text."""

from __future__ import annotations

import pytest
import torch

from lookahead_reasoning import ConfigError
from lookahead_reasoning.decoding.autoregressive import generate
from lookahead_reasoning.decoding.speculative import generate_sd
from lookahead_reasoning.models.kernels import (apply_cpu_linear, onednn_linear_available, restore_linear,
                                         use_onednn_linear, uses_onednn_linear)
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.testing import tiny_model

needs_onednn = pytest.mark.skipif(not onednn_linear_available(), reason="this torch build has no oneDNN linear")


def _linears(model) -> int:
    return sum(isinstance(m, torch.nn.Linear) for m in model.modules())


def _logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


@needs_onednn
def test_same_logits_as_default_linear_with_padding():
    loaded = tiny_model("qwen2", seed=3)
    model = loaded.model
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 200, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # a left-padded row
    ref = _logits(model, ids, mask)
    assert use_onednn_linear(model) == _linears(model) > 0
    assert uses_onednn_linear(model)
    assert use_onednn_linear(model) == 0  # idempotent: nothing left to switch
    fast = _logits(model, ids, mask)
    assert fast.shape == ref.shape
    torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)
    # really a different kernel path, not the same call under another name
    assert restore_linear(model) == _linears(model)
    assert not uses_onednn_linear(model)
    torch.testing.assert_close(_logits(model, ids, mask), ref, atol=0, rtol=0)


@needs_onednn
def test_greedy_text_unchanged_for_ar_and_sd():
    target, draft = tiny_model("qwen2", seed=0), tiny_model("qwen2", seed=0)
    t_lm, d_lm = LM.from_loaded(target), LM.from_loaded(draft)
    prompt = list(range(5, 25))
    ar_ref = generate(t_lm, prompt, max_new_tokens=24).token_ids
    use_onednn_linear(target.model)
    use_onednn_linear(draft.model)
    assert generate(t_lm, prompt, max_new_tokens=24).token_ids == ar_ref
    assert generate_sd(t_lm, prompt, d_lm, gamma=3, max_new_tokens=24).token_ids == ar_ref


@needs_onednn
def test_grad_mode_falls_back_to_default_linear():
    model = tiny_model("qwen2", seed=4).model
    use_onednn_linear(model)
    layer = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    x = torch.randn(2, layer.in_features, requires_grad=True)
    with torch.enable_grad():
        y = layer(x)
    assert y.requires_grad  # went through F.linear, which tracks gradients
    torch.testing.assert_close(y, torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_auto_leaves_non_float32_models_alone_and_onednn_refuses_them():
    model = tiny_model("qwen2", seed=5).model.to(torch.bfloat16)
    assert apply_cpu_linear(model, "auto") is False
    assert not uses_onednn_linear(model)
    with pytest.raises(ConfigError, match="float32 models on the CPU"):
        apply_cpu_linear(model, "onednn")


def test_default_choice_and_bad_choice():
    model = tiny_model("qwen2", seed=6).model
    assert apply_cpu_linear(model, "default") is False and not uses_onednn_linear(model)
    with pytest.raises(ConfigError, match="cpu_linear must be one of"):
        apply_cpu_linear(model, "fast")


@needs_onednn
def test_auto_switches_float32_cpu_models():
    model = tiny_model("qwen2", seed=7).model
    assert apply_cpu_linear(model, "auto") is True and uses_onednn_linear(model)


def test_load_model_rejects_a_bad_cpu_linear_before_loading():
    from lookahead_reasoning.models import load_model

    with pytest.raises(ConfigError, match="cpu_linear"):
        load_model("/no/such/model", cpu_linear="turbo")


def test_int8_draft_keeps_sd_and_lr_lossless():
    from lookahead_reasoning import LookaheadGenerator, StepConfig

    from lr_helpers import exact

    target, draft = tiny_model("qwen2", seed=0), tiny_model("qwen2", seed=0)
    n_linear = _linears(draft.model)
    gen = LookaheadGenerator(target=target, draft=draft, verifier=exact(), k=2, steps=StepConfig((" ",), 6),
                             precision={"draft": "int8-dynamic"})
    assert _linears(gen.draft.model) == 0 and n_linear > 0  # every linear of the draft is int8 now
    assert _linears(gen.target.model) == n_linear            # the target is untouched
    prompt = list(range(5, 25))
    ar = gen.generate(prompt, mode="ar", max_new_tokens=20).token_ids
    for mode in ("sd", "lr", "lr-sd"):
        assert gen.generate(prompt, mode=mode, max_new_tokens=20).token_ids == ar, mode


def test_int8_draft_bad_input():
    from lookahead_reasoning import LookaheadGenerator
    from lookahead_reasoning.models.kernels import quantize_draft_int8

    from lr_helpers import exact

    with pytest.raises(ConfigError, match="draft model of its own"):
        LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=None, verifier=exact(), precision={"draft": "int8-dynamic"})
    with pytest.raises(ConfigError, match="the draft's precision must be"):
        LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=tiny_model("qwen2", seed=1), verifier=exact(),
                           precision={"draft": "int4"})
    with pytest.raises(ConfigError, match="draft_quantize: not a setting or a loading option"):
        LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=tiny_model("qwen2", seed=1), verifier=exact(),
                           draft_quantize="int8")
    with pytest.raises(ConfigError, match="models on the CPU"):
        quantize_draft_int8(tiny_model("qwen2", seed=0).model.to("meta"))


def test_auto_quantizes_only_a_cpu_draft_it_loaded_itself(tmp_path):
    """"auto" (the default) quantizes a draft the generator loads from a name or path; a model object
    the caller passes in is never changed behind their back (they can ask for "int8")."""
    from lookahead_reasoning import LookaheadGenerator

    from lr_helpers import exact

    saved = tiny_model("qwen2", seed=1)
    saved.model.save_pretrained(tmp_path / "draft")
    saved.tokenizer.save_pretrained(tmp_path / "draft")
    loaded = LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=str(tmp_path / "draft"), verifier=exact(),
                                dtype="float32")
    assert loaded.draft_quantize == "int8" and _linears(loaded.draft.model) == 0
    passed = tiny_model("qwen2", seed=1)
    own = LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=passed, verifier=exact(), precision={"draft": "auto"})
    assert own.draft_quantize is None and _linears(passed.model) > 0
    shared = LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=None, verifier=exact(), precision={"draft": "auto"})
    assert shared.draft_quantize is None and _linears(shared.target.model) > 0
    bf16 = tiny_model("qwen2", seed=1)
    bf16.model.to(torch.bfloat16)
    cast = LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=bf16, verifier=exact(), precision={"draft": "int8-dynamic"})
    assert cast.draft_quantize == "int8" and _linears(cast.draft.model) == 0  # bf16 is cast to float32, then int8
    off = LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=str(tmp_path / "draft"), verifier=exact(),
                             precision={"draft": None}, dtype="float32")
    assert off.draft_quantize is None and _linears(off.draft.model) > 0


def test_int8_from_a_bf16_draft_keeps_sd_lossless():
    from lookahead_reasoning import LookaheadGenerator

    from lr_helpers import exact

    draft = tiny_model("qwen2", seed=0)
    draft.model.to(torch.bfloat16)
    gen = LookaheadGenerator(target=tiny_model("qwen2", seed=0), draft=draft, verifier=exact(), precision={"draft": "int8-dynamic"})
    assert _linears(gen.draft.model) == 0
    prompt = list(range(5, 25))
    ar = gen.generate(prompt, mode="ar", max_new_tokens=16).token_ids
    sd = gen.generate(prompt, mode="sd", max_new_tokens=16, gamma=3)
    assert sd.token_ids == ar
    assert sd.stats.accepted > 0  # the int8 copy of the same weights still agrees with the target often
