"""Inter-annotator agreement of a project: Krippendorff's alpha (ordinal, over -1/0/+1)
per project, per annotator and per annotator pair, and agreement on the first-error
position. The math is in ``annotation.quality.agreement_math``; this module loads the ratings.

What counts (issue 5, point 2):

- only current human annotations: nothing superseded, imports and adjudications left
  out, and one pass per annotator per chain (their newest, as in consensus);
- a step an annotator did not rate is missing, not a disagreement. In first_error mode
  the steps after a first -1 were never asked for: they have no StepRating, and nothing
  here fills them in, so they simply drop out of the pairable data;
- the first-error position of a pass is the index of its first -1, or -1 for none.

Computed on demand from one query into numpy arrays: about a second at 100,000
annotations (see ``bench/bench_agreement.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from django.contrib.auth import get_user_model

from annotation.models import AnnotationSource, Project, StepRating
from annotation.quality.agreement_math import (
    first_error_agreement,
    krippendorff_alpha_ordinal,
)

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class CurrentRatings:
    """Long-format current human ratings of a project, one entry per rated step."""

    chain: IntArray
    annotation: IntArray
    annotator: IntArray
    step: IntArray
    step_index: IntArray
    rating: IntArray

    def __len__(self) -> int:
        return int(self.rating.size)


def current_human_ratings(
    *, project: Project, chain_ids: list[int] | None = None
) -> CurrentRatings:
    """The project's current human ratings in one query, keeping per (chain, annotator)
    only the newest annotation: a re-queued chain labeled twice by one person must not
    count as two coders agreeing with each other. Newest is the highest id, which is
    insertion order (created_at is the same order, but ties at equal timestamps)."""
    rows = StepRating.objects.filter(
        annotation__chain__project=project,
        annotation__source=AnnotationSource.HUMAN,
        annotation__superseded_by__isnull=True,
    )
    if chain_ids is not None:
        rows = rows.filter(annotation__chain_id__in=chain_ids)
    data = np.array(
        list(
            rows.order_by().values_list(
                "annotation__chain_id",
                "annotation_id",
                "annotation__annotator_id",
                "step_id",
                "step__index",
                "rating",
            )
        ),
        dtype=np.int64,
    ).reshape(-1, 6)
    if data.size:
        chain, annotation, annotator = data[:, 0], data[:, 1], data[:, 2]
        # Newest annotation per (chain, annotator): sort so it comes first in its group.
        order = np.lexsort((-annotation, annotator, chain))
        chain_s, annotator_s, annotation_s = chain[order], annotator[order], annotation[order]
        group_start = np.ones(order.size, dtype=bool)
        group_start[1:] = (chain_s[1:] != chain_s[:-1]) | (annotator_s[1:] != annotator_s[:-1])
        newest = np.maximum.accumulate(np.where(group_start, np.arange(order.size), 0))
        keep = order[annotation_s == annotation_s[newest]]
        data = data[np.sort(keep)]
    return CurrentRatings(*(np.ascontiguousarray(data[:, k]) for k in range(6)))


@dataclass(frozen=True, slots=True)
class AnnotatorAgreement:
    annotator_id: int
    username: str
    values: int
    alpha: float | None
    first_error_pairs: int
    first_error_share: float | None


@dataclass(frozen=True, slots=True)
class PairAgreement:
    annotator_a: int
    annotator_b: int
    username_a: str
    username_b: str
    steps: int
    alpha: float | None
    first_error_pairs: int
    first_error_share: float | None


@dataclass(frozen=True, slots=True)
class ProjectAgreement:
    alpha: float | None
    ratings: int
    pairable_ratings: int
    steps: int
    coincidences: list[list[float]]
    first_error_pairs: int
    first_error_share: float | None
    annotators: list[AnnotatorAgreement]
    pairs: list[PairAgreement]


def agreement_compute(*, project: Project, data: CurrentRatings | None = None) -> ProjectAgreement:
    """Alpha and first-error agreement of the project, per annotator and per pair (see
    ``krippendorff_alpha_ordinal`` for how per-annotator alpha is defined). Two queries:
    the ratings and the usernames; one when the caller passes the project's
    ``current_human_ratings`` it already loaded."""
    if data is None:
        data = current_human_ratings(project=project)
    alpha = krippendorff_alpha_ordinal(unit=data.step, coder=data.annotator, value=data.rating)
    first = first_error_agreement(
        chain=data.chain, coder=data.annotator, step_index=data.step_index, value=data.rating
    )
    user_ids = {coder.coder for coder in alpha.coders}
    names = dict(get_user_model().objects.filter(pk__in=user_ids).values_list("pk", "username"))

    def share(agree_total: tuple[int, int] | None) -> tuple[int, float | None]:
        if not agree_total or not agree_total[1]:
            return 0, None
        return agree_total[1], agree_total[0] / agree_total[1]

    annotators = []
    for coder in alpha.coders:
        pairs, fe_share = share(first.by_coder.get(coder.coder))
        annotators.append(
            AnnotatorAgreement(
                annotator_id=coder.coder,
                username=names.get(coder.coder, ""),
                values=coder.values,
                alpha=coder.alpha,
                first_error_pairs=pairs,
                first_error_share=fe_share,
            )
        )
    pair_rows = []
    for pair in alpha.pairs:
        pairs, fe_share = share(first.by_pair.get((pair.coder_a, pair.coder_b)))
        pair_rows.append(
            PairAgreement(
                annotator_a=pair.coder_a,
                annotator_b=pair.coder_b,
                username_a=names.get(pair.coder_a, ""),
                username_b=names.get(pair.coder_b, ""),
                steps=pair.units,
                alpha=pair.alpha,
                first_error_pairs=pairs,
                first_error_share=fe_share,
            )
        )
    return ProjectAgreement(
        alpha=alpha.alpha,
        ratings=len(data),
        pairable_ratings=alpha.pairable_values,
        steps=alpha.units,
        coincidences=alpha.coincidences,
        first_error_pairs=first.pairs,
        first_error_share=first.share,
        annotators=annotators,
        pairs=pair_rows,
    )
