"""A cross-process lock on a file, for the caches that several processes may fill at once."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive POSIX lock on ``path`` (created if missing); a no-op where fcntl is missing."""
    try:
        import fcntl
    except ImportError:  # Windows: no cross-process lock; the callers' atomic renames still protect readers
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
