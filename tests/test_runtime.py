"""The runtime layer hands out sessions: ``LM.session(rows)`` is the one way the other layers get a
:class:`~lookahead_reasoning.runtime.session.Session`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.runtime.session import Session

from conftest import tiny_lm

SRC = Path(__file__).resolve().parents[1] / "src" / "lookahead_reasoning"


@pytest.mark.parametrize("arch_name", ["llama", "qwen2"])
def test_lm_session_gives_the_logits_of_a_session_built_directly(arch_name):
    lm = tiny_lm(arch_name)
    rows = [[5, 6, 7], list(range(40, 52)), [9]]
    made = lm.session(rows)
    assert isinstance(made, Session) and made.lm is lm and made.rows == rows and made.cached == [0, 0, 0]
    got = made.logits(keep=2)
    direct = Session(lm, rows)
    assert got.shape == (3, 2, lm.vocab_size)
    assert torch.equal(got, direct.logits(keep=2))
    for session in (made, direct):  # the same edits on both go on giving the same logits
        session.set_rows([r[:-1] + [3] for r in rows])
    assert torch.equal(made.logits(keep=1), direct.logits(keep=1))


def test_lm_session_rejects_empty_rows():
    lm = tiny_lm("qwen2")
    with pytest.raises(ValueError):
        lm.session([])
    with pytest.raises(ValueError):
        lm.session([[1], []])


def test_only_the_runtime_layer_constructs_sessions():
    """Outside runtime/, sessions come from ``lm.session(rows)`` (or ``fork``), never ``Session(...)``."""
    calls = re.compile(r"(?<![\w.])Session\(")
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.parent.name == "runtime":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if calls.search(line.split("#", 1)[0]):
                offenders.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert not offenders, "build sessions with lm.session(rows):\n" + "\n".join(offenders)


def test_the_session_module_needs_lm_for_typing_only():
    """runtime/lm.py imports runtime/session.py; the reverse import would be a cycle."""
    source = (SRC / "runtime" / "session.py").read_text(encoding="utf-8")
    top_level = [line for line in source.splitlines() if line.startswith(("from ", "import "))]
    assert not any(".lm import" in line for line in top_level), top_level
    assert LM.session.__doc__ and "(B, k, V)" in LM.session.__doc__


def test_metered_installs_a_listener_and_a_pad_policy_for_the_block_only():
    lm = LM(tiny_lm("qwen2").model, tiny_lm("qwen2").tokenizer)  # its own listeners and policy
    seen, outer_seen = [], []
    outer = lambda r, n: n  # noqa: E731
    with lm.metered(outer_seen.append, pad_to=outer):
        with pytest.raises(RuntimeError):
            with lm.metered(seen.append, pad_to=lambda r, n: n + 2):
                assert lm.pad_to is not outer and len(lm.listeners) == 2
                lm.session([[5, 6, 7]]).logits()
                raise RuntimeError("a run that fails")
        assert lm.pad_to is outer and lm.listeners == [outer_seen.append]  # the inner block's left
        lm.session([[5, 6]]).logits()
    assert lm.pad_to is None and lm.listeners == []
    assert [t.n for t in seen] == [5] and [t.n for t in outer_seen] == [5, 2]  # 3 padded to 5 inside, 2 outside
