"""Lookahead Reasoning as a model of lm-evaluation-harness (``pip install ".[eval]"``): :class:`LookaheadLM`.

    lookahead-reasoning eval --model lookahead --model_args target=qwen2.5-coder-1.5b,draft=qwen2.5-coder-0.5b,mode=auto \\
        --tasks gsm8k_lookahead --apply_chat_template --limit 10

``lookahead-reasoning eval`` is the harness's own command line (every option of ``lm_eval``) with this model
registered as ``lookahead`` and the task ``gsm8k_lookahead`` on its include path: GSM8K problems from a
local JSONL file (the 64 that ship with this package by default; ``--gsm8k FILE --gsm8k-offset N
--gsm8k-limit M`` pick others), graded by the harness (exact match on the ``\\boxed{}`` number, or on the
last number). lm-eval 0.4.13 finds models only in its own table, so the stock ``lm_eval`` command sees
this one only where the module is imported first (``import lookahead_reasoning.integrations.harness``
before ``lm_eval.simple_evaluate(model="lookahead", ...)``); the package also declares it under the
``lm_eval.models`` entry point for harness versions that read that group.

* ``generate_until``: the library's :meth:`~lookahead_reasoning.LookaheadGenerator.generate` on the
  context as given (the harness applies the chat template when asked); the answer is cut at the first of
  the request's ``until`` strings (generation itself ends at EOS or ``max_gen_toks``).
* ``loglikelihood`` and ``loglikelihood_rolling``: the target's own forward (float32 log-probabilities).

``model_args``: the options of ``lookahead-reasoning lr`` by their names (:func:`harness_spec`): ``target``,
``draft`` (names, paths or hub ids, as :class:`~lookahead_reasoning.LookaheadGenerator` takes; ``none``: no draft model,
for modes ``ar`` and ``sd-ngram``), ``mode`` (``auto``),
``verifier`` (``exact``) and ``threshold``, ``k``, ``gamma``, ``width``, ``draft_stop_below``, ``delimiter``,
``max_step_tokens``, ``dtype``, ``device``, ``precision``, ...; and ``max_gen_toks`` (the default answer
budget, 512). Sampling comes with each request (the harness's ``gen_kwargs``).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch

from ..bench.datasets import load_jsonl
from ..errors import ConfigError, DatasetError, require, whole
from ..options import GeneratorSpec, decoding_settings, option_defaults, refuse_unread_options
from ..presets import MODE_READS, MODES, no_model
from ..sampling import SamplingConfig
from ..verifiers.options import verifier_settings_from_args

try:
    import lm_eval.models  # noqa: F401  the harness's own models (hf, vllm, ...): it loads them only into an empty table
    from lm_eval.api.model import LM as HarnessBase
    from lm_eval.api.registry import register_model
except ImportError:  # the eval extra is not installed: the model cannot be made (NOT_INSTALLED says so)
    HarnessBase, register_model = object, None

NOT_INSTALLED = "lm-evaluation-harness is not installed: pip install 'lookahead-reasoning[eval]' (or lm-eval)"

log = logging.getLogger(__name__)
TASK = "gsm8k_lookahead"
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "gsm8k-train-64.jsonl"


# The model_args: what a generator is built from, by the names the command line's options have
# (options.GeneratorSpec, options.decoding_settings, verifiers.options.VerifierSettings), and the
# options the harness adds itself. Sampling is not among them: it comes with each request (gen_kwargs).
LOADING_ARGS = ("target", "draft", "mode", "dtype", "device", "precision", "draft_quantize", "cpu_linear", "fast_path")
DECODING_ARGS = ("k", "gamma", "width", "draft_stop_below", "token_sd_target", "token_sd_draft", "delimiter",
                 "max_step_tokens")
VERIFIER_ARGS = ("verifier", "threshold", "judge_model", "judge_url", "judge_name", "judge_timeout", "judge_dtype")
HARNESS_OWN = {"max_gen_toks": 512, "batch_size": 1, "max_batch_size": None}
TEXT_ARGS = (*LOADING_ARGS, "token_sd_target", "token_sd_draft", "delimiter", "verifier", "judge_model", "judge_url",
             "judge_name", "judge_dtype")


def harness_spec(model_args: dict[str, Any]) -> GeneratorSpec:
    """The :class:`~..options.GeneratorSpec` of the harness's ``model_args`` (the names of the command line's
    options, ``mode`` auto by default), checked before any model loads; a refusal names the model_arg, as
    does one that the mode would not read (:func:`~..options.refuse_unread_options`). lm-eval reads "none" as
    None: ``draft=none`` is no draft model (refused where the mode drafts), ``target=none`` is refused, and
    None elsewhere takes the default."""
    known = (*LOADING_ARGS, *DECODING_ARGS, *VERIFIER_ARGS, *HARNESS_OWN)
    unknown = sorted(set(model_args) - set(known))
    require(not unknown, f"{', '.join(unknown)}: not a model_arg of lookahead (known: {', '.join(sorted(known))})",
            ConfigError)
    model_args = {name: "none" if value is None and name in ("target", "draft") else value
                  for name, value in model_args.items()}
    wrong = sorted(name for name in TEXT_ARGS if model_args.get(name) is not None and not isinstance(model_args[name], str))
    require(not wrong, f"{', '.join(f'{n}={model_args[n]!r}' for n in wrong)}: give a name (text)", ConfigError)
    loading = {name: model_args[name] for name in LOADING_ARGS if model_args.get(name) is not None}
    decoding = {name: model_args[name] for name in DECODING_ARGS if name in model_args}
    try:
        mode = loading.get("mode", "auto")
        require(mode in MODES, f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
        settings, defaults = decoding_settings(decoding), option_defaults()
        given = {name: name for name, value in model_args.items() if name in defaults and value != defaults[name]}
        refuse_unread_options((mode,), settings, given, loading.get("draft"))
        if "draft" not in MODE_READS[mode] or no_model(loading.get("draft")):
            loading["draft"] = None  # a mode that drafts nothing loads no draft model
        spec = GeneratorSpec(**{"mode": "auto", **loading}, settings=settings,
                             verifier=verifier_settings_from_args(argparse.Namespace(**{
                                 name: model_args[name] for name in VERIFIER_ARGS if name in model_args})))
        spec.check()
    except ConfigError as exc:  # the command line's option names, as model_args: --max-step-tokens -> max_step_tokens
        raise ConfigError(re.sub(r"(?<![\w-])--?([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"),
                                 str(exc))) from None
    return spec


class LookaheadLM(HarnessBase):
    """The harness's view of a :class:`~lookahead_reasoning.LookaheadGenerator` (module docstring)."""

    def __init__(self, **model_args: Any):
        require(register_model is not None, NOT_INSTALLED, ConfigError)
        super().__init__()
        own = {name: model_args.pop(name, default) for name, default in HARNESS_OWN.items()}
        require(str(own["batch_size"]) in ("1", "auto") or own["batch_size"] is None,
                f"batch_size {own['batch_size']}: requests run one at a time (batch_size=1)", ConfigError)
        cap = own["max_batch_size"]
        require(cap is None or whole(cap, 1), f"max_batch_size must be None or a whole number >= 1 (requests run one "
                f"at a time), got {cap!r}", ConfigError)
        device = model_args.get("device")
        if device is not None and str(device).startswith("cuda") and not torch.cuda.is_available():
            log.warning("device %s: CUDA is not available here, running on the CPU (the harness asks for cuda:0 "
                        "unless --device says otherwise)", device)
            model_args["device"] = None
        budget = own["max_gen_toks"]
        require(whole(budget, 1), f"max_gen_toks must be a whole number of tokens >= 1, got {budget!r}", ConfigError)
        spec = harness_spec(model_args)
        self.mode, self.max_gen_toks = spec.mode, budget
        self.gen = spec.build()
        self.summaries: list[dict[str, Any]] = []  # one per generate_until request: what ran

    # ------------------------------------------------------------------ generation
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        answers = []
        for request in requests:
            context, options = request.args
            options = dict(options or {})
            until = options.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            budget = int(options.pop("max_gen_toks", self.max_gen_toks))
            sampling = SamplingConfig()
            if options.pop("do_sample", False) and float(options.get("temperature", 0.0)) > 0:
                sampling = SamplingConfig(temperature=float(options["temperature"]),
                                          top_p=float(options.get("top_p", 1.0)))
            result = self.gen.generate(context, raw=True, mode=self.mode, max_new_tokens=budget, sampling=sampling)
            self.summaries.append(result.summary())
            text = result.text
            cut = min((text.find(s) for s in until if s and s in text), default=-1)
            answers.append(text if cut < 0 else text[:cut])
            self.cache_hook.add_partial("generate_until", request.args, answers[-1])
        return answers

    # ------------------------------------------------------------------ scoring
    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        out = []
        for request in requests:
            context, continuation = request.args
            head = self.gen.target.encode(context) if context else [self._prefix_id()]
            tail = self.gen.target.encode(continuation)
            out.append(self._score(head, tail))
            self.cache_hook.add_partial("loglikelihood", request.args, out[-1])
        return out

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        out = []
        for request in requests:
            (text,) = request.args
            logprob, _ = self._score([self._prefix_id()], self.gen.target.encode(text))
            out.append(logprob)
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, logprob)
        return out

    def _score(self, head: Sequence[int], tail: Sequence[int]) -> tuple[float, bool]:
        """(sum of log p(tail | head), whether greedy decoding would write tail): one target forward."""
        if not tail:
            return 0.0, True
        lm = self.gen.target
        logits = lm.session([list(head) + list(tail)]).logits(keep=len(tail) + 1)[0, :-1]  # (len(tail), V)
        logp = torch.log_softmax(logits.float(), dim=-1)
        ids = torch.tensor(list(tail), device=logp.device)
        total = float(logp.gather(1, ids[:, None]).sum())
        return total, bool((logp.argmax(dim=-1) == ids).all())

    def _prefix_id(self) -> int:
        return min(self.gen.target.eos_ids) if self.gen.target.eos_ids else self.gen.target.pad_id

    # ------------------------------------------------------------------ chat
    @property
    def tokenizer_name(self) -> str:
        return self.gen.target.name.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.gen.target.tokenizer, "chat_template", None)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.gen.target.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                             add_generation_prompt=add_generation_prompt)


