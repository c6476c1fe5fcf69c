"""Precision "w8a8" (int8 weights, int8 activations with one scale per row): the layer against its
slow float64 reference, batch invariance of the quantised model, and the lossless properties with a
w8a8 target (greedy SD == its greedy AR; Lookahead Reasoning with the exact verifier and
draft == target == its greedy AR).

As in test_precision.py the tiny models are float32 with random weights, activations between the
linears are float32, and every equality is against the quantised model's own greedy AR.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning import LookaheadGenerator, StepConfig
from lookahead_reasoning.decoding.autoregressive import generate
from lookahead_reasoning.decoding.drafters import NGramDrafter
from lookahead_reasoning.decoding.speculative import generate_sd
from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.planning.auto import cost_key
from lookahead_reasoning.models.int8_layers import (Int8PerTokenLinear, Int8WeightOnlyLinear, quantize_activations_int8,
                                                   reference_w8a8_linear, w8a8_kernel_available)
from lookahead_reasoning.models.precision import apply_precision, normalize_precision, resolve_precision, weight_bytes

from conftest import ORDINARY_IDS, max_abs_diff, reference_logits, tiny_lm
from lr_helpers import exact, frequent_char
from test_precision import float32_between_the_linears  # noqa: F401  (autouse: float32 between the linears here too)
from test_precision import int8_char_lm, int8_lm, rows_alone_and_batched

pytestmark = pytest.mark.skipif(not w8a8_kernel_available(), reason="torch._int_mm is missing or inexact here (no VNNI/AMX)")

# Batch invariance tolerance. The int8 products are exact integers, so a linear's row is bitwise the
# same alone or in a batch *given the same input*. What differs between a row alone and in a padded
# batch is the float32 summation order of attention (~1e-6 on these tiny models); that could move an
# activation across a boundary of its int8 grid (a step of max|x_row| / 127), which would move the
# logits by a few hundredths. Measured over 40 random batches on both architectures: at most 4e-6
# (no crossing happened). The tolerance leaves room for a crossing, as test_precision's does for bf16
# steps; a row that sees its neighbours (the per-batch scale of "int8-dynamic") moves by 1.9.
W8A8_ATOL = 0.1


def w8a8_lm(arch: str = "qwen2", seed: int = 0) -> LM:
    return int8_lm(arch, seed, precision="w8a8")


def w8a8_char_lm(seed: int = 0) -> LM:
    return int8_char_lm(seed, precision="w8a8")


# ------------------------------------------------------------------------------------- the layer

def test_activation_quantisation_per_row():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 32, generator=gen) * torch.tensor([1e-3, 1.0, 50.0, 0.0, 3.0]).unsqueeze(1)
    q, scale = quantize_activations_int8(x)
    assert q.dtype == torch.int8 and scale.shape == (5, 1)
    assert int(q[3].abs().max()) == 0  # an all-zero row stays zero, no division by zero
    for r in (0, 1, 2, 4):
        assert int(q[r].abs().max()) == 127  # every nonzero row uses its whole range
        assert float((q[r].float() * scale[r] - x[r]).abs().max()) <= 0.5 * float(scale[r]) * (1 + 1e-6)
    # a row's quantisation does not depend on the others
    q1, s1 = quantize_activations_int8(x[2:3])
    assert torch.equal(q1, q[2:3]) and torch.equal(s1, scale[2:3])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lead", [(1,), (3,), (2, 5)])
def test_w8a8_layer_equals_its_reference_and_is_close_to_float(bias, lead):
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(64, 48, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(48, 64, generator=gen))
        if bias:
            linear.bias.copy_(torch.randn(48, generator=gen))
    layer = Int8PerTokenLinear(linear.weight, linear.bias)
    x = torch.randn(*lead, 64, generator=gen)
    with torch.no_grad():
        got, ref, dense = layer(x), reference_w8a8_linear(layer, x), linear(x)
    assert got.shape == (*lead, 48) and got.dtype == torch.float32
    # the integer product is exact; only the float32 rescaling rounds
    assert max_abs_diff(got, ref) < 1e-5 * float(ref.abs().max())
    # int8 weights and int8 activations: within a few percent of the float layer
    assert max_abs_diff(got, dense) < 4e-2 * float(dense.abs().max())
    assert max_abs_diff(got, dense) > 0  # it did quantise


def test_w8a8_layer_rows_are_bitwise_independent_of_the_batch():
    gen = torch.Generator().manual_seed(2)
    layer = Int8PerTokenLinear(torch.randn(96, 128, generator=gen))
    x = torch.randn(13, 128, generator=gen) * torch.logspace(-2, 2, 13).unsqueeze(1)
    with torch.no_grad():
        batch = layer(x)
        alone = torch.cat([layer(x[i:i + 1]) for i in range(13)])
    assert torch.equal(batch, alone)


# ------------------------------------------------------------------------------- applying to a model

@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_apply_w8a8_replaces_every_linear(arch):
    model = copy.deepcopy(tiny_lm(arch).model)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    before = weight_bytes(model)
    info = apply_precision(model, "w8a8")
    assert info.precision == "w8a8" and info.linears_converted == n_linear and info.kernel == "torch._int_mm"
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert sum(isinstance(m, Int8PerTokenLinear) for m in model.modules()) == n_linear
    assert info.weight_bytes_after < before


def test_w8a8_logits_close_to_float32_and_to_int8():
    prompt = [12, 40, 41, 7, 99, 3]
    ref = reference_logits(tiny_lm("qwen2"), prompt)
    w8a8, int8 = reference_logits(w8a8_lm("qwen2"), prompt), reference_logits(int8_lm("qwen2"), prompt)
    assert max_abs_diff(ref, w8a8) < 0.08 * float(ref.abs().max())
    assert (ref.argmax(-1) == w8a8.argmax(-1)).float().mean() >= 0.5
    assert max_abs_diff(w8a8, int8) > 0  # another model than weight-only int8


def test_the_cost_table_tells_w8a8_from_int8():
    assert cost_key(w8a8_lm("qwen2")) != cost_key(int8_lm("qwen2"))
    assert "Int8PerTokenLinear" in cost_key(w8a8_lm("qwen2"))["linear_kinds"]


# --------------------------------------------------------------------------------- batch invariance

chunks = st.lists(st.sampled_from(ORDINARY_IDS), min_size=1, max_size=6)
three_rows = st.lists(st.lists(chunks, min_size=1, max_size=3), min_size=3, max_size=3)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=three_rows)
def test_w8a8_row_alone_equals_row_in_a_padded_batch_of_three(arch, rows):
    alone, batched = rows_alone_and_batched(w8a8_lm(arch), rows)
    for a, b in zip(alone, batched):
        assert max_abs_diff(a, b) < W8A8_ATOL


def test_w8a8_batch_invariance_fixed_case_and_its_tolerance_is_tight():
    rows = [[[5], [7, 8, 9, 10, 11], [12]], [list(range(40, 52)), [3], [1, 2, 3, 4]], [[200, 200], [9], [9, 9]]]
    alone, batched = rows_alone_and_batched(w8a8_lm("qwen2"), rows)
    assert max(max_abs_diff(a, b) for a, b in zip(alone, batched)) < W8A8_ATOL

    dynamic = copy.deepcopy(tiny_lm("qwen2").model)
    apply_precision(dynamic, "int8-dynamic", role="draft")
    alone, batched = rows_alone_and_batched(LM(dynamic, tiny_lm("qwen2").tokenizer), rows)
    assert max(max_abs_diff(a, b) for a, b in zip(alone, batched)) > 5 * W8A8_ATOL


# ---------------------------------------------------------------------- lossless with a w8a8 target

prompts = st.lists(st.sampled_from(ORDINARY_IDS), min_size=1, max_size=16)


@pytest.mark.parametrize("draft", ["same", "float", "ngram"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=prompts, gamma=st.sampled_from([1, 3, 6]), n=st.integers(1, 24))
def test_greedy_sd_with_w8a8_target_equals_its_greedy_ar(draft, prompt, gamma, n):
    drafter = {"same": lambda: w8a8_lm("qwen2"), "float": lambda: tiny_lm("qwen2"),
               "ngram": lambda: NGramDrafter(max_n=2)}[draft]()
    expected = generate(w8a8_lm("qwen2"), prompt, max_new_tokens=n)
    result = generate_sd(w8a8_lm("qwen2"), prompt, drafter, gamma=gamma, max_new_tokens=n)
    assert result.token_ids == expected.token_ids and result.stop_reason == expected.stop_reason


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=st.lists(st.integers(0, 96), min_size=1, max_size=12), k=st.sampled_from([1, 3]),
       mode=st.sampled_from(["lr", "lr-sd"]))
def test_lr_exact_verifier_w8a8_draft_equal_to_w8a8_target_equals_greedy_ar(prompt, k, mode):
    target = w8a8_char_lm(0)
    steps = StepConfig((frequent_char(target, prompt),), 10)
    gen = LookaheadGenerator(target=target, draft=w8a8_char_lm(0), verifier=exact(), k=k, steps=steps)
    ar = generate(w8a8_char_lm(0), prompt, max_new_tokens=32)
    lr = gen.generate(prompt, mode=mode, max_new_tokens=32)
    assert lr.token_ids == ar.token_ids and lr.stop_reason == ar.stop_reason
    assert all(v.accepted for c in lr.stats.cycles for v in c.verdicts)


# ----------------------------------------------------------------------------------- names, errors

def test_w8a8_names_and_refusals(monkeypatch):
    assert normalize_precision("W8A8") == normalize_precision("int8-w8a8") == "w8a8"
    assert resolve_precision("w8a8", "cpu") == "w8a8"
    with pytest.raises(ConfigError, match="CPU only"):
        resolve_precision("w8a8", torch.device("cuda"))
    import lookahead_reasoning.models.precision as precision

    monkeypatch.setattr(precision, "w8a8_kernel_available", lambda: False)
    with pytest.raises(ConfigError, match="_int_mm"):
        resolve_precision("w8a8", "cpu")
    model = copy.deepcopy(tiny_lm("qwen2").model)
    with pytest.raises(ConfigError):
        apply_precision(model, "w8a8")
    assert any(isinstance(m, torch.nn.Linear) for m in model.modules())  # a refusal leaves the model alone
    assert not any(isinstance(m, Int8WeightOnlyLinear) for m in model.modules())


def test_settings_accept_w8a8_and_name_it_when_refusing():
    from lookahead_reasoning.options import GeneratorSpec

    GeneratorSpec(precision="w8a8").check()
    GeneratorSpec(precision="int8-w8a8").check()
    with pytest.raises(ConfigError, match="w8a8"):
        GeneratorSpec(precision="w4a4").check()
