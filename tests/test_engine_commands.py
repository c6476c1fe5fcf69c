"""``generate`` and ``pairs`` with ``--target-url``, against the loopback FakeEngine of
test_engine_client: the text the engine writes comes out, a pairs file resumes and is read by the
``verifiers`` ablation, and a dead URL or a file of other models ends in one line with exit status 2."""

from __future__ import annotations

import json

import pytest

from lookahead_reasoning.cli import main
from lookahead_reasoning.runtime.engine.llamacpp import free_port

from test_engine_client import FakeEngine


def _dataset(tmp_path, n: int):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(n)))
    return path


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_generate_over_an_engine_prints_its_text_and_a_summary_line(capsys):
    with FakeEngine(text="So 2 + 2 = 4.", stop=None) as engine:
        rc = main(["generate", "--target-url", engine.url, "--prompt", "What is 2 + 2?", "--max-new-tokens", "16"])
        out = capsys.readouterr().out
        [sent] = engine.requests
    assert rc == 0 and out.startswith("So 2 + 2 = 4.\n\n[")
    assert out.rstrip().endswith(f"engine {engine.url}, stop: eos]") and " tokens, " in out and " tok/s, " in out
    assert sent["prompt"] == [ord(c) for c in "What is 2 + 2?"] and sent["max_tokens"] == 16
    assert sent["temperature"] == 0.0 and "stop" not in sent


def test_pairs_over_engines_record_both_steps_and_the_verifiers_read_them(tmp_path, capsys):
    data, out = _dataset(tmp_path, 2), tmp_path / "pairs.jsonl"
    with FakeEngine(text="Step one.") as target, FakeEngine(text="Step two.") as draft:
        rc = main(["pairs", "--dataset", str(data), "--out", str(out), "--target-url", target.url,
                   "--draft-url", draft.url, "--max-new-tokens", "30"])
    assert rc == 0 and f"pairs: {out}" in capsys.readouterr().out
    records = _lines(out)
    pairs = [r for r in records if r["kind"] == "pair"]
    summaries = [r for r in records if r["kind"] == "problem"]
    assert [r["mode"] for r in records] == ["step-0", "step-1", "step-2", "problem"] * 2
    assert all(p["draft"] == "Step two.\n\n" and p["target"] == "Step one.\n\n" for p in pairs)
    assert pairs[1]["prefix"] == "Step one.\n\n" and pairs[1]["prefix_tokens"] == 11
    assert pairs[0]["target_ids"] == [ord(c) for c in "Step one.\n\n"] and pairs[0]["agreed_tokens"] == 5
    assert pairs[0]["exact"] is False and pairs[0]["same_numbers"] is True
    assert pairs[0]["draft_probs"] is None and pairs[0]["target_probs_of_draft"] is None
    assert {(r["target_model"], r["draft_model"], r["target_url"], r["draft_url"]) for r in records} == \
        {("fake", "fake", target.url, draft.url)}
    assert summaries[0]["text"] == "Step one.\n\n" * 3 and summaries[0]["pairs"] == 3
    # the fake writes its whole step past max_tokens; the run keeps the budget's 30 tokens of it
    assert summaries[0]["new_tokens"] == 30 and summaries[1]["problem_id"] != summaries[0]["problem_id"]
    assert main(["verifiers", str(out), "--verifiers", "exact"]) == 0
    table = capsys.readouterr().out
    assert "6 step pairs from 2 problems" in table and "| exact | 6 | 0 | 0.0% |" in table


