#!/usr/bin/env python
"""Data manager benchmark: one filtered or sorted page of the chain list (``chain_list``,
the selector the API and page call) at 1,000,000 chains, on PostgreSQL.

    .venv/bin/python bench/bench_chains.py [--database-url postgres://.../steplab_chains_bench]
        [--chains 1000000] [--rounds 30] [--keep-db] [--quick] [--out bench/out/chains.json]

Builds one project in a fresh database (``bench_foundation.bench_database_prepare``:
created and migrated, dropped first unless --keep-db): problems, chains and three steps
each written by the server itself (INSERT ... SELECT over generate_series, faster than
COPY from a client and with every index of the schema in place), 1 % flagged, 20 %
finished by two annotators (their annotations and ratings too, one chain in ten of those
disputed), 1 % skipped, 0.1 % gold (answer keys from an import), every chain but one in
ten scored by one succeeded scoring run; each chain's stored agreement worked out by
``chains_agreement_refresh`` (timed: what migration 0017 costs at this size); ANALYZE;
then times ``--rounds`` pages of 50 for each filter, the first page and a page deep in
the list (keyset ``after``), a common, a rare and an absent word searched, and each sort
order both ways, first page and the page at the middle chain of that order (its
cursor), and prints p50 and p95 per case, and writes them to ``--out`` as JSON. Beside
them, the reference the sorts replace: ORDER BY the agreement worked out per row and the
PRM score's per-row sub-select (``naive``), the first page only. A measurement, not a
test. ``--quick`` (20,000 chains, 5 rounds) is what ``bench/run_all.py --quick`` runs."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.bench_foundation import bench_database_prepare, django_setup  # noqa: E402

FILL_SQL = """
INSERT INTO annotation_problem (project_id, text, reference_answer, content_hash, created_at)
SELECT %(p)s, 'Problem ' || i || ': how many ways to tile a ' || (i %% 97) || ' by '
       || (i %% 13) || ' board with dominoes?', '', md5('p' || i), now()
FROM generate_series(1, %(problems)s) i;

INSERT INTO annotation_chain (project_id, problem_id, content_hash, final_answer, generator,
    meta, step_count, priority, finished_count, is_finished, is_flagged, flag_reason,
    is_gold, created_at)
SELECT %(p)s, %(first_problem)s + (i %% %(problems)s), md5('c' || i), '42', 'bench', '{}', 3,
       random(),
       CASE WHEN i %% 5 = 0 THEN 2 ELSE 0 END, i %% 5 = 0, i %% 100 = 1,
       CASE WHEN i %% 100 = 1 THEN 'garbled' ELSE '' END, false, now()
FROM generate_series(1, %(chains)s) i;

INSERT INTO annotation_step (chain_id, index, text)
SELECT c.id, k, 'Step ' || k || ' of chain ' || c.id || CASE WHEN c.id %% 1000 = 7
       THEN ' uses the transfer matrix' ELSE ' counts the tilings' END
FROM annotation_chain c, generate_series(0, 2) k WHERE c.project_id = %(p)s;

INSERT INTO annotation_annotation (chain_id, source, source_name, annotator_id, rewrite,
    note, request_id, created_at)
SELECT c.id, 'human', '', u.id, '', '', '', now()
FROM annotation_chain c, unnest(%(annotators)s::bigint[]) u(id)
WHERE c.project_id = %(p)s AND c.finished_count = 2;

INSERT INTO annotation_steprating (annotation_id, step_id, rating, comment)
SELECT a.id, s.id,
       CASE WHEN a.annotator_id = %(second)s AND s.index = 1 AND c.id %% 50 = 0 THEN -1
            ELSE 1 END, ''
FROM annotation_annotation a JOIN annotation_chain c ON c.id = a.chain_id
JOIN annotation_step s ON s.chain_id = c.id WHERE c.project_id = %(p)s;

