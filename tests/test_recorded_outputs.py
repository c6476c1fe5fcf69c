"""Every mode's greedy output on three GSM8K problems (float32, 128 tokens) is the one recorded in
tests/fixtures/greedy_outputs.json: a restructuring of the code must not change what it writes.
(Record again with ``scripts/record_outputs.py`` only for a change meant to alter the text.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.real
@pytest.mark.slow
def test_every_mode_writes_the_recorded_tokens():
    spec = importlib.util.spec_from_file_location("record_outputs", ROOT / "scripts" / "record_outputs.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    if not record.GSM8K.exists():
        pytest.skip(f"GSM8K file not found at {record.GSM8K}")
    fixture = json.loads(record.FIXTURE.read_text(encoding="utf-8"))
    try:
        now = record.run(fixture["settings"])
    except Exception as exc:  # the offline models are not installed
        if "cannot load" in str(exc) or "not installed" in str(exc):
            pytest.skip(str(exc))
        raise
    for problem, modes in fixture["outputs"].items():
        for mode, ids in modes.items():
            assert now[problem][mode] == ids, (problem, mode)
