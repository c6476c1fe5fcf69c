"""Lookahead Reasoning inside transformers' ``generate``: the ``custom_generate`` entry.

transformers runs a decoding method of one's own in two ways, and both reach :func:`run` here:

* a folder holding ``custom_generate/generate.py`` (a hub repository or a local path, loaded with
  ``trust_remote_code=True``), whose ``generate(model, **everything generate was given)`` replaces the
  whole of ``generate``. This package holds one (:data:`CUSTOM_GENERATE`); its function is :func:`generate`::

      out = model.generate(**inputs, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
                           assistant_model=draft, tokenizer=tokenizer, max_new_tokens=512)

* a callable, which runs in place of the decoding loop after ``generate`` has prepared the generation
  config: :func:`decoding` makes one. transformers hands a callable neither ``assistant_model``, nor
  ``streamer``, nor ``tokenizer`` (it passes on only keywords that its own sampling loop lacks and that
  it has not taken for itself), so they are given to :func:`decoding`::

      out = model.generate(**inputs, custom_generate=decoding(draft, tokenizer=tokenizer, mode="lr"))

The caller's model is the target, the draft the draft. The library's own keywords (:data:`OWN`) are
``LookaheadGenerator``'s: ``mode`` (``auto`` by default; ``lr``, ``lr-sd``, ``sd``, ``sd-ngram``, ``ar``),
``verifier`` (``exact``) with ``verifier_kwargs``, ``planner``, ``fast_path``, and every field of
:class:`~lookahead_reasoning.settings.Settings` that the generation config does not already carry and a
model of this process reads (``k``, ``gamma``, ``width``, ``steps``, ``draft_stop_below``, ``token_sd``,
...), each checked by the rule it has everywhere and refused by name where the mode does not read it
(:data:`~lookahead_reasoning.presets.MODE_READS`); ``tokenizer`` and ``draft_tokenizer`` (transformers'
``assistant_tokenizer``).
What runs is the library's: the generation config gives ``max_new_tokens`` (or ``max_length``),
``do_sample`` with ``temperature``, ``top_k`` and ``top_p``, and ``eos_token_id``; the result is what
``generate`` returns, the prompt's ids and the new ones (a ``GenerateDecoderOnlyOutput`` with
``return_dict_in_generate=True``, whose ``lookahead`` entry holds each row's run summary). A batch of
several prompts runs row by row (left padding read from ``attention_mask``; rows that end early are
padded with ``pad_token_id``). Every other option that would change the output (beams, several
sequences per prompt, repetition penalties, logits processors, stopping criteria, ...) is refused by
name: these loops would silently ignore it.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from transformers import AutoTokenizer
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ..errors import ConfigError, require, whole
from ..generator import LookaheadGenerator
from ..presets import check_mode
from ..sampling import SamplingConfig
from ..settings import Settings

CUSTOM_GENERATE = str(Path(__file__).resolve().parents[1])  # holds custom_generate/generate.py

# Options of a GenerationConfig these loops cannot honour, with the value that means "not used".
UNSUPPORTED = {
    "num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1, "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None, "force_words_ids": None, "min_length": 0, "min_new_tokens": None, "stop_strings": None,
    "diversity_penalty": 0.0, "penalty_alpha": None, "guidance_scale": None, "sequence_bias": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "typical_p": 1.0, "min_p": None, "top_h": None, "length_penalty": 1.0,
    "exponential_decay_length_penalty": None, "prompt_lookup_num_tokens": None, "dola_layers": None,
    "watermarking_config": None, "output_scores": False, "output_logits": False, "output_attentions": False,
    "output_hidden_states": False, "constraints": None, "renormalize_logits": False, "low_memory": None,
}
# Arguments of generate that carry nothing these loops use when they are empty.
PASSED_EMPTY = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "negative_prompt_ids",
                "negative_prompt_attention_mask", "synced_gpus", "use_model_defaults")
MODEL_INPUTS = ("input_ids", "attention_mask", "use_cache", "cache", "past_key_values", "cache_position",
                "position_ids", "token_type_ids", "return_dict")  # output_attentions/hidden_states: refused if set


# The library's keywords: the generator's, the tokenizers, and the settings the generation config does not
# carry (it gives max_new_tokens, the sampling and, through torch's seed, the seed) and that a model of this
# process reads (the request timeout and retries are an engine's).
GENERATOR_OWN = ("mode", "verifier", "verifier_kwargs", "planner", "fast_path")
SETTING_OWN = tuple(sorted(f.name for f in fields(Settings)
                           if f.name not in ("max_new_tokens", "sampling", "seed", "timeout_s", "retries")))
OWN = (*GENERATOR_OWN, "tokenizer", "draft_tokenizer", *SETTING_OWN)


def options_from(bag: dict[str, Any]) -> dict[str, Any]:
    """The library's keywords (:data:`OWN`) among ``bag``'s, taken out of it (``assistant_tokenizer``,
    transformers' name for the draft's tokenizer, included), and checked: an unknown mode, or a setting
    its rule refuses, is a ConfigError naming it."""
    taken = {name: bag.pop(name) for name in OWN if name in bag}
    if (assistant := bag.pop("assistant_tokenizer", None)) is not None:
        taken["draft_tokenizer"] = assistant
    check_mode(taken.setdefault("mode", "auto"))
    Settings.preset().with_overrides(**{name: taken[name] for name in SETTING_OWN if name in taken})
    return taken


def generate(model: Any, inputs: torch.Tensor | None = None, generation_config: Any = None, *,
             assistant_model: Any = None, streamer: Any = None, **kwargs: Any) -> Any:
    """The folder form's entry: every argument ``model.generate`` was given. See the module docstring."""
    kwargs = dict(kwargs)
    for name in PASSED_EMPTY:
        value = kwargs.pop(name, None)
        require(not value or name in ("synced_gpus", "use_model_defaults"),
                f"{name} is not supported by Lookahead Reasoning's generate (its loops would ignore it)", ConfigError)
    input_ids = inputs if inputs is not None else kwargs.pop("input_ids", None)
    require(isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2,
            "give the prompt as input_ids of shape (batch, length)", ConfigError)
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    options = options_from(kwargs)
    model_inputs = {name: kwargs.pop(name) for name in MODEL_INPUTS if name in kwargs}
    try:
        unknown = config.update(**kwargs)
        config.validate()
    except (ValueError, TypeError, AttributeError) as exc:  # transformers' own check of the generation config
        raise ConfigError(f"{', '.join(sorted(kwargs))}: {exc}") from None
    require(not unknown, f"{', '.join(sorted(unknown))}: not an option of generate or of Lookahead Reasoning's "
            f"({', '.join(OWN)})", ConfigError)
    return run(model, assistant_model, input_ids, model_inputs.get("attention_mask"), config, options, streamer)


