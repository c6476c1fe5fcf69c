"""The machinery of the bad-input generator (``tests/test_bad_inputs.py``): sentinels where a model would load, a
request would go out, a server would be built or started, the harness would evaluate or the loop would run; the
outcome of one case; what the case resolved to when it reached a sentinel; and the values of every kind an
option's argparse action admits.

A sentinel raises :class:`Reached` (a BaseException, so that no ``except Exception`` of the code under test
swallows it) with the locals of every frame above it: the generator being built, the parsed options, the
settings, the servers' configs. A case is then judged by :func:`judge`: refused with a one-line error that names
an option (or file) it gave, or accepted, every option it gave seen in what it resolved to.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from lookahead_reasoning.errors import LookaheadError


class Reached(BaseException):
    """A model load, a request, a server's build or start, an evaluation or the loop: the case passed every check."""

    def __init__(self, what: str, detail: Any = None):
        super().__init__(what)
        self.what, self.detail = what, detail
        frame, self.frames = sys._getframe(1), []
        while frame is not None:  # innermost first: (function name, its locals)
            self.frames.append((frame.f_code.co_name, dict(frame.f_locals)))
            frame = frame.f_back


def _stop(what: str) -> Callable[..., Any]:
    def stop(*args: Any, **kwargs: Any) -> Any:
        raise Reached(what, (args, kwargs))
    return stop


def _async_stop(what: str) -> Callable[..., Any]:
    async def stop(*args: Any, **kwargs: Any) -> Any:
        raise Reached(what, (args, kwargs))
    return stop


@contextlib.contextmanager
def sentinels():
    """Every place a case must not reach before a refusal, replaced by a sentinel (for the ``with`` block)."""
    import httpx
    import transformers
    from huggingface_hub import constants as hub_constants

    import lookahead_reasoning
    from lookahead_reasoning import generator
    from lookahead_reasoning.models import loading
    from lookahead_reasoning.runtime.engine import llamacpp, process, vllm
    from lookahead_reasoning.verifiers import embedding

    mp = _Patches()
    original = loading.load_model
    for name, module in list(sys.modules.items()):  # every module that imported the one loading function
        if name.startswith(lookahead_reasoning.__name__) and getattr(module, "load_model", None) is original:
            mp.set(module, "load_model", _stop("load"))
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        mp.set(cls, "from_pretrained", _stop("load"))
    mp.set(embedding.EmbeddingVerifier, "load", _stop("load"))
    mp.set(hub_constants, "HF_HUB_OFFLINE", True)  # a hub lookup is a request: a name not on disk fails at once
    mp.set(httpx.Client, "send", _stop("request"))
    mp.set(httpx.AsyncClient, "send", _async_stop("request"))
    for cls in (process.ServerProcess, llamacpp.LlamaServer, vllm.VLLMServer):
        mp.set(cls, "prepare", _stop("server"))
    mp.set(process.ServerProcess, "start", _stop("server"))
    mp.set(generator, "prepare", _stop("loop"))
    mp.set(generator.LookaheadGenerator, "planning", _stop("loop"))
    try:
        import lm_eval.__main__ as harness_main
        mp.set(harness_main, "cli_evaluate", _stop("evaluate"))
    except ImportError:
        pass
    try:
        yield
    finally:
        mp.undo()


class _Patches:
    def __init__(self):
        self.saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self.saved.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))
        setattr(owner, name, value)

    def undo(self) -> None:
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)


@dataclass
class Outcome:
    """What one case did: ``code`` (a command's exit status; None for a Python call), ``error`` (its stderr or the
    typed exception's message), ``crash`` (an exception that is no refusal: a traceback), ``reached`` (the
    sentinel it reached), ``out`` (its stdout)."""

    code: int | None = None
    error: str = ""
    crash: BaseException | None = None
    reached: Reached | None = None
    out: str = ""


