"""Grading a final answer against the problem's reference answer: the project's one grader.

Two stages. A fast path decides the common case in this process: the two answers spelled
the same once normalized (wrappers, dollars, spacing, thousands separators, degrees and
percent, a leading ``x =``), or two plain numbers. Everything else goes to ``math-verify``
(HuggingFace's grader, LaTeX parsed by ``latex2sympy2_extended``), which knows sets,
intervals, tuples, equations, matrices and units that a hand-written grader misses.

math-verify enforces its own time limits with SIGALRM, which only works in the main thread
(a Celery thread pool or a gunicorn thread calling it raises). So it runs with its limits
off inside a long-lived child process this module owns (``spawn`` context, so no torch or
Django state is inherited), and each call has a deadline: a child that has not answered
by then is killed and restarted, and the call answers None (undecidable). sympy can spend
minutes on ``9^{9^{9^9}}``; only a process-level limit stops it for sure.
"""

from __future__ import annotations

import atexit
import logging
import math
import multiprocessing
import re
import threading
from multiprocessing.connection import Connection
from typing import Any

logger = logging.getLogger(__name__)

# How long a fresh child may take to import math-verify and sympy before it is given up.
STARTUP_S = 120.0
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_ASSIGNMENT = re.compile(r"^[a-zA-Z](_\{?\w+\}?)?\s*=\s*(?P<value>[^=]+)$")
_TEXT_WRAPPERS = ("\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\boxed", "\\fbox", "\\mbox")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# "The answer is X" (Math-Shepherd, GSM8K-style), "#### X" (GSM8K), "# Answer\n\nX" (PRM800K).
_ANSWER_LINE = re.compile(
    r"(?:the\s+(?:final\s+)?answer\s+is\s*:?|^\s*####|^\s*#\s*answer\s*\n\s*)"
    r"\s*(?P<answer>.+?)(?:\.?\s*I hope it is correct\.?)?\s*$",
    re.IGNORECASE | re.MULTILINE,
)


def _closing_brace(text: str, open_index: int) -> int | None:
    """The index of the ``}`` matching the ``{`` at ``open_index``, None if unbalanced."""
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _unwrap(text: str, command: str) -> str:
    """Replaces ``\\command{inner}`` by ``inner``, braces balanced.

    >>> _unwrap(r"\\boxed{\\frac{1}{2}}", r"\\boxed")
    '\\\\frac{1}{2}'
    """
    while (start := text.find(command + "{")) != -1:
        end = _closing_brace(text, start + len(command))
        if end is None:
            return text  # unbalanced: leave it alone
        text = text[:start] + text[start + len(command) + 1 : end] + text[end + 1 :]
    return text


def extract_answer(text: str) -> str | None:
    """A completion's final answer: the content of its last ``\\boxed{...}`` (braces
    balanced), else of its last "The answer is X", "#### X" or "# Answer" line, else None.

    >>> extract_answer(r"so $x = \\boxed{\\frac{1}{2}}$. Check: \\boxed{3}.")
    '3'
    >>> extract_answer("2 + 2 = 4.\\nThe answer is: 4."), extract_answer("#### 1,000")
    ('4', '1,000')
    >>> extract_answer("Final Answer: The final answer is $12$. I hope it is correct.")
    '12'
    >>> extract_answer("no answer here") is None
    True
    """
    for match in reversed(list(_BOXED.finditer(text))):
        end = _closing_brace(text, match.end() - 1)
        if end is not None:
            inner = text[match.end() : end].strip()
            if inner:
                return inner
    lines = list(_ANSWER_LINE.finditer(text))
    if lines:
        answer = lines[-1].group("answer").strip().rstrip(".").strip().strip("$").strip()
        return answer or None
    return None


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


def fast_equivalent(given: str, reference: str) -> bool | None:
    """The fast path: True for the same normalized spelling, True/False for two plain
    numbers, None when it cannot tell (math-verify decides those).

    >>> fast_equivalent("1,000", "1000.0"), fast_equivalent("x = 3", "4")
    (True, False)
    >>> fast_equivalent(r"\\frac{1}{2}", "0.5") is None
    True
    """
    left, right = normalize_answer(given), normalize_answer(reference)
    if not left or not right:
        return None
    if left == right or left.lower() == right.lower():
        return True
    if _NUMBER.match(left) and _NUMBER.match(right):
        return math.isclose(float(left), float(right), rel_tol=1e-9, abs_tol=1e-12)
    return None


def _math_verify(given: str, reference: str) -> bool | None:
    """math-verify's verdict with its own time limits off (runs in the child). Both sides
    are read as boxed LaTeX, the highest-priority extraction; None when either side does
    not parse (math-verify answers False for those, which would grade a chain wrong for
    a spelling it cannot read)."""
    from math_verify import LatexExtractionConfig, parse, verify

    # LaTeX extraction only: math-verify's plain-expression extraction hands text to
    # sympy's ``parse_expr``, which evaluates Python, and answers are untrusted text.
    latex = [LatexExtractionConfig()]
    gold = parse(f"\\boxed{{{reference}}}", latex, parsing_timeout=None)
    target = parse(f"\\boxed{{{given}}}", latex, parsing_timeout=None)
    if not gold or not target:
        return None
    return bool(verify(gold, target, timeout_seconds=None))


def _serve(conn: Connection) -> None:
    """The child's loop: answers each (given, reference) with True, False or None."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401 - imported before "ready", so startup is not a call's time

    conn.send("ready")
    while True:
        try:
            given, reference = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result = _math_verify(given, reference)
        except Exception:  # noqa: BLE001 - sympy raises many types on odd input
            result = None
        conn.send(result)


class _Verifier:
    """The child process and its pipe. One call at a time (a lock): the child is
    single-threaded, and a deadline must belong to one call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Any = None
        self._conn: Connection | None = None

    def _start(self) -> Connection:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child,), daemon=True, name="math-verify")
        process.start()
        child.close()
        if not parent.poll(STARTUP_S) or parent.recv() != "ready":
            process.kill()
            process.join()
            raise RuntimeError("the math-verify child did not start")
        self._process, self._conn = process, parent
        return parent

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def check(self, given: str, reference: str, timeout_s: float) -> bool | None:
        with self._lock:
            conn = self._conn
            if conn is None or not self._process.is_alive():
                self.stop()
                conn = self._start()
            try:
                conn.send((given, reference))
                if conn.poll(timeout_s):
                    result: bool | None = conn.recv()
                    return result
            except (EOFError, OSError):
                pass  # the child died on this input: restart it for the next call
            logger.warning("math-verify gave no answer within %.1f s; restarting it", timeout_s)
            self.stop()
            return None


_verifier = _Verifier()
atexit.register(_verifier.stop)


def answers_equivalent(given: str, reference: str, *, timeout_s: float = 5.0) -> bool | None:
    """Whether the final answer ``given`` matches ``reference``: True or False, None when
    either is empty, math-verify cannot parse one of them, or it did not decide within
    ``timeout_s`` seconds. Safe to call from any thread.

    >>> answers_equivalent("1,000", "1000"), answers_equivalent(r"\\boxed{4}", "5")
    (True, False)
    >>> answers_equivalent("", "5") is None
    True
    """
    if not given or not given.strip() or not reference or not reference.strip():
        return None
    fast = fast_equivalent(given, reference)
    if fast is not None:
        return fast
    return _verifier.check(given, reference, timeout_s)
