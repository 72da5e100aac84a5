"""A lab as a real one looks after a week, for the browser tests that go over every page:
a lead, three annotators (one with a long name), ML staff; chains with long steps, wide
display math and a long unbroken token; a disputed chain with three voters and imported
labels, a flagged one, a finished one; two snapshots, a model version, an import and
guidelines with math. Built with the factories, in about a second."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from annotation.datasets.snapshots import snapshot_create
from annotation.models import Annotation, Chain, ImportBatch, Problem, Project, Role, Step
from prm_training.models import ModelVersion, RunStatus, TrainingRun
from tests.factories import (
    MembershipFactory,
    ProjectFactory,
    annotation_with_ratings,
    machine_labels,
)

GUIDELINES = """# Grading

Rate each step on its own. A step that says $x^2 \\ge 0$ for every real $x$ is **+1**;
one that divides by $x - 1$ without saying $x \\ne 1$ is **−1**.

$$
\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}
$$

| rating | when |
|---|---|
| +1 | right and useful |
| 0 | unclear, or right but useless |
| −1 | wrong |
"""

PROBLEM = (
    "Find the sum $S_n = \\sum_{k=1}^{n} \\frac{1}{k(k+1)(k+2)}$ for every positive integer "
    "$n$, and show that $S_n < \\frac{1}{4}$."
)
WIDE_MATH = (
    "$$S_n = \\frac{1}{2}\\sum_{k=1}^{n}\\left(\\frac{1}{k(k+1)} - \\frac{1}{(k+1)(k+2)}\\right)"
    " = \\frac{1}{2}\\left(\\frac{1}{1\\cdot 2} - \\frac{1}{(n+1)(n+2)}\\right)"
    " = \\frac{n(n+3)}{4(n+1)(n+2)} \\quad\\text{for every } n \\ge 1.$$"
)
STEPS = [
    "Write each term with partial fractions: $\\frac{1}{k(k+1)(k+2)} = "
    "\\frac{1}{2}\\left(\\frac{1}{k(k+1)} - \\frac{1}{(k+1)(k+2)}\\right)$.",
    f"The sum telescopes:\n{WIDE_MATH}",
    "So $S_n = \\frac{1}{4} - \\frac{1}{2(n+1)(n+2)}$, and since the subtracted term is "
    "positive, $S_n < \\frac{1}{4}$. A checksum of the derivation, as a model printed it: "
    "0x" + "f3a9" * 24 + ".",
    "Therefore the answer is $\\boxed{\\frac{n(n+3)}{4(n+1)(n+2)}}$.",
]


@dataclass
class Lab:
    project: Project
    lead: User
    annotator: User  # "ann": labeled the disputed chain and the finished one
    long_named: User  # an annotator with a long username
    ml: User
    disputed: Chain  # three voters and imported labels disagree; flagged once
    unlabeled: Chain  # what the workspace leases next
    annotation: Annotation  # ann's pass over the disputed chain (history)

    def ids(self) -> dict[str, Any]:
        return {
            "project": self.project.pk,
            "chain": self.disputed.pk,
            "annotation": self.annotation.pk,
        }


def _chain(project: Project, n: int, steps: list[str], **fields: Any) -> Chain:
    problem = Problem.objects.create(
        project=project,
        text=PROBLEM if n == 0 else f"Problem {n}: {PROBLEM}",
        reference_answer="$\\frac{n(n+3)}{4(n+1)(n+2)}$",
        content_hash=f"lab-problem-{project.pk}-{n}",
    )
    chain = Chain.objects.create(
        project=project,
        problem=problem,
        content_hash=f"lab-chain-{project.pk}-{n}",
        final_answer="$\\frac{n(n+3)}{4(n+1)(n+2)}$",
        generator="Qwen2.5-Math-7B-Instruct",
        step_count=len(steps),
        **fields,
    )
    Step.objects.bulk_create(Step(chain=chain, index=i, text=text) for i, text in enumerate(steps))
    return chain


def lab_build(*, round_no: int = 3) -> Lab:
    """The lab; ``round_no`` names the project, so a benchmark can build several."""
    project = ProjectFactory(
        name=f"Telescoping sums, round {round_no}: a rather long project name as labs write them",
        overlap=3,
        guidelines=GUIDELINES,
    )
    lead = MembershipFactory(
        project=project, role=Role.LEAD, user__username="lena", user__is_staff=True
    ).user
    ann = MembershipFactory(project=project, user__username="ann").user
    bob = MembershipFactory(project=project, user__username="bob").user
    long_named = MembershipFactory(
        project=project, user__username="annotator-with-a-rather-long-name"
    ).user
    ml = MembershipFactory(project=project, role=Role.ML, user__username="mo").user
    batch = ImportBatch.objects.create(
        project=project,
        filename="processbench-math-telescoping-sums-and-other-long-file-names.json",
        format="processbench",
        content_hash=f"lab-batch-{project.pk}",
        chains_created=4,
    )
    disputed = _chain(
        project,
        0,
        STEPS,
        finished_count=3,
        is_finished=True,
        flag_reason="Step 3 prints a checksum nobody asked for",
        flagged_by=bob,
        flagged_at=timezone.now(),
        is_flagged=True,
    )
    annotation = annotation_with_ratings(chain=disputed, annotator=ann, labels=[1, 1, -1, 1])
    annotation.ratings.filter(step__index=2).update(
        comment="The checksum is noise, and the bound needs n ≥ 1 said out loud."
    )
    annotation_with_ratings(chain=disputed, annotator=bob, labels=[1, -1, -1, 1])
    annotation_with_ratings(chain=disputed, annotator=long_named, labels=[1, 1, 0, 1])
    annotation_with_ratings(chain=disputed, labels=[1, 1, 1, 1], import_batch=batch)
    # Three machine sources beside the votes, with a model name as long as a path
    long_model = "Qwen2.5-Math-1.5B-Instruct-rollouts-at-temperature-0.7-from-a-long-path"
    machine_labels(
        chain=disputed,
        ratings=[1, 1, -1, -1],
        values=[0.88, 0.63, 0.0, 0.0],
        detail={"rollouts": 8, "reached": 5},
        model=long_model,
    )
    machine_labels(chain=disputed, ratings=[1, -1, None, None], source="judge", run_kind="judge")
    machine_labels(
        chain=disputed,
        ratings=[None] * 4,
        values=[0.91, 0.42, 0.07, 0.12],
        source="prm",
        run_kind="scoring",
    )
    finished = _chain(project, 1, STEPS, finished_count=3, is_finished=True)
    for person in (ann, bob, long_named):
        annotation_with_ratings(chain=finished, annotator=person, labels=[1, 1, 1, 1])
    unlabeled = _chain(project, 2, STEPS, priority=10.0)
    _chain(project, 3, STEPS)
    first = snapshot_create(project=project, user=lead, finished_only=False)
    annotation_with_ratings(chain=finished, annotator=lead, labels=[1, 1, 0, 1])
    snapshot_create(project=project, user=lead, finished_only=False)
    ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=first,
        version=1,
        checkpoint_dir="/nonexistent",
        metrics={"processbench_f1": 0.31, "step_auroc": 0.72, "first_error_accuracy": 0.4},
        is_active=True,
    )
    return Lab(
        project=project,
        lead=lead,
        annotator=ann,
        long_named=long_named,
        ml=ml,
        disputed=disputed,
        unlabeled=unlabeled,
        annotation=annotation,
    )
