"""The demo data generator and the `seed_demo` command."""

from __future__ import annotations

import ast
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.demo_data import generate_chains, write_jsonl
from annotation.models import Annotation, Chain, ImportBatch, LabelingMode, Membership, Project

EQUATION = re.compile(r"\$([^$=]+)=([^$]+)\$")


def _value(latex: str) -> float:
    """An independent evaluator for the test: LaTeX operators to Python, then a literal-only
    AST walk (no eval)."""
    source = latex.replace("\\times", "*").replace("\\div", "/")
    tree = ast.parse(source.strip(), mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div)
    assert all(isinstance(node, allowed) for node in ast.walk(tree)), latex
    return float(eval(compile(tree, "<step>", "eval"), {"__builtins__": {}}))  # noqa: S307


def _first_wrong_step(steps: tuple[str, ...]) -> int | None:
    for index, step in enumerate(steps):
        for left, right in EQUATION.findall(step):
            if abs(_value(left) - float(right)) > 0.006:  # results are written to 2 decimals
                return index
    return None


def test_generator_is_deterministic() -> None:
    first = generate_chains(count=50, seed=11)
    assert first == generate_chains(count=50, seed=11)
    assert first != generate_chains(count=50, seed=12)


def test_the_file_is_byte_identical_for_the_same_seed(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl(generate_chains(count=30, seed=5), a)
    write_jsonl(generate_chains(count=30, seed=5), b)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(("count", "rate"), [(200, 0.3), (40, 0.5), (25, 0.0), (10, 1.0)])
def test_errors_are_where_meta_says_and_correct_chains_add_up(count: int, rate: float) -> None:
    chains = generate_chains(count=count, seed=2024, error_rate=rate)
    assert len(chains) == count
    assert sum(c.injected_error_step is not None for c in chains) == round(count * rate)
    for chain in chains:
        # Every computation before the injected step is right; the injected one is wrong.
        assert _first_wrong_step(chain.steps) == chain.injected_error_step, chain
        if chain.injected_error_step is None:
            assert chain.answer == chain.reference_answer
        else:
            # The error is carried forward to a wrong final answer.
            assert chain.answer != chain.reference_answer
            later = chain.steps[chain.injected_error_step + 1 :]
            assert _first_wrong_step(later) is None  # later steps compute correctly from it
        assert 3 <= len(chain.steps) <= 8
        assert chain.answer in chain.steps[-1]


def test_problems_are_distinct_and_varied() -> None:
    chains = generate_chains(count=200, seed=2024)
    assert len({c.problem for c in chains}) == 200
    assert len({c.scenario for c in chains}) >= 6
    assert any("\\times" in s for c in chains for s in c.steps)
    assert any("\\div" in s for c in chains for s in c.steps)


def test_records_are_generic_jsonl_without_labels(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    assert write_jsonl(generate_chains(count=20, seed=3, error_rate=0.5), path) == 20
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 20
    for record in records:
        assert "labels" not in record
        assert set(record) >= {"problem", "steps", "answer", "reference_answer", "meta"}
        assert "injected_error_step" in record["meta"]
    assert sum(r["meta"]["injected_error_step"] is not None for r in records) == 10


def _counts() -> dict[str, int]:
    return {
        "users": get_user_model().objects.count(),
        "projects": Project.objects.count(),
        "memberships": Membership.objects.count(),
        "chains": Chain.objects.count(),
        "imports": ImportBatch.objects.count(),
        "annotations": Annotation.objects.count(),
    }


@pytest.mark.django_db
def test_seed_demo_is_idempotent_and_prints_logins() -> None:
    # When the seed runs twice
    first_out, second_out = StringIO(), StringIO()
    call_command("seed_demo", "--allow-without-debug", stdout=first_out)
    after_first = _counts()
    call_command("seed_demo", "--allow-without-debug", stdout=second_out)

    # Then the second run adds nothing
    assert _counts() == after_first
    assert after_first == {
        "users": 4,
        "projects": 3,
        "memberships": 9,
        "chains": 240,
        "imports": 3,
        "annotations": 0,  # the chains are for people to grade
    }
    main = Project.objects.get(name="Demo: arithmetic word problems")
    assert (main.labeling_mode, main.overlap, main.chains.count()) == (
        LabelingMode.ALL_STEPS,
        2,
        200,
    )
    assert Project.objects.get(name="Demo: first error").labeling_mode == LabelingMode.FIRST_ERROR
    # The machine-label project: problems with answers to sample from, and the workspace
    # showing the Monte-Carlo verdicts that its rollouts will write
    machine = Project.objects.get(name="Demo: machine labels")
    assert machine.problems.exclude(reference_answer="").count() == 6
    assert not machine.chains.exists()
    assert (machine.prelabels, machine.prelabel_source) == (True, "monte_carlo")
    assert machine.routing_sources == ["monte_carlo", "judge"]
    roles = dict(Membership.objects.filter(project=main).values_list("user__username", "role"))
    assert roles == {"annotator": "annotator", "lead": "lead", "ml": "ml"}
    # The known error positions travel with the chains for later gold use.
    with_errors = main.chains.exclude(meta__injected_error_step=None).count()
    assert with_errors == 60

    # and both runs end with the URL and one line per login, which work
    for out in (first_out.getvalue(), second_out.getvalue()):
        lines = out.strip().splitlines()
        assert "URL: http://127.0.0.1:8000/" in lines
        assert "login: annotator / annotator-demo (annotator)" in lines
        assert "login: admin / admin-demo (superuser)" in lines
    User = get_user_model()
    assert User.objects.get(username="lead").check_password("lead-demo")
    assert User.objects.get(username="lead").is_staff
    assert User.objects.get(username="admin").is_superuser
    assert not User.objects.get(username="annotator").is_staff


@pytest.mark.django_db
def test_seed_demo_keeps_a_changed_password() -> None:
    call_command("seed_demo", "--allow-without-debug", stdout=StringIO())
    user = get_user_model().objects.get(username="annotator")
    user.set_password("my-own-secret")
    user.save()
    call_command("seed_demo", "--allow-without-debug", stdout=StringIO())
    user.refresh_from_db()
    assert user.check_password("my-own-secret")


@pytest.mark.django_db
def test_seed_demo_refuses_without_debug(settings: object) -> None:
    settings.DEBUG = False  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match="published passwords"):
        call_command("seed_demo", stdout=StringIO())
    assert Project.objects.count() == 0
