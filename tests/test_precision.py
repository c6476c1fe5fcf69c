"""Weight precision (``lookahead_reasoning.models.precision``): the int8 layer against its slow reference,
batch invariance of the quantised model, the lossless properties with a quantised target (greedy
SD == greedy AR, Lookahead Reasoning with the exact verifier and draft == target == greedy AR),
and clear errors on bad input.

The tiny models are float32 with random weights; quantising them makes a new model whose greedy
text differs from the float32 one, and every equality here is against that quantised model's own
greedy AR.
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning import LookaheadGenerator, StepConfig
from lookahead_reasoning.decoding.autoregressive import decode_rows, generate
from lookahead_reasoning.decoding.drafters import NGramDrafter
from lookahead_reasoning.runtime.session import Session
from lookahead_reasoning.decoding.speculative import generate_sd
from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.models.kernels import apply_cpu_linear
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.models.int8_layers import (Int8WeightOnlyLinear, int8_kernel_available, quantize_linears_int8,
                                                   quantize_rows_int8, reference_int8_linear)
from lookahead_reasoning.models.precision import (PRECISIONS, apply_precision, normalize_precision, resolve_precision,
                                                  weight_bytes)
from lookahead_reasoning.sampling import SamplingConfig
from lookahead_reasoning.stopping import StopChecker, StopCondition

from conftest import ORDINARY_IDS, feed_chunks, gsm8k_questions, max_abs_diff, reference_logits, tiny_lm
from lr_helpers import exact, frequent_char, tiny_lm as char_lm

pytestmark = pytest.mark.skipif(not int8_kernel_available(), reason="this torch build cannot run the int8 kernel")

# Batch invariance tolerance. Weight-only int8 keeps activations unquantised and its kernel computes
# each output row from its own input row only (bitwise the same alone or among 32 rows), so a row's
# arithmetic is the same alone or in a batch except for the summation order of attention over a
# padded cache, as in float32, where the tiny models' logits (O(5)) move by ~1e-5. But each int8
# linear rounds its input to bf16, and a 1e-6 change can push an element across a bf16 rounding
# boundary: that element then moves by one bf16 step (2**-8 relative), and the output layer's
# result is itself rounded to bf16 (one step at |logit| 4 is 2**-6 = 0.016). On these tiny models,
# with few, wide-valued dimensions, that shows as up to four such steps (0.06, measured over 30
# random batches). A real batching bug (a leaked pad, a wrong position, activations scaled per
# batch) moves logits by O(1): the dynamic-int8 check below differs by 1.0-1.9.
INT8_ATOL = 0.1


def int8_atol(logits: torch.Tensor) -> float:
    """INT8_ATOL, or four bf16 steps at the largest |logit| where that is more: a step is 2**-7 of the
    power of two below the value (0.0625 at |logit| 8-16), so the same rounding moves larger logits
    further (hypothesis found two steps, 0.125, at a logit near 8)."""
    top = float(logits.abs().max())
    return max(INT8_ATOL, 4 * 2.0 ** (math.floor(math.log2(top)) - 7)) if top > 0 else INT8_ATOL


@pytest.fixture(autouse=True)
def float32_between_the_linears(monkeypatch):
    """Every test here runs the int8 model with float32 activations between its linears, whatever the
    CPU (where bf16 is native the model would run bf16 there, and the tolerances above assume float32);
    the bf16 case has a test of its own, which overrides this."""
    import lookahead_reasoning.models.precision as precision

    monkeypatch.setattr(precision, "cpu_supports_bf16", lambda: False)


@functools.cache
def _quantised_model(arch: str, seed: int, precision: str):
    model = copy.deepcopy(tiny_lm(arch, seed).model)  # the conftest models are shared: quantise a copy
    apply_precision(model, precision)
    return model


def int8_lm(arch: str = "qwen2", seed: int = 0, precision: str = "int8") -> LM:
    """A fresh LM (own counters) over a quantised copy of conftest's tiny model (arch, seed)."""
    base = tiny_lm(arch, seed)
    return LM(_quantised_model(arch, seed, precision), base.tokenizer, name=f"tiny-{arch}-{seed}-{precision}")


@functools.cache
def _quantised_char_model(seed: int, precision: str):
    model = copy.deepcopy(char_lm(seed).model)
    apply_precision(model, precision)
    return model


