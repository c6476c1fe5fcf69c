"""Verifiers by name: :func:`make_verifier`, the known names, and the ``paper-judge`` preset."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from ..errors import VerifierError, require
from .base import Verifier
from .combine import CascadeVerifier, RandomVerifier
from .embedding import EmbeddingVerifier, NumbersEmbeddingVerifier
from .likelihood import LikelihoodVerifier
from .judge import (ALIGNED_ANSWERS, ALIGNED_PREFILL, ALIGNED_QUESTION, JUDGE_OPTION_NAMES, JudgeOptions,
                    LLMJudgeVerifier)
from .openai import OpenAIJudgeVerifier
from .score import TargetScoreVerifier
from .text import ExactMatchVerifier


def paper_judge(judge: Any = None, base_url: str | None = None, *, threshold: float | None = None,
                batch_size: int = 16, model: str | None = None, format_prompt: Callable[[str], str] | None = None,
                **remote: Any) -> CascadeVerifier:
    """The paper's verifier: exact match first, then an LLM judge asked whether the steps are aligned.

    Stage 1 accepts steps that are equal after lower-casing and removing whitespace. Stage 2 asks a
    judge (a local chat model ``judge``, or an OpenAI-compatible server at ``base_url``) whether the
    two steps are aligned (same main idea, logic and numbers), with its answer pre-filled with "[",
    and reads ONE token: the judge's most likely token must start "aligned"; one that starts
    "unaligned" rejects, anything else is unclear and rejects (counted in ``failures``). Given a
    ``threshold``, stage 2 accepts when P(aligned) / (P(aligned) + P(unaligned)) >= threshold instead.
    ``batch_size``: the local judge's pairs per forward. The server's ``model`` (None: its only one)
    and ``format_prompt`` (default: the question followed by "\nAnswer: "), and ``remote``, forwarded
    to :class:`OpenAIJudgeVerifier`: its ``api_key`` and ``timeout`` (``paper_judge.keyword_options``).
    """
    unknown = sorted(set(remote) - set(paper_judge.keyword_options))
    require(not unknown, f"paper_judge takes no option(s) {unknown}", VerifierError)
    require((judge is None) != (base_url is None),
            "the paper-judge verifier needs exactly one judge: judge=LM(...) (a local chat model) or "
            "base_url='http://host:port/v1' (an OpenAI-compatible server)", VerifierError)
    rule = "top" if threshold is None else "share"
    options = JudgeOptions(threshold=0.5 if threshold is None else threshold, answers=ALIGNED_ANSWERS,
                           question=ALIGNED_QUESTION, rule=rule, prefill=ALIGNED_PREFILL)
    if judge is not None:
        stage = LLMJudgeVerifier(judge, options, batch_size=batch_size)
    else:
        format_prompt = format_prompt or (lambda q: f"{q}\nAnswer: ")
        stage = OpenAIJudgeVerifier(base_url, model, options, format_prompt=format_prompt, **remote)
    return CascadeVerifier(ExactMatchVerifier(), stage, name="paper-judge")


paper_judge.keyword_options = ("api_key", "timeout")  # what ``remote`` may hold


_FACTORIES: dict[str, Callable[..., Verifier]] = {
    "exact": ExactMatchVerifier,
    "embedding": EmbeddingVerifier,
    "embedding-numbers": NumbersEmbeddingVerifier,
    "judge": LLMJudgeVerifier,
    "openai-judge": OpenAIJudgeVerifier,
    "paper-judge": paper_judge,
    "target-score": TargetScoreVerifier,
    "likelihood": LikelihoodVerifier,
    "likelihood-numbers": functools.partial(LikelihoodVerifier, same_numbers=True),
    "random": RandomVerifier,
}
_ALIASES = {"embed": "embedding", "cosine": "embedding", "llm-judge": "judge", "openai": "openai-judge",
            "numbers": "embedding-numbers", "score": "target-score",
            "logprob": "likelihood"}
KNOWN_VERIFIERS = [f"{key} (or {', '.join(aliases)})" if (aliases := [a for a, k in _ALIASES.items() if k == key])
                   else key for key in _FACTORIES] + ["cascade:<first>+<then> (e.g. cascade:exact+embedding)"]


def options_of(factory: Callable) -> set[str]:
    """The keyword options a verifier class or factory function takes by name: its named parameters and
    its ``keyword_options`` (what ``paper_judge`` forwards from ``**remote``; the :class:`JudgeOptions`
    fields a judge takes in its ``options``, which :func:`make_verifier` folds into them)."""
    named = {name for name, p in inspect.signature(factory).parameters.items()
             if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return named | set(getattr(factory, "keyword_options", ()))


def canonical_name(name: str) -> str:
    """The registry key of a verifier name or alias; VerifierError listing the known names otherwise."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    require(key in _FACTORIES, f"unknown verifier {name!r}; known: {', '.join(KNOWN_VERIFIERS)}", VerifierError)
    return key


