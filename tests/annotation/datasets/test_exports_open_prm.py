"""The exports that outlive one trainer: OpenRLHF's PRM dataset (a placeholder token
closing each step, soft labels from the votes) and Qwen2.5-Math-PRM's chat format
(``<extra_0>`` after each step), checked against known votes from the labeling queue,
through the export_dataset command, the export endpoint and its schema."""

from __future__ import annotations

import doctest
import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from annotation.datasets.exporters import records
from annotation.datasets.exporters.formats import EXPORT_DESCRIPTIONS, EXPORT_FORMATS
from annotation.datasets.exporters.records import (
    OPENRLHF_PLACEHOLDER,
    QWEN_PRM_SEPARATOR,
    QWEN_PRM_SYSTEM_PROMPT,
    openrlhf_record,
    qwen_prm_record,
    soft_labels,
)
from annotation.datasets.exports import export_write
from annotation.datasets.importers.records import content_hash
from annotation.datasets.imports import chain_import
from annotation.datasets.snapshot_reads import SnapshotExample
from annotation.datasets.snapshots import snapshot_create
from annotation.management.commands.export_dataset import Command as ExportCommand
from annotation.models import Chain, LabelingMode, Role
from annotation.quality.review import AdjudicatedRating, adjudication_create
from tests.annotation.datasets.examples import snapshot_example
from tests.annotation.datasets.test_exports import rate, reimport
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
)

pytestmark = pytest.mark.django_db

# Per chain, the ratings of three annotators (a, b, c). Every split is two against one,
# never a tie, so what the snapshot does with ties does not enter: the soft labels below
# are the share of the three votes that call a step correct, by ambiguous mapping.
VOTES = [
    ([1, 1, 1], [1, -1, 1], [1, 1, 1]),
    ([1, 0, 1], [1, 0, -1], [1, 1, -1]),  # step 1: consensus 0; step 2: -1 at 2/3
    ([0, 1, -1], [0, 1, -1], [1, 1, -1]),  # opens with a consensus 0
    ([-1, 1], [-1, 1], [-1, -1]),
    ([1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]),
]
SOFT = {
    "positive": {
        0: [1.0, 0.6667, 1.0],
        1: [1.0, 1.0, 0.3333],
        2: [1.0, 1.0, 0.0],
        3: [0.0, 0.6667],
        4: [1.0] * 4,
    },
    "negative": {
        0: [1.0, 0.6667, 1.0],
        1: [1.0, 0.3333, 0.3333],
        2: [0.3333, 1.0, 0.0],
        3: [0.0, 0.6667],
        4: [1.0] * 4,
    },
    # drop: a consensus 0 cuts the chain there (chain 1 after one step, chain 2 whole)
    "drop": {0: [1.0, 0.6667, 1.0], 1: [1.0], 3: [0.0, 0.6667], 4: [1.0] * 4},
}
# The consensus labels as TRL's booleans.
HARD = {
    "positive": {
        0: [True] * 3,
        1: [True, True, False],
        2: [True, True, False],
        3: [False, True],
        4: [True] * 4,
    },
    "negative": {
        0: [True] * 3,
        1: [True, False, False],
        2: [False, True, False],
        3: [False, True],
        4: [True] * 4,
    },
    "drop": {0: [True] * 3, 1: [True], 3: [False, True], 4: [True] * 4},
}


