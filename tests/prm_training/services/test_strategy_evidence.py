"""The 'auto' acquisition strategy: random until the paired simulation on the project's
own labels shows a strategy that beats it, and the reason every time."""

from __future__ import annotations

import csv
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from annotation.datasets.snapshots import snapshot_create
from prm_training.models import ProjectTrainingSettings
from prm_training.services.strategy import (
    acquisition_strategy_resolve,
    strategy_from_evidence,
)

pytestmark = pytest.mark.django_db


def _gap(mean: float, half: float) -> dict[str, Any]:
    return {"mean": mean, "low": mean - half, "high": mean + half, "text": f"{mean:+.3f} ± {half}"}


def _line(
    name: str,
    f1: float,
    auroc: float = 0.0,
    fe: float = 0.0,
    below: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    """A stored line: the last round at equal labeled steps, and the rounds below random."""
    return {
        "strategy": name,
        "labeled_steps": 900,
        "processbench_f1": _gap(f1, 0.02),
        "step_auroc": _gap(auroc, 0.01),
        "first_error_accuracy": _gap(fe, 0.01),
        "below": {
            "processbench_f1": [],
            "step_auroc": [],
            "first_error_accuracy": [],
            **(below or {}),
        },
        "saves_steps": False,
    }


def _evidence(*lines: dict[str, Any]) -> dict[str, Any]:
    return {"chains": 1400, "seeds": 20, "rounds": 8, "batch": 40, "lines": list(lines)}


@pytest.mark.parametrize(
    ("lines", "chosen", "why"),
    [
        # no strategy's F1 interval is above zero: random, naming the best
        (
            [_line("entropy", -0.022), _line("first_error_entropy", 0.004)],
            "random",
            "no strategy saves labeled steps over random over 20 seeds on the project's "
            "1400 labeled chains (the best, first_error_entropy, F1 +0.004 ± 0.02 at equal "
            "steps)",
        ),
        # one is above at the last round, but was below on first-error accuracy at round 2:
        # still random, and the reason names the round
        (
            [_line("convincing_wrong", 0.05, below={"first_error_accuracy": [2]})],
            "random",
            "no strategy saves labeled steps over random over 20 seeds on the project's "
            "1400 labeled chains (the best, convincing_wrong, F1 +0.050 ± 0.02 at equal "
            "steps; below random on first_error_accuracy at round 2)",
        ),
        # two save steps: the one with the larger F1 gain
        (
            [_line("entropy", 0.03), _line("disagreement", 0.05, auroc=0.01)],
            "disagreement",
            "saves labeled steps: F1 +0.050 ± 0.02 against random at equal labeled steps, "
            "never below it, over 20 seeds on the project's 1400 labeled chains",
        ),
    ],
)
def test_auto_takes_a_strategy_only_when_it_saves_steps_on_corrected_intervals(
    lines: list[dict[str, Any]], chosen: str, why: str
) -> None:
    strategy, reason = strategy_from_evidence(_evidence(*lines))
    assert strategy == chosen
    assert reason == why


def test_evidence_from_before_the_equal_steps_rule_supports_nothing() -> None:
    # Given: a line stored by the simulator before #26 (last round only, by chains)
    old = {key: value for key, value in _line("entropy", 0.05).items() if key != "below"}

    # When / Then: it is not read as support
    strategy, why = strategy_from_evidence(_evidence(old))
    assert strategy == "random" and "run the simulation again" in why


def test_auto_is_random_without_evidence_and_a_set_strategy_is_kept(project: Any) -> None:
    loop = ProjectTrainingSettings(project=project)
    assert loop.acquisition_strategy == "auto"
    strategy, why = acquisition_strategy_resolve(loop=loop)
    assert strategy == "random"
    assert 'run one with "Simulate strategies" on the ML page' in why
    assert "manage.py" not in why
    loop.acquisition_strategy = "entropy"
    assert acquisition_strategy_resolve(loop=loop) == ("entropy", "set in the loop settings")


def test_the_command_stores_too_few_labels_as_such(
    arithmetic_project: Any, tiny_bert_dir: Path, tmp_path: Path
) -> None:
    # Given: 30 labeled chains in a snapshot, far fewer than the full-size simulation needs
    snapshot_create(project=arithmetic_project)
    stdout = StringIO()

    # When
    call_command(
        "simulate_active_learning",
        "--project",
        str(arithmetic_project.pk),
        "--save",
        "--out",
        str(tmp_path / "sim"),
        stdout=stdout,
    )

    # Then: 'auto' stays random and says why
    loop = ProjectTrainingSettings.objects.get(project=arithmetic_project)
    strategy, why = acquisition_strategy_resolve(loop=loop)
    assert strategy == "random"
    assert why == (
        "30 labeled chains are too few for a paired comparison (the simulation needs 425)"
    )
    assert why in stdout.getvalue()


def test_the_command_replays_the_project_s_labels_and_auto_reads_the_result(
    arithmetic_project: Any, tiny_bert_dir: Path, tmp_path: Path, client_for: Any, make_member: Any
) -> None:
    # Given: the project's 30 labeled chains in a snapshot
    snapshot = snapshot_create(project=arithmetic_project)

    # When: ML staff run the quick simulation on them and save it
    stdout = StringIO()
    call_command(
        "simulate_active_learning",
        "--project",
        str(arithmetic_project.pk),
        "--save",
        "--quick",
        "--strategy",
        "entropy",
        "--backbone",
        str(tiny_bert_dir),
        "--max-length",
        "128",
        "--out",
        str(tmp_path / "sim"),
        stdout=stdout,
        stderr=StringIO(),
    )

    # Then: the evidence is stored with its paired lines, and 'auto' follows it
    loop = ProjectTrainingSettings.objects.get(project=arithmetic_project)
    evidence = loop.strategy_evidence
    assert (evidence["chains"], evidence["snapshot"], evidence["seeds"]) == (
        30,
        snapshot.version,
        3,
    )
    assert [line["strategy"] for line in evidence["lines"]] == ["entropy"]
    assert acquisition_strategy_resolve(loop=loop) == (evidence["chosen"], evidence["why"])
    assert "saved for project" in stdout.getvalue()
    # ...and the settings API says what a scoring run applies and why
    ml = make_member(arithmetic_project, "ml")
    body = client_for(ml).get(f"/api/v1/projects/{arithmetic_project.pk}/training-settings/")
    assert body.json()["applied_strategy"] == {
        "strategy": evidence["chosen"],
        "why": evidence["why"],
    }


def test_the_command_measures_a_project_s_stored_machine_labels_beside_the_prm(
    arithmetic_project: Any, tiny_bert_dir: Path, tmp_path: Path
) -> None:
    # Given: the project's 30 labeled chains, a judge's verdicts on every chain (sure on
    # half of them), and a snapshot
    from annotation.models import Chain
    from tests.factories import machine_labels

    for chain in Chain.objects.filter(project=arithmetic_project).order_by("pk"):
        machine_labels(
            chain=chain,
            ratings=[1] * chain.step_count,
            source="judge",
            confidence=0.9 if chain.pk % 2 else 0.4,
            run_kind="judge",
        )
    snapshot_create(project=arithmetic_project)

    # When: ML staff run the quick simulation with machine arms of the PRM and the judge
    stdout = StringIO()
    call_command(
        "simulate_active_learning",
        "--project",
        str(arithmetic_project.pk),
        "--save",
        "--quick",
        "--strategy",
        "random",
        "--machine-arms",
        "0.5",
        "--machine-sources",
        "prm,judge",
        "--backbone",
        str(tiny_bert_dir),
        "--max-length",
        "128",
        "--out",
        str(tmp_path / "sim"),
        stdout=stdout,
        stderr=StringIO(),
    )

    # Then: both arms are in the machine table, the judge's sure chains were taken
    machines = stdout.getvalue().split("machine arms at the last round")[1]
    assert "machine_prm@0.5" in machines and "machine_judge@0.5" in machines
    with open(tmp_path / "sim" / "results.csv", newline="") as handle:
        judge = [row for row in csv.DictReader(handle) if row["strategy"] == "machine_judge@0.5"]
    assert judge and all(int(row["machine_chains"]) > 0 for row in judge if row["round"] != "0")
    # And 'auto' never reads a machine arm as an acquisition strategy
    evidence = ProjectTrainingSettings.objects.get(project=arithmetic_project).strategy_evidence
    assert [line["strategy"] for line in evidence["lines"]] == []
