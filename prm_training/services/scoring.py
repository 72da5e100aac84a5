"""Scoring runs: P(step correct) for the unlabeled chains with the active model version,
turned into queue priorities by the project's acquisition function.

The run is idempotent like a training run (``services.runs``): it is claimed QUEUED ->
RUNNING under a row lock, scores are written with the unique key (scoring_run, chain), so
a redelivered task that takes over a dead worker's run (stale heartbeat) rewrites the
same rows.

Once every chain is scored, the version's verdicts on them are written as machine labels
of the PRM source (``services.scoring_labels``: the version's readout, with run and
version; rewritten by a takeover), which pre-labels and routing read.

Priorities are written by the queue (``annotation.labeling.queue.priorities``) a chunk of chains
per short transaction, so while they are written the queue mixes old and new priorities
for a moment.

Once a run succeeds, a person's label the active PRM contradicts with the project's
``routing_second_look`` confidence is sent to another annotator (``services.second_look``),
and a project that routes by the PRM gets a routing pass.

Torch is imported only inside ``scoring_run_execute`` (worker side)."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet, Sum

from annotation.labeling.queue.priorities import PRIORITY_CHUNK, chain_priorities_write
from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    LabelingMode,
    MachineSource,
    Project,
)
from annotation.routing.services import chains_route_enqueue_on_commit
from prm_training.ml.progress import Phase, PhaseMeter, RunCancelled
from prm_training.models import (
    AUTO_STRATEGY,
    AcquisitionStrategy,
    ChainScore,
    ModelVersion,
    RunStatus,
    ScoringRun,
    chain_aggregates,
)
from prm_training.selectors import project_training_settings_get
from prm_training.services.examples import chain_examples_build
from prm_training.services.progress import RunProgress, run_kept_alive
from prm_training.services.runs import (
    feature_cache_dir,
    run_admission_check,
    run_cancel,
    run_claim,
    run_enqueue_on_commit,
    run_failure_detail,
    run_finish,
    run_retry_check,
)
from prm_training.services.scoring_labels import prm_labels_write
from prm_training.services.second_look import second_looks_request
from prm_training.services.strategy import (
    acquisition_strategy_resolve,
    version_zero_shot_unmeasured,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from prm_training.ml.readout import Readout

logger = logging.getLogger(__name__)

# Chains loaded, scored and stored per round trip; bounds the worker's memory.
SCORING_PAGE = 1_000


def chains_to_score(*, project: Project) -> QuerySet[Chain]:
    """The chains the PRM should rank: open (not finished, not flagged, in no evaluation
    set: never leased) and with no human annotation yet. Chains that a person has begun to
    label keep their place."""
    human = Annotation.objects.filter(chain=OuterRef("pk"), source=AnnotationSource.HUMAN)
    return Chain.objects.filter(
        project=project, is_finished=False, is_flagged=False, evaluation_set__isnull=True
    ).filter(~Exists(human))


def scoring_run_start(
    *,
    project: Project,
    user: User | None,
    model_version: ModelVersion | None = None,
    strategy: str | None = None,
    random_fraction: float | None = None,
    seed: int = 0,
    retry_of: ScoringRun | None = None,
) -> ScoringRun:
    """Create a QUEUED scoring run with ``model_version`` (default: the active one) and the
    project's acquisition settings unless given (its strategy resolved as 'auto' says,
    ``acquisition_strategy_resolve``, the reason kept in the run's note); enqueue it once
    committed. ``retry_of``: the failed or cancelled run it retries."""
    loop = project_training_settings_get(project=project)
    if model_version is None:
        model_version = ModelVersion.objects.filter(project=project, is_active=True).first()
        if model_version is None:
            raise ValidationError("The project has no active model version to score with.")
    elif model_version.project_id != project.pk:
        raise ValidationError({"model_version": "The version belongs to another project."})
    note = ""
    if not strategy:
        strategy, why = acquisition_strategy_resolve(loop=loop, version=model_version)
        if loop.acquisition_strategy == AUTO_STRATEGY:
            note = f"Chosen from evidence: {strategy}, {why}."
    if strategy not in AcquisitionStrategy.values:
        raise ValidationError({"strategy": f"Unknown acquisition strategy {strategy!r}."})
    fraction = loop.random_fraction if random_fraction is None else float(random_fraction)
    if not 0.0 <= fraction <= 1.0 or math.isnan(fraction):
        raise ValidationError({"random_fraction": "Must be between 0 and 1."})
    with transaction.atomic():
        run_admission_check(ScoringRun, project_id=project.pk)
        run = ScoringRun.objects.create(
            project=project,
            model_version=model_version,
            strategy=strategy,
            strategy_note=note,
            random_fraction=fraction,
            seed=seed,
            started_by=user if user is not None and user.is_authenticated else None,
            retry_of=retry_of,
        )
        run_enqueue_on_commit(run)
    return run


def scoring_run_cancel(*, run: ScoringRun) -> ScoringRun:
    """A queued run is cancelled at once; a running one stops within about a second,
    between two batches. The queue keeps the order it had: priorities are written only
    once every chain is scored (``runs.run_cancel``)."""
    return run_cancel(run)


def scoring_run_retry(*, run: ScoringRun, user: User | None) -> ScoringRun:
    """A new scoring run with the settings of ``run`` (its version, strategy, random share
    and seed), which failed or was cancelled."""
    run_retry_check(run)
    return scoring_run_start(
        project=run.project,
        user=user,
        model_version=run.model_version,
        strategy=run.strategy,
        random_fraction=run.random_fraction,
        seed=run.seed,
        retry_of=run,
    )


def mixed_priorities(
    *, chain_ids: Sequence[int], acquisition: Sequence[float], random_fraction: float, seed: int
) -> dict[int, float]:
    """Queue priorities in (0, 1] for ``chain_ids``: the queue is filled slot by slot, each
    slot taking the best remaining chain by acquisition (ties: lower id first) or, with
    probability ``random_fraction``, a uniformly random remaining chain. The first slot gets
    priority 1, the last 1/n. NaN acquisition counts as the lowest.

    >>> mixed_priorities(chain_ids=[1, 2, 3], acquisition=[0.1, 0.9, 0.5],
    ...                  random_fraction=0.0, seed=0)
    {2: 1.0, 3: 0.6666666666666666, 1: 0.3333333333333333}
    """
    n = len(chain_ids)
    if n == 0:
        return {}
    rng = random.Random(seed)
    by_value = sorted(
        range(n),
        key=lambda i: (
            -acquisition[i] if not math.isnan(acquisition[i]) else math.inf,
            chain_ids[i],
        ),
    )
    shuffled = list(range(n))
    rng.shuffle(shuffled)
    taken = [False] * n
    best = pick = 0
    priorities: dict[int, float] = {}
    for slot in range(n):
        if rng.random() < random_fraction:
            while taken[shuffled[pick]]:
                pick += 1
            chosen = shuffled[pick]
        else:
            while taken[by_value[best]]:
                best += 1
            chosen = by_value[best]
        taken[chosen] = True
        priorities[chain_ids[chosen]] = (n - slot) / n
    return priorities


def _acquisition_values(
    *,
    strategy: str,
    rows: list[ChainScore],
    answers: dict[int, tuple[str, str]],
    seed: int,
    first_error_labeling: bool,
) -> list[float]:
    """One acquisition value per row (higher = more worth a human's time), from the ML
    package, per step an annotator of this project would rate. ``convincing_wrong``
    grades each final answer against the reference."""
    import numpy as np

    from prm_training.ml.acquisition import acquisition_scores
    from prm_training.ml.grading import answers_equivalent
    from prm_training.ml.readout import ChainScores

    scores = [
        ChainScores(chain_id=row.chain_id, step_probs=row.step_probs, member_probs=row.member_probs)
        for row in rows
    ]
    correct = None
    if strategy == AcquisitionStrategy.CONVINCING_WRONG:
        correct = [
            answers_equivalent(answers[row.chain_id][0], answers[row.chain_id][1])
            if answers[row.chain_id][1].strip()
            else None
            for row in rows
        ]
    values = acquisition_scores(
        strategy,
        scores,
        answers_correct=correct,
        first_error_labeling=first_error_labeling,
        rng=np.random.default_rng(seed),
    )
    return [float(v) for v in values]


def cold_start_strategy(*, strategy: str, version: ModelVersion) -> tuple[str, str]:
    """(the strategy a scoring run applies, why when it is not ``strategy``).

    The cold-start rule: a model-driven strategy steers the queue only once the version
    beats the strongest baseline that reads no step on its held-out chains, F1 and AUROC
    each with its paired interval above zero (``verdict_against_baselines``). Until then
    nothing shows that its uncertainty knows more about the steps than the answer's grade
    and the steps' places do (the text-blind head), and a strategy steered by it may
    cost labels (on ProcessBench no strategy saves steps over random even with a version
    that does: BENCHMARKS.md, issue #26). So the run picks at random and says why; the
    chosen strategy takes over by itself with a better version.

    A zero-shot version with no held-out labels (``strategy.version_zero_shot_unmeasured``)
    has no comparison to lose: its own step scores steer, and the note says so.
    ``disagreement`` then applies ``entropy``: the version is one head, the PRM's own,
    with nothing to disagree."""
    from prm_training.ml.baselines import verdict_against_baselines

    if strategy == AcquisitionStrategy.RANDOM:
        return strategy, ""
    verdict = verdict_against_baselines(version.metrics)
    if verdict.beaten:
        return strategy, ""
    if version_zero_shot_unmeasured(version):
        unmeasured = (
            f"Zero-shot v{version.version} has no labeled held-out chains to compare with "
            "the baselines: its own step scores steer the queue, as set."
        )
        if strategy == AcquisitionStrategy.DISAGREEMENT:
            return AcquisitionStrategy.ENTROPY, (
                f"{unmeasured} Step uncertainty instead of ensemble disagreement: the "
                "version is one head, the PRM's own."
            )
        return strategy, unmeasured
    label = AcquisitionStrategy(strategy).label
    return AcquisitionStrategy.RANDOM, (
        f"Random picks instead of {label}: v{version.version} {verdict.text}. "
        f"{label} takes over once a version beats the baselines."
    )


def scoring_run_execute(
    *, scoring_run_id: int, task_id: str = "", worker: str = ""
) -> ScoringRun | None:
    """Score, rank and reprioritize. Called by the ``prm_training.score`` task; safe to
    call again for the same run (``services.runs``)."""
    run = run_claim(ScoringRun, scoring_run_id, task_id=task_id, worker=worker)
    if run is None:
        return None
    try:
        with run_kept_alive(run):
            _score(run)
    except RunCancelled:
        run_finish(run, status=RunStatus.CANCELLED)
    except Exception as exc:  # noqa: BLE001 - any failure ends the run, the queue keeps its order
        logger.exception("Scoring run %s failed", run.pk)
        run_finish(run, status=RunStatus.FAILED, error=run_failure_detail(exc))
    run.refresh_from_db()
    if run.status == RunStatus.SUCCEEDED:
        _second_looks(run)
        _route(run)
    return run


def _route(run: ScoringRun) -> None:
    """New PRM verdicts may change what routing does where the lead routes by the PRM (as
    the project stands now): a routing pass is sent."""
    sources = (
        Project.objects.filter(pk=run.project_id).values_list("routing_sources", flat=True).first()
    )
    if sources and MachineSource.PRM in sources:
        chains_route_enqueue_on_commit(project_id=run.project_id)


def _second_looks(run: ScoringRun) -> None:
    """Labels the active PRM contradicts go to a second look (``services.second_look``)
    once a run has succeeded. A failure here is logged and leaves the run as it ended:
    its scores and priorities stand, and the next run looks again."""
    try:
        second_looks_request(project=run.project)
    except Exception:  # noqa: BLE001 - the scoring run succeeded whatever this does
        logger.exception("Second looks after scoring run %s failed", run.pk)


def _score(run: ScoringRun) -> None:
    """Score the run's chains (``_score_chains``), write the version's verdicts on them as
    PRM machine labels (``scoring_labels``), then rank them and write the queue's
    priorities (``_prioritize``), every phase reported (``progress.RunProgress``)."""
    progress = RunProgress(run)
    readout = _score_chains(run, progress)
    progress(Phase("writing", 0, 0, detail="machine labels"))
    prm_labels_write(run=run, readout=readout)
    progress(Phase("writing", 0, 0, detail="queue priorities"))
    _prioritize(run)


def _score_chains(run: ScoringRun, progress: RunProgress) -> Readout:
    """Every chain to score through the run's version, a page at a time, into ChainScore
    rows (rewritten by a takeover); the phase counts steps a batch at a time, and a cancel
    stops it between two batches. The version's readout (its threshold)."""
    from prm_training.ml.checkpoint import load_prm
    from prm_training.ml.score import score_chains, truncation_counts

    meter = PhaseMeter(progress)
    meter.start("loading", detail=f"v{run.model_version.version}")
    prm = load_prm(run.model_version.checkpoint_dir, cache_dir=str(feature_cache_dir()))
    to_score = chains_to_score(project=run.project).order_by("id")
    chain_ids = list(to_score.values_list("id", flat=True))
    steps = to_score.aggregate(steps=Sum("step_count"))["steps"] or 0
    ScoringRun.objects.filter(pk=run.pk).update(chains_total=len(chain_ids), chains_scored=0)
    meter.start("scoring", total=steps, unit="steps", detail=f"0/{len(chain_ids):,} chains")
    scored = 0
    cut: dict[str, float] = {}
    for start in range(0, len(chain_ids), SCORING_PAGE):
        page = list(
            Chain.objects.filter(pk__in=chain_ids[start : start + SCORING_PAGE])
            .select_related("problem")
            .order_by("id")
        )
        examples = chain_examples_build(chains=[(chain, None) for chain in page])
        rows = [
            _chain_score(run, item) for item in score_chains(prm, examples, steps_done=meter.tick)
        ]
        ChainScore.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["scoring_run", "chain"],
            update_fields=["step_probs", "member_probs", "chain_score", "chain_uncertainty"],
        )
        scored += len(rows)
        # Counted as a training run counts it, so no cut is silent where scores steer
        # the queue (the windows overlap; what they still cannot hold is counted).
        for name, value in truncation_counts(prm.tokenizer, examples, prm.config).items():
            cut[name] = cut.get(name, 0.0) + value
        progress.note(chains_scored=scored)
        meter.set(meter.phase.done, detail=f"{scored:,}/{len(chain_ids):,} chains")
    ScoringRun.objects.filter(pk=run.pk).update(truncation=cut)
    return prm.readout


def _chain_score(run: ScoringRun, item: Any) -> ChainScore:
    """The stored row of one chain's scores (``item``: the ML package's ChainScores)."""
    probs = [float(p) for p in item.step_probs]
    score, uncertainty = chain_aggregates(probs)
    return ChainScore(
        scoring_run=run,
        chain_id=item.chain_id,
        step_probs=probs,
        member_probs=(
            [[float(p) for p in member] for member in item.member_probs]
            if item.member_probs is not None
            else None
        ),
        chain_score=score,
        chain_uncertainty=uncertainty,
    )


def _prioritize(run: ScoringRun) -> None:
    """The run's scores turned into acquisition values by the strategy it applies (the
    cold-start rule may say random), spread over problems, mixed with random picks, and
    written as the queue's priorities; the run ends SUCCEEDED."""
    project, version = run.project, run.model_version
    rows = list(ChainScore.objects.filter(scoring_run=run).order_by("chain_id"))
    facts = {
        chain_id: (answer, reference, problem_id)
        for chain_id, answer, reference, problem_id in Chain.objects.filter(
            pk__in=[row.chain_id for row in rows]
        ).values_list("id", "final_answer", "problem__reference_answer", "problem_id")
    }
    answers = {chain_id: (answer, reference) for chain_id, (answer, reference, _) in facts.items()}
    applied, cold = cold_start_strategy(strategy=run.strategy, version=version)
    note = " ".join(filter(None, [run.strategy_note, cold]))
    ScoringRun.objects.filter(pk=run.pk).update(applied_strategy=applied, strategy_note=note)
    values = (
        _acquisition_values(
            strategy=applied,
            rows=rows,
            answers=answers,
            seed=run.seed,
            first_error_labeling=project.labeling_mode == LabelingMode.FIRST_ERROR,
        )
        if rows
        else []
    )
    ranked = values
    if applied != AcquisitionStrategy.RANDOM and values:
        # Every problem's best chain before any problem's second (near-duplicates).
        import numpy as np

        from prm_training.ml.acquisition import spread_over_groups

        groups = [facts[row.chain_id][2] for row in rows]
        ranked = [float(v) for v in spread_over_groups(np.asarray(values), groups)]
    priorities = mixed_priorities(
        chain_ids=[row.chain_id for row in rows],
        acquisition=ranked,
        random_fraction=run.random_fraction,
        seed=run.seed,
    )
    for row, value in zip(rows, values, strict=True):
        row.acquisition = value if math.isfinite(value) else None
        row.priority = priorities[row.chain_id]
    ChainScore.objects.bulk_update(rows, ["acquisition", "priority"], batch_size=PRIORITY_CHUNK)
    changed = chain_priorities_write(project=project, priorities=priorities)
    run_finish(run, status=RunStatus.SUCCEEDED, priorities_updated=changed)