def int8_char_lm(seed: int = 0, precision: str = "int8") -> LM:
    """The character-tokenizer tiny model of lr_helpers, quantised (one token per character: text == tokens)."""
    base = char_lm(seed)
    return LM(_quantised_char_model(seed, precision), base.tokenizer, name=f"tiny-char-{seed}-{precision}")


# ------------------------------------------------------------------------------------ the int8 layer

def test_row_quantisation_reconstructs_within_half_a_step():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(40, 96, generator=gen) * torch.logspace(-3, 1, 40).unsqueeze(1)  # rows of very different size
    w[3] = 0.0  # an all-zero row must not divide by zero
    q, scale = quantize_rows_int8(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.bfloat16 and scale.shape == (40,)
    assert int(q.abs().max()) <= 127 and int(q[3].abs().max()) == 0
    step = scale.float().unsqueeze(1)
    err = (q.float() * step - w).abs()
    # rounding error is half a step; clipping at +-127 (the bf16 scale can round below absmax / 127)
    # adds at most absmax * 2**-8
    assert bool((err <= 0.5 * step + w.abs().amax(1, keepdim=True) * 2**-8 + 1e-12).all())
    assert bool(((q.abs() == 127).sum(1)[torch.arange(40) != 3] >= 1).all())  # every nonzero row uses the range


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lead", [(1,), (3,), (2, 5)])
def test_int8_layer_equals_its_reference_and_is_close_to_float(bias, lead):
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(64, 48, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(48, 64, generator=gen))
        if bias:
            linear.bias.copy_(torch.randn(48, generator=gen))
    layer = Int8WeightOnlyLinear(linear.weight, linear.bias)
    x = torch.randn(*lead, 64, generator=gen)
    with torch.no_grad():
        got, ref, dense = layer(x), reference_int8_linear(layer, x), linear(x)
    assert got.shape == (*lead, 48) and got.dtype == torch.float32
    # same products, another summation order (and bf16 partial results inside the kernel)
    assert max_abs_diff(got, ref) < 2e-2 * float(ref.abs().max())
    # int8 weights and a bf16 input: within a few percent of the float layer
    assert max_abs_diff(got, dense) < 3e-2 * float(dense.abs().max())
    assert layer.weight.shape == (48, 64) and layer.weight.dtype == torch.int8


def test_int8_layer_rows_do_not_depend_on_the_batch():
    """The kernel alone: each row of a batch equals that row fed alone (bitwise on this op)."""
    gen = torch.Generator().manual_seed(2)
    layer = Int8WeightOnlyLinear(torch.randn(96, 128, generator=gen))
    x = torch.randn(13, 128, generator=gen)
    with torch.no_grad():
        batch = layer(x)
        alone = torch.cat([layer(x[i:i + 1]) for i in range(13)])
    assert max_abs_diff(batch, alone) <= 1e-6 * float(alone.abs().max())


# ------------------------------------------------------------------------------- applying to a model

@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_apply_int8_replaces_every_linear_and_shrinks_the_weights(arch):
    model = copy.deepcopy(tiny_lm(arch).model)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    before = weight_bytes(model)
    info = apply_precision(model, "int8")
    assert info.precision == "int8" and info.linears_converted == n_linear
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert isinstance(model.get_output_embeddings(), Int8WeightOnlyLinear)
    assert info.weight_bytes_before == before and info.weight_bytes_after == weight_bytes(model) < before
    assert info.compute_dtype == torch.float32
    linear_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, Int8WeightOnlyLinear))
    # each linear weight went from 4 bytes to 1 (+ a 2-byte scale per row)
    assert before - info.weight_bytes_after >= 3 * linear_params - 4 * sum(
        m.out_features for m in model.modules() if isinstance(m, Int8WeightOnlyLinear))


def test_tied_output_layer_is_untied_and_the_embedding_kept():
    model = copy.deepcopy(tiny_lm("qwen2").model)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    embedding = model.model.embed_tokens.weight.detach().clone()
    apply_precision(model, "int8")
    assert torch.equal(model.model.embed_tokens.weight, embedding)
    assert isinstance(model.lm_head, Int8WeightOnlyLinear) and not model.config.tie_word_embeddings
    with torch.no_grad():
        logits = model(torch.tensor([[5, 6, 7]])).logits
    assert torch.isfinite(logits).all()