def run_command(main: Callable[[list[str]], int], argv: list[str]) -> Outcome:
    """``main(argv)`` with its output captured: an exit status, a sentinel reached, or a crash."""
    err, out = io.StringIO(), io.StringIO()
    outcome = Outcome()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            outcome.code = main(argv)
    except Reached as reached:
        outcome.reached = reached
    except SystemExit as exit_:  # argparse's refusal
        outcome.code = exit_.code if isinstance(exit_.code, int) else 2
    except Exception as exc:  # noqa: BLE001 - what the generator hunts
        outcome.crash = exc
    outcome.error, outcome.out = err.getvalue().strip(), out.getvalue()
    return outcome


def run_call(call: Callable[[], Any]) -> Outcome:
    """A Python entry: refused with a typed exception (a LookaheadError), a sentinel reached, or a crash."""
    outcome = Outcome()
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            call()
        outcome.code = 0
    except Reached as reached:
        outcome.reached = reached
    except LookaheadError as exc:
        outcome.code, outcome.error = 2, str(exc)
    except Exception as exc:  # noqa: BLE001 - what the generator hunts
        outcome.crash = exc
    return outcome


@dataclass
class View:
    """What a case resolved to when it reached a sentinel: the locals of every frame above it."""

    reached: Reached

    @property
    def what(self) -> str:
        return self.reached.what

    def find(self, kind: type, name: str | None = None) -> Any:
        """The innermost local that is a ``kind`` (named ``name`` when given), else None."""
        for _, local in self.reached.frames:
            for key, value in local.items():
                if isinstance(value, kind) and (name is None or key == name):
                    return value
        return None

    def local(self, name: str, function: str | None = None, default: Any = None) -> Any:
        """Local ``name`` of the innermost frame (of ``function``, when given) that has it."""
        for fn, local in self.reached.frames:
            if name in local and (function is None or fn == function):
                return local[name]
        return default

    def gen_local(self, name: str, default: Any = None) -> Any:
        """Local ``name`` of the frame that builds a LookaheadGenerator (its ``__init__``)."""
        from lookahead_reasoning import LookaheadGenerator

        for fn, local in self.reached.frames:
            if fn == "__init__" and isinstance(local.get("self"), LookaheadGenerator) and name in local:
                return local[name]
        return default

    @property
    def args(self) -> argparse.Namespace | None:
        return self.find(argparse.Namespace)

    @property
    def gen(self) -> Any:
        from lookahead_reasoning import LookaheadGenerator

        return self.find(LookaheadGenerator)

    @property
    def loaded(self) -> tuple[tuple, dict]:
        """(positional, keyword) arguments of the load the case reached ((), {} where it reached none)."""
        return self.reached.detail if self.what == "load" else ((), {})


@dataclass
class Done:
    """A case that ran to its end (an offline command: a report, a verifier ablation) with the options it parsed."""

    outcome: Outcome
    args: argparse.Namespace
    what: str = "done"

    def local(self, name: str, function: str | None = None, default: Any = None) -> Any:
        return default


# ---------------------------------------------------------------------------------------- files of every kind

def gsm8k_line(i: int) -> str:
    return json.dumps({"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}.\n#### {i + 1}"})


def pair_record(i: int) -> dict:
    return {"kind": "pair", "problem_id": "p-0", "mode": f"step-{i}", "step": i, "prefix": "", "draft": "So 2.",
            "target": "So 3." if i % 2 else "So 2.", "draft_end": "stop_string", "target_end": "stop_string",
            "draft_ids": [1], "target_ids": [2], "exact": i % 2 == 0, "same_numbers": i % 2 == 0,
            "target_model": "t", "draft_model": "d"}


FILE_KINDS = ("missing", "empty", "not_jsonl", "no_fields", "directory", "broken_mid")