def stage_names(spec: str) -> list[str]:
    """The registry keys a name stands for: one, or the two stages of "cascade:<first>+<then>"."""
    name = spec.strip().lower()
    if not name.startswith("cascade:"):
        return [canonical_name(name)]
    parts = name[len("cascade:"):].split("+")
    require(len(parts) == 2 and all(parts),
            f"a cascade is written 'cascade:<first>+<then>', e.g. 'cascade:exact+embedding'; got {spec!r}",
            VerifierError)
    return [canonical_name(p) for p in parts]


def check_verifier_spec(spec: str | Verifier, **kw: Any) -> list[str]:
    """Check a name and its option names before anything is loaded; returns the stage keys.

    Raises VerifierError for an unknown name, a malformed cascade or an option no stage takes (as
    :func:`make_verifier` would); model objects (``judge=``, ``target=``) may still be missing.
    """
    if not isinstance(spec, str):
        require(hasattr(spec, "verify"), f"expected a verifier name or object, got {spec!r}", VerifierError)
        return []
    keys = stage_names(spec)
    accepted = set().union(*(options_of(_FACTORIES[k]) for k in keys))
    unknown = sorted(set(kw) - accepted)
    require(not unknown, f"verifier {spec!r} takes no option(s) {unknown} (verifier_kwargs); "
            f"{'its stages take' if len(keys) > 1 else 'it takes'} {sorted(accepted)}", VerifierError)
    return keys


def make_verifier(spec: str | Verifier, **kw: Any) -> Verifier:
    """A verifier from a name and options, or ``spec`` itself if it already is one.

    Names: :data:`KNOWN_VERIFIERS` (aliases in parentheses). Each takes its constructor's options by name
    (a judge also the :class:`~.judge.JudgeOptions` fields); "judge" needs ``judge=LM``, "openai-judge"
    ``base_url=``, "paper-judge" either, "target-score" ``target=LM``; each stage of a cascade takes the
    options its constructor knows. An option no stage takes raises VerifierError (so ``threshold=`` given
    to "exact" is an error, not silently ignored); so does an unknown name, listing the known ones.
    """
    keys = check_verifier_spec(spec, **kw)
    if not isinstance(spec, str):
        require(not kw, f"options {sorted(kw)} given with a ready verifier {spec!r}", VerifierError)
        return spec
    if len(keys) == 1:
        return _build(keys[0], kw)
    first, then = (_build(k, {o: v for o, v in kw.items() if o in options_of(_FACTORIES[k])}) for k in keys)
    return CascadeVerifier(first, then)


def _build(key: str, kw: dict[str, Any]) -> Verifier:
    if key == "judge" and kw.get("judge") is None:
        raise VerifierError("the 'judge' verifier needs judge=LM(...) (a loaded chat model)")
    if key == "openai-judge" and not kw.get("base_url"):
        raise VerifierError("the 'openai-judge' verifier needs base_url='http://host:port/v1' "
                            "(and model='<served name>', else the server's only model is used)")
    if key == "target-score" and kw.get("target") is None:
        raise VerifierError("the 'target-score' verifier needs target=LM(...) (the target model)")
    factory = _FACTORIES[key]
    if factory in (LLMJudgeVerifier, OpenAIJudgeVerifier):  # a judge's option fields go into its JudgeOptions
        fields = {name: value for name, value in kw.items() if name in JUDGE_OPTION_NAMES}
        kw = {name: value for name, value in kw.items() if name not in fields}
        kw["options"] = JudgeOptions.given(kw.get("options"), fields)
    return factory(**kw)


__all__ = ["KNOWN_VERIFIERS", "canonical_name", "check_verifier_spec", "make_verifier", "paper_judge",
           "stage_names"]
