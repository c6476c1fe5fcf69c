"""Benchmark problems from GSM8K- or AIME-style JSON lines, or from the ``datasets`` library.

Two record shapes are understood (keys are matched case-insensitively):

* GSM8K: ``{"question": ..., "answer": "<worked solution>\\n#### 72"}``. The gold answer is the
  text after the last ``####``, stripped, with thousands commas removed (``"1,234"`` -> ``"1234"``).
* AIME: ``{"question" or "problem": ..., "answer": 204}``; the answer may be an int or a string and
  is kept as written (``str(answer)``).

Bundled with the package: ``gsm8k-mini``, the first 64 GSM8K training problems (MIT; ids
``train-0`` ..), the command line's default data set (:data:`BUNDLED`).

Either shape may carry its own ``"id"``; otherwise a problem is named ``"<file stem>-<line index>"``
(0-based line index), so ids stay the same whatever ``offset``/``limit``/``sample`` picks. That is
what lets a benchmark run resume.

Selection happens after the whole file is parsed and checked, in this order:
``offset`` drops the first problems, ``sample`` draws a seeded random subset of what is left
(returned in file order; with one seed a larger sample contains every smaller one), and ``limit``
keeps the first ``limit`` of the result.
"""

from __future__ import annotations

import json
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from ..errors import DatasetError, require

BUNDLED = {"gsm8k-mini": Path(__file__).resolve().parents[1] / "data" / "gsm8k-train-64.jsonl"}
DEFAULT_DATASET = "gsm8k-mini"
Format = Literal["auto", "gsm8k", "aime"]
FORMATS = ("auto", "gsm8k", "aime")
ON_ERROR = ("raise", "skip")
# A bare (AIME-style) answer longer than this, or spanning lines, is taken for a worked solution
# that lost its "#### <answer>" line when the format is auto-detected.
MAX_BARE_ANSWER = 200
# Default configs and splits of the datasets-library names this module knows about.
HF_DEFAULTS: dict[str, tuple[str | None, str]] = {
    "openai/gsm8k": ("main", "test"),
    "gsm8k": ("main", "test"),
}


@dataclass
class Problem:
    """One benchmark problem: ``answer`` is the gold final answer, ``index`` its 0-based record index
    in the source (the line index for a JSONL file), ``source`` the file path or dataset name."""

    id: str
    question: str
    answer: str
    source: str
    index: int


@dataclass(frozen=True)
class SkippedLine:
    """A record left out by ``on_error="skip"``: 1-based line (or record) number and the reason."""

    line: int
    reason: str


class ProblemList(list):
    """A ``list[Problem]`` that also says where it came from and which records were skipped: ``skipped`` lists
    every malformed record of the whole source (not only of the selected slice). Slicing gives a plain list."""

    def __init__(self, problems: Iterable[Problem] = (), *, source: str = "",
                 skipped: Iterable[SkippedLine] = ()):
        super().__init__(problems)
        self.source = source
        self.skipped: list[SkippedLine] = list(skipped)


class _BadRecord(Exception):
    """Internal: one record is malformed (the message says why)."""


# ----------------------------------------------------------------------------------------------
# records


def _strip_thousands(text: str) -> str:
    """``"1,234"`` -> ``"1234"``, ``"-1,234.5"`` -> ``"-1234.5"``; anything else unchanged."""
    candidate = text.replace(",", "")
    return candidate if "," in text and candidate.lstrip("+-").replace(".", "", 1).isdigit() else text


def _gsm8k_gold(answer: str) -> str:
    if "####" not in answer:
        raise _BadRecord("GSM8K answer has no '#### <final answer>' line")
    gold = _strip_thousands(answer.rsplit("####", 1)[1].strip())
    if not gold:
        raise _BadRecord("GSM8K answer has nothing after '####'")
    return gold


def _bare_gold(answer: Any, *, auto: bool) -> str:
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise _BadRecord(f"'answer' must be a string or a number, not {type(answer).__name__}")
    gold = str(answer).strip()
    if not gold:
        raise _BadRecord("'answer' is empty")
    if auto and ("\n" in gold or len(gold) > MAX_BARE_ANSWER):
        raise _BadRecord("'answer' looks like a worked solution but has no '#### <final answer>' line")
    return gold