INSERT INTO annotation_assignment (project_id, chain_id, annotator_id, status, created_at,
    expires_at, skip_reason, chain_open)
SELECT %(p)s, c.id, %(first)s, 'skipped', now(), now(), 'too long', true
FROM annotation_chain c WHERE c.project_id = %(p)s AND c.id %% 100 = 3;
"""

# Every chain but one in ten scored: three step probabilities drawn from the chain's id,
# the chain's score the least and its uncertainty 1 - |2p - 1| at the least sure step.
SCORES_SQL = """
INSERT INTO prm_training_chainscore (scoring_run_id, chain_id, step_probs, chain_score,
    chain_uncertainty)
SELECT %(run)s, c.id, to_jsonb(ARRAY[p1, p2, p3]), LEAST(p1, p2, p3),
       GREATEST(1 - abs(2 * p1 - 1), 1 - abs(2 * p2 - 1), 1 - abs(2 * p3 - 1))
FROM annotation_chain c,
     LATERAL (SELECT round(((c.id * 7919) %% 1000) / 1000.0, 3)::float AS p1,
                     round(((c.id * 104729) %% 1000) / 1000.0, 3)::float AS p2,
                     round(((c.id * 1299709) %% 1000) / 1000.0, 3)::float AS p3) probs
WHERE c.project_id = %(p)s AND c.id %% 10 <> 0
"""


def fill(*, chains: int) -> int:
    from django.db import connection, transaction

    from annotation.models import (
        Annotation,
        AnnotationSource,
        Chain,
        ImportBatch,
        Problem,
        Project,
        Role,
        Step,
        StepRating,
    )
    from annotation.quality.gold import gold_mark
    from tests.factories import MembershipFactory

    project = Project.objects.create(name="chains bench", overlap=2)
    users = [MembershipFactory(project=project, role=Role.ANNOTATOR).user for _ in range(2)]
    problems = max(1, chains // 10)
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        first_problem = (
            Problem.objects.order_by("-id").values_list("id", flat=True).first() or 0
        ) + 1
        for statement in FILL_SQL.split(";\n"):
            if statement.strip():
                cursor.execute(
                    statement,
                    {
                        "p": project.pk,
                        "problems": problems,
                        "first_problem": first_problem,
                        "chains": chains,
                        "annotators": [u.pk for u in users],
                        "first": users[0].pk,
                        "second": users[1].pk,
                    },
                )
    # Gold: 0.1 % of chains, among the finished ones; their answer keys are imported
    # labels (a gold chain needs an adjudication or an import's labels), every step +1.
    gold_ids = list(
        Chain.objects.filter(project=project, finished_count=2)
        .order_by("id")
        .values_list("id", flat=True)[: max(1, chains // 1000)]
    )
    batch = ImportBatch.objects.create(
        project=project, filename="gold.jsonl", format="prm800k", content_hash="bench-gold"
    )
    keys = Annotation.objects.bulk_create(
        Annotation(
            chain_id=chain_id,
            source=AnnotationSource.IMPORT,
            source_name="prm800k",
            import_batch=batch,
        )
        for chain_id in gold_ids
    )
    steps = Step.objects.filter(chain_id__in=gold_ids).values_list("chain_id", "id")
    key_of = {key.chain_id: key.pk for key in keys}
    StepRating.objects.bulk_create(
        StepRating(annotation_id=key_of[chain_id], step_id=step_id, rating=1)
        for chain_id, step_id in steps
    )
    gold_mark(project=project, chain_ids=gold_ids)
    _scores_fill(project=project)
    print(f"filled {chains:,} chains in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return project.pk


def _scores_fill(*, project: Any) -> None:
    """One succeeded scoring run over the chains (SCORES_SQL), and each chain's stored
    agreement worked out as migration 0017 does; ANALYZE."""
    from django.db import connection, transaction
    from django.utils import timezone

    from annotation.models import Chain
    from annotation.quality.chain_agreement import chains_agreement_refresh
    from prm_training.models import RunStatus
    from tests.factories import scoring_run_with_model_version

    run = scoring_run_with_model_version(
        project=project,
        content_hash="chains-bench",
        status=RunStatus.SUCCEEDED,
        finished_at=timezone.now(),
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(SCORES_SQL, {"run": run.pk, "p": project.pk})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum would have: the refresh is planned on it
    started = time.perf_counter()
    with transaction.atomic():
        refreshed = chains_agreement_refresh(
            chains=Chain.objects.filter(project=project, finished_count__gte=2)
        )
    print(
        f"agreement of {refreshed:,} chains worked out in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _timed(call: Any, rounds: int) -> tuple[float, float, int]:
    """p50 and p95 in ms of ``rounds`` calls, and the rows the last one gave."""
    times = []
    found = 0
    for _ in range(rounds):
        started = time.perf_counter()
        found = call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return statistics.median(times), p95, found


def _middle_cursor(*, project: Any, order: Any) -> Any:
    """The cursor of a page that ends at the middle chain of ``order``: each phase counted
    until the one that holds it, then the row at its offset there (set-up, not timed)."""
    from annotation.chains.order import ChainCursor
    from annotation.chains.selectors import chain_order_phases
    from annotation.models import Chain

    half = project.chains.count() // 2
    seen = 0
    for index, phase in enumerate(chain_order_phases(project=project, order=order)):
        chains = phase.scored(Chain.objects.filter(project=project))
        if chains is None:
            continue
        chains = chains.filter(phase.where)
        count = chains.count()
        if seen + count > half:
            row = chains.order_by(*phase.ordering())[half - seen]
            return ChainCursor(phase=index, value=phase.value_of(row), chain_id=row.pk)
        seen += count
    return None


def measure_sorts(*, project_id: int, rounds: int) -> list[tuple[str, float, float, int]]:
    """Each sort order both ways, the first page and the page at the middle chain of the
    order; then the reference: ORDER BY the per-row agreement and PRM sub-select."""
    from annotation.chains.order import SORT_KEYS, ChainOrder
    from annotation.chains.selectors import ChainFilters, chain_list
    from annotation.models import Project

    project = Project.objects.get(pk=project_id)
    rows = []
    for key in SORT_KEYS[1:]:
        for descending in (False, True):
            order = ChainOrder(key=key, descending=descending)
            middle = _middle_cursor(project=project, order=order)
            for where, cursor in (("first page", None), ("page at the middle", middle)):

                def page(order: Any = order, cursor: Any = cursor) -> int:
                    found = chain_list(
                        project=project, filters=ChainFilters(), order=order, cursor=cursor
                    )
                    return len(found.rows)

                rows.append((f"sort={order}, {where}", *_timed(page, rounds)))
    rows += _naive_sorts(project=project, rounds=max(1, rounds // 5))
    return rows


def _naive_sorts(*, project: Any, rounds: int) -> list[tuple[str, float, float, int]]:
    """What the sorts replace: the first page ordered by the agreement worked out per
    row (the data manager's expression before migration 0017) and by the PRM score's
    per-row sub-select: the database works every chain's value out, then sorts."""
    from django.db.models import F

    from annotation.chains.scores import chains_with_scores
    from annotation.models import Chain
    from annotation.quality.chain_agreement import agreement_expression

    def by_agreement() -> int:
        chains = Chain.objects.filter(project=project).annotate(computed=agreement_expression())
        ordered = chains.order_by(F("computed").desc(nulls_last=True), "-pk")
        return len(list(ordered.values_list("pk", flat=True)[:51]))

    def by_score() -> int:
        chains = chains_with_scores(
            chains=Chain.objects.filter(project=project), project_id=project.pk
        )
        ordered = chains.order_by(F("prm_score").desc(nulls_last=True), "-pk")
        return len(list(ordered.values_list("pk", flat=True)[:51]))

    return [
        ("naive: ORDER BY agreement worked out per row", *_timed(by_agreement, rounds)),
        ("naive: ORDER BY the PRM score's sub-select", *_timed(by_score, rounds)),
    ]


def measure(*, project_id: int, rounds: int) -> list[tuple[str, float, float, int]]:
    from annotation.chains.selectors import ChainFilters, chain_list
    from annotation.models import Chain, Project
    from tests.factories import UserFactory  # noqa: F401  (factories set the test password)

    project = Project.objects.get(pk=project_id)
    annotator = project.memberships.order_by("id").values_list("user_id", flat=True).first()
    middle = (
        Chain.objects.filter(project=project)
        .order_by("id")
        .values_list("id", flat=True)[Chain.objects.filter(project=project).count() // 2]
    )
    cases = {
        "no filter, first page": (ChainFilters(), None),
        "no filter, page at 500,000th chain": (ChainFilters(), middle),
        "status=unlabeled": (ChainFilters(statuses=("unlabeled",)), None),
        "status=in_progress": (ChainFilters(statuses=("in_progress",)), None),
        "status=finished": (ChainFilters(statuses=("finished",)), None),
        "status=disputed": (ChainFilters(statuses=("disputed",)), None),
        "status=flagged": (ChainFilters(statuses=("flagged",)), None),
        "status=skipped": (ChainFilters(statuses=("skipped",)), None),
        "status=gold": (ChainFilters(statuses=("gold",)), None),
        "annotator=<one of two>": (ChainFilters(annotator=annotator), None),
        "agreement <= 0.75": (ChainFilters(max_agreement=0.75), None),
        "search 'transfer matrix' (0.1 %)": (ChainFilters(search="transfer matrix"), None),
        "search 'tilings' (99.9 %)": (ChainFilters(search="tilings"), None),
        "search 'permanent' (no chain)": (ChainFilters(search="permanent"), None),
        "status=finished + search 'tilings'": (
            ChainFilters(statuses=("finished",), search="tilings"),
            None,
        ),
    }
    rows = []
    for name, (filters, after) in cases.items():
        times = []
        found = 0
        for _ in range(rounds):
            started = time.perf_counter()
            page = chain_list(project=project, filters=filters, after=after, limit=50)
            times.append((time.perf_counter() - started) * 1000)
            found = len(page.rows)
        times.sort()
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        rows.append((name, statistics.median(times), p95, found))
    return rows


DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_chains_bench"
DEFAULT_OUT = Path(__file__).resolve().parent / "out" / "chains.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--chains", type=int, help="chains to fill (1,000,000; --quick 20,000)")
    parser.add_argument("--rounds", type=int, help="pages timed per filter (30; --quick 5)")
    parser.add_argument("--keep-db", action="store_true", help="reuse a filled database")
    parser.add_argument("--quick", action="store_true", help="small sizes for the test suite")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON report path")
    args = parser.parse_args()
    chains = args.chains or (20_000 if args.quick else 1_000_000)
    rounds = args.rounds or (5 if args.quick else 30)
    bench_database_prepare(url=args.database_url, recreate=not args.keep_db)
    django_setup(args.database_url)
    from annotation.models import Project

    existing = Project.objects.filter(name="chains bench").values_list("id", flat=True).first()
    project_id = existing if args.keep_db and existing else fill(chains=chains)
    rows = measure(project_id=project_id, rounds=rounds)
    rows += measure_sorts(project_id=project_id, rounds=rounds)
    print(f"{'filter or sort (page of 50)':50} {'p50 ms':>9} {'p95 ms':>9} {'rows':>5}")
    for name, p50, p95, found in rows:
        print(f"{name:50} {p50:9.1f} {p95:9.1f} {found:5d}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "config": {"chains": chains, "rounds": rounds},
        "pages": [
            {"filter": name, "p50_ms": p50, "p95_ms": p95, "rows": found}
            for name, p50, p95, found in rows
        ],
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
