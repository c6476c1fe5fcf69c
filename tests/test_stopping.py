"""``StopChecker`` on a real (byte-level BPE) tokenizer: stop strings are found on decoded text,
inside a larger token (".\\n\\n") or split over tokens ("\\n" + "\\n"); EOS and the budget cut
exactly; the scan restarts after a rollback."""

from __future__ import annotations

import pytest

from lookahead_reasoning.errors import ConfigError
from lookahead_reasoning.stopping import StopChecker, StopCondition

from lookahead_reasoning.testing import tiny_tokenizer

TOK = tiny_tokenizer()


def ids(text: str) -> list[int]:
    return TOK.encode(text, add_special_tokens=False)


def decode(tokens) -> str:
    return TOK.decode(list(tokens), skip_special_tokens=True)


def checker(stop_strings=(), eos=(), budget=100) -> StopChecker:
    return StopChecker(StopCondition(frozenset(eos), tuple(stop_strings), budget), decode)


def first_stop_one_by_one(chk: StopChecker, tokens):
    """Feed the tokens one at a time, as the AR loop does; return the first hit."""
    for n in range(len(tokens) + 1):
        hit = chk.check(tokens[:n])
        if hit is not None:
            return hit
    return None


def test_step_delimiter_inside_a_larger_token():
    tokens = ids("Add 3.\n\nThen 4.\n\n")
    dot_nl_nl = ids(".\n\n")
    assert len(dot_nl_nl) == 1  # the tokenizer merges it: "\n\n" is not a token of its own here
    cut = tokens.index(dot_nl_nl[0]) + 1
    for hit in (checker(["\n\n"]).check(tokens), first_stop_one_by_one(checker(["\n\n"]), tokens)):
        assert (hit.keep, hit.reason) == (cut, "stop_string")
        assert decode(tokens[:hit.keep]) == "Add 3.\n\n"


def test_stop_string_split_across_tokens():
    tokens = ids("x\n") + ids("\ny\n\n")  # "\n" then "\n": two tokens make the stop string
    assert decode(tokens[:2]) == "x\n" and "\n\n" not in decode(tokens[:2])
    hit = first_stop_one_by_one(checker(["\n\n"]), tokens)
    assert (hit.keep, hit.reason) == (3, "stop_string")
    # a longer stop string over several tokens: "the answer" ends at the token holding "r"
    tokens = ids("so the answer is 12")
    hit = checker(["answer", "zzz"]).check(tokens)
    assert decode(tokens[:hit.keep]) == "so the answer"


def test_stop_string_in_the_middle_of_a_token_keeps_the_whole_token():
    tokens = ids("a.\n\nb")
    hit = checker([".\n"]).check(tokens)
    assert decode(tokens[:hit.keep]) == "a.\n\n"  # the token ".\n\n" completes ".\n" and is kept whole


def test_no_stop_string_means_no_hit():
    tokens = ids("one two three")
    assert checker(["\n\n"]).check(tokens) is None
    assert first_stop_one_by_one(checker(["\n\n"]), tokens) is None


def test_eos_cuts_after_the_eos_token_and_wins_over_the_budget():
    tokens = ids("abc") + [TOK.eos_token_id] + ids("def")
    hit = checker(eos=[TOK.eos_token_id]).check(tokens)
    assert (hit.keep, hit.reason) == (4, "eos")
    hit = checker(eos=[TOK.eos_token_id], budget=4).check(tokens)
    assert (hit.keep, hit.reason) == (4, "eos")
    # EOS decodes to nothing (special token), so it never completes a stop string by itself
    hit = checker(["\n\n"], eos=[TOK.eos_token_id]).check(ids("a\n") + [TOK.eos_token_id] + ids("\n"))
    assert (hit.keep, hit.reason) == (3, "eos")


@pytest.mark.parametrize("budget", [1, 2, 5])
def test_budget_is_exact(budget):
    tokens = ids("abcdefgh")
    hit = first_stop_one_by_one(checker(budget=budget), tokens)
    assert (hit.keep, hit.reason) == (budget, "budget")
    hit = checker(budget=budget).check(tokens)  # all at once, more than the budget
    assert (hit.keep, hit.reason) == (budget, "budget")


def test_zero_budget():
    assert checker(budget=0).check([]).keep == 0
    hit = checker(budget=0).check(ids("ab"))
    assert (hit.keep, hit.reason) == (0, "budget")


def test_rollback_then_other_tokens_is_rescanned():
    """Seen 10 tokens, then rolled back to 3 and grown past 10 with a stop string at position 5."""
    chk = checker(["\n\n"], budget=100)
    first = ids("abcdefghij")
    assert chk.check(first) is None
    second = first[:3] + ids("x\n\nyzwvuts")
    hit = chk.check(second)
    assert hit is not None and decode(second[:hit.keep]) == "abcx\n\n"
    # shrinking alone, then growing without a stop, is no stop
    chk = checker(["\n\n"])
    assert chk.check(ids("a\nb")) is None
    assert chk.check(ids("a")) is None
    assert chk.check(ids("ab\nc")) is None


def test_bad_conditions_raise():
    with pytest.raises(ConfigError):
        StopCondition(max_new_tokens=-1)
    with pytest.raises(ConfigError):
        StopCondition(stop_strings=("",))
    with pytest.raises(ConfigError):
        StopCondition(max_new_tokens=2.5)