def decoding(draft: Any = None, streamer: Any = None, **options: Any) -> Callable[..., Any]:
    """The callable form: a decoding method for ``model.generate(..., custom_generate=decoding(draft, ...))``;
    ``options``: the library's keywords (:data:`OWN`: ``tokenizer=``, ``mode=``, ``k=``, ...).

    transformers calls it with the generation config it prepared, in place of its own sampling loop
    (the processors and stopping criteria it built from that config are read from the config here). It
    hands a callable neither ``assistant_model``, ``streamer`` nor ``tokenizer``, so they are given here.
    """
    unknown = sorted(set(options) - set(OWN) - {"assistant_tokenizer"})
    require(not unknown, f"{', '.join(unknown)}: not an option of Lookahead Reasoning's ({', '.join(OWN)})",
            ConfigError)
    chosen = options_from(dict(options))

    def lookahead_decoding(model: Any, input_ids: torch.Tensor, logits_processor: Any = None,
                           stopping_criteria: Any = None, generation_config: Any = None, **model_kwargs: Any) -> Any:
        return run(model, draft, input_ids, model_kwargs.get("attention_mask"), generation_config, chosen, streamer)

    return lookahead_decoding


def run(model: Any, draft: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, config: Any,
        options: dict[str, Any] | None = None, streamer: Any = None) -> Any:
    """Generate for every row of ``input_ids`` (B, T) with the library (``options``: :func:`options_from`'s);
    returns (B, T + new) ids, or a ``GenerateDecoderOnlyOutput`` when the config asks for a dict."""
    options = dict(options or {})
    mode = options.setdefault("mode", "auto")
    require(draft is not None or mode in ("ar", "sd-ngram"), f"mode {mode} needs a draft model: pass "
            "assistant_model= (or the draft to decoding(), the callable form)", ConfigError)
    check_config(config)
    rows, length = input_ids.shape
    require(streamer is None or rows == 1, "a streamer takes one prompt: give a batch of one", ConfigError)
    require(streamer is None or callable(getattr(streamer, "put", None)), f"streamer must have put() and end() as "
            f"transformers' streamers do, got {streamer!r}", ConfigError)
    new_tokens = _budget(config, length)
    tokenizer = options["tokenizer"] = options.get("tokenizer") or _tokenizer_of(model)
    for name in ("tokenizer", "draft_tokenizer"):
        given = options.get(name)
        require(given is None or callable(getattr(given, "decode", None)), f"{name} must be a transformers tokenizer, "
                f"got {given!r}", ConfigError)
    gen = _generator(model, draft, options)
    gen.target.eos_ids = _eos_ids(config, gen.target)
    if options.get("draft_tokenizer") is None:  # one vocabulary: the same end for both
        gen.draft.eos_ids = gen.target.eos_ids
    sampling = SamplingConfig(temperature=1.0 if config.temperature is None else config.temperature,
                              top_k=config.top_k or None, top_p=1.0 if config.top_p is None else config.top_p) \
        if config.do_sample else SamplingConfig()
    seed = int(torch.randint(0, 2**62, (1,)).item()) if config.do_sample else 0  # torch.manual_seed reproduces
    knobs = {name: options[name] for name in SETTING_OWN if name in options}
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    results = []
    for row in range(rows):
        prompt = input_ids[row][mask[row].bool()].tolist()
        # a draft of another vocabulary reads the prompt as text (the target's ids as they are otherwise)
        given = prompt if gen.same_vocab else tokenizer.decode(prompt, skip_special_tokens=False)
        results.append(gen.generate(given, raw=not gen.same_vocab, mode=mode, max_new_tokens=new_tokens,
                                    sampling=sampling, seed=seed, **knobs,
                                    on_text=_Stream(streamer, prompt) if streamer is not None else None))
    return _output(input_ids, results, config.pad_token_id if config.pad_token_id is not None else gen.target.pad_id,
                   config.return_dict_in_generate)