def _parse_record(record: Any, fmt: Format = "auto") -> tuple[str, str, str | None]:
    """``(question, gold answer, own id or None)`` of one record; raises ``_BadRecord``."""
    if not isinstance(record, dict):
        raise _BadRecord(f"expected a JSON object, got {type(record).__name__}")
    rec = {str(k).lower(): v for k, v in record.items()}
    question = rec.get("question", rec.get("problem"))
    if question is None:
        raise _BadRecord("missing 'question' (or 'problem')")
    if not isinstance(question, str) or not question.strip():
        raise _BadRecord("'question' must be a non-empty string")
    answer = rec.get("answer")
    if answer is None:
        raise _BadRecord("missing 'answer'")
    if fmt == "gsm8k" and not isinstance(answer, str):
        raise _BadRecord("GSM8K 'answer' must be a string ending in '#### <final answer>'")
    if fmt == "gsm8k" or (fmt == "auto" and isinstance(answer, str) and "####" in answer):
        gold = _gsm8k_gold(answer)
    else:
        gold = _bare_gold(answer, auto=fmt == "auto")
    own_id = rec.get("id")
    if own_id is not None and (isinstance(own_id, bool) or not isinstance(own_id, (str, int))
                               or not str(own_id).strip()):
        raise _BadRecord("'id' must be a non-empty string or an int")
    return question, gold, (str(own_id).strip() if own_id is not None else None)


def _build(records: Iterable[tuple[int, Any]], *, where: str, source: str, stem: str, fmt: Format,
           on_error: str, unit: str = "line") -> ProblemList:
    """Problems from ``(0-based index, record or JSON error)`` pairs; ``where`` names the source
    in messages. A record that is a ``json.JSONDecodeError`` instance was unreadable."""
    problems, skipped, seen = [], [], set()
    for index, record in records:
        try:
            if isinstance(record, json.JSONDecodeError):
                raise _BadRecord(f"invalid JSON ({record.msg} at column {record.colno})")
            question, gold, own_id = _parse_record(record, fmt)
            pid = own_id if own_id is not None else f"{stem}-{index}"
            if pid in seen:
                raise _BadRecord(f"duplicate id {pid!r}")
        except _BadRecord as e:
            message = f"{where}, {unit} {index + 1}: {e}"
            if on_error == "raise":
                raise DatasetError(message) from None
            warnings.warn(f"skipping {message}", stacklevel=3)
            skipped.append(SkippedLine(index + 1, str(e)))
            continue
        seen.add(pid)
        problems.append(Problem(pid, question, gold, source, index))
    return ProblemList(problems, source=source, skipped=skipped)


