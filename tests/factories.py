"""factory_boy factories for the annotation app."""
from __future__ import annotations

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

