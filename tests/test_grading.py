"""Answer extraction and math-verify grading: boxed answers, number fallback, equivalent forms,
wrong or missing answers, odd input, and worker threads (where math-verify's signal timeout is off)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_reasoning.bench import Grade, extract_answer, extract_boxed, grade
from lookahead_reasoning.bench.grading import answers_match, normalize_answer


# ------------------------------------------------------------------------------------- extraction

@pytest.mark.parametrize("text, expected", [
    (r"so the answer is \boxed{72}.", "72"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\frac{\sqrt{3}}{2^{x+1}}} done", r"\frac{\sqrt{3}}{2^{x+1}}"),
    (r"first \boxed{1}, then \fbox{2}, finally \boxed{3}", "3"),
    (r"\fbox{ 18 }", "18"),
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
    (r"\boxed{\fbox{1}+1}", r"\fbox{1}+1"),
    (r"$\boxed 5$", "5"),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text", ["no box here", r"\boxed{\frac{1}{2}", r"\boxed{1} and then \boxed{2", "", r"\boxedx{3}"])
def test_extract_boxed_absent_or_unbalanced(text):
    assert extract_boxed(text) is None


@pytest.mark.parametrize("text, expected", [
    (r"It is 5, so \boxed{7}. Check: 9", "7"),  # a box wins over later numbers
    ("She pays $1,234 in total.", "1234"),
    ("The total is 1,234,567.89 dollars", "1234567.89"),
    ("The temperature drops to -4.", "-4"),
    ("x = −12", "-12"),
    ("It costs -$5 now", "-5"),
    ("read pages 3-4", "4"),  # a hyphen in a range is not a minus sign
    ("The answer is 3/4.", "3/4"),
    ("half of it is .5", ".5"),
    ("Natalia sold 48+24 = 72 clips.\n#### 72", "72"),
    ("The price is $18.00.", "18.00"),
    ("no numbers at all", None),
    ("", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("raw, expected", [
    ("1,234", "1234"), ("$18$", "18"), (r"\$18.00", "18.00"), ("18 dollars", "18"), ("5 cm.", "5"),
    (r"\text{18 dollars}", "18"), ("1{,}234", "1234"), ("−3", "-3"), ("2x", "2x"), ("(1,2)", "(1,2)"),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


# ---------------------------------------------------------------------------------------- grading

@pytest.mark.parametrize("text, gold", [
    (r"\boxed{72}", "72"),
    (r"\boxed{\frac{3}{4}}", "0.75"),
    (r"\boxed{\dfrac{3}{4}}", r"\frac{3}{4}"),
    (r"\boxed{0.75}", r"\frac{3}{4}"),
    (r"\boxed{3/4}", "0.75"),
    (r"\boxed{\tfrac12}", "0.5"),
    (r"\boxed{1,234}", "1234"),
    (r"\boxed{1234}", "1,234"),
    ("so she has 1,234 left.", "1234"),
    (r"\boxed{18 dollars}", "18"),
    (r"\boxed{18 \text{ dollars}}", "18"),
    (r"\boxed{\text{18 dollars}}", "18"),
    (r"\boxed{5 cm}", "5"),
    (r"\boxed{5\,\text{cm}}", "5"),
    (r"\boxed{\$18.00}", "18"),
    ("He earned $18.00.", "18"),
    (r"\boxed{-3}", "-3"),
    ("The change is -7 degrees.", "-7"),
    (r"\boxed{10\%}", "10"),
    (r"\boxed{2\sqrt{3}}", r"\sqrt{12}"),
    (r"\boxed{10^6}", "1,000,000"),
    (r"\boxed{073}", "73"),  # AIME answers are sometimes written with leading zeros
    (r"\boxed{1} no wait, \boxed{2}", "2"),
])
def test_correct(text, gold):
    assert grade(text, gold).correct, (text, gold, extract_answer(text))


@pytest.mark.parametrize("text, gold", [
    (r"\boxed{71}", "72"),
    (r"\boxed{3}", "-3"),
    (r"\boxed{-3}", "3"),
    (r"\boxed{\frac{1}{3}}", "0.5"),
    (r"\boxed{0.333}", r"\frac{1}{3}"),  # math-verify rounds to 6 places, not 3
    (r"\boxed{2} no wait, \boxed{1}", "2"),  # the last box counts
    (r"\boxed{72 + x}", "72"),
    ("I do not know.", "72"),  # no answer at all
    ("", "72"),
    (r"\boxed{}", "72"),
    (r"\boxed{\text{three}}", "3"),
])
def test_incorrect(text, gold):
    assert not grade(text, gold).correct


def test_grade_record():
    g = grade(r"Thus \boxed{\frac{3}{4}}.", "0.75")
    assert g == Grade(predicted=r"\frac{3}{4}", gold="0.75", correct=True)
    assert grade("nothing", "5") == Grade(None, "5", False)
    assert grade(r"\boxed{204}", 204) == Grade("204", "204", True)  # AIME golds may be ints


@pytest.mark.parametrize("text", [
    r"\boxed{\frac{}{}}", r"\boxed{\left(}", r"\boxed{)))}", r"\boxed{\sqrt}", r"\boxed{1/0}",
    r"\boxed{" + "1+" * 2000 + "1}", r"\boxed{\begin{pmatrix}1\end{pmatrix}}", "\\boxed{\x00}",
])
def test_odd_input_is_incorrect_not_an_error(text):
    assert grade(text, "72").correct is False
    assert answers_match(None, "72") is False
    assert grade(None, "72").correct is False  # type: ignore[arg-type]


def test_huge_numbers_are_not_evaluated():
    start = time.perf_counter()
    assert not grade(r"\boxed{9^{9^{9^{9}}}}", "72").correct
    assert not grade(r"\boxed{2^{10^{10}}}", "72").correct
    assert not grade(r"\boxed{(10^{10})!}", "72").correct
    assert grade(r"\boxed{2^{10}}", "1024").correct
    assert time.perf_counter() - start < 5


def test_grading_works_in_worker_threads():
    """math-verify's timeouts use signal.alarm, which fails off the main thread: grading must not."""
    cases = [(r"\boxed{\frac{3}{4}}", "0.75", True), (r"\boxed{1,234}", "1234", True),
             (r"\boxed{5}", "6", False), (r"\boxed{9^{9^{9^{9}}}}", "72", False)]
    results, errors = {}, []

    def work(i, text, gold):
        try:
            results[i] = grade(text, gold).correct
        except BaseException as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, *c[:2])) for i, c in enumerate(cases)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert results == {i: c[2] for i, c in enumerate(cases)}


def test_main_thread_alarm_handler_restored():
    before = signal.getsignal(signal.SIGALRM)
    assert grade(r"\boxed{\frac{6}{8}}", "0.75").correct
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.alarm(0) == 0  # no alarm left pending


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("0123456789-+.,/$\\{}()^_ abxfrcboxed%")), max_size=40))
def test_never_raises(text):
    g = grade(text, "12")
    assert isinstance(g.correct, bool)
    assert g.predicted is None or isinstance(g.predicted, str)
