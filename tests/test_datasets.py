"""Loading GSM8K / AIME problems: gold answers, ids, slicing and seeded sampling, malformed lines
(raise with the line number, or skip and report), missing files, and the datasets-library path."""

from __future__ import annotations

import json
import sys
import types
import warnings
from pathlib import Path

import pytest

from lookahead_reasoning.bench import Problem, load_dataset, load_hf, load_jsonl
from lookahead_reasoning.errors import ConfigError, DatasetError

GSM8K_TRAIN = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "train.jsonl"


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _gsm8k(tmp_path: Path, n: int = 10) -> Path:
    return _write(tmp_path / "mini.jsonl",
                  [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i}"}
                   for i in range(n)])


# ------------------------------------------------------------------------------------- the formats

def test_gsm8k_lines(tmp_path):
    path = _write(tmp_path / "g.jsonl", [
        {"question": "Q0", "answer": "Work.\n#### 72"},
        {"question": "Q1", "answer": "Big.\n#### 1,234"},
        {"question": "Q2", "answer": "Neg.\n####  -5 "},
    ])
    problems = load_jsonl(path, format="gsm8k")
    assert [p.answer for p in problems] == ["72", "1234", "-5"]
    assert [p.id for p in problems] == ["g-0", "g-1", "g-2"]
    assert problems[1] == Problem("g-1", "Q1", "1234", str(path), 1)
    assert problems.skipped == []


def test_aime_lines(tmp_path):
    path = _write(tmp_path / "aime24.jsonl", [
        {"id": "2024-I-1", "problem": "Find x.", "answer": 204},
        {"question": "Find y.", "answer": "033"},
        {"ID": 7, "Problem": "Find z.", "Answer": "25"},  # keys in any case
    ])
    problems = load_jsonl(path, format="aime")
    assert [(p.id, p.question, p.answer) for p in problems] == [
        ("2024-I-1", "Find x.", "204"), ("aime24-1", "Find y.", "033"), ("7", "Find z.", "25")]
    assert load_jsonl(path) == problems  # auto detects the same


def test_auto_detects_per_line(tmp_path):
    path = _write(tmp_path / "mixed.jsonl", [
        {"question": "G", "answer": "steps\n#### 10"},
        {"problem": "A", "answer": 5},
    ])
    assert [p.answer for p in load_jsonl(path)] == ["10", "5"]


