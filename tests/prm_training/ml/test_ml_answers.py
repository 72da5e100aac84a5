"""Final-answer grading against the reference answer."""

from __future__ import annotations

import pytest

from prm_training.ml.answers import grade_answer, normalize_answer


@pytest.mark.parametrize(
    ("answer", "reference"),
    [
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac{1}{2}", r"\frac12"),
        ("1,000", "1000"),
        ("x=3", "3"),
        ("x = 3", r"\boxed{3}"),
        (r"\boxed{\frac{3}{4}}", "0.75"),
        (r"$2\sqrt{2}$", r"\sqrt{8}"),
        ("2*(x+1)", "2x+2"),
        (r"\text{Monday}", "monday"),
        ("50\\%", "50"),
        ("90^\\circ", "90"),
        ("10.", "10"),
        ("1e3", "1000"),
    ],
)
def test_equivalent_answers_are_graded_correct(answer: str, reference: str) -> None:
    assert grade_answer(answer, reference) is True


@pytest.mark.parametrize(
    ("answer", "reference"),
    [
        ("0.49", "0.5"),
        (r"\frac{1}{3}", "0.33"),
        ("x+1", "x+2"),
        ("Tuesday", "Monday"),
        ("1,000", "100"),
    ],
)
def test_different_answers_are_graded_wrong(answer: str, reference: str) -> None:
    assert grade_answer(answer, reference) is False


@pytest.mark.parametrize(("answer", "reference"), [("", "3"), ("3", ""), ("  ", "3")])
def test_empty_side_is_ungraded(answer: str, reference: str) -> None:
    assert grade_answer(answer, reference) is None


def test_hostile_input_is_refused_before_sympy_sees_it(monkeypatch) -> None:
    # Given a sympy parser that notes what it is asked to parse
    import sympy.parsing.sympy_parser as parser

    parsed: list[str] = []
    real = parser.parse_expr
    monkeypatch.setattr(
        parser, "parse_expr", lambda text, **k: parsed.append(text) or real(text, **k)
    )

    # Then a tower of powers, code, and a text too long for sympy are refused unparsed
    # (only the plain reference "1" reaches the parser)
    assert grade_answer("9^9^9^9", "1") is False
    assert grade_answer("__import__('os')", "1") is False
    assert grade_answer("(" * 500 + "1" + ")" * 500, "1") is False
    assert set(parsed) <= {"1"}


def test_normalize_answer() -> None:
    assert normalize_answer(r"  $\boxed{ y = 12,345 }$. ") == "12345"
