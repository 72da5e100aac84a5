"""Grading a final answer against the problem's reference answer: the project's one grader.

Two stages. A fast path decides the common case in this process: the two answers spelled
the same once normalized (wrappers, dollars, spacing, thousands separators, degrees and
percent, a leading ``x =``), or two plain numbers. Everything else goes to ``math-verify``
(HuggingFace's grader, LaTeX parsed by ``latex2sympy2_extended``), which knows sets,
intervals, tuples, equations, matrices and units that a hand-written grader misses.

math-verify enforces its own time limits with SIGALRM, which only works in the main thread
(a Celery thread pool or a gunicorn thread calling it raises). So it runs with its limits
off inside a long-lived child process this module owns, and each call has a deadline: a
child that has not answered by then is killed and restarted, and the call answers None
(undecidable). sympy can spend minutes on ``9^{9^{9^9}}``; only a process-level limit
stops it for sure. The child is a plain subprocess (``child_process``), ``python -m
prm_training.ml.grading``, speaking one JSON line per question and answer over its stdin
and stdout: it starts the same from a Celery prefork child (daemonic, so
``multiprocessing`` may not start children there), a thread or a script, and inherits no
torch or Django state.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import select
import subprocess
import sys
import threading
import time

from .child_process import exit_when_orphaned, python_child, stop_child

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


def _serve() -> None:
    """The child's loop (``python -m prm_training.ml.grading``): reads one JSON
    ``[given, reference]`` a line from stdin, answers ``true``, ``false`` or ``null`` a line
    on stdout. Anything else that writes to stdout (sympy prints) goes to stderr instead,
    so the answers' channel carries answers only."""
    exit_when_orphaned()
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401 - imported before "ready", so startup is not a call's time

    answers.write("ready\n")
    for line in sys.stdin:
        try:
            given, reference = json.loads(line)
            result = _math_verify(str(given), str(reference))
        except Exception:  # noqa: BLE001 - sympy raises many types on odd input
            result = None
        answers.write(json.dumps(result) + "\n")


def _read_line(fd: int, pending: bytearray, timeout_s: float) -> str | None:
    """The next line the child writes on ``fd`` (``pending`` holds what came before it),
    or None when none came within ``timeout_s`` or the child closed its end."""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in pending:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line.decode()


class _Verifier:
    """The child process and its pipes. One call at a time (a lock): the child is
    single-threaded, and a deadline must belong to one call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pending = bytearray()

    def _start(self) -> subprocess.Popen[bytes]:
        process = python_child(
            "prm_training.ml.grading", stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._process, self._pending = process, bytearray()
        assert process.stdout is not None
        if _read_line(process.stdout.fileno(), self._pending, STARTUP_S) != "ready":
            self.stop()
            raise RuntimeError("the math-verify child did not start")
        return process

    def stop(self) -> None:
        if self._process is not None:
            for pipe in (self._process.stdin, self._process.stdout):
                if pipe is not None:
                    pipe.close()
            stop_child(self._process, grace_s=0)
        self._process = None

    def check(self, given: str, reference: str, timeout_s: float) -> bool | None:
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                self.stop()
                process = self._start()
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write((json.dumps([given, reference]) + "\n").encode())
                process.stdin.flush()
                answer = _read_line(process.stdout.fileno(), self._pending, timeout_s)
            except OSError:
                answer = None  # the child died on this input: restart it for the next call
            if answer is not None:
                result: bool | None = json.loads(answer)
                return result
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


if __name__ == "__main__":
    _serve()
