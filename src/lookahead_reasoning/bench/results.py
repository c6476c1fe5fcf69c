"""The results file of a benchmark: one JSON line per finished (problem, mode, sample), written whole
and synced before the next run starts, so that a killed or interrupted run resumes where it stopped,
and never into a file whose records come from another setup.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import ConfigError, LookaheadError, require


def shard_path(out: str | Path, index: int, count: int) -> Path:
    out = Path(out)
    return out if count <= 1 else out.with_name(f"{out.name}.shard{index}-of-{count}")


def check_writable(path: Path, what: str = "results", option: str = "--out") -> None:
    """Fail early, naming ``option`` and the path, when ``what`` could not be saved there (an empty path is the
    current folder: refused as a folder)."""
    if Path(path).is_dir():
        raise ConfigError(f"{option} {str(path) if str(path) != '.' else repr('')}: a folder, not a file to write "
                          f"{what} to") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"{option}: cannot write {what} to {path} ({exc.strerror or exc}): give a path in a "
                          f"writable folder") from None


def check_scope(offset: int, limit: int | None) -> None:
    """ConfigError naming ``--offset`` (an integer >= 0) or ``--limit`` (None or an integer >= 1)."""
    require(isinstance(offset, int) and offset >= 0, f"--offset must be >= 0, got {offset!r}")
    require(limit is None or (isinstance(limit, int) and limit >= 1),
            f"--limit must be >= 1 (a selection of {limit!r} problems runs nothing), got {limit!r}")


def as_paths(paths: Any) -> list[Any]:
    """One path or several (a command's ``nargs="+"``, a list in Python) as a list."""
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def read_records(path: Path) -> Iterable[dict[str, Any]]:
    """The records of a results file; a torn last line (killed run) and non-records are skipped."""
    if not path.exists():
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the results in {path} to resume: {getattr(exc, 'strerror', None) or exc}") from None
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            yield rec


def read_bank_files(paths: Any, error: type[LookaheadError] = ConfigError) -> list[dict[str, Any]]:
    """The records of a bank of step pairs: one pairs file or several, in order; ``error`` naming the file
    that is missing, or when no file holds a step pair."""
    paths = as_paths(paths)
    require(bool(paths), "no pairs file given", error)
    records = []
    for path in map(Path, paths):
        require(path.is_file(), f"no pairs file at {path}: `lookahead-reasoning pairs --out {path}` writes one", error)
        records += read_records(path)
    require(any(r.get("kind") == "pair" for r in records), f"{', '.join(map(str, paths))} holds no step pairs", error)
    return records


def done_pairs(path: Path) -> set[tuple[str, str, int]]:
    """(problem id, mode, sample) triples already in a results file; a torn last line (killed run) is ignored."""
    return {(str(rec.get("problem_id")), str(rec.get("mode")), int(rec.get("sample", 0))) for rec in read_records(path)}


# What a results file must share with the run that appends to it: numbers of two setups never mix.
SETUP_FIELDS = ("target", "draft", "precision", "temperature")


def setup_of(config: Any) -> dict[str, Any]:
    """The fields of :data:`SETUP_FIELDS` as a run of ``config`` (a ``BenchConfig``) writes them into its records."""
    g = config.generator
    return {"target": g.target, "draft": g.draft, "precision": g.precision or "as-loaded",
            "temperature": g.settings.sampling.temperature}


def check_same_setup(path: Path, config: Any) -> None:
    """Refuse to resume into a results file whose records come from another target, draft, precision
    or temperature (a field an older record lacks is not compared)."""
    want = setup_of(config)
    for rec in read_records(path):
        differ = [f for f in SETUP_FIELDS if f in rec and rec[f] != want[f]]
        if differ:
            had = ", ".join(f"{f} {rec[f]!r}" for f in differ)
            now = ", ".join(f"{f} {want[f]!r}" for f in differ)
            raise ConfigError(f"{path} holds results of another setup ({had}; this run: {now}): resuming would "
                              f"mix them; give another --out")


def check_same_models(path: Path, models: dict[str, Any], what: str = "results", now: str = "this run's are") -> None:
    """Refuse to resume into a file of ``what`` written by other models than ``models`` (a field either side
    lacks is not compared)."""
    for rec in read_records(path):
        differ = [f for f, v in models.items() if rec.get(f) not in (None, v) and v is not None]
        if differ:
            raise ConfigError(f"{path} holds {what} of other models ({', '.join(f'{f} {rec[f]!r}' for f in differ)}; "
                              f"{now} {', '.join(f'{f} {models[f]!r}' for f in differ)}): give another --out")


@contextlib.contextmanager
def _whole() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block ends, so that a record is written whole and synced;
    the KeyboardInterrupt is raised right after. Outside the main thread, a plain block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and push it to disk before going on.

    A last line torn by a kill (no newline at the end) is closed first, so the new record starts
    on a line of its own; the torn line is ignored when results are read.
    """
    line = json.dumps(record, ensure_ascii=False) + "\n"
    with _whole():
        torn = path.exists() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(("\n" if torn else "") + line)
            fh.flush()
            os.fsync(fh.fileno())


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


__all__ = ["SETUP_FIELDS", "append_record", "as_paths", "check_same_models", "check_same_setup", "check_scope", "check_writable",
           "done_pairs", "read_bank_files", "read_records", "setup_of", "shard_path"]
