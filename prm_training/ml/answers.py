"""Grading a chain's final answer against the problem's reference answer.

In order: normalized strings, then numbers, then sympy equivalence where both sides parse.
Answers come from imported text, so sympy only ever sees a sanitized, short expression
parsed with ``evaluate=False`` (``9**9**9`` is not computed while parsing), power towers
and factorials are refused, and equivalence is decided numerically or by ``expand`` and
``cancel``, never by the open-ended ``simplify``. (sympy's ``parse_latex`` needs the
ANTLR runtime, which is not a dependency, so LaTeX is rewritten to plain syntax first.)
"""

from __future__ import annotations

import math
import re

MAX_SYMPY_CHARS = 200
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_ASSIGNMENT = re.compile(r"^[a-zA-Z](_\{?\w+\}?)?\s*=\s*(?P<value>[^=]+)$")
_TEXT_WRAPPERS = ("\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\boxed", "\\fbox", "\\mbox")
_SYMPY_SAFE = re.compile(r"^[0-9a-zA-Z+\-*/().,^ ]+$")


def _unwrap(text: str, command: str) -> str:
    """Replaces ``\\command{inner}`` by ``inner``, braces balanced.

    >>> _unwrap(r"\\boxed{\\frac{1}{2}}", r"\\boxed")
    '\\\\frac{1}{2}'
    """
    while (start := text.find(command + "{")) != -1:
        depth, index = 0, start + len(command)
        for index in range(start + len(command), len(text)):
            if text[index] == "{":
                depth += 1
            elif text[index] == "}":
                depth -= 1
                if depth == 0:
                    break
        else:
            return text  # unbalanced: leave it alone
        text = text[:start] + text[start + len(command) + 1 : index] + text[index + 1 :]
    return text


def normalize_answer(text: str) -> str:
    """A canonical spelling: wrappers, dollars, spacing, thousands separators, units of
    degree and percent, a leading ``x =`` and a trailing period removed.

    >>> normalize_answer(r"$\\boxed{x = 1,000.}$")
    '1000'
    """
    text = text.strip()
    for command in _TEXT_WRAPPERS:
        text = _unwrap(text, command)
    for token in (
        "$",
        "\\!",
        "\\,",
        "\\;",
        "\\:",
        "\\left",
        "\\right",
        "\\displaystyle",
        "^\\circ",
        "^{\\circ}",
        "\\%",
        "%",
        "\\ ",
    ):
        text = text.replace(token, "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = text.strip().rstrip(".").strip()
    if (match := _ASSIGNMENT.match(text)) is not None:
        text = match.group("value").strip()
    text = re.sub(r"\s+", " ", text)
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    return text


def _latex_to_plain(text: str) -> str:
    """Rewrites the LaTeX that answers use into sympy syntax.

    >>> _latex_to_plain(r"\\frac{1}{2}+\\sqrt{3}")
    '((1)/(2))+sqrt(3)'
    >>> _latex_to_plain(r"\\frac12")
    '((1)/(2))'
    """
    text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
        text = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", text)
    text = re.sub(r"\\sqrt(\d)", r"sqrt(\1)", text)
    for latex, plain in (("\\cdot", "*"), ("\\times", "*"), ("\\pi", "pi"), ("{", "("), ("}", ")")):
        text = text.replace(latex, plain)
    return text.replace(" ", "")


def _as_number(text: str) -> float | None:
    return float(text) if _NUMBER.match(text) else None


def _sympy_expr(text: str):  # noqa: ANN202 - sympy's Expr, imported lazily
    plain = _latex_to_plain(text)
    if (
        len(plain) > MAX_SYMPY_CHARS
        or not _SYMPY_SAFE.match(plain)
        or "!" in plain
        or plain.count("^") + plain.count("**") > 2
    ):
        return None
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    transformations = (*standard_transformations, implicit_multiplication_application, convert_xor)
    try:
        return parse_expr(plain, transformations=transformations, evaluate=False)
    except Exception:  # noqa: BLE001 - sympy raises many types on junk input
        return None


def _sympy_equal(left: str, right: str) -> bool | None:
    a, b = _sympy_expr(left), _sympy_expr(right)
    if a is None or b is None:
        return None
    import sympy

    try:
        if a.is_number and b.is_number:
            x, y = complex(sympy.N(a, 30)), complex(sympy.N(b, 30))
            return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))
        return bool(sympy.cancel(sympy.expand(a - b)) == 0)
    except Exception:  # noqa: BLE001 - overflow, unsupported ops: not provably equal
        return None


def grade_answer(answer: str, reference: str) -> bool | None:
    """True when ``answer`` matches ``reference``, False when not, None when either is empty.

    >>> grade_answer(r"\\frac{1}{2}", "0.5"), grade_answer("1,000", "1000")
    (True, True)
    >>> grade_answer("x=3", "3"), grade_answer(r"\\boxed{4}", "5"), grade_answer("", "5")
    (True, False, None)
    """
    if not answer or not answer.strip() or not reference or not reference.strip():
        return None
    left, right = normalize_answer(answer), normalize_answer(reference)
    if not left or not right:
        return None
    if left == right or left.lower() == right.lower():
        return True
    x, y = _as_number(left), _as_number(right)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
    return bool(_sympy_equal(left, right))