def test_pairs_over_engines_resume_and_refuse_a_file_of_other_models(tmp_path, capsys):
    data, out = _dataset(tmp_path, 2), tmp_path / "pairs.jsonl"
    args = ["pairs", "--dataset", str(data), "--out", str(out), "--max-new-tokens", "20"]
    with FakeEngine() as target, FakeEngine() as draft:
        urls = ["--target-url", target.url, "--draft-url", draft.url]
        assert main(args + urls + ["--limit", "1"]) == 0
        first = _lines(out)
        assert main(args + urls) == 0
        assert len(target.requests) == 2 + 2 and len(draft.requests) == 2 + 2  # the second run: problem 2 only
        assert main(args + urls) == 0 and len(target.requests) == 4  # nothing left to do
    records = _lines(out)
    assert records[:len(first)] == first and [r["index"] for r in records if r["kind"] == "problem"] == [0, 1]
    capsys.readouterr()
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"kind": "pair", "problem_id": "x", "mode": "step-0", "target_model": "another"}) + "\n")
    with FakeEngine() as engine:
        assert main(["pairs", "--dataset", str(data), "--out", str(other), "--target-url", engine.url,
                     "--draft-url", engine.url]) == 2
        assert engine.requests == []  # refused before any completion
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {other} holds pairs of other models") and "'another'" in err and "\n" not in err


@pytest.mark.parametrize("command", [["generate"], ["pairs", "--dataset", "DATA"]])
def test_a_dead_url_is_one_line_and_exit_status_2(command, capsys, tmp_path):
    """(pairs reads its dataset first: a missing file is named before any connection.)"""
    command = [str(_dataset(tmp_path, 1)) if a == "DATA" else a for a in command]
    url = f"http://127.0.0.1:{free_port()}"
    assert main(command + ["--target-url", url, "--draft-url", url][:4 if command[0] == "pairs" else 2]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot connect to the engine at " + url) and "\n" not in err


def test_pairs_over_an_engine_without_a_draft_is_one_line(capsys):
    assert main(["pairs", "--dataset", "x.jsonl", "--target-url", "http://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.strip() == ("error: pairs over engines need a draft: give --draft-url "
                                               "(or --draft-model on the target's engine)")


def test_pairs_over_engines_resume_inside_a_problem(tmp_path):
    """A run stopped after a problem's first pair: the rerun writes the later pairs and the summary only."""
    data, out = _dataset(tmp_path, 1), tmp_path / "pairs.jsonl"
    with FakeEngine() as engine:
        args = ["pairs", "--dataset", str(data), "--out", str(out), "--target-url", engine.url,
                "--draft-url", engine.url, "--max-new-tokens", "30"]
        assert main(args) == 0
        whole = _lines(out)
        out.write_text(out.read_text().splitlines(keepends=True)[0] + '{"kind": "pair", "problem_id"')  # torn
        assert main(args) == 0
    again = _lines_skipping_torn(out)
    assert [r["mode"] for r in again] == [r["mode"] for r in whole] == ["step-0", "step-1", "step-2", "problem"]
    assert [r["target"] for r in again[:3]] == [r["target"] for r in whole[:3]] == ["Step one.\n\n"] * 3


def _lines_skipping_torn(path) -> list[dict]:
    from lookahead_reasoning.bench.ablation import load_pairs

    pairs = load_pairs(path)
    return pairs + [json.loads(line) for line in path.read_text().splitlines() if '"kind": "problem"' in line]


def test_what_the_engine_run_honours_reaches_its_requests(capsys):
    """Sampling, steps, seed and width given to ``lr --target-url`` are in the requests the engine receives."""
    with FakeEngine(text="So 2 + 2 = 4, and the answer is \\boxed{4}.") as engine:
        code = main(["lr", "--target-url", engine.url, "--draft-url", engine.url, "--mode", "lr", "-k", "1",
                     "--width", "2", "--temperature", "0.5", "--top-k", "7", "--top-p", "0.9", "--seed", "11",
                     "--delimiter", "\n", "--max-step-tokens", "9", "--prompt", "What is 2 + 2?",
                     "--max-new-tokens", "30", "--no-compare", "--no-warmup"])
        requests = list(engine.requests)
    assert code == 0, capsys.readouterr().err
    steps = [r for r in requests if r.get("stop")]
    assert steps and all(r["stop"] == ["\n"] and r["max_tokens"] <= 9 for r in steps)
    assert all(r["temperature"] == 0.5 and r["top_k"] == 7 and r["top_p"] == 0.9 for r in steps)
    assert any(r.get("seed") is not None for r in steps)
    assert len(steps) >= 3  # a drafted step, its alternative (width 2), the target's row