def test_output_layer_can_stay_float():
    model = copy.deepcopy(tiny_lm("qwen2").model)
    n = quantize_linears_int8(model, include_output_layer=False)
    assert isinstance(model.lm_head, torch.nn.Linear) and n == sum(
        isinstance(m, Int8WeightOnlyLinear) for m in model.modules())


def test_int8_logits_close_to_float32():
    """Quantisation moves the tiny model's logits a little, not to something else."""
    prompt = [12, 40, 41, 7, 99, 3]
    ref, q = reference_logits(tiny_lm("qwen2"), prompt), reference_logits(int8_lm("qwen2"), prompt)
    assert max_abs_diff(ref, q) < 0.05 * float(ref.abs().max())
    assert (ref.argmax(-1) == q.argmax(-1)).float().mean() >= 0.5


def test_int8_runs_bf16_between_the_linears_where_bf16_is_native(monkeypatch):
    import lookahead_reasoning.models.precision as precision

    monkeypatch.setattr(precision, "cpu_supports_bf16", lambda: True)
    model = copy.deepcopy(tiny_lm("qwen2").model)
    info = apply_precision(model, "int8")
    assert info.compute_dtype == torch.bfloat16 and model.model.embed_tokens.weight.dtype == torch.bfloat16
    lm = LM(model, tiny_lm("qwen2").tokenizer)
    rows = [[[5, 6], [7]], [list(range(30, 40)), [8, 9]], [[1], [2, 3, 4]]]
    alone, batched = rows_alone_and_batched(lm, rows)
    ref = reference_logits(tiny_lm("qwen2"), [5, 6, 7])
    assert max_abs_diff(alone[0], ref) < 0.1 * float(ref.abs().max())  # bf16 everywhere: looser, still close
    for a, b in zip(alone, batched):
        assert max_abs_diff(a, b) < 8 * INT8_ATOL  # bf16 attention and norms round 2**-8 relative at every step


def test_float32_and_bf16_precisions_cast_and_keep_nn_linear():
    model = copy.deepcopy(tiny_lm("qwen2").model)
    apply_cpu_linear(model, "auto")
    info = apply_precision(model, "bf16")
    assert info.compute_dtype == torch.bfloat16 and info.weight_bytes_after * 2 == info.weight_bytes_before
    assert next(model.parameters()).dtype == torch.bfloat16
    info = apply_precision(model, "float32")
    assert info.compute_dtype == torch.float32 and next(model.parameters()).dtype == torch.float32
    assert any(isinstance(m, torch.nn.Linear) for m in model.modules())


# --------------------------------------------------------------------------------- batch invariance