if register_model is not None:
    register_model("lookahead", "lookahead-reasoning")(LookaheadLM)


# ---------------------------------------------------------------------------------------------- the task

# The GSM8K task over a local JSONL of {"question", "answer"} problems (answers end "#### N"), with the instruction
# of lookahead_reasoning.prompts; graded on the \boxed{} number and on the last number. @DATA@: the file.
TASK_YAML = r"""task: gsm8k_lookahead
dataset_path: json
dataset_kwargs:
  data_files:
    test: @DATA@
test_split: test
output_type: generate_until
doc_to_text: "{{question}}\n\nSolve the problem step by step. Separate the steps with a blank line, and put the final answer in \\boxed{{ '{}' }}."
doc_to_target: "{{answer.split('####')[-1].strip()}}"
generation_kwargs:
  until: []
  do_sample: false
  max_gen_toks: 512
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\$", "\\.$"]
filter_list:
  - name: boxed
    filter:
      - function: regex
        regex_pattern: "boxed\\{\\s*\\$?(-?[0-9][0-9.,]*)"
      - function: take_first
  - name: last-number
    filter:
      - function: regex
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{2,})|(-?[0-9]+)"
      - function: take_first
metadata:
  version: 1.0
"""


def task_dir(data: Path = SHIPPED, offset: int = 0, limit: int | None = None) -> Path:
    """A folder for ``--include_path`` with the task over problems ``offset`` .. ``offset + limit`` of ``data``,
    every line of which is checked first (a line that is no GSM8K record is named with its file and line
    before the harness starts)."""
    require(isinstance(offset, int) and offset >= 0, f"--gsm8k-offset must be >= 0, got {offset!r}", ConfigError)
    require(limit is None or (isinstance(limit, int) and limit >= 1),
            f"--gsm8k-limit must be >= 1 (a limit of {limit!r} selects no problem)", ConfigError)
    try:
        problems = load_jsonl(data, format="gsm8k")
    except DatasetError as exc:
        raise DatasetError(f"--gsm8k: {exc}") from None
    lines = Path(data).read_text(encoding="utf-8-sig").splitlines()
    chosen = [lines[p.index] for p in problems[offset:offset + limit if limit is not None else None]]
    require(len(chosen) > 0, f"--gsm8k-offset {offset}: {data} has {len(problems)} problems (offsets 0 to "
            f"{len(problems) - 1})", ConfigError)
    folder = Path(tempfile.mkdtemp(prefix="lookahead-tasks-"))
    (folder / "problems.jsonl").write_text("\n".join(chosen) + "\n", encoding="utf-8")
    data_file = json.dumps(str(folder / "problems.jsonl"))
    (folder / f"{TASK}.yaml").write_text(TASK_YAML.replace("@DATA@", data_file), encoding="utf-8")
    return folder


def eval_parser() -> argparse.ArgumentParser:
    """The options ``lookahead-reasoning eval`` reads itself (the task's problems); the rest are lm_eval's."""
    ap = argparse.ArgumentParser(prog="lookahead-reasoning eval", add_help=False)
    ap.add_argument("--gsm8k", type=Path, default=SHIPPED, help="a GSM8K JSONL file (default: the 64 shipped)")
    ap.add_argument("--gsm8k-offset", type=int, default=0, help="the first problem of --gsm8k to run (0-based)")
    ap.add_argument("--gsm8k-limit", type=int, default=None, help="how many problems (default: all from the offset)")
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    """``lookahead-reasoning eval``: the harness's command line with this model and the local task."""
    ours, rest = eval_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    require(register_model is not None, NOT_INSTALLED, ConfigError)
    from lm_eval.__main__ import cli_evaluate  # the harness's command line (its heavier modules load here)

    folder = task_dir(ours.gsm8k, ours.gsm8k_offset, ours.gsm8k_limit)
    saved = sys.argv
    sys.argv = ["lm_eval", *rest, "--include_path", str(folder)]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved


__all__ = ["LookaheadLM", "harness_spec", "NOT_INSTALLED", "TASK", "eval_parser", "main", "task_dir"]
