"""factory_boy factories for the annotation app."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model

from annotation.models import Chain, Membership, Problem, Project, Role, Step


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pass-1234")


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    name = factory.Sequence(lambda n: f"project {n}")
    overlap = 1


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    project = factory.SubFactory(ProjectFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.ANNOTATOR


class ProblemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Problem

    project = factory.SubFactory(ProjectFactory)
    text = factory.Sequence(lambda n: f"What is {n} + {n}?")
    content_hash = factory.Sequence(lambda n: f"problem-{n:056d}")


class ChainFactory(factory.django.DjangoModelFactory):
    """A chain with ``step_count`` steps (default 3)."""

    class Meta:
        model = Chain
        skip_postgeneration_save = True

    project = factory.SubFactory(ProjectFactory)
    problem = factory.LazyAttribute(lambda o: ProblemFactory(project=o.project))
    content_hash = factory.Sequence(lambda n: f"chain-{n:058d}")
    final_answer = "42"
    step_count = 3

    @factory.post_generation
    def with_steps(obj: Chain, create: bool, extracted: object, **kwargs: object) -> None:
        if create:
            Step.objects.bulk_create(
                [Step(chain=obj, index=i, text=f"Step {i + 1}.") for i in range(obj.step_count)]
            )


class ImportBatchFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "annotation.ImportBatch"

    project = factory.SubFactory(ProjectFactory)
    filename = "labels.jsonl"
    format = "prm800k"
    content_hash = factory.Sequence(lambda n: f"batch-{n:058d}")


def annotation_with_ratings(
    *,
    chain: Chain,
    labels: list[int | None],
    annotator: object | None = None,
    import_batch: object | None = None,
    supersedes: object | None = None,
):
    """An Annotation on ``chain`` with a StepRating per non-None entry of ``labels``: a
    person's when ``annotator`` is given, else an import's (``import_batch``, made when
    missing). Written directly, without the queue, for consensus tests."""
    from annotation.models import Annotation, AnnotationSource, StepRating

    if annotator is None and import_batch is None:
        import_batch = ImportBatchFactory(project=chain.project)
    annotation = Annotation.objects.create(
        chain=chain,
        source=AnnotationSource.HUMAN if annotator is not None else AnnotationSource.IMPORT,
        source_name="" if annotator is not None else "prm800k",
        annotator=annotator,
        import_batch=import_batch,
        supersedes=supersedes,
    )
    steps = {step.index: step for step in chain.steps.all()}
    StepRating.objects.bulk_create(
        StepRating(annotation=annotation, step=steps[index], rating=label)
        for index, label in enumerate(labels)
        if label is not None
    )
    return annotation


def scoring_run_with_model_version(*, project: Project, content_hash: str, **fields: Any) -> Any:
    """A ScoringRun of a ModelVersion of ``project`` (its snapshot, version 1, and a
    succeeded training run; no checkpoint on disk), with ``fields`` set: rows a URL can
    name, not a model."""
    from annotation.models import Snapshot
    from prm_training.models import ModelVersion, RunStatus, ScoringRun, TrainingRun

    snapshot = Snapshot.objects.create(project=project, version=1, content_hash=content_hash)
    version = ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=snapshot,
        version=1,
        checkpoint_dir="/nonexistent",
        metrics={},
    )
    return ScoringRun.objects.create(
        project=project, model_version=version, strategy="uncertainty", **fields
    )


def api_token_key(user: Any, *, scope: str = "full", name: str = "test") -> str:
    """The key of a new API token of ``user`` (made by the service the page calls)."""
    from annotation.api.tokens import api_token_create

    return api_token_create(user=user, name=name, scope=scope).key


class MachineLabelFactory(factory.django.DjangoModelFactory):
    """A machine's label on a step (``step`` required): a Monte-Carlo verdict of rollout
    run 1 unless said otherwise. Written directly, as a run's service would."""

    class Meta:
        model = "annotation.MachineLabel"

    step = None
    chain = factory.LazyAttribute(lambda o: o.step.chain)
    project = factory.LazyAttribute(lambda o: o.step.chain.project)
    source = "monte_carlo"
    rating = 1
    value = None
    model = "tiny-decoder"
    run_kind = "rollout"
    run_id = 1


def machine_labels(
    *, chain: Chain, ratings: list[int | None], source: str = "monte_carlo", **fields: Any
) -> list[Any]:
    """A MachineLabel of ``source`` per non-None entry of ``ratings`` on ``chain``'s steps,
    with ``fields`` (``values``: a list of P(correct) per step, None to leave out)."""
    values = fields.pop("values", None)
    steps = {step.index: step for step in chain.steps.all()}
    return [
        MachineLabelFactory(
            step=steps[index],
            source=source,
            rating=rating,
            value=None if values is None else values[index],
            **fields,
        )
        for index, rating in enumerate(ratings)
        if rating is not None or (values is not None and values[index] is not None)
    ]