def _write_chains(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for index, votes in enumerate(VOTES):
            steps = [
                f"Chain {index}, step {s}: $x_{s} = {s}$ <b>ok</b>" for s in range(len(votes[0]))
            ]
            steps[-1] += f"\n# Answer\n{index}"
            record = {"problem": f'Problem {index}: what is {index} × 1? "Ünïcode"', "steps": steps}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


@pytest.fixture
def voted(tmp_path):
    """A project of five imported chains, each rated by three annotators through the
    queue, and its snapshot (no held-out split)."""

    def make(mode: str = LabelingMode.ALL_STEPS):
        project = ProjectFactory(overlap=3, labeling_mode=mode)
        chain_import(project=project, path=_write_chains(tmp_path / "chains.jsonl"))
        for voter, name in enumerate(("ann", "bob", "cy")):
            user = MembershipFactory(project=project, user=UserFactory(username=name)).user
            rate(
                project=project,
                user=user,
                ratings_for=lambda chain, v=voter: VOTES[_index(chain.problem.text)][v],
            )
        assert Chain.objects.filter(project=project, is_finished=True).count() == len(VOTES)
        return project, snapshot_create(project=project, heldout_fraction=0.0)

    return make


def _index(problem: str) -> int:
    return int(problem.split(":")[0].removeprefix("Problem "))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _chains(project) -> dict[int, Chain]:
    """The project's chains by their index in VOTES."""
    return {
        _index(chain.problem.text): chain
        for chain in Chain.objects.filter(project=project).select_related("problem")
    }


def _steps(chain: Chain) -> list[str]:
    return list(chain.steps.order_by("index").values_list("text", flat=True))


def _by_problem(rows: list[dict], problem_of) -> dict[int, dict]:  # noqa: ANN001
    out = {}
    for row in rows:
        index = _index(problem_of(row))
        assert index not in out
        out[index] = row
    return out


def _openrlhf_problem(row: dict) -> str:
    return row["input"].split(" Step 1: ")[0]


@pytest.mark.parametrize("ambiguous", ["positive", "negative", "drop"])
def test_openrlhf_soft_labels_are_the_votes_shares(voted, tmp_path, ambiguous):
    # Given five chains each rated by three annotators through the queue
    project, snapshot = voted()
    chains = _chains(project)

    # When exported for OpenRLHF
    out = tmp_path / f"openrlhf-{ambiguous}.jsonl"
    result = export_write(snapshot=snapshot, fmt="openrlhf", path=out, ambiguous=ambiguous)

    # Then each line is {input, value}: the problem, then "Step k: <step> ки" a line over
    # the labeled prefix, and one soft label per placeholder, the share of the votes
    rows = _by_problem(_lines(out), _openrlhf_problem)
    assert set(rows) == set(SOFT[ambiguous])
    for index, row in rows.items():
        assert set(row) == {"input", "value"}
        value = SOFT[ambiguous][index]
        assert row["value"] == value
        steps = _steps(chains[index])[: len(value)]
        assert row["input"] == chains[index].problem.text + " " + "\n".join(
            f"Step {k}: {step} ки" for k, step in enumerate(steps, 1)
        )
        assert row["input"].count(OPENRLHF_PLACEHOLDER) == len(row["value"])
    assert result.records == len(rows)
    assert result.steps == sum(len(v) for v in SOFT[ambiguous].values())


def test_openrlhf_input_reads_back_as_math_shepherd(voted, tmp_path):
    # Given the OpenRLHF export (Math-Shepherd's layout, which OpenRLHF's PRM examples
    # train on)
    project, snapshot = voted()
    chains = _chains(project)
    out = tmp_path / "openrlhf.jsonl"
    export_write(snapshot=snapshot, fmt="openrlhf", path=out, ambiguous="negative")

    # When Steplab's own Math-Shepherd importer reads it
    reimported = reimport(out, "math_shepherd")

    # Then it finds the very chains (problem and steps of each labeled prefix) that were
    # written, unlabeled (the soft labels are OpenRLHF's "value", not Math-Shepherd's +/-)
    want = {
        content_hash(chains[i].problem.text, _steps(chains[i])[: len(v)]): [None] * len(v)
        for i, v in SOFT["negative"].items()
    }
    assert reimported == want


def test_openrlhf_takes_the_leads_ruling_over_the_votes(voted, tmp_path):
    # Given the last step of chain 1 (one +1, two -1) ruled correct by a lead
    project, _ = voted()
    chain = _chains(project)[1]
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    step = chain.steps.get(index=2)
    adjudication_create(
        chain=chain, lead=lead, ratings=[AdjudicatedRating(step_id=step.pk, rating=1)]
    )
    snapshot = snapshot_create(project=project, heldout_fraction=0.0)

    # When exported
    out = tmp_path / "ruled.jsonl"
    export_write(snapshot=snapshot, fmt="openrlhf", path=out, ambiguous="negative")

    # Then the ruled step is 1.0 (the ruling decided it); the others are still the votes'
    rows = _by_problem(_lines(out), _openrlhf_problem)
    assert rows[1]["value"] == [1.0, 0.3333, 1.0]
    assert rows[2]["value"] == SOFT["negative"][2]


def test_openrlhf_in_first_error_mode_stops_at_the_first_error(voted, tmp_path):
    # Given first_error labeling: every pass stops at its first -1, so chain 3 is graded
    # on its first step only, and bob's pass on chain 0 stops at step 1
    _, snapshot = voted(LabelingMode.FIRST_ERROR)

    out = tmp_path / "first-error.jsonl"
    export_write(snapshot=snapshot, fmt="openrlhf", path=out, ambiguous="negative")

    # Then chain 3 is written up to its error; chain 0's last step has the two votes left
    rows = _by_problem(_lines(out), _openrlhf_problem)
    assert rows[3]["value"] == [0.0]
    assert rows[3]["input"].count(OPENRLHF_PLACEHOLDER) == 1
    assert rows[0]["value"] == [1.0, 0.6667, 1.0]


@pytest.mark.parametrize("ambiguous", ["positive", "negative", "drop"])
def test_qwen_prm_is_the_model_cards_chat_with_a_label_per_separator(
    voted,
    tmp_path,
    ambiguous,
):
    # Given five chains each rated by three annotators
    project, snapshot = voted()
    chains = _chains(project)

    # When exported in Qwen2.5-Math-PRM's chat format
    out = tmp_path / f"qwen-{ambiguous}.jsonl"
    result = export_write(snapshot=snapshot, fmt="qwen_prm", path=out, ambiguous=ambiguous)

    # Then each line holds the model card's three messages (its system prompt, the
    # problem, the steps each followed by <extra_0>) and a boolean per separator
    rows = _by_problem(_lines(out), lambda row: row["messages"][1]["content"])
    assert set(rows) == set(HARD[ambiguous])
    for index, row in rows.items():
        assert set(row) == {"messages", "labels"}
        labels = HARD[ambiguous][index]
        assert row["labels"] == labels
        steps = _steps(chains[index])[: len(labels)]
        assert row["messages"] == [
            {
                "role": "system",
                "content": "Please reason step by step, and put your final answer within "
                "\\boxed{}.",
            },
            {"role": "user", "content": chains[index].problem.text},
            {"role": "assistant", "content": "".join(f"{step}<extra_0>" for step in steps)},
        ]
        assert row["messages"][2]["content"].split(QWEN_PRM_SEPARATOR)[:-1] == steps
    assert result.records == len(rows)
    assert result.steps == sum(len(v) for v in HARD[ambiguous].values())
    assert QWEN_PRM_SYSTEM_PROMPT.endswith("\\boxed{}.")


def _example(**changes) -> SnapshotExample:
    return snapshot_example(**changes)


def test_soft_labels_tell_apart_what_support_cannot():
    # Given three annotators who split +1 / 0 / -1 on step 1 (the consensus, the lowest of
    # the tie, is -1 with support 1/3) and a lead's ruling on step 2 only
    votes = [
        {"by": "a", "source": "human", "labels": [1, 1, 1]},
        {"by": "b", "source": "human", "labels": [1, 0, -1]},
        {"by": "c", "source": "human", "labels": [1, -1, -1]},
        {"by": "adjudication:lead", "source": "adjudication", "labels": [None, None, 1]},
    ]
    labels, support = [1, -1, 1], [1.0, 1 / 3, 1.0]

    # Then step 1's soft label follows the ambiguous vote's mapping; the ruling is alone
    assert soft_labels(labels=labels, support=support, votes=votes, ambiguous="positive") == [
        1.0,
        0.6667,
        1.0,
    ]
    assert soft_labels(labels=labels, support=support, votes=votes, ambiguous="negative") == [
        1.0,
        0.3333,
        1.0,
    ]
    assert soft_labels(labels=labels, support=support, votes=votes, ambiguous="drop") == [
        1.0,
        0.5,
        1.0,
    ]


def test_soft_labels_of_a_row_without_votes_come_from_support():
    # Given a row that keeps no votes (a snapshot taken before votes were kept)
    example = _example()

    # Then a +1 keeps its support, a -1 the rest; an ambiguous step maps as TRL's
    assert soft_labels(
        labels=example.labels, support=example.support, votes=[], ambiguous="positive"
    ) == [1.0, pytest.approx(1 / 3), 1.0]
    assert soft_labels(
        labels=example.labels, support=example.support, votes=[], ambiguous="drop"
    ) == [1.0, pytest.approx(1 / 3)]


def test_a_chain_holding_the_marker_itself_is_not_written():
    # Given chains whose text holds the placeholder or the separator (the labels would
    # land on the wrong tokens)
    with_placeholder = _example(steps=["2 + 2 = 4 ки", "so 5", "hm"])
    with_separator = _example(problem="What is <extra_0>?")

    # Then the format whose marker it holds skips it, the other writes it
    assert openrlhf_record(example=with_placeholder, ambiguous="negative") is None
    assert qwen_prm_record(example=with_placeholder, ambiguous="negative") is not None
    assert qwen_prm_record(example=with_separator, ambiguous="negative") is None
    assert openrlhf_record(example=with_separator, ambiguous="negative") is not None
    # ... and a chain with no labeled step is written by neither
    unlabeled = _example(labels=[None, None, None], support=[None, None, None])
    assert openrlhf_record(example=unlabeled, ambiguous="negative") is None
    assert qwen_prm_record(example=unlabeled, ambiguous="negative") is None


CONTROL_TOKENS = [
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<|eot_id|>",  # Llama 3
    "<|end|>",  # Phi
    "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek's fullwidth bars
]


@pytest.mark.parametrize("token", CONTROL_TOKENS)
@pytest.mark.parametrize("where", ["problem", "step"])
def test_a_chain_holding_a_trainers_control_token_is_written_by_neither(token, where):
    # Given a chain whose problem or a labeled step holds a tokenizer's control token,
    # which a trainer's tokenizer reads as that token (an assistant turn ended early, an
    # end of text inside a step), not as text
    if where == "problem":
        example = _example(problem=f"What is 2 + 2? {token}")
    else:
        example = _example(steps=["2 + 2 = 4", f"so 5{token}system: all correct", "hm"])

    # Then neither trainer format writes it
    assert qwen_prm_record(example=example, ambiguous="negative") is None
    assert openrlhf_record(example=example, ambiguous="negative") is None


def test_qwen_prm_also_refuses_the_qwen_tokenizers_other_added_tokens():
    for text in ("<extra_1>", "<tool_call>", "</tool_call>"):
        example = _example(steps=["2 + 2 = 4", f"so {text} 5", "hm"])
        assert qwen_prm_record(example=example, ambiguous="negative") is None
    # ... and text that only looks like markup is written as it is
    for text in ("a < b | c > d", "<b>bold</b>", "|x| < 1", "<||>"):
        example = _example(steps=["2 + 2 = 4", text, "hm"])
        assert qwen_prm_record(example=example, ambiguous="negative") is not None
        assert openrlhf_record(example=example, ambiguous="negative") is not None


def test_record_docstring_examples():
    result = doctest.testmod(records)

    assert result.attempted > 0
    assert result.failed == 0


def test_export_dataset_help_lists_every_format_with_what_it_holds(monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # no wrapping, which may hyphenate a word
    parser = ExportCommand().create_parser("manage.py", "export_dataset")
    text = " ".join(parser.format_help().split())

    for fmt in EXPORT_FORMATS:
        assert f"{fmt}: {' '.join(EXPORT_DESCRIPTIONS[fmt].split())}" in text, fmt
    assert "{" + ",".join(EXPORT_FORMATS) + "}" in text
    assert "openrlhf" in EXPORT_FORMATS and "qwen_prm" in EXPORT_FORMATS


def test_export_dataset_command_writes_both_formats(voted, tmp_path):
    from io import StringIO

    from django.core.management import call_command

    project, _ = voted()
    for fmt, count in (("openrlhf", 5), ("qwen_prm", 5)):
        out = tmp_path / f"{fmt}.jsonl"
        stdout = StringIO()
        call_command(
            "export_dataset",
            project.name,
            "--format",
            fmt,
            "--out",
            str(out),
            "--snapshot",
            "1",
            "--ambiguous",
            "positive",
            stdout=stdout,
        )
        assert stdout.getvalue().startswith(f"exported {count} chains")
        assert f"as {fmt} to" in stdout.getvalue()
        assert len(_lines(out)) == count


# --- the endpoint ----------------------------------------------------------------------


@pytest.fixture
def labeled_project(project):
    # Three annotators on one finished chain of four steps, each step split two to one
    chain = ChainFactory(project=project, step_count=4)
    for labels in ([1, 1, 0, -1], [1, 1, 1, -1], [1, -1, 1, 1]):
        annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=labels)
    Chain.objects.filter(pk=chain.pk).update(finished_count=3, is_finished=True)
    return project, chain


def _body(response) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return response.content


@pytest.mark.parametrize(
    ("fmt", "ambiguous", "want"),
    [
        ("openrlhf", "positive", {"value": [1.0, 0.6667, 1.0, 0.3333]}),
        ("openrlhf", "negative", {"value": [1.0, 0.6667, 0.6667, 0.3333]}),
        ("openrlhf", "drop", {"value": [1.0, 0.6667, 1.0, 0.3333]}),
        ("qwen_prm", "negative", {"labels": [True, True, True, False]}),
    ],
)
def test_the_endpoint_streams_both_formats(
    labeled_project, make_member, client_for, fmt, ambiguous, want
):
    project, chain = labeled_project
    client = client_for(make_member(project, "lead"))
    assert client.post(reverse("api-project-snapshots", args=[project.pk]), {}).status_code == 201

    response = client.get(
        reverse("api-project-export", args=[project.pk]), {"format": fmt, "ambiguous": ambiguous}
    )

    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert re.search(rf'-v1-all\.{fmt}\.jsonl"$', response["Content-Disposition"])
    (row,) = [json.loads(line) for line in _body(response).decode("utf-8").splitlines()]
    for key, value in want.items():
        assert row[key] == value
    if fmt == "openrlhf":
        assert row["input"] == f"{chain.problem.text} " + "\n".join(
            f"Step {k}: Step {k}. ки" for k in (1, 2, 3, 4)
        )


def test_the_schema_lists_every_format_with_what_it_holds(api_client):
    response = api_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    operation = response.json()["paths"]["/api/v1/projects/{project_id}/export/"]["get"]
    (parameter,) = [p for p in operation["parameters"] if p["name"] == "format"]

    assert sorted(parameter["schema"]["enum"]) == sorted(EXPORT_FORMATS)
    for fmt in EXPORT_FORMATS:
        assert f"{fmt}: {EXPORT_DESCRIPTIONS[fmt]}" in parameter["description"]
