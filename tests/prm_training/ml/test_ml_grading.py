"""The grader: answer extraction, the fast path, math-verify in its child process with a
process-level deadline, from the main thread and from others."""

from __future__ import annotations

import threading

import pytest

from prm_training.ml.grading import answers_equivalent, extract_answer, fast_equivalent


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (r"So the answer is $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (
            r"\boxed{1} then \boxed{\left( 3, \frac{\pi}{2} \right)}",
            r"\left( 3, \frac{\pi}{2} \right)",
        ),
        (r"\boxed {7}", "7"),
        ("Step 2: 6 * 7 = 42. The answer is: 42", "42"),
        ("Adding up.\n#### 1,250", "1,250"),
        ("The final answer is $12$.", "12"),
        (r"unbalanced \boxed{3", None),
        ("no answer at all", None),
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("given", "reference"),
    [
        ("1,000", "1000"),
        ("x = 3", "3"),
        (r"\frac12", "0.5"),
        (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"),
        ("1+2\\sqrt{3}", "2\\sqrt3+1"),
        ("8, 3, 1", "1,3,8"),
        (r"\text{(C)}", "C"),
        (r"90^\circ", "90"),
        ("3R^2", "3R^{2}"),
        (r"[2, 5)", r"[2,5)"),
        (r"\dfrac{1}{2}", r"\frac12"),
        ("x = 3", r"\boxed{3}"),
        (r"\boxed{\frac{3}{4}}", "0.75"),
        (r"$2\sqrt{2}$", r"\sqrt{8}"),
        ("2(x+1)", "2x+2"),
        (r"\text{Monday}", "monday"),
        ("50\\%", "50"),
        ("10.", "10"),
        ("1e3", "1000"),
        (
            r"\begin{pmatrix} -\frac{1}{3} \\ \frac{2}{3} \end{pmatrix}",
            r"\begin{pmatrix} -1/3 \\ 2/3 \end{pmatrix}",
        ),
        (r"(2, \infty)", r"(2,\infty)"),
    ],
)
def test_equivalent_answers(given: str, reference: str) -> None:
    assert answers_equivalent(given, reference) is True


@pytest.mark.parametrize(
    ("given", "reference"),
    [
        ("4", "5"),
        (r"\frac{1}{3}", "0.5"),
        ("(3, 2)", "(2, 3)"),
        (r"\sqrt{2}", "2"),
        ("x+1", "x-1"),
        ("0.49", "0.5"),
        (r"\frac{1}{3}", "0.33"),
        ("Tuesday", "Monday"),
        ("1,000", "100"),
    ],
)
def test_different_answers(given: str, reference: str) -> None:
    assert answers_equivalent(given, reference) is False


def test_empty_answers_are_undecidable() -> None:
    assert answers_equivalent("", "5") is None
    assert answers_equivalent("5", "  ") is None


def test_code_in_an_answer_is_never_run(tmp_path) -> None:
    # Given answers that are Python code (sympy's parse_expr would evaluate them)
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    # When they are graded
    results = [answers_equivalent(code, "1"), answers_equivalent("1", code)]
    # Then nothing ran, and they are not graded right
    assert not marker.exists()
    assert True not in results


def test_the_fast_path_leaves_latex_to_math_verify() -> None:
    # the common case never crosses a process; LaTeX that only sympy can compare does
    assert fast_equivalent("1,000", "1000") is True
    assert fast_equivalent("7", "8") is False
    assert fast_equivalent(r"\frac{1}{2}", "0.5") is None


def test_a_runaway_comparison_is_cut_at_the_limit_and_the_next_call_works() -> None:
    # Given a power tower that sympy would spend minutes (or for ever) on
    # When it is graded with a 2-second limit
    assert answers_equivalent("9^{9^{9^{9}}}", "1", timeout_s=2.0) is None
    # Then the call gave up (None) and the restarted child grades the next pair
    assert answers_equivalent(r"\frac{1}{2}", "0.5") is True


def test_it_works_outside_the_main_thread() -> None:
    # Given a thread that is not the main one (a Celery or gunicorn thread)
    results: list[bool | None] = []
    thread = threading.Thread(
        target=lambda: results.extend(
            [answers_equivalent(r"\frac{2}{4}", "0.5"), answers_equivalent(r"\sqrt{2}", "2")]
        )
    )
    # When it grades answers that need math-verify
    thread.start()
    thread.join()
    # Then math-verify answers (its own SIGALRM limits would raise there)
    assert results == [True, False]


def test_the_grader_child_ends_when_the_process_that_started_it_dies() -> None:
    """A worker killed while its grader is deep in sympy leaves no grader behind."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = (
        "from prm_training.ml.grading import _verifier, answers_equivalent\n"
        "answers_equivalent(r'\\frac{1}{2}', '0.5')\n"
        "print(_verifier._process.pid, flush=True)\n"
        "answers_equivalent('9^{9^{9^{9}}}', '3', timeout_s=600)\n"
    )
    root = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=root)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(0.5)  # the child is busy with the power tower
    parent.kill()
    parent.wait()

    def gone() -> bool:
        try:
            status = Path(f"/proc/{child}/status").read_text()
        except FileNotFoundError:
            return True
        return "State:\tZ" in status

    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone()
