"""The front door: :class:`LookaheadGenerator`.

    from lookahead_reasoning import LookaheadGenerator

    gen = LookaheadGenerator(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", verifier="embedding")
    result = gen.generate("Natalia sold clips to 48 friends ...", max_new_tokens=512)
    print(result.text, result.stats.summary())

One object holds the target, the draft, the verifier and the settings, and runs every mode on the
same loaded models so that their speeds can be compared in one process:
``lr`` (Lookahead Reasoning), ``lr-sd`` (LR with token-level SD inside every step), ``ar``
(autoregressive target), ``sd`` (token-level SD with the draft model), ``sd-ngram`` (token-level
SD with prompt lookup).
"""

from __future__ import annotations

import dataclasses

import logging
import time
from typing import Any, Callable, Sequence

import torch

from .decoding.autoregressive import generate as generate_ar
from .decoding.drafters import ModelDrafter, NGramDrafter, check_same_vocabulary, check_stop_below
from .decoding.lookahead import LRState, LRStats, StepWriter, TokenSD, Translator, run_cycle
from .decoding.results import GenerationResult, SDStats
from .decoding.session import Session
from .decoding.speculative import generate_sd
from .decoding.steps import StepConfig
from .errors import ConfigError, TokenizerMismatchError, require
from .lm import LM
from .sampling import SamplingConfig, make_generator

log = logging.getLogger(__name__)

MODES = ("lr", "lr-sd", "ar", "sd", "sd-ngram")


def as_lm(model: Any, **load_kwargs: Any) -> LM:
    """An LM from a name/path (loaded with :func:`lookahead_reasoning.models.load_model`), a
    LoadedModel, an LM, or a ``(model, tokenizer)`` pair."""
    if isinstance(model, LM):
        return model
    if isinstance(model, str):
        from .models import load_model

        return LM.from_loaded(load_model(model, **load_kwargs))
    if isinstance(model, tuple) and len(model) == 2:
        return LM(model[0], model[1])
    if hasattr(model, "model") and hasattr(model, "tokenizer"):
        return LM.from_loaded(model)
    raise ConfigError(f"cannot use {type(model).__name__} as a model: give a name, a path, a LoadedModel, "
                      "an LM or a (model, tokenizer) pair")