def _budget(config: Any, length: int) -> int:
    """The new tokens the config asks for (``max_new_tokens``, else ``max_length`` less the ``length``-token
    prompt); ConfigError naming the option that leaves none."""
    for name in ("max_new_tokens", "max_length"):
        value = getattr(config, name)
        require(value is None or (isinstance(value, int) and not isinstance(value, bool)),
                f"{name} must be a whole number of tokens, got {value!r}", ConfigError)
    if config.max_new_tokens is not None:
        require(config.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {config.max_new_tokens}", ConfigError)
        return config.max_new_tokens
    new_tokens = (config.max_length if config.max_length is not None else 20) - length
    require(new_tokens >= 1, f"nothing to generate: max_length {config.max_length} leaves no room after the "
            f"{length}-token prompt", ConfigError)
    return new_tokens


def _output(input_ids: torch.Tensor, results: list[Any], pad: int, as_dict: bool) -> Any:
    """What ``generate`` returns: the (B, T) prompts and each row's new tokens, padded to the longest row."""
    news = [list(r.token_ids) for r in results]
    width = max(len(n) for n in news)
    new = torch.tensor([n + [pad] * (width - len(n)) for n in news], dtype=input_ids.dtype, device=input_ids.device)
    sequences = torch.cat([input_ids, new], dim=1)
    if not as_dict:
        return sequences
    out = GenerateDecoderOnlyOutput(sequences=sequences)
    out["lookahead"] = [r.summary() for r in results]
    return out


def check_config(config: Any) -> None:
    """ConfigError naming every option of ``config`` these loops cannot honour."""
    used = [name for name, unused in UNSUPPORTED.items() if getattr(config, name, unused) not in (unused, None)]
    require(not used, f"{', '.join(used)}: not supported by Lookahead Reasoning's generate (set "
            f"{', '.join(f'{n}={UNSUPPORTED[n]!r}' for n in used)}: the model's own generation config may set them)",
            ConfigError)


class _Stream:
    """A transformers streamer fed as ``generate`` feeds one: the prompt first, then each new token, then ``end()``."""

    def __init__(self, streamer: Any, prompt: Sequence[int]):
        self.streamer, self.sent = streamer, 0
        streamer.put(torch.tensor([list(prompt)]))

    def update(self, tokens: Sequence[int]) -> None:
        if len(tokens) > self.sent:
            self.streamer.put(torch.tensor(list(tokens[self.sent:])))
            self.sent = len(tokens)

    def finish(self, tokens: Sequence[int]) -> None:
        self.update(tokens)
        self.streamer.end()


_GENERATORS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _generator(model: Any, draft: Any, options: dict[str, Any]) -> LookaheadGenerator:
    """One LookaheadGenerator per (target, draft, tokenizers, mode, verifier, planner, fast path), kept while the
    model lives: its cost tables and learned rates carry over from call to call, as a generator's do (the
    settings go to each call)."""
    tokenizer, draft_tokenizer = options["tokenizer"], options.get("draft_tokenizer")
    own = {name: options[name] for name in GENERATOR_OWN if name in options}  # the mode: what it reads is checked
    key = (id(draft), id(tokenizer), id(draft_tokenizer), *(f"{name}={value!r}" for name, value in sorted(own.items())))
    per_model = _GENERATORS.setdefault(model, {})
    if key not in per_model:
        draft_pair = None if draft is None else (draft, draft_tokenizer or tokenizer)
        per_model[key] = LookaheadGenerator(target=(model, tokenizer), draft=draft_pair, **own)
    return per_model[key]


def _tokenizer_of(model: Any) -> Any:
    source = getattr(model.config, "_name_or_path", None)
    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # noqa: BLE001 - any failure means: the caller must give it
        raise ConfigError(f"no tokenizer for {source!r} ({type(exc).__name__}): pass tokenizer= to generate "
                          "(steps are cut on decoded text)") from None


def _eos_ids(config: Any, target: Any) -> frozenset[int]:
    eos = config.eos_token_id
    if eos is None:
        return target.eos_ids
    ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    require(all(whole(i) for i in ids), f"eos_token_id must be a token id or a list of them, got {eos!r}", ConfigError)
    return frozenset(ids)


__all__ = ["CUSTOM_GENERATE", "OWN", "check_config", "decoding", "generate", "options_from", "run"]