def _check_selection(fmt: str, on_error: str, limit: int | None = None, offset: int = 0, sample: int | None = None,
                     seed: int = 0) -> None:
    require(fmt in FORMATS, f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    require(on_error in ON_ERROR, f"on_error must be 'raise' or 'skip', got {on_error!r}")
    require(limit is None or (isinstance(limit, int) and limit >= 0), f"limit must be None or >= 0, got {limit!r}")
    require(isinstance(offset, int) and offset >= 0, f"offset must be >= 0, got {offset!r}")
    require(sample is None or (isinstance(sample, int) and sample >= 0),
            f"sample must be None or >= 0, got {sample!r}")


def select(problems: ProblemList, *, limit: int | None = None, offset: int = 0, sample: int | None = None,
           seed: int = 0) -> ProblemList:
    """Apply ``offset``, then ``sample`` (seeded, file order kept), then ``limit``."""
    chosen = list(problems)[offset:]
    if sample is not None and sample < len(chosen):
        order = list(range(len(chosen)))
        random.Random(seed).shuffle(order)
        chosen = [chosen[i] for i in sorted(order[:sample])]
    if limit is not None:
        chosen = chosen[:limit]
    return ProblemList(chosen, source=problems.source, skipped=problems.skipped)


# ----------------------------------------------------------------------------------------------
# files


def _json_lines(text: str) -> Iterator[tuple[int, Any]]:
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            yield i, json.loads(line)
        except json.JSONDecodeError as e:
            yield i, e


def load_jsonl(path: str | Path, *, format: Format = "auto", limit: int | None = None, offset: int = 0,
               sample: int | None = None, seed: int = 0, on_error: str = "raise") -> ProblemList:
    """Problems of a JSON-lines file (GSM8K or AIME records; see the module docstring), or of a ``.json`` file
    holding one JSON array of records (its "lines" are then the 1-based record numbers). Blank lines are
    ignored. A malformed record raises :class:`DatasetError` naming the file and line, or with
    ``on_error="skip"`` is reported with :func:`warnings.warn` and listed in the result's ``skipped``."""
    _check_selection(format, on_error, limit, offset, sample, seed)
    p = BUNDLED.get(str(path), Path(path).expanduser())
    if not p.exists():
        raise DatasetError(f"dataset file not found: {p}")
    if p.is_dir():
        raise DatasetError(f"dataset path is a directory, not a .jsonl file: {p}")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{p} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DatasetError(f"cannot read dataset file {p}: {e.strerror or e}") from None
    records, unit = _json_lines(text), "line"
    if p.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            records, unit = enumerate(json.loads(text)), "record"
        except json.JSONDecodeError as e:
            raise DatasetError(f"{p}: invalid JSON array ({e.msg} at line {e.lineno}, column {e.colno})") from None
    problems = _build(records, where=str(p), source=str(p), stem=p.stem, fmt=format, on_error=on_error,
                      unit=unit)
    return select(problems, limit=limit, offset=offset, sample=sample, seed=seed)


# ----------------------------------------------------------------------------------------------
# the datasets library


def load_hf(name: str, split: str | None = None, *, config: str | None = None, format: Format = "auto",
            on_error: str = "raise", **selection: Any) -> ProblemList:
    """Problems of a dataset loaded with the ``datasets`` library (e.g. ``"openai/gsm8k"``, whose
    config defaults to ``"main"``, or an AIME dataset with question/problem and answer columns).

    ``split`` defaults to ``"test"``; ``selection`` is ``limit``, ``offset``, ``sample`` and ``seed``, as
    for :func:`load_jsonl`. Records go through the same checks as JSONL lines; ids are
    ``"<name>-<split>-<row>"`` unless a row has its own ``id``. Needs ``pip install datasets`` and,
    for a dataset not cached yet, network access.
    """
    _check_selection(format, on_error, **selection)
    require(isinstance(name, str) and name.strip() != "", "dataset name must be a non-empty string")
    default_config, default_split = HF_DEFAULTS.get(name, (None, "test"))
    config = config if config is not None else default_config
    split = split or default_split
    try:
        import datasets  # noqa: PLC0415 - optional dependency
    except ImportError:
        raise DatasetError(
            f"loading {name!r} from the Hugging Face hub needs the `datasets` library, which is not "
            f"installed: run `pip install datasets`, or download the data and pass a .jsonl path instead") from None
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - network, missing dataset, bad split: all one kind for us
        raise DatasetError(f"could not load dataset {name!r} (config {config!r}, split {split!r}) "
                           f"with the datasets library: {type(e).__name__}: {e}") from e
    problems = _build(enumerate(ds), where=f"{name} [{split}]", source=f"{name}:{split}",
                      stem=f"{name.rsplit('/', 1)[-1]}-{split}", fmt=format, on_error=on_error, unit="row")
    return select(problems, **selection)


def load_dataset(spec: str | Path, **kw: Any) -> ProblemList:
    """Problems of a file or a dataset name: a path ending in ``.jsonl``/``.json`` (or any existing file or
    directory) goes to :func:`load_jsonl`; anything else is a ``datasets``-library name for :func:`load_hf`,
    written ``name`` or ``name:split`` (``"openai/gsm8k:test"``). Keyword arguments are passed on."""
    text = str(spec)
    path = Path(text).expanduser()
    if text in BUNDLED or isinstance(spec, Path) or path.suffix.lower() in (".jsonl", ".json") or path.exists():
        return load_jsonl(path, **kw)
    name, sep, split = text.partition(":")
    if sep and "split" not in kw:
        kw["split"] = split or None
    return load_hf(name, **kw)


__all__ = ["Problem", "ProblemList", "SkippedLine", "load_dataset", "load_hf", "load_jsonl", "select"]
