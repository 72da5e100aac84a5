"""Machine-label runs (issue 23) up to the worker: what a start accepts and refuses (a
causal LM under the backbone root by name, parameters within bounds, items of the
project by id or filter), cancel and retry, and the API around them: ML staff and leads
start and follow them, an annotator gets 403 everywhere, unknown fields are refused. The
runs' work is tests/prm_training/services/test_machine_label_work.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from annotation.models import Role
from prm_training.models import JudgeSample, MachineLabelRun, RunStatus
from prm_training.services.machine_labels import (
    machine_label_run_cancel,
    machine_label_run_retry,
    machine_label_run_start,
)
from tests.factories import ChainFactory, ProblemFactory
from tests.prm_training.lm_fixtures import LM, lm_root, tiny_lm_dir  # noqa: F401 - fixtures

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("lm_root")]


def test_a_sampling_run_stores_its_model_parameters_and_problems(project: Any) -> None:
    problems = [ProblemFactory(project=project, reference_answer="2") for _ in range(3)]

    run = machine_label_run_start(
        project=project,
        user=None,
        kind="sample",
        model=LM,
        params={"n": 4, "temperature": 1.0, "seed": 7},
        ids=[problems[2].pk, problems[0].pk],
    )

    assert run.status == RunStatus.QUEUED
    assert (run.kind, run.model_name, run.items_total) == ("sample", LM, 2)
    assert run.item_ids == [problems[2].pk, problems[0].pk]
    assert run.selection == {"ids": [problems[2].pk, problems[0].pk]}
    assert run.params == {
        "n": 4,
        "temperature": 1.0,
        "top_p": 0.95,
        "max_new_tokens": 512,
        "seed": 7,
    }


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("", "Not an available backbone"),
        ("bert", "bert is not a causal language model."),
        ("../tiny-llama-lm", "Not an available backbone"),
        ("version:1", "Not an available backbone"),
        ("missing-model", "Not an available backbone"),
    ],
)
def test_only_a_causal_lm_under_the_backbone_root_is_run(
    project: Any, model: str, message: str
) -> None:
    problem = ProblemFactory(project=project)
    with pytest.raises(ValidationError) as refused:
        machine_label_run_start(
            project=project, user=None, kind="sample", model=model, ids=[problem.pk]
        )
    assert refused.value.message_dict["model"][0].startswith(message)
    assert not MachineLabelRun.objects.exists()


def test_bad_parameters_are_refused_by_name(project: Any) -> None:
    chain = ChainFactory(project=project)
    with pytest.raises(ValidationError) as refused:
        machine_label_run_start(
            project=project,
            user=None,
            kind="judge",
            model=LM,
            params={"n": 0, "top_p": 2, "seed": 1.5, "mode": "search", "beam": 3},
            ids=[chain.pk],
        )
    assert refused.value.message_dict == {
        "n": ["Must be between 1 and 64."],
        "top_p": ["Must be between 0.01 and 1."],
        "seed": ["Must be an integer."],
        "mode": ["Only a rollout run has a mode."],
        "beam": ["Not a parameter of a machine-label run."],
    }


def test_items_come_from_the_project_by_id_or_filter(project: Any) -> None:
    other = ChainFactory()
    no_reference = ChainFactory(project=project)
    referenced = ChainFactory(
        project=project, problem=ProblemFactory(project=project, reference_answer="4")
    )
    lone_problem = ProblemFactory(project=project, reference_answer="9")

    def refusal(**kwargs: Any) -> dict[str, list[str]]:
        with pytest.raises(ValidationError) as refused:
            machine_label_run_start(project=project, user=None, model=LM, **kwargs)
        return refused.value.message_dict

    assert refusal(kind="rollout", ids=[other.pk]) == {
        "chains": [f"Not chains of this project: {other.pk}."]
    }
    # Rollouts are graded against the problem's reference answer.
    assert refusal(kind="rollout", ids=[no_reference.pk]) == {
        "chains": [
            f"Their problem has no reference answer to grade rollouts against: {no_reference.pk}."
        ]
    }
    assert refusal(kind="judge", ids=[referenced.pk], filter="all") == {
        "chains": ["Name the chains by id, or a filter (not both)."]
    }
    assert refusal(kind="judge", filter="without_chains") == {
        "filter": ["Must be one of: all, without_labels."]
    }
    # The filters, resolved when the run starts.
    rollout = machine_label_run_start(
        project=project, user=None, kind="rollout", model=LM, filter="all"
    )
    assert rollout.item_ids == [referenced.pk]
    sample = machine_label_run_start(
        project=project, user=None, kind="sample", model=LM, filter="without_chains"
    )
    assert sample.item_ids == [lone_problem.pk]
    assert sample.selection == {"filter": "without_chains"}


def test_a_queued_run_is_cancelled_and_retried_with_what_it_asked(project: Any) -> None:
    chain = ChainFactory(
        project=project, problem=ProblemFactory(project=project, reference_answer="1")
    )
    run = machine_label_run_start(
        project=project,
        user=None,
        kind="rollout",
        model=LM,
        params={"n": 2, "mode": "search"},
        ids=[chain.pk],
    )

    cancelled = machine_label_run_cancel(run=run)
    retry = machine_label_run_retry(run=cancelled, user=None)

    assert cancelled.status == RunStatus.CANCELLED
    assert retry.retry_of_id == run.pk
    assert (retry.kind, retry.model_name, retry.params, retry.item_ids) == (
        run.kind,
        run.model_name,
        run.params,
        run.item_ids,
    )
    with pytest.raises(ValidationError, match="already cancelled"):
        machine_label_run_cancel(run=cancelled)
    with pytest.raises(ValidationError, match="Only a failed or cancelled run"):
        machine_label_run_retry(run=retry, user=None)


def test_the_project_s_judge_template_is_checked_and_used_by_judge_runs(
    project: Any, make_member: Any, client_for: Any
) -> None:
    from prm_training.ml.judge import DEFAULT_TEMPLATE

    chain = ChainFactory(project=project)
    client = client_for(make_member(project, Role.ML))
    url = reverse("api-training-settings", args=[project.pk])

    # A template that fills a field the judge does not give is refused, naming it
    bad = client.patch(url, {"judge_template": "Judge {steps} of {problem}"}, format="json")
    assert bad.status_code == 400
    assert "{tagged_response}" in bad.json()["judge_template"][0]
    # ...a good one is stored, and a judge run sends it; blank goes back to ProcessBench's
    mine = "Problem: {problem}\nSteps: {tagged_response}\nEarliest wrong step in \\boxed{{}}."
    assert client.patch(url, {"judge_template": mine}, format="json").status_code == 200
    run = machine_label_run_start(
        project=project, user=None, kind="judge", model=LM, ids=[chain.pk]
    )
    assert run.params["template"] == mine
    assert client.patch(url, {"judge_template": ""}, format="json").status_code == 200
    run = machine_label_run_start(
        project=project, user=None, kind="judge", model=LM, ids=[chain.pk]
    )
    assert run.params["template"] == DEFAULT_TEMPLATE


@pytest.mark.parametrize(
    "template",
    [
        "{problem:>1000000000}{tagged_response}",
        "{problem!r}{tagged_response}",
        "{problem.__class__}{tagged_response}",
        "{tagged_response[0]}",
        "{tagged_response}{tagged_response}",
    ],
    ids=["width", "conversion", "attribute", "index", "twice"],
)
def test_a_template_names_fields_and_nothing_else(
    project: Any, make_member: Any, client_for: Any, template: str
) -> None:
    import tracemalloc

    # Given: ML staff, and a lead who starts a judge run with its own template
    chain = ChainFactory(project=project)
    url = reverse("api-training-settings", args=[project.pk])
    ml = client_for(make_member(project, Role.ML))
    lead = client_for(make_member(project, Role.LEAD))

    # When: a template with a format spec, a conversion, an attribute, an index or a
    # field twice is saved as the project's, or sent with a run
    tracemalloc.start()
    saved = ml.patch(url, {"judge_template": template}, format="json")
    started = lead.post(
        reverse("api-machine-label-runs", args=[project.pk]),
        {"kind": "judge", "model": LM, "chains": [chain.pk], "template": template},
        format="json",
    )
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    # Then: both are 400s naming what is wrong, and checking it built no text (the
    # width once cost 1.5 GB here)
    assert saved.status_code == 400, saved.content
    assert "each once and alone" in saved.json()["judge_template"][0]
    assert started.status_code == 400, started.content
    assert "template" in json.dumps(started.json())
    assert not MachineLabelRun.objects.exists()
    assert peak < 20 * 2**20


def test_a_judge_prompt_is_the_template_s_text_with_its_fields_filled() -> None:
    from prm_training.ml.judge import DEFAULT_TEMPLATE, judge_prompt, template_fill

    # The ProcessBench template fills as str.format did, braces included
    assert judge_prompt(DEFAULT_TEMPLATE, "P", ["a"]) == DEFAULT_TEMPLATE.format(
        problem="P", tagged_response="<paragraph_0>\na\n</paragraph_0>"
    )
    # A value is put in as it is: braces or format fields in it are text
    assert template_fill("{problem}!", {"problem": "{tagged_response:>9}"}) == (
        "{tagged_response:>9}!"
    )
    with pytest.raises(ValueError, match="not a field"):
        template_fill("{other}", {"problem": "P"})


# --- the API -----------------------------------------------------------------------------


def _urls(project: Any, run: MachineLabelRun) -> list[tuple[str, str]]:
    return [
        ("get", reverse("api-machine-label-runs", args=[project.pk])),
        ("post", reverse("api-machine-label-runs", args=[project.pk])),
        ("get", reverse("api-machine-label-run", args=[run.pk])),
        ("post", reverse("api-machine-label-run-cancel", args=[run.pk])),
        ("post", reverse("api-machine-label-run-retry", args=[run.pk])),
        ("get", reverse("api-machine-label-run-judge-samples", args=[run.pk])),
    ]


def test_an_annotator_gets_403_on_every_endpoint(
    project: Any, make_member: Any, client_for: Any
) -> None:
    run = MachineLabelRun.objects.create(project=project, kind="judge", model_name=LM)
    client = client_for(make_member(project, Role.ANNOTATOR))
    for method, url in _urls(project, run):
        response = getattr(client, method)(url, {"kind": "sample", "model": LM}, format="json")
        assert response.status_code == 403, (method, url, response.status_code)
    assert MachineLabelRun.objects.count() == 1


@pytest.mark.parametrize("role", [Role.ML, Role.LEAD])
def test_ml_staff_and_leads_start_follow_and_cancel_a_run(
    project: Any, make_member: Any, client_for: Any, role: str
) -> None:
    problem = ProblemFactory(project=project, reference_answer="2")
    client = client_for(make_member(project, role))

    started = client.post(
        reverse("api-machine-label-runs", args=[project.pk]),
        {"kind": "sample", "model": LM, "n": 2, "problems": [problem.pk]},
        format="json",
    )
    assert started.status_code == 201, started.json()
    body = started.json()
    assert (body["kind"], body["status"], body["items_total"]) == ("sample", "queued", 1)
    assert body["params"]["n"] == 2

    listed = client.get(reverse("api-machine-label-runs", args=[project.pk])).json()
    assert [run["id"] for run in listed] == [body["id"]]
    shown = client.get(reverse("api-machine-label-run", args=[body["id"]])).json()
    assert shown["model_name"] == LM
    cancelled = client.post(reverse("api-machine-label-run-cancel", args=[body["id"]]))
    assert cancelled.json()["status"] == "cancelled"
    retried = client.post(reverse("api-machine-label-run-retry", args=[body["id"]]))
    assert retried.status_code == 201
    assert retried.json()["retry_of"] == body["id"]


def test_a_start_with_unknown_or_misplaced_fields_is_a_400_naming_them(
    project: Any, make_member: Any, client_for: Any
) -> None:
    chain = ChainFactory(project=project)
    client = client_for(make_member(project, Role.ML))
    url = reverse("api-machine-label-runs", args=[project.pk])

    unknown = client.post(
        url, {"kind": "judge", "model": LM, "chains": [chain.pk], "beams": 4}, format="json"
    )
    misplaced = client.post(
        url, {"kind": "judge", "model": LM, "problems": [chain.problem_id]}, format="json"
    )
    bad_model = client.post(url, {"kind": "judge", "model": "bert", "filter": "all"}, format="json")

    assert unknown.status_code == 400
    assert unknown.json()["beams"] == ["This field cannot be set here."]
    assert misplaced.status_code == 400
    assert misplaced.json()["problems"] == ["A judge run takes no problems."]
    assert bad_model.status_code == 400
    assert bad_model.json()["model"] == ["bert is not a causal language model."]
    assert not MachineLabelRun.objects.exists()


def test_a_judge_run_s_raw_samples_page_by_chain_and_by_parse(
    project: Any, make_member: Any, client_for: Any
) -> None:
    # Given: a judge run with 3 samples on each of 2 chains, one unparsed on the second
    run = MachineLabelRun.objects.create(project=project, kind="judge", model_name=LM)
    chains = [ChainFactory(project=project) for _ in range(2)]
    verdicts = {chains[0].pk: [1, 1, -1], chains[1].pk: [2, None, 2]}
    for chain in chains:
        for index, verdict in enumerate(verdicts[chain.pk]):
            JudgeSample.objects.create(
                run=run, chain=chain, sample_index=index, text=f"critique {index}", verdict=verdict
            )
    client = client_for(make_member(project, Role.ML))
    url = reverse("api-machine-label-run-judge-samples", args=[run.pk])

    # When: read two at a time, then filtered
    first = client.get(url, {"limit": 2}).json()
    second = client.get(url, {"limit": 2, "after": first["next_after"]}).json()
    unparsed = client.get(url, {"unparsed": "true"}).json()
    of_chain = client.get(url, {"chain": chains[1].pk}).json()

    # Then: pages in order with their raw text; the unparsed sample has a null verdict
    assert [(r["chain"], r["sample_index"]) for r in first["results"] + second["results"]] == [
        (chains[0].pk, 0),
        (chains[0].pk, 1),
        (chains[0].pk, 2),
        (chains[1].pk, 0),
    ]
    assert first["results"][0]["text"] == "critique 0"
    assert [(r["chain"], r["verdict"], r["text"]) for r in unparsed["results"]] == [
        (chains[1].pk, None, "critique 1")
    ]
    assert unparsed["next_after"] is None
    assert [r["verdict"] for r in of_chain["results"]] == [2, None, 2]
    assert client.get(url, {"limit": 0}).status_code == 400
    assert client.get(url, {"after": "x"}).status_code == 400
    other = ChainFactory()  # of another project
    assert "No chain" in client.get(url, {"chain": other.pk}).json()["chain"][0]
