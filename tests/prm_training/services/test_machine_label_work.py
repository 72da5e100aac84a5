"""What machine-label runs do, in process (``machine_label_run_execute``): a sampling run
imports the chains a tiny causal LM writes, with their provenance and graded answers; a
rollout run stores each step's Monte-Carlo value as it finishes and, killed halfway and
taken over, repeats no stored rollout; the search mode finds a planted first error; a
judge run keeps every sample, unparsed ones as null, and labels steps from the majority;
a run stops between items when cancelled. The real worker's side is
tests/prm_training/test_machine_label_worker.py."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from annotation.datasets.imports import chain_import
from annotation.models import Chain, MachineLabel, Problem, Step
from prm_training.ml.generation import engine_load
from prm_training.ml.judge import template_hash
from prm_training.ml.rollouts import rollout_prompt
from prm_training.models import JudgeSample, MachineLabelRun, RunStatus
from prm_training.services import progress as progress_module
from prm_training.services.machine_label_rollouts import config_hash
from prm_training.services.machine_label_work import machine_label_run_execute
from prm_training.services.machine_labels import machine_label_run_cancel, machine_label_run_start
from tests.factories import ChainFactory, ProblemFactory
from tests.prm_training.lm_fixtures import (  # noqa: F401 - fixtures
    LM,
    Killed,
    RecordingEngine,
    ScriptedEngine,
    lm_root,
)
from tests.prm_training.lm_fixtures import tiny_lm_dir as tiny_lm_dir  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("lm_root")]

SHORT = {"n": 2, "max_new_tokens": 6, "temperature": 1.0}


def problems_imported(project: Any, answers: dict[str, str]) -> list[Problem]:
    """Problems as a lead brings them in: a problems file through the import."""
    data = "".join(
        json.dumps({"problem": text, "reference_answer": answer}) + "\n"
        for text, answer in answers.items()
    )
    chain_import(project=project, path=io.BytesIO(data.encode()), fmt="problems")
    return [Problem.objects.get(project=project, text=text) for text in answers]


def chain_with(project: Any, texts: list[str], reference: str = "7") -> Chain:
    chain = ChainFactory(
        project=project,
        problem=ProblemFactory(project=project, reference_answer=reference),
        step_count=0,
    )
    Step.objects.bulk_create([Step(chain=chain, index=i, text=t) for i, t in enumerate(texts)])
    Chain.objects.filter(pk=chain.pk).update(step_count=len(texts))
    return chain


def labels_of(run: MachineLabelRun) -> list[MachineLabel]:
    return list(
        MachineLabel.objects.filter(run_kind=run.kind, run_id=run.pk).order_by(
            "chain_id", "step__index"
        )
    )


# --- sample ------------------------------------------------------------------------------


def test_a_sampling_run_imports_the_lm_s_chains_with_their_provenance(project: Any) -> None:
    # Given: two problems with reference answers
    problems = problems_imported(project, {"What is 1 + 1?": "2", "What is 2 + 2?": "4"})
    run = machine_label_run_start(
        project=project,
        user=None,
        kind="sample",
        model=LM,
        params={**SHORT, "seed": 11},
        ids=[p.pk for p in problems],
    )

    # When: the run samples with the tiny LM loaded from the backbone root
    run = machine_label_run_execute(run_id=run.pk)

    # Then: its chains are imported, each naming the model, the run, its parameters and
    # seed, and whether its final answer matched (none can be read from random words)
    assert run is not None and run.status == RunStatus.SUCCEEDED, run.error
    chains = list(Chain.objects.filter(project=project, meta__sampling__run=run.pk))
    assert (
        chains
        and len(chains) + run.result.get("empty", 0) + run.result.get("chains_duplicate", 0) == 4
    )
    assert {chain.problem_id for chain in chains} <= {p.pk for p in problems}
    for chain in chains:
        assert chain.generator == LM
        sampling = chain.meta["sampling"]
        assert sampling["params"] == {**run.params, "seed": 11}
        assert sampling["seed"] == 11 and sampling["index"] in (0, 1)
        assert chain.meta["final_answer_correct"] is None
        assert chain.step_count == chain.steps.count() >= 1
        assert chain.import_batch.filename.startswith(f"sampling-run-{run.pk}-")
    assert (run.items_done, run.completions) == (2, 4)
    assert run.tokens > 0
    assert run.phase["name"] == "writing"


def test_sampled_answers_are_graded_against_the_reference(project: Any) -> None:
    (problem,) = problems_imported(project, {"What is 3 + 4?": "7"})
    texts = ["3 + 4 = 7.\n\nSo \\boxed{7}.", "3 + 4 = 8.\n\nSo \\boxed{8}.", "I give up."]
    engine = ScriptedEngine(lambda prompt, j: texts[j])
    run = machine_label_run_start(
        project=project, user=None, kind="sample", model=LM, params={"n": 3}, ids=[problem.pk]
    )

    run = machine_label_run_execute(run_id=run.pk, engine=engine)

    assert run is not None and run.status == RunStatus.SUCCEEDED, run.error
    graded = {
        tuple(chain.steps.order_by("index").values_list("text", flat=True)): chain.meta[
            "final_answer_correct"
        ]
        for chain in Chain.objects.filter(project=project)
    }
    # The project splits steps by line (its default), so each chain has two steps but
    # the one without an answer.
    assert graded == {
        ("3 + 4 = 7.", "So \\boxed{7}."): True,
        ("3 + 4 = 8.", "So \\boxed{8}."): False,
        ("I give up.",): None,
    }
    assert run.result["chains_created"] == 3
    assert (run.result["graded"], run.result["correct"]) == (2, 1)
    # A second run drawing the same chains imports nothing new: they are duplicates.
    again = machine_label_run_start(
        project=project, user=None, kind="sample", model=LM, params={"n": 3}, ids=[problem.pk]
    )
    again = machine_label_run_execute(run_id=again.pk, engine=engine)
    assert again is not None and again.result["chains_duplicate"] == 3
    assert Chain.objects.filter(project=project).count() == 3


# --- rollout -----------------------------------------------------------------------------


def test_a_rollout_run_stores_each_step_s_value(project: Any) -> None:
    chain = chain_with(project, ["a b", "b c", "c d"])
    run = machine_label_run_start(
        project=project, user=None, kind="rollout", model=LM, params=SHORT, ids=[chain.pk]
    )

    run = machine_label_run_execute(run_id=run.pk)

    assert run is not None and run.status == RunStatus.SUCCEEDED, run.error
    labels = labels_of(run)
    assert [label.step.index for label in labels] == [0, 1, 2]
    for label in labels:
        # Random words never reach "7".
        assert (label.source, label.value, label.rating) == ("monte_carlo", 0.0, -1)
        assert label.detail == {"rollouts": 2, "reached": 0, "hard": False, "mode": "full"}
        assert (label.model, label.config_hash) == (LM, config_hash(run))
    assert (run.completions, run.items_done, run.result) == (6, 1, {"labels": 3})


def test_a_rollout_run_killed_halfway_resumes_without_repeating_a_stored_rollout(
    project: Any, tiny_lm_dir: Path
) -> None:
    # Given: two chains of three steps, and a run whose worker dies at its fifth rollout
    chains = [chain_with(project, ["a b", "b c", "c d"]) for _ in range(2)]
    run = machine_label_run_start(
        project=project,
        user=None,
        kind="rollout",
        model=LM,
        params=SHORT,
        ids=[c.pk for c in chains],
    )
    lm = engine_load(tiny_lm_dir)
    first = RecordingEngine(lm, kill_at=5)
    with pytest.raises(Killed):
        machine_label_run_execute(run_id=run.pk, worker="w1", engine=first)
    stored = labels_of(run)
    assert len(stored) == 4  # each step's value was written as it finished
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    # ...its heartbeat goes silent
    MachineLabelRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )

    # When: the task is delivered again and takes the run over
    second = RecordingEngine(lm)
    run = machine_label_run_execute(run_id=run.pk, worker="w2", engine=second)

    # Then: it rolled out only the two steps left, and every step has one value
    assert run is not None and run.status == RunStatus.SUCCEEDED, run.error
    assert run.attempts == 2
    stored_prompts = {
        rollout_prompt(label.chain.problem.text, ["a b", "b c", "c d"], label.step.index)
        for label in stored
        if label.chain_id == chains[1].pk
    } | {
        rollout_prompt(label.chain.problem.text, ["a b", "b c", "c d"], label.step.index)
        for label in stored
        if label.chain_id == chains[0].pk
    }
    assert second.calls == 2
    assert not stored_prompts & set(second.prompts)
    assert [(lb.chain_id, lb.step.index) for lb in labels_of(run)] == [
        (c.pk, i) for c in chains for i in range(3)
    ]


def test_the_search_finds_a_planted_first_error_and_stores_its_probes(project: Any) -> None:
    # Given: a chain of 6 steps whose step 4 is wrong, and a policy that reaches the
    # answer from any prefix without it
    texts = [f"step {i} fine" for i in range(6)]
    texts[4] = "step 4 WRONG"
    chain = chain_with(project, texts, reference="7")
    engine = ScriptedEngine(lambda prompt, j: "\\boxed{9}" if "WRONG" in prompt else "\\boxed{7}")
    run = machine_label_run_start(
        project=project,
        user=None,
        kind="rollout",
        model=LM,
        params={"n": 2, "mode": "search"},
        ids=[chain.pk],
    )

    run = machine_label_run_execute(run_id=run.pk, engine=engine)

    # Then: found within ceil(log2(6 + 1)) = 3 probes, each stored, the error marked
    assert run is not None and run.status == RunStatus.SUCCEEDED, run.error
    assert run.result["first_errors"] == {str(chain.pk): 4}
    labels = labels_of(run)
    assert len(labels) == len(engine.prompts) <= 3
    by_step = {label.step.index: label for label in labels}
    assert by_step[4].rating == -1 and by_step[4].detail["first_error"] is True
    assert all(label.rating == 1 for index, label in by_step.items() if index < 4)
    assert {label.detail["mode"] for label in labels} == {"search"}


def test_a_search_within_its_rollout_budget_leaves_the_chain_undecided(project: Any) -> None:
    # Given: the same chain with a budget of two probes of two rollouts, where the search
    # needs three
    texts = [f"step {i} fine" for i in range(6)]
    texts[4] = "step 4 WRONG"
    chain = chain_with(project, texts, reference="7")
    engine = ScriptedEngine(lambda prompt, j: "\\boxed{9}" if "WRONG" in prompt else "\\boxed{7}")
    run = machine_label_run_start(
        project=project,
        user=None,
        kind="rollout",
        model=LM,
        params={"n": 2, "mode": "search", "budget": 4},
        ids=[chain.pk],
    )

    run = machine_label_run_execute(run_id=run.pk, engine=engine)

    # Then: two probes (four rollouts), stored; no first error claimed
    assert run is not None and run.status == RunStatus.SUCCEEDED, run.error
    assert len(engine.prompts) == 2 and len(labels_of(run)) == 2
    assert run.result["first_errors"] == {}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"n": 2, "mode": "full", "budget": 8}, "budget"),
        ({"n": 4, "mode": "search", "budget": 3}, "budget"),
    ],
)
def test_a_rollout_budget_is_checked(project: Any, params: dict[str, Any], field: str) -> None:
    chain = chain_with(project, ["a", "b"], reference="7")
    with pytest.raises(ValidationError) as error:
        machine_label_run_start(
            project=project, user=None, kind="rollout", model=LM, params=params, ids=[chain.pk]
        )
    assert field in error.value.message_dict


# --- judge -------------------------------------------------------------------------------


def test_a_judge_run_keeps_every_sample_and_labels_from_the_majority(project: Any) -> None:
    # Given: three chains and a judge that names step 1 twice and once says nothing
    # parseable of the first, says "no error" of the second, and never parses on the third
    first, second, third = (chain_with(project, ["x", "y", "z"]) for _ in range(3))
    script = {
        first.problem.text: ["\\boxed{1}", "I cannot tell.", "\\boxed{1}"],
        second.problem.text: ["\\boxed{-1}", "\\boxed{-1}", "\\boxed{2}"],
        third.problem.text: ["maybe", "\\boxed{7}", "no"],
    }

    def answer(prompt: str, j: int) -> str:
        return next(texts[j] for text, texts in script.items() if text in prompt)

    run = machine_label_run_start(
        project=project,
        user=None,
        kind="judge",
        model=LM,
        params={"n": 3},
        ids=[first.pk, second.pk, third.pk],
    )

    run = machine_label_run_execute(run_id=run.pk, engine=ScriptedEngine(answer))

    # Then: every sample is stored with its text; unparsed ones (and an index past the
    # chain) have a null verdict
    assert run is not None and run.status == RunStatus.SUCCEEDED, run.error
    samples = {
        (s.chain_id, s.sample_index): (s.verdict, s.text)
        for s in JudgeSample.objects.filter(run=run)
    }
    assert samples[(first.pk, 1)] == (None, "I cannot tell.")
    assert [samples[(third.pk, j)][0] for j in range(3)] == [None, None, None]
    assert run.result == {"samples": 9, "unparsed": 4, "labels": 5}
    # ...and labels follow the majority: +1 before the step it names, -1 at it, none
    # after; "no error" labels every step +1; no parsed sample, no label
    ratings = {(lb.chain_id, lb.step.index): lb.rating for lb in labels_of(run)}
    assert ratings == {
        (first.pk, 0): 1,
        (first.pk, 1): -1,
        (second.pk, 0): 1,
        (second.pk, 1): 1,
        (second.pk, 2): 1,
    }
    label = MachineLabel.objects.get(
        run_kind="judge", run_id=run.pk, step__chain=first, step__index=1
    )
    assert label.confidence == 1.0
    assert label.config_hash == template_hash(run.params["template"])
    assert label.detail["votes"] == {"1": 2} and label.detail["unparsed"] == 1


# --- cancel ------------------------------------------------------------------------------


def test_a_cancelled_run_stops_between_items_and_keeps_what_it_stored(
    project: Any, monkeypatch: Any
) -> None:
    # Given: a judge run over three chains, its cancel flag read at every check
    monkeypatch.setattr(progress_module, "PROGRESS_WRITE_SECONDS", 0.0)
    chains = [chain_with(project, ["x", "y"]) for _ in range(3)]
    run = machine_label_run_start(
        project=project,
        user=None,
        kind="judge",
        model=LM,
        params={"n": 1},
        ids=[c.pk for c in chains],
    )

    def answer(prompt: str, j: int) -> str:
        # ML staff cancel while the second chain is being judged.
        if chains[1].problem.text in prompt:
            machine_label_run_cancel(run=MachineLabelRun.objects.get(pk=run.pk))
        return "\\boxed{-1}"

    run = machine_label_run_execute(run_id=run.pk, engine=ScriptedEngine(answer))

    # Then: it stops before storing the second chain's verdict, and keeps the first's
    assert run is not None and run.status == RunStatus.CANCELLED
    judged = set(JudgeSample.objects.filter(run=run).values_list("chain_id", flat=True))
    assert judged == {chains[0].pk}
    assert {label.chain_id for label in labels_of(run)} == {chains[0].pk}
    assert run.items_done == 1