def test_blank_lines_and_bom_are_fine(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text("\ufeff" + json.dumps({"question": "Q", "answer": "#### 3"}) + "\n\n   \n"
                    + json.dumps({"question": "R", "answer": "#### 4"}) + "\n", encoding="utf-8")
    problems = load_jsonl(path)
    assert [(p.index, p.answer) for p in problems] == [(0, "3"), (3, "4")]  # index = line index


def test_json_array_file(tmp_path):
    path = tmp_path / "arr.json"
    path.write_text(json.dumps([{"problem": "A", "answer": 1}, {"problem": "B", "answer": 2}]))
    assert [p.answer for p in load_jsonl(path)] == ["1", "2"]
    path.write_text(json.dumps([{"problem": "A", "answer": 1}, {"problem": "B"}]))
    with pytest.raises(DatasetError, match=r"arr\.json, record 2: missing 'answer'"):
        load_jsonl(path)


# ---------------------------------------------------------------------------------- the real file

@pytest.mark.skipif(not GSM8K_TRAIN.exists(), reason="shared GSM8K data not present")
def test_real_gsm8k_file():
    first = load_jsonl(GSM8K_TRAIN, limit=3)
    assert len(first) == 3
    assert first[0].answer == "72" and first[0].id == "train-0" and first[0].question.startswith("Natalia")
    assert first[1].answer == "10"
    everything = load_jsonl(GSM8K_TRAIN)
    n = len(everything)
    assert n > 7000 and everything.skipped == []
    assert all(p.answer and "," not in p.answer for p in everything)
    window = load_jsonl(GSM8K_TRAIN, offset=100, limit=5)
    assert [p.index for p in window] == [100, 101, 102, 103, 104]
    assert [p.id for p in window] == [p.id for p in everything[100:105]]
    assert len(load_jsonl(GSM8K_TRAIN, offset=n - 2, limit=10)) == 2
    assert load_jsonl(GSM8K_TRAIN, offset=n) == []
    assert load_dataset(str(GSM8K_TRAIN), limit=1)[0].answer == "72"


# ----------------------------------------------------------------------------- slicing & sampling

def test_offset_and_limit(tmp_path):
    path = _gsm8k(tmp_path)
    assert [p.index for p in load_jsonl(path, limit=3)] == [0, 1, 2]
    assert [p.index for p in load_jsonl(path, offset=8)] == [8, 9]
    assert [p.index for p in load_jsonl(path, offset=2, limit=2)] == [2, 3]
    assert load_jsonl(path, limit=0) == []


def test_seeded_sampling(tmp_path):
    path = _gsm8k(tmp_path, 30)
    a = load_jsonl(path, sample=8, seed=0)
    assert len(a) == 8
    assert [p.id for p in load_jsonl(path, sample=8, seed=0)] == [p.id for p in a]  # reproducible
    assert [p.id for p in load_jsonl(path, sample=8, seed=1)] != [p.id for p in a]  # seed matters
    assert [p.index for p in a] == sorted(p.index for p in a) and len({p.id for p in a}) == 8
    smaller = load_jsonl(path, sample=4, seed=0)
    assert {p.id for p in smaller} <= {p.id for p in a}  # one seed: a larger sample extends a smaller
    after_offset = load_jsonl(path, offset=20, sample=5, seed=3)
    assert len(after_offset) == 5 and all(p.index >= 20 for p in after_offset)
    assert load_jsonl(path, sample=8, seed=0, limit=3) == a[:3]  # limit applies after sampling
    assert len(load_jsonl(path, sample=100)) == 30  # more than there is: everything


def test_bad_selection_arguments(tmp_path):
    path = _gsm8k(tmp_path)
    for kw in ({"limit": -1}, {"offset": -2}, {"sample": -1}, {"on_error": "ignore"}, {"format": "csv"}):
        with pytest.raises(ConfigError):
            load_jsonl(path, **kw)


# ----------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("bad, why", [
    ('{"question": "Q", "answer": "#### 1"', "invalid JSON"),
    ('{"answer": "#### 1"}', "missing 'question'"),
    ('{"question": "Q"}', "missing 'answer'"),
    ('{"question": "Q", "answer": "She had 5.\\nThen 7 more."}', "no '#### <final answer>'"),
    ('{"question": "Q", "answer": "steps ####   "}', "nothing after '####'"),
    ('["question", "answer"]', "expected a JSON object"),
    ('{"question": "", "answer": "#### 1"}', "non-empty string"),
    ('{"question": "Q", "answer": [1]}', "string or a number"),
])
def test_malformed_line_names_file_and_line(tmp_path, bad, why):
    good = json.dumps({"question": "Q", "answer": "#### 1"})
    path = _write(tmp_path / "broken.jsonl", [good, good, bad, good])
    with pytest.raises(DatasetError) as info:
        load_jsonl(path)
    assert str(path) in str(info.value) and "line 3" in str(info.value) and why in str(info.value)


def test_gsm8k_format_requires_the_marker(tmp_path):
    path = _write(tmp_path / "g.jsonl", [{"question": "Q", "answer": "5"}])
    with pytest.raises(DatasetError, match="line 1: GSM8K answer has no '#### <final answer>'"):
        load_jsonl(path, format="gsm8k")
    assert load_jsonl(path)[0].answer == "5"  # auto reads it as a bare answer


def test_duplicate_ids(tmp_path):
    path = _write(tmp_path / "d.jsonl", [{"id": "a", "problem": "P", "answer": 1}, {"id": "a", "problem": "Q", "answer": 2}])
    with pytest.raises(DatasetError, match="line 2: duplicate id 'a'"):
        load_jsonl(path)