class LookaheadGenerator:
    """Lookahead Reasoning over a target and a draft model, with a pluggable verifier.

    Args:
        target, draft: model names (offline short names, hub ids, local dirs, .gguf files),
            LoadedModel / LM objects or (model, tokenizer) pairs. ``draft=None`` uses the target.
        verifier: a Verifier or a name for :func:`lookahead_reasoning.verifiers.make_verifier`
            ("exact", "embedding", "judge", "cascade:exact+embedding", ...).
        k: drafted steps per cycle (k >= 1).
        width: drafts per position (W >= 1). W - 1 alternatives are sampled (at ``alt_temperature``
            when decoding is greedy) at each drafted position; one can replace the target's
            correction where the main draft is rejected (see ``run_cycle``).
        steps: the step segmenter (delimiters, per-step token cap).
        token_sd: token-level SD inside steps, used by mode "lr-sd" (default: the draft model drafts
            tokens for the target's branches, prompt lookup drafts tokens for the draft's own steps;
            with tokenizers that differ the target falls back to plain decoding inside steps).
        sampling: temperature / top-k / top-p; temperature 0 is greedy.
        gamma: drafted tokens per iteration for modes "sd" and "sd-ngram".
        draft_quantize: None, "int8" or "auto". "int8" turns a CPU draft's linear layers into
            dynamic int8 ones (:func:`lookahead_reasoning.kernels.quantize_draft_int8`): a half to a
            third of the draft's cost per token, at a somewhat lower acceptance rate; token-level SD
            output is unchanged (the target checks every drafted token). "auto" does it when the draft
            is a model of its own on the CPU (the CLI's default); None leaves the draft as loaded.
        draft_stop_below: modes "sd" and "lr-sd" (inside the target's branches): the draft model stops
            drafting after a token it gave less than this probability (see ModelDrafter); with it a
            larger gamma pays. None drafts gamma tokens.
        load_kwargs: passed to load_model for names (dtype=, device=, ...).
    """

    def __init__(
        self,
        target: Any,
        draft: Any = None,
        verifier: Any = "embedding",
        *,
        k: int = 3,
        width: int = 1,
        steps: StepConfig | None = None,
        token_sd: TokenSD | None = None,
        sampling: SamplingConfig | None = None,
        gamma: int = 4,
        verifier_kwargs: dict | None = None,
        alt_temperature: float = 0.7,
        draft_quantize: str | None = None,
        draft_stop_below: float | None = None,
        **load_kwargs: Any,
    ):
        require(isinstance(k, int) and k >= 1, f"k (drafted steps per cycle) must be an integer >= 1, got {k!r}")
        require(isinstance(width, int) and width >= 1, f"width (drafts per position) must be an integer >= 1, got {width!r}")
        require(isinstance(gamma, int) and gamma >= 1, f"gamma (drafted tokens per iteration) must be >= 1, got {gamma!r}")
        check_stop_below(draft_stop_below)  # here, not only when a drafter is built: fail before loading
        self.k, self.width, self.gamma, self.alt_temperature = k, width, gamma, alt_temperature
        self.draft_stop_below = draft_stop_below
        self.steps = steps or StepConfig()
        self.token_sd = token_sd or TokenSD(target="draft", draft="ngram")
        self.sampling = sampling or SamplingConfig()
        self.target = as_lm(target, **load_kwargs)
        self.draft = self.target if draft is None else as_lm(draft, **load_kwargs)
        require(draft_quantize in (None, "none", "int8", "auto"),
                f"draft_quantize must be None, 'int8' or 'auto', got {draft_quantize!r}")
        if draft_quantize == "auto":
            param = next(self.draft.model.parameters(), None)
            own = self.draft is not self.target and self.draft.model is not self.target.model
            fits = param is not None and param.device.type == "cpu" and param.is_floating_point()
            draft_quantize = "int8" if own and fits else None
        if draft_quantize == "int8":
            require(self.draft is not self.target and self.draft.model is not self.target.model,
                    "draft_quantize='int8' needs a draft model of its own (the draft is the target here)")
            from .kernels import quantize_draft_int8

            quantize_draft_int8(self.draft.model)
        self.draft_quantize = draft_quantize if draft_quantize != "none" else None
        if self.draft is self.target:  # separate counters for the two roles
            self.draft = LM(self.target.model, self.target.tokenizer, self.target.name)
        try:
            check_same_vocabulary(self.draft, self.target)
            self.same_vocab = True
        except TokenizerMismatchError:
            self.same_vocab = False
            log.warning("draft and target tokenizers differ: steps are passed as text, and token-level "
                        "SD with the draft model is off for this pair (n-gram SD still works)")
        if isinstance(verifier, str):
            from .verifiers import make_verifier

            verifier = make_verifier(verifier, **(verifier_kwargs or {}))
        self.verifier = verifier

    # ------------------------------------------------------------------ prompts
    def _prompts(self, prompt: str | list[dict[str, str]] | list[int], raw: bool) -> tuple[list[int], list[int]]:
        if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
            require(self.same_vocab, "a prompt given as token ids needs draft and target to share a tokenizer")
            return list(prompt), list(prompt)
        target_ids = self.target.prompt_ids(prompt, raw=raw)
        draft_ids = target_ids if self.same_vocab else self.draft.prompt_ids(prompt, raw=raw)
        return target_ids, draft_ids

    # ------------------------------------------------------------------ warm-up
    def warmup(self, modes: Sequence[str] = ("lr",), tokens: int = 8) -> None:
        """Run each mode once on a short question, untimed, and call the verifier once.

        The first forwards of a fresh process page the weights in and set up kernels, and the first
        verifier call loads its model: both are several times slower than later calls. Timing a
        mode without this charges it for the process's start-up, not for its decoding.
        """
        from .prompts import math_messages

        probe = math_messages("What is 2 + 3?")
        for mode in modes:
            self.generate(probe, mode=mode, max_new_tokens=tokens)
        if any(m.startswith("lr") for m in modes):
            # the same numbers on both sides, so a numbers check passes and the embedding model runs too
            self.verifier.verify([("Add 2 and 3 to get 5.", "2 plus 3 is 5.")])

    # ------------------------------------------------------------------ generate
    def generate(
        self,
        prompt: str | list[dict[str, str]],
        *,
        mode: str = "lr",
        max_new_tokens: int = 512,
        seed: int | None = 0,
        raw: bool = False,
        on_text: Callable[[str], None] | None = None,
        gamma: int | None = None,
        k: int | None = None,
    ) -> GenerationResult:
        """Answer ``prompt``: a question, chat messages, or token ids (used as they are).

        ``raw=True`` uses a text prompt as it is, without the chat template. ``gamma`` and ``k``
        override the generator's drafted tokens per iteration and drafted steps per cycle for this
        call (a benchmark sweeps them with the models loaded once).

        Modes: "lr", "lr-sd", "ar", "sd", "sd-ngram" (see the module docstring).
        """
        require(mode in MODES, f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        require(isinstance(max_new_tokens, int) and max_new_tokens >= 0,
                f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        given_gamma = gamma
        gamma = self.gamma if gamma is None else gamma
        k = self.k if k is None else k
        require(isinstance(gamma, int) and gamma >= 1, f"gamma (drafted tokens per iteration) must be >= 1, got {gamma!r}")
        require(isinstance(k, int) and k >= 1, f"k (drafted steps per cycle) must be an integer >= 1, got {k!r}")
        target_ids, draft_ids = self._prompts(prompt, raw)
        if mode == "ar":
            return generate_ar(self.target, target_ids, max_new_tokens=max_new_tokens, sampling=self.sampling,
                               seed=seed, on_text=on_text)
        if mode in ("sd", "sd-ngram"):
            if mode == "sd" and not self.same_vocab:
                check_same_vocabulary(self.draft, self.target)  # raises with the explanation
            drafter = self.draft if mode == "sd" else NGramDrafter(self.token_sd.ngram_max, self.token_sd.ngram_min)
            return generate_sd(self.target, target_ids, drafter, gamma=gamma, max_new_tokens=max_new_tokens,
                               sampling=self.sampling, seed=seed, on_text=on_text,
                               draft_stop_below=self.draft_stop_below)
        token_sd = None
        if mode == "lr-sd":
            token_sd = self.token_sd if given_gamma is None else dataclasses.replace(self.token_sd, gamma=given_gamma)
        return self._generate_lr(target_ids, draft_ids, max_new_tokens, seed, on_text, token_sd, k)

    def _generate_lr(self, target_ids, draft_ids, max_new_tokens, seed, on_text, token_sd: TokenSD | None, k: int):
        generator = make_generator(seed)
        stats = LRStats(k=k)
        target_drafter = draft_drafter = None
        row_drafter = None
        if token_sd is not None:
            stats.target_sd, stats.draft_sd = SDStats(gamma=token_sd.gamma), SDStats(gamma=token_sd.gamma)
            ngram = NGramDrafter(token_sd.ngram_max, token_sd.ngram_min)
            draft_drafter = ngram if token_sd.draft == "ngram" else None
            if token_sd.target == "ngram":
                target_drafter = ngram
            elif token_sd.target == "draft":
                if not self.same_vocab:
                    log.warning("token-level SD with the draft model needs one vocabulary: off for this pair")
                else:
                    def row_drafter(state: LRState, n_rows: int):
                        drafter = ModelDrafter(self.draft, self.sampling, generator, stop_below=self.draft_stop_below)
                        drafter.attach(state.draft.fork(n_rows))
                        return drafter
        gamma = token_sd.gamma if token_sd else self.gamma
        draft_writer = StepWriter(self.draft, self.steps, self.sampling, generator, draft_drafter, gamma,
                                  stats.draft_sd)
        target_writer = StepWriter(self.target, self.steps, self.sampling, generator, target_drafter, gamma,
                                   stats.target_sd)
        state = LRState(Session(self.target, [target_ids]), Session(self.draft, [draft_ids]),
                        len(target_ids), len(draft_ids), max_new_tokens)
        translator = Translator(self.target, self.draft, self.same_vocab)
        alt_writer = None
        if self.width > 1:  # alternatives must differ from the main draft: they are sampled
            alt_sampling = self.sampling if not self.sampling.greedy else SamplingConfig(temperature=self.alt_temperature)
            alt_writer = StepWriter(self.draft, self.steps, alt_sampling, generator, draft_drafter, gamma)
        t_calls, t_secs = self.target.stats.calls, self.target.stats.seconds
        d_calls, d_secs = self.draft.stats.calls, self.draft.stats.seconds
        sent = 0
        start = time.perf_counter()
        if max_new_tokens == 0:
            state.done = "budget"
        while state.done is None:
            stats.cycles.append(run_cycle(state, k, draft_writer, target_writer, self.verifier, translator,
                                          row_drafter, self.width, alt_writer))
            if on_text is not None:
                text = self.target.decode(state.target.rows[0][len(target_ids):])
                if len(text) > sent and not text.endswith("\ufffd"):
                    on_text(text[sent:])
                    sent = len(text)
        wall = time.perf_counter() - start
        if stats.target_sd is not None:
            stats.target_sd.target_forwards = self.target.stats.calls - t_calls
            stats.target_sd.target_seconds = self.target.stats.seconds - t_secs
            stats.target_sd.draft_forwards = self.draft.stats.calls - d_calls
            stats.target_sd.draft_seconds = self.draft.stats.seconds - d_secs
        new = state.target.rows[0][len(target_ids):]
        mode = "lr-sd" if token_sd else "lr"
        return GenerationResult(new, self.target.decode(new), list(target_ids), state.done,
                                self.target.stats.calls - t_calls, wall, mode=mode, stats=stats)