def rows_alone_and_batched(lm: LM, rows: list[list[list[int]]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Feed rows chunk by chunk in one padded batch (left pads, then middle pads as decoding makes
    them); return each row's logits from the batch and from the row fed alone the same way."""
    return [feed_chunks(lm, [r])[0][0] for r in rows], feed_chunks(lm, rows)[0]


chunks = st.lists(st.sampled_from(ORDINARY_IDS), min_size=1, max_size=6)
three_rows = st.lists(st.lists(chunks, min_size=1, max_size=3), min_size=3, max_size=3)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=three_rows)
def test_int8_row_alone_equals_row_in_a_padded_batch_of_three(arch, rows):
    lm = int8_lm(arch)
    alone, batched = rows_alone_and_batched(lm, rows)
    for a, b in zip(alone, batched):
        assert max_abs_diff(a, b) < int8_atol(a)


def test_int8_batch_invariance_fixed_case_and_its_tolerance_is_tight():
    """A short row beside long ones (left pads, then middle pads). The same check on the batch
    -dependent dynamic int8 model fails by far more than INT8_ATOL: the tolerance can catch a
    row that sees its neighbours."""
    rows = [[[5], [7, 8, 9, 10, 11], [12]], [list(range(40, 52)), [3], [1, 2, 3, 4]], [[200, 201], [9], [9, 9]]]
    rows[2][0] = [200] * 2  # a row of large-id tokens: different activations from the others
    alone, batched = rows_alone_and_batched(int8_lm("qwen2"), rows)
    worst = max(max_abs_diff(a, b) for a, b in zip(alone, batched))
    assert worst < INT8_ATOL

    dynamic = copy.deepcopy(tiny_lm("qwen2").model)
    apply_precision(dynamic, "int8-dynamic", role="draft")
    alone, batched = rows_alone_and_batched(LM(dynamic, tiny_lm("qwen2").tokenizer), rows)
    assert max(max_abs_diff(a, b) for a, b in zip(alone, batched)) > 5 * INT8_ATOL


# ---------------------------------------------------------------------- lossless with an int8 target

prompts = st.lists(st.sampled_from(ORDINARY_IDS), min_size=1, max_size=16)


@pytest.mark.parametrize("draft", ["same", "float", "other", "ngram"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=prompts, gamma=st.sampled_from([1, 3, 6]), n=st.integers(1, 24))
def test_greedy_sd_with_int8_target_equals_its_greedy_ar(draft, prompt, gamma, n):
    drafter = {"same": lambda: int8_lm("qwen2"),  # the int8 target's own weights: every draft accepted
               "float": lambda: tiny_lm("qwen2"),  # the float32 model it came from: agrees often, not always
               "other": lambda: int8_lm("qwen2", seed=1),
               "ngram": lambda: NGramDrafter(max_n=2)}[draft]()
    expected = generate(int8_lm("qwen2"), prompt, max_new_tokens=n)
    result = generate_sd(int8_lm("qwen2"), prompt, drafter, gamma=gamma, max_new_tokens=n)
    if result.token_ids != expected.token_ids:
        assert_first_difference_is_a_near_tie(int8_lm("qwen2"), prompt, result.token_ids, expected.token_ids)
        return
    assert result.stop_reason == expected.stop_reason


def assert_first_difference_is_a_near_tie(lm: LM, prompt, got, expected) -> None:
    """Two greedy texts of one int8 model may part only where its two best logits are within the
    batch tolerance (INT8_ATOL, a few bf16 steps: see the top of this file), so that a forward over
    several tokens and one over a single token can rank them differently; anywhere else the
    difference is a bug."""
    i = next((j for j, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    assert i is not None, f"one text is a prefix of the other: {len(got)} against {len(expected)} tokens"
    with torch.no_grad():
        logits = lm.model(torch.tensor([list(prompt) + list(expected[:i])])).logits[0, -1].float()
    top = logits.topk(2).values
    assert float(top[0] - top[1]) <= INT8_ATOL, f"the texts part at token {i}, where the best logit leads by {float(top[0] - top[1]):.3f}"
    assert {got[i], expected[i]} <= set(logits.topk(2).indices.tolist())


def test_identical_int8_draft_accepts_every_token():
    target, reference = int8_lm("llama"), int8_lm("llama")
    target.eos_ids = reference.eos_ids = frozenset()  # run the whole budget
    expected = generate(reference, [5, 6, 7, 8], max_new_tokens=40)
    result = generate_sd(target, [5, 6, 7, 8], int8_lm("llama"), gamma=4, max_new_tokens=40)
    assert result.token_ids == expected.token_ids and len(expected.token_ids) == 40
    assert result.stats.alpha == 1.0 and result.target_forwards < expected.target_forwards


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=st.lists(st.integers(0, 96), min_size=1, max_size=12), k=st.sampled_from([1, 3]),
       mode=st.sampled_from(["lr", "lr-sd"]))
def test_lr_exact_verifier_int8_draft_equal_to_int8_target_equals_greedy_ar(prompt, k, mode):
    target = int8_char_lm(0)
    steps = StepConfig((frequent_char(target, prompt),), 10)
    gen = LookaheadGenerator(target=target, draft=int8_char_lm(0), verifier=exact(), k=k, steps=steps)
    ar = generate(int8_char_lm(0), prompt, max_new_tokens=32)
    lr = gen.generate(prompt, mode=mode, max_new_tokens=32)
    if lr.token_ids != ar.token_ids:  # the rows' batched forwards may rank a near tie differently (prompt [28, 52])
        assert_first_difference_is_a_near_tie(int8_char_lm(0), prompt, lr.token_ids, ar.token_ids)
        return
    assert lr.stop_reason == ar.stop_reason
    assert all(v.accepted for c in lr.stats.cycles for v in c.verdicts)  # identical models agree on every step


def test_lr_with_float_draft_and_int8_target_equals_int8_ar():
    """A draft that is not the target (its float32 original): rejected steps are rewritten by the target."""
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    target = int8_char_lm(0)
    steps = StepConfig((frequent_char(target, prompt),), 10)
    gen = LookaheadGenerator(target=target, draft=char_lm(1), verifier=exact(), k=3, steps=steps)
    assert gen.generate(prompt, mode="lr", max_new_tokens=48).token_ids == \
        generate(int8_char_lm(0), prompt, max_new_tokens=48).token_ids


# ------------------------------------------------------------------------------------------- errors

def test_names_and_aliases(monkeypatch):
    import lookahead_reasoning.models.precision as precision

    assert normalize_precision(None) == "auto" and normalize_precision(" FP32 ") == "float32"
    assert normalize_precision("bfloat16") == "bf16" and set(PRECISIONS) >= {"auto", "float32", "bf16", "int8"}
    monkeypatch.setattr(precision, "cpu_supports_int8_dot", lambda: False)  # a CPU without VNNI
    assert resolve_precision("auto", "cpu") == "int8"  # the kernel runs here (the module is skipped otherwise)
    assert resolve_precision("bf16", "cpu") == "bf16"


@pytest.mark.parametrize("bad, pattern", [
    ("int4", "unknown precision 'int4'; choose one of auto, float32, bf16, int8"),
    ("", "unknown precision ''"),
    (8, "precision must be a string"),
])
def test_unknown_precision_is_refused(bad, pattern):
    with pytest.raises(ConfigError, match=pattern):
        resolve_precision(bad, "cpu")
    model = copy.deepcopy(tiny_lm("qwen2").model)
    with pytest.raises(ConfigError, match=pattern):
        apply_precision(model, bad)


def test_int8_off_the_cpu_and_a_missing_kernel_are_refused(monkeypatch):
    with pytest.raises(ConfigError, match="runs on the CPU only.*'bf16' or 'float32'"):
        resolve_precision("int8", torch.device("meta"))
    with pytest.raises(ConfigError, match="CUDA is not available|runs on the CPU only"):
        resolve_precision("int8", "cuda")
    import lookahead_reasoning.models.precision as precision

    monkeypatch.setattr(precision, "int8_kernel_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_supports_int8_dot", lambda: False)
    with pytest.raises(ConfigError, match=r"needs torch._weight_int8pack_mm.*use 'float32'"):
        resolve_precision("int8", "cpu")
    assert resolve_precision("auto", "cpu") in ("float32", "bf16")  # auto falls back instead of failing


@pytest.mark.parametrize("int8_dot, w8a8_runs, int8_runs, expected", [
    (True, True, True, "w8a8"),     # VNNI/AMX: the per-token kernel is the fastest measured
    (False, True, True, "int8"),    # no int8 dot products: w8a8 is measured only where they exist
    (True, False, True, "int8"),    # VNNI but no _int_mm in this torch build
    (False, False, False, None),    # neither kernel: the unquantised dtype
])
def test_auto_precision_follows_the_cpus_int8_instructions(monkeypatch, int8_dot, w8a8_runs, int8_runs, expected):
    import lookahead_reasoning.models.precision as precision

    monkeypatch.setattr(precision, "cpu_supports_int8_dot", lambda: int8_dot)
    monkeypatch.setattr(precision, "w8a8_kernel_available", lambda: w8a8_runs)
    monkeypatch.setattr(precision, "int8_kernel_available", lambda: int8_runs)
    got = resolve_precision("auto", "cpu")
    assert got == expected if expected else got in ("bf16", "float32")


def test_a_saturating_int8_product_is_not_taken_for_the_kernel(monkeypatch):
    """Without VNNI, oneDNN's AVX2 int8 path sums product pairs in saturating int16: that inexact
    product must make w8a8 unavailable (refused by name, and auto falls back to weight-only int8)."""
    import lookahead_reasoning.models.precision as precision

    def saturating(a, b):
        return (a.int() @ b.int()).clamp(-32768, 32767)

    monkeypatch.setattr(torch, "_int_mm", saturating)
    precision.w8a8_kernel_available.cache_clear()
    try:
        assert not precision.w8a8_kernel_available()
        with pytest.raises(ConfigError, match="runs inexactly.*use 'int8'"):
            resolve_precision("w8a8", "cpu")
        monkeypatch.setattr(precision, "cpu_supports_int8_dot", lambda: True)
        assert resolve_precision("auto", "cpu") == "int8"
        monkeypatch.setattr(torch, "_int_mm", lambda a, b: a.int() @ b.int())  # exact: available again
        precision.w8a8_kernel_available.cache_clear()
        assert precision.w8a8_kernel_available() and resolve_precision("auto", "cpu") == "w8a8"
    finally:
        precision.w8a8_kernel_available.cache_clear()


def test_dynamic_int8_is_refused_for_a_target_and_leaves_the_model_alone():
    model = copy.deepcopy(tiny_lm("qwen2").model)
    with pytest.raises(ConfigError, match="batch invariant.*'int8' \\(weight-only\\) for a target"):
        apply_precision(model, "int8-dynamic")
    assert next(model.parameters()).dtype == torch.float32 and any(isinstance(m, torch.nn.Linear) for m in model.modules())
    with pytest.raises(ConfigError, match="role must be one of target, draft"):
        apply_precision(model, "int8", role="verifier")
    info = apply_precision(model, "int8-dynamic", role="draft")
    assert info.precision == "int8-dynamic"
    assert any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules())


# -------------------------------------------------------------------------------------- real models

@functools.cache
def _real_int8_loaded(name: str):
    from lookahead_reasoning.errors import ModelLoadError
    from lookahead_reasoning.models import load_model

    try:
        loaded = load_model(name, dtype="bf16")  # the offline cache is bf16: loading bf16 is exact
    except ModelLoadError as exc:  # the offline model packages are not installed
        pytest.skip(f"cannot load {name}: {exc}")
    apply_precision(loaded.model, "int8")
    return loaded


def _real_int8(name: str) -> LM:
    """A fresh LM (own counters) over the int8 real model, loaded and quantised once per session."""
    loaded = _real_int8_loaded(name)
    return LM(loaded.model, loaded.tokenizer, name=f"{name}-int8")


@pytest.mark.real
def test_real_int8_draft_greedy_same_alone_and_in_a_padded_batch():
    """Qwen2.5-Coder-0.5B in int8: a GSM8K prompt's first 16 greedy tokens are the same decoded alone
    and as the middle row of a batch of three prompts of other lengths (left pads)."""
    lm = _real_int8("qwen2.5-coder-0.5b")
    questions = gsm8k_questions(3)
    prompts = [lm.prompt_ids(q) for q in (questions[1], questions[0], questions[2][:60])]
    alone = generate(lm, prompts[1], max_new_tokens=16).token_ids
    session = Session(lm, prompts)
    stop = StopCondition(frozenset(), (), 16)
    decode_rows(session, [len(p) for p in prompts], [StopChecker(stop, lm.decode) for _ in prompts], SamplingConfig())
    assert session.rows[1][len(prompts[1]):] == alone
    assert len(alone) == 16


@pytest.mark.real
@pytest.mark.slow
def test_real_int8_target_sd_equals_its_ar():
    """Qwen2.5-Coder-1.5B in int8, draft 0.5B in int8: greedy SD equals greedy AR over 64 tokens."""
    target, draft = _real_int8("qwen2.5-coder-1.5b"), _real_int8("qwen2.5-coder-0.5b")
    prompt = target.prompt_ids(gsm8k_questions(1)[0])
    ar = generate(target, prompt, max_new_tokens=64)
    sd = generate_sd(_real_int8("qwen2.5-coder-1.5b"), prompt, draft, gamma=5, max_new_tokens=64)
    assert sd.token_ids == ar.token_ids


def test_load_model_applies_the_precision_and_refuses_a_bad_name(tmp_path):
    from lookahead_reasoning.errors import ConfigError
    from lookahead_reasoning.models import load_model
    from lookahead_reasoning.testing import tiny_model

    saved = tiny_model("qwen2", seed=3)
    saved.model.save_pretrained(tmp_path / "m")
    saved.tokenizer.save_pretrained(tmp_path / "m")
    loaded = load_model(str(tmp_path / "m"), precision="int8")
    assert any(isinstance(m, Int8WeightOnlyLinear) for m in loaded.model.modules())
    assert not any(type(m) is torch.nn.Linear for m in loaded.model.modules())
    with pytest.raises(ConfigError, match="precision"):
        load_model(str(tmp_path / "m"), precision="int3")