def test_skip_mode_warns_and_reports(tmp_path):
    good = {"question": "Q", "answer": "#### 1"}
    path = _write(tmp_path / "s.jsonl", [good, "{not json", good, {"question": "Q"}, good])
    with pytest.warns(UserWarning) as caught:
        problems = load_jsonl(path, on_error="skip")
    messages = [str(w.message) for w in caught]
    assert any("line 2" in m for m in messages) and any("line 4" in m for m in messages)
    assert [p.index for p in problems] == [0, 2, 4]
    assert [s.line for s in problems.skipped] == [2, 4]
    assert "missing 'answer'" in problems.skipped[1].reason
    # the report covers the whole file, not only the selected slice
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [s.line for s in load_jsonl(path, on_error="skip", limit=1).skipped] == [2, 4]


def test_missing_file_and_directory(tmp_path):
    missing = tmp_path / "nope" / "gsm8k.jsonl"
    with pytest.raises(DatasetError, match="not found") as info:
        load_jsonl(missing)
    assert str(missing) in str(info.value)
    with pytest.raises(DatasetError, match="directory"):
        load_jsonl(tmp_path)
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(str(missing))  # a .jsonl spec never falls through to the hub


def test_not_utf8(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    with pytest.raises(DatasetError, match="UTF-8"):
        load_jsonl(path)


# --------------------------------------------------------------------------- datasets library

def test_load_hf_without_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DatasetError, match=r"pip install datasets.*\.jsonl"):
        load_hf("openai/gsm8k", "test")
    with pytest.raises(DatasetError, match="openai/gsm8k"):
        load_dataset("openai/gsm8k")


def _fake_datasets(monkeypatch, rows, calls):
    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        if name == "missing/dataset":
            raise FileNotFoundError("no such dataset")
        return rows
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load_dataset))


def test_load_hf_with_a_datasets_module(monkeypatch):
    calls = []
    rows = [{"question": f"Q{i}", "answer": f"work\n#### {i},000"} for i in range(5)]
    _fake_datasets(monkeypatch, rows, calls)
    problems = load_hf("openai/gsm8k", limit=2, offset=1)
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [(p.id, p.answer, p.source) for p in problems] == [
        ("gsm8k-test-1", "1000", "openai/gsm8k:test"), ("gsm8k-test-2", "2000", "openai/gsm8k:test")]
    assert [p.index for p in load_dataset("openai/gsm8k:train", sample=2, seed=0)] == \
        [p.index for p in load_hf("openai/gsm8k", "train", sample=2, seed=0)]
    assert calls[-1] == ("openai/gsm8k", "main", "train")
    with pytest.raises(DatasetError, match="could not load dataset 'missing/dataset'.*no such dataset"):
        load_dataset("missing/dataset")


def test_load_hf_malformed_row(monkeypatch):
    _fake_datasets(monkeypatch, [{"problem": "P", "answer": 3}, {"problem": "P"}], [])
    with pytest.raises(DatasetError, match=r"some/aime \[test\], row 2: missing 'answer'"):
        load_hf("some/aime")
    with pytest.warns(UserWarning, match="row 2"):
        assert [p.answer for p in load_hf("some/aime", on_error="skip")] == ["3"]


def test_the_shipped_gsm8k_slice_is_the_training_sets_first_64_problems():
    mini = load_dataset("gsm8k-mini")
    assert len(mini) == 64 and [p.id for p in mini[:2]] == ["train-0", "train-1"]
    assert mini[0].answer == "72" and mini[0].question.startswith("Natalia sold clips to 48 of her friends")
    full = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "train.jsonl"
    if full.is_file():  # beside the checkout: the slice is that file's first 64 problems, ids included
        first = load_dataset(str(full), limit=64)
        assert [(p.question, p.answer) for p in first] == [(p.question, p.answer) for p in mini]