@dataclass
class Files:
    """Input files of every kind, written once into ``root``: ``gsm8k``, ``bank`` (a step-pair bank), ``results``
    (a benchmark's), ``flips``, and for each of those ``FILE_KINDS`` (``files.bad("missing")``)."""

    root: Path
    made: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = {"kind": "problem", "problem_id": "p-0", "question": "What is 2 + 1?", "gold": "3", "text": "3",
                   "target_model": "t", "draft_model": "d"}
        result = {"problem_id": "p-0", "mode": "ar", "sample": 0, "new_tokens": 3, "wall_time_s": 1.0,
                  "tokens_per_s": 3.0, "correct": True, "predicted": "3", "gold": "3", "text": "3"}
        self.write("gsm8k.jsonl", "\n".join(gsm8k_line(i) for i in range(3)) + "\n")
        self.write("bank.jsonl", "".join(json.dumps(r) + "\n" for r in [*map(pair_record, range(4)), problem]))
        self.write("results.jsonl", json.dumps(result) + "\n")
        self.write("flips.jsonl", json.dumps({"problem_id": "p-0", "mode": "step-1", "flipped": False}) + "\n")
        self.write("empty.jsonl", "")
        self.write("not_jsonl.jsonl", "question: what is 2 + 1?\nanswer: 3\n")
        self.write("no_fields.jsonl", json.dumps({"text": "no question here", "n": 1}) + "\n")
        self.write("broken_mid.jsonl", gsm8k_line(0) + "\n" + gsm8k_line(1)[:30] + "\n" + gsm8k_line(2) + "\n")
        (self.root / "a-folder").mkdir(exist_ok=True)
        self.made["directory"] = self.root / "a-folder"
        self.made["missing"] = self.root / "no-such-file.jsonl"
        self.made["unwritable"] = Path("/proc/no-such-folder/out.jsonl")

    def write(self, name: str, text: str) -> None:
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        self.made[name.removesuffix(".jsonl")] = path

    def __getitem__(self, kind: str) -> str:
        return str(self.made[kind])

    def out(self, name: str) -> str:
        """A fresh output path (nothing there yet)."""
        return str(self.root / "out" / name)


# ---------------------------------------------------------------------------------------- values of every kind

INTS = {"out_of_range": ["-1", "-100", str(10 ** 12)], "boundary": ["0", "1", "2"], "wrong_type": ["x", "1.5", "0x10"],
        "empty": [""]}
FLOATS = {"out_of_range": ["-1", "1e12", "nan", "inf"], "boundary": ["0", "1", "0.5", "1e-9"],
          "wrong_type": ["x", "1,5"], "empty": [""]}
TEXTS = {"empty": ["", " "], "none": ["none", "None"], "wrong_type": ["12", "-3"], "bogus": ["no-such-thing", "ñ" * 3]}
URLS = {"scheme": ["ftp://127.0.0.1:9", "ws://127.0.0.1:9", "file:///tmp"], "bogus": ["not a url", "http://"],
        "empty": [""]}


def option_kinds(action: argparse.Action, files: Files, category: str) -> dict[str, list[list[str]]]:
    """Every kind of value ``action`` admits, each a few argv tails (after the flag, or the positional itself)."""
    one = lambda values: [[v] for v in values]  # noqa: E731
    if action.nargs == 0:  # a flag
        return {"given": [[]]}
    if action.choices:
        valid = [str(c) for c in action.choices]
        return {"valid": one(valid), "bogus": [["bogus"], [valid[0].upper() + "x"]], "empty": [[""]]}
    if category == "in":
        return {kind: [[files[kind]]] for kind in FILE_KINDS}
    if category == "out":
        return {"unwritable": [[files["unwritable"]]], "directory": [[files["directory"]]], "empty": [[""]]}
    if category == "url":
        return {kind: one(values) for kind, values in URLS.items()}
    table = INTS if action.type is int else FLOATS if action.type is float else TEXTS
    kinds = {kind: one(values) for kind, values in table.items()}
    if action.nargs in ("+", "*") or action.option_strings == [] and action.nargs is None:
        kinds["files"] = [[files[kind]] for kind in FILE_KINDS]
    return kinds


def draw_value(data: st.DataObject, kinds: dict[str, list[list[str]]]) -> tuple[str, list[str]]:
    """A kind, then one of its values."""
    kind = data.draw(st.sampled_from(sorted(kinds)), label="kind")
    return kind, data.draw(st.sampled_from(kinds[kind]), label="value")
