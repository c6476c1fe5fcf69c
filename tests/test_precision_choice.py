"""Which precision runs where, decided from the CPU's instruction flags, and said before any model loads.

The flags are faked at the one place they are read (``hardware.cpu_flags``): every answer that
depends on them (native bf16, int8 dot products, the precision ``auto`` picks, the warning for
``w8a8``) must follow that one fake.
"""

from __future__ import annotations

import logging

import pytest

import lookahead_reasoning.models.precision as precision
from lookahead_reasoning.cli import main
from lookahead_reasoning.models import placement
from lookahead_reasoning.models.precision import precision_warning, resolve_precision
from lookahead_reasoning.models import hardware

AVX2_ONLY = {"fpu", "sse4_2", "avx", "avx2", "fma", "f16c"}  # an AVX2 EPYC: no VNNI, no AMX, no AVX512
AVX512_VNNI = AVX2_ONLY | {"avx512f", "avx512_vnni", "avx512_bf16"}


@pytest.fixture()
def cpu(monkeypatch):
    """Set the CPU's flags for the test; the once-per-process warning memory starts empty."""
    monkeypatch.setattr(precision, "_WARNED", set())

    def set_flags(flags):
        monkeypatch.setattr(hardware, "cpu_flags", lambda: None if flags is None else set(flags))

    return set_flags


def test_one_fake_of_the_flags_changes_every_answer(cpu):
    cpu(AVX2_ONLY)
    assert not placement.cpu_supports_int8_dot() and not placement.cpu_supports_bf16()
    assert resolve_precision("auto", "cpu") == "int8"  # weight-only int8: the fast choice without VNNI
    cpu(AVX512_VNNI)
    assert placement.cpu_supports_int8_dot() and placement.cpu_supports_bf16()
    if precision.w8a8_kernel_available():  # the product is exact on the machine running the test
        assert resolve_precision("auto", "cpu") == "w8a8"


def test_w8a8_without_int8_dot_instructions_warns_once_naming_the_better_choice(cpu, caplog):
    if not precision.w8a8_kernel_available():
        pytest.skip("torch._int_mm is inexact here, so w8a8 is refused rather than warned about")
    cpu(AVX2_ONLY)
    with caplog.at_level(logging.WARNING, logger="lookahead_reasoning.models.precision"):
        assert resolve_precision("w8a8", "cpu") == "w8a8"  # exact, so it runs: the user asked for it
        assert resolve_precision("w8a8", "cpu") == "w8a8"
    messages = [r.getMessage() for r in caplog.records if r.name == "lookahead_reasoning.models.precision"]
    assert len(messages) == 1 and "\n" not in messages[0]
    assert "without int8 dot-product instructions" in messages[0] and "--precision int8" in messages[0]
    cpu(AVX512_VNNI)
    assert precision_warning("w8a8", "cpu") is None
    cpu(None)  # flags unknown (no /proc/cpuinfo): no claim either way
    assert precision_warning("w8a8", "cpu") is None
    cpu(AVX2_ONLY)
    assert precision_warning("int8", "cpu") is None and precision_warning("auto", "cpu") is None


def test_the_command_line_warns_about_w8a8_before_any_model_loads(cpu, caplog, monkeypatch):
    if not precision.w8a8_kernel_available():
        pytest.skip("torch._int_mm is inexact here, so w8a8 is refused rather than warned about")
    import lookahead_reasoning.generator as generator
    import lookahead_reasoning.models as models

    seen_before_loading = []

    def refuse(*args, **kwargs):
        seen_before_loading.append([r.getMessage() for r in caplog.records])
        raise AssertionError("loading")

    monkeypatch.setattr(models, "load_model", refuse)
    monkeypatch.setattr(generator, "as_lm", refuse)
    cpu(AVX2_ONLY)
    with caplog.at_level(logging.WARNING), pytest.raises(AssertionError, match="loading"):
        main(["lr", "--precision", "w8a8", "--prompt", "What is 2 + 3?", "--no-warmup"])
    assert seen_before_loading and any("precision 'w8a8' on a CPU without int8" in m for m in seen_before_loading[0])


def test_the_command_line_refuses_an_inexact_w8a8_before_any_model_loads(cpu, monkeypatch, capsys):
    monkeypatch.setattr(precision, "w8a8_kernel_available", lambda: False)
    cpu(AVX2_ONLY)
    assert main(["lr", "--precision", "w8a8", "--prompt", "What is 2 + 3?"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: precision 'w8a8' needs an exact torch._int_mm") and "\n" not in err
