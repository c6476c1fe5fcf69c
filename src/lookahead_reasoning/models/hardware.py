"""What this machine's CPU can do, read without torch: the instruction flags.

The probes that need torch (native bf16, an exact int8 product) live in ``models.placement`` and
``precision``; they read the flags from here, so one fake of :func:`cpu_flags` in a test changes
every answer at once.
"""

from __future__ import annotations


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (Linux), or None where that file is not readable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def has_int8_dot(flags: set[str] | None) -> bool | None:
    """Whether the flags name an int8 dot-product instruction (VNNI or AMX); None when unknown."""
    return None if flags is None else bool(flags & INT8_DOT_FLAGS)
