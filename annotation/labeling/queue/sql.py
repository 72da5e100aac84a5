"""Every SQL statement the labeling queue runs (``annotation.labeling.queue``'s header says why
the hot path is plain SQL). Each names its tables and columns from the models, so a
renamed table or field shows here, and each runs on PostgreSQL and on SQLite unless its
comment says otherwise."""

from __future__ import annotations

import functools

from django.db import connection
from django.db.models import Model

from annotation.labeling.queue.rows import select_columns
from annotation.models import (
    Annotation,
    AnnotationSource,
    ApiToken,
    Assignment,
    AssignmentStatus,
    Chain,
    ChainRouting,
    MachineLabel,
    Membership,
    Problem,
    Project,
    Step,
    StepRating,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryStatus,
)

# --- claim ---------------------------------------------------------------------------------

# Keeps each NOT EXISTS below a probe per chain (an index lookup by chain and annotator).
# Without it PostgreSQL may plan the test as an anti-join against everything the annotator ever
# did, read in full on every claim: it does when its statistics predate the annotator's
# work, and in the generic plan of the prepared statement, where the annotator is a
# parameter. An OFFSET keeps PostgreSQL from turning the sub-select into a join (SQLite
# needs the LIMIT to take an OFFSET); the rows and the answer are the same.
PROBE = "LIMIT 1 OFFSET 0"

# The queue's one predicate, in SQL, shared by the candidate scan, the re-check under the
# lock and the "is this expired lease's place still free" test, so they cannot drift apart.
# ``c`` is the chain. Live leases of the caller are not counted: a claim skips the chains
# the caller holds a live lease on (``skip``; ``next`` only claims when it holds none, a
# prefetch holds one), and an expired lease being taken back must not count the caller's
# newer lease on the chain.
# Hand-written rather than built by the ORM: this is the hot path, and building it as a
# queryset cost more than running it. Plain SQL that SQLite runs too.
PLACE_FREE_SQL = f"""
    NOT c.is_finished AND c.routing <> '{ChainRouting.AGREED}'
    AND c.finished_count + (
        SELECT COUNT(*) FROM {Assignment._meta.db_table} a
        WHERE a.chain_id = c.id AND a.status = '{AssignmentStatus.ACTIVE}'
          AND a.expires_at > %(now)s AND a.annotator_id <> %(user)s
    ) < %(overlap)s + c.extra_labels
    AND NOT EXISTS (
        SELECT 1 FROM {Assignment._meta.db_table} a
        WHERE a.chain_id = c.id AND a.annotator_id = %(user)s
          AND a.status IN ('{AssignmentStatus.SUBMITTED}', '{AssignmentStatus.SKIPPED}')
        {PROBE}
    )
    AND NOT EXISTS (
        SELECT 1 FROM {Annotation._meta.db_table} n
        WHERE n.chain_id = c.id AND n.annotator_id = %(user)s
          AND n.source = '{AnnotationSource.HUMAN}'
        {PROBE}
    )
"""

# Whether the caller may lease chain ``c`` now: a gold chain has no overlap (it is offered
# to every annotator once: ``quality.gold``), so past the flag only the claim's own gold
# query (``GOLD_CANDIDATE_SQL``, or the screening's pick) decides; any other chain needs a
# free place. Gold and real work are leased by the same statement, so a gold lease costs
# what a real one does: nothing an annotator times tells them apart. The place is worked
# out first, gold or not (an OR runs its arms in order), for the same reason.
CLAIMABLE_SQL = f"NOT c.is_flagged AND (({PLACE_FREE_SQL}) OR c.is_gold)"

# The gold chain a claim leases when the gold draw chose gold: the first of the project's
# gold chains that the caller has not submitted, skipped or annotated and holds no live
# lease on, in the caller's own keyed shuffle (``%(gold_order)s``:
# ``quality.gold_reads.gold_order``, hashed with the chain id), locked. Every claim under a
# gold rate runs it, and the real work's candidate query, each locking its row, and leases
# one of the two (``claim._gold_chain``): a gold claim runs the statements a real one does.
GOLD_CANDIDATE_SQL = f"""
    SELECT c.id FROM {Chain._meta.db_table} c
    WHERE c.project_id = %(project)s AND c.is_gold AND NOT c.is_flagged
      AND NOT EXISTS (
          SELECT 1 FROM {Assignment._meta.db_table} a
          WHERE a.chain_id = c.id AND a.annotator_id = %(user)s
            AND (a.status IN ('{AssignmentStatus.SUBMITTED}', '{AssignmentStatus.SKIPPED}')
                 OR (a.status = '{AssignmentStatus.ACTIVE}' AND a.expires_at > %(now)s))
      )
      AND NOT EXISTS (
          SELECT 1 FROM {Annotation._meta.db_table} n
          WHERE n.chain_id = c.id AND n.annotator_id = %(user)s
            AND n.source = '{AnnotationSource.HUMAN}'
      )
    ORDER BY MD5(%(gold_order)s || CAST(c.id AS TEXT)), c.id
    LIMIT 1 {{lock}}
"""

# A gold chain the screening picked, locked while it is still gold (None: it no longer is).
GOLD_LOCK_SQL = (
    f"SELECT c.id FROM {Chain._meta.db_table} c WHERE c.id = %(chain)s AND c.is_gold {{lock}}"
)

# People first (routing), then highest priority, then oldest. ``project_id``, ``NOT
# is_finished``, ``NOT is_flagged``, no evaluation set (its chains are never leased), not
# machine-agreed (routing accepted it without a person) and the order match the partial index
# ``chain_queue_idx``: the scan walks the index and stops
# at the first chain that passes the per-chain probes.
# The ``NOT IN`` repeats a test of the predicate on purpose: PostgreSQL runs it as one hashed
# subplan (the caller's submitted and skipped chains, read once by the annotator index), so
# walking past chains the caller already did but that wait for other annotators costs a hash
# probe each instead of three index probes: an annotator labeling alone in a project with
# overlap 2 walks past everything they did (BENCHMARKS.md, "Figures from the code's
# comments"). The set holds only closed leases on chains still in the queue
# (``chain_open``, index ``assignment_done_open``): the chains the walk can meet. Over the
# whole history it grew with every chain the annotator ever did, and so did every claim.
# Being a subset of what the probes exclude, a stale flag only sends a chain to the probes.
CANDIDATE_SQL = f"""
    SELECT c.id FROM {Chain._meta.db_table} c
    WHERE c.project_id = %(project)s AND NOT c.is_finished AND NOT c.is_flagged
      AND c.evaluation_set_id IS NULL AND NOT c.is_gold AND c.routing <> '{ChainRouting.AGREED}'
      AND c.id NOT IN (
          SELECT a.chain_id FROM {Assignment._meta.db_table} a
          WHERE a.annotator_id = %(user)s AND a.project_id = %(project)s AND a.chain_open
            AND a.status IN ('{AssignmentStatus.SUBMITTED}', '{AssignmentStatus.SKIPPED}')
      )
      AND {PLACE_FREE_SQL} {{skip}}
    ORDER BY c.people_first DESC, c.priority DESC, c.id
    LIMIT 1 {{lock}}
"""

RECHECK_SQL = f"""
    SELECT ({CLAIMABLE_SQL}),
           EXISTS (
               SELECT 1 FROM {Assignment._meta.db_table} a
               WHERE a.chain_id = c.id AND a.status = '{AssignmentStatus.ACTIVE}'
                 AND a.expires_at <= %(now)s
           )
    FROM {Chain._meta.db_table} c WHERE c.id = %(chain)s
"""

PLACE_SQL = f"SELECT {PLACE_FREE_SQL} FROM {Chain._meta.db_table} c WHERE c.id = %(chain)s"

# Verification (``annotation.labeling.queue.prelabels``): the pre-labels of chain ``c`` as one JSON
# object {"step index": verdict}, the latest verdict of source ``%(prelabel_source)s`` on
# each step (its newest row that gives one), NULL where the source has none on the chain.
# A row with a value and no rating (a probability: the PRM, a Monte-Carlo soft value) is
# a verdict by its side of 0.5. ``{json_object}`` is the database's JSON aggregate
# (``prelabels_sql``). Reads the index ``machine_label_by_chain`` and, per row, the
# unique index on (step, source, ...) for a newer one.
MACHINE_VERDICT_SQL = (
    "COALESCE(m.rating, CASE WHEN m.value >= 0.5 THEN 1 WHEN m.value IS NOT NULL THEN -1 END)"
)
PRELABELS_SQL = f"""(
    SELECT {{json_object}}(CAST(s."index" AS TEXT), {MACHINE_VERDICT_SQL})
    FROM {MachineLabel._meta.db_table} m
    JOIN {Step._meta.db_table} s ON s.id = m.step_id
    WHERE m.chain_id = c.id AND m.source = %(prelabel_source)s
      AND (m.rating IS NOT NULL OR m.value IS NOT NULL)
      AND NOT EXISTS (
          SELECT 1 FROM {MachineLabel._meta.db_table} n
          WHERE n.step_id = m.step_id AND n.source = m.source AND n.id > m.id
            AND (n.rating IS NOT NULL OR n.value IS NOT NULL)
      )
)"""
_JSON_OBJECT_AGGREGATES = {"postgresql": "jsonb_object_agg", "sqlite": "json_group_object"}


@functools.cache
def prelabels_sql(vendor: str) -> str:
    """``PRELABELS_SQL`` for the database ``vendor``, built once."""
    return PRELABELS_SQL.format(json_object=_JSON_OBJECT_AGGREGATES[vendor])


# The lease itself, taken only if the re-check under the lock passes, in one statement: it
# starts after the candidate statement got the chain's lock, so (READ COMMITTED) it sees
# every lease and submit committed before. The common case costs this one round trip; when
# it inserts nothing, ``_recheck`` tells a lost race from stale leases to expire first.
# ``{prelabels}`` is NULL, or ``prelabels_sql`` when the project pre-labels: the lease
# stores the verdicts it shows (or, held out, would have shown) in the same statement.
LEASE_IF_FREE_SQL = f"""
    INSERT INTO {Assignment._meta.db_table}
        (project_id, chain_id, annotator_id, status, created_at, expires_at, finished_at,
         skip_reason, prelabel_source, prelabels, prelabels_shown)
    SELECT %(project)s, c.id, %(user)s, '{AssignmentStatus.ACTIVE}', %(now)s, %(expires)s,
           NULL, '', %(prelabel_from)s, {{prelabels}}, %(prelabels_shown)s
    FROM {Chain._meta.db_table} c
    WHERE c.id = %(chain)s AND {CLAIMABLE_SQL}
      AND NOT EXISTS (
          SELECT 1 FROM {Assignment._meta.db_table} a
          WHERE a.chain_id = c.id AND a.status = '{AssignmentStatus.ACTIVE}'
            AND a.expires_at <= %(now)s
      )
    RETURNING id, prelabels
"""

# PostgreSQL: the lease as above and, in the same trip, what the lease's answer shows (the
# chain's steps with its final answer and problem: ``leases.LeasedChain``). No rows: no
# lease. SQLite cannot write inside a WITH, so there the answer reads them afterwards.
LEASE_WITH_CHAIN_SQL = f"""
    WITH l AS ({LEASE_IF_FREE_SQL})
    SELECT l.id, l.prelabels, s.id, s."index", s.text, c.final_answer, p.text,
           p.reference_answer
    FROM l
    JOIN {Chain._meta.db_table} c ON c.id = %(chain)s
    JOIN {Problem._meta.db_table} p ON p.id = c.problem_id
    LEFT JOIN {Step._meta.db_table} s ON s.chain_id = c.id
    ORDER BY s."index"
"""


@functools.cache
def lease_sql(*, vendor: str, with_chain: bool, prelabels: bool) -> str:
    """The lease statement (``LEASE_WITH_CHAIN_SQL`` or ``LEASE_IF_FREE_SQL``) for
    ``vendor``, with the pre-labels' subquery or NULL in their place: built once each, so
    a project without pre-labels runs the statement it always did, plus two constants."""
    template = LEASE_WITH_CHAIN_SQL if with_chain else LEASE_IF_FREE_SQL
    return template.format(prelabels=prelabels_sql(vendor) if prelabels else "NULL")


# The caller's live leases in a project, oldest first: ``next`` answers with the oldest,
# ``prefetch`` with the newest (index ``assignment_live_by_annotator``).
LIVE_LEASES_SQL = f"""
    SELECT {select_columns(Assignment, "a")} FROM {Assignment._meta.db_table} a
    WHERE a.project_id = %(project)s AND a.annotator_id = %(user)s
      AND a.status = '{AssignmentStatus.ACTIVE}' AND a.expires_at > %(now)s
    ORDER BY a.id
"""

LOCK_USER_SQL = "SELECT 1 FROM {table} WHERE id = %s {lock}"


# --- who may label: the project, a token's user ---------------------------------------------


def project_member_sql(*, user: str) -> str:
    """SQL that holds when the user ``user`` (an SQL expression: a parameter or a column)
    is a member of the project aliased ``p``: the labeling queue's access rule, for the
    plain-SQL lookups on its hot path (superusers pass without it)."""
    return f"""EXISTS (
        SELECT 1 FROM {Membership._meta.db_table} m
        WHERE m.project_id = p.id AND m.user_id = {user}
    )"""


PROJECT_FOR_LABELING_SQL = (
    f"SELECT {select_columns(Project, 'p')} FROM {Project._meta.db_table} p "
    "WHERE p.id = %(project)s {member}"
)
MEMBER_SQL = f"AND {project_member_sql(user='%(user)s')}"


@functools.cache
def token_project_sql() -> str:
    """``TOKEN_PROJECT_SQL`` for the installed user model, built once, not per request."""
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    return TOKEN_PROJECT_SQL.format(
        user_columns=select_columns(user_model, "u"), user_table=user_model._meta.db_table
    )


# A token's user, the token and the project, when the user may label in it; whether the
# token still works (``annotation.api_tokens``) is checked on the row.
TOKEN_PROJECT_SQL = f"""
    SELECT {{user_columns}}, {select_columns(ApiToken, "t")}, {select_columns(Project, "p")}
    FROM {ApiToken._meta.db_table} t
    JOIN {{user_table}} u ON u.id = t.user_id
    JOIN {Project._meta.db_table} p ON p.id = %(project)s
    WHERE t.key_hash = %(key_hash)s
      AND (u.is_superuser OR {project_member_sql(user="u.id")})
"""


@functools.cache
def token_user_sql() -> str:
    """The user of a token, by its key's hash, with the token, for the installed user
    model: built once, not on every request."""
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    return (
        f"SELECT {select_columns(user_model, 'u')}, {select_columns(ApiToken, 't')} "
        f"FROM {user_model._meta.db_table} u "
        f"JOIN {ApiToken._meta.db_table} t ON t.user_id = u.id WHERE t.key_hash = %s"
    )


# --- the caller's own lease: renew, skip, submit --------------------------------------------

# The chain of the caller's own lease, locked, with its project's row alongside (the
# chain's columns, then the project's: ``queue.rows``), then whether the project has an
# active webhook: a submit that finishes the chain looks its webhooks up only then, so
# most projects' finishing submits run no statement for them. The lease's owner and,
# unless the caller is a superuser, a membership in the project are part of the lookup:
# a lease of someone else, or of a project the caller left, is not found.
LOCK_OWN_CHAIN_SQL = f"""
    SELECT {select_columns(Chain, "c")}, {select_columns(Project, "p")}, EXISTS (
        SELECT 1 FROM {Webhook._meta.db_table} w WHERE w.project_id = p.id AND w.active
    )
    FROM {Chain._meta.db_table} c
    JOIN {Project._meta.db_table} p ON p.id = c.project_id
    WHERE c.id = (
        SELECT a.chain_id FROM {Assignment._meta.db_table} a
        WHERE a.id = %(assignment)s AND a.annotator_id = %(user)s
    ) {{member}}
    {{lock}}
"""
# The lease with its chain's steps (id, index), one row per step (one with NULLs for a
# chain without steps), and the id of the caller's annotation that already carries the
# submit's request_id, if any: a submit reads all three after taking the chain lock, in
# one trip. (``n.request_id <> ''`` lets PostgreSQL use the partial unique index; the
# caller's id rather than the lease's column makes the lookup run once, not once a step.)
ASSIGNMENT_WITH_STEPS_SQL = f"""
    SELECT {select_columns(Assignment, "a")}, s.id, s."index", (
        SELECT n.id FROM {Annotation._meta.db_table} n
        WHERE n.annotator_id = %(user)s AND n.request_id = %(request_id)s
          AND n.request_id <> ''
    )
    FROM {Assignment._meta.db_table} a
    LEFT JOIN {Step._meta.db_table} s ON s.chain_id = a.chain_id
    WHERE a.id = %(assignment)s
    ORDER BY s."index"
"""
LEASE_SUBMITTED_SQL = (
    f"UPDATE {Assignment._meta.db_table} SET status = '{AssignmentStatus.SUBMITTED}', "
    "finished_at = %s, chain_open = %s WHERE id = %s"
)
CHAIN_COUNTED_SQL = (
    f"UPDATE {Chain._meta.db_table} SET finished_count = %s, is_finished = %s WHERE id = %s"
)
# ``Chain.agreement`` (``annotation.quality.chain_agreement``: the share of steps that the
# chain's current human passes do not rate differently) worked out again for the one chain
# a counted submit changed. The same definition as the ORM expression there, which the
# bulk writers keep: built and compiled per call, that expression cost more Django CPU
# than the rest of the submit, on every counted submit past a chain's first pass
# (BENCHMARKS.md, the queue under concurrency). The ratings are reached through the
# chain's own passes, so the plan reads that chain's rows only. ``{chain}`` is the chain
# id's placeholder, ``{more}`` more (step_id, rating) rows to count with them.
_CURRENT_RATINGS_SQL = f"""
    SELECT x.step_id, x.rating FROM {StepRating._meta.db_table} x
    JOIN {Annotation._meta.db_table} m ON m.id = x.annotation_id
    WHERE m.chain_id = {{chain}} AND m.source = '{AnnotationSource.HUMAN}'
      AND NOT EXISTS (
          SELECT 1 FROM {Annotation._meta.db_table} later WHERE later.supersedes_id = m.id
      )
    {{more}}
"""


def _agreement_sql(*, chain: str, more: str = "") -> str:
    """The agreement of chain ``chain`` (a placeholder), an expression over the chain's row
    (its ``step_count``): one minus the share of steps whose ratings differ."""
    ratings = _CURRENT_RATINGS_SQL.format(chain=chain, more=more)
    return f"""1.0 - CAST((
        SELECT COUNT(*) FROM (
            SELECT v.step_id FROM ({ratings}) v
            GROUP BY v.step_id HAVING MAX(v.rating) > MIN(v.rating)
        ) disputed
    ) AS DOUBLE PRECISION) / CASE WHEN step_count > 1 THEN step_count ELSE 1 END"""


# A counted submit past the chain's first pass, after its writes (SQLite, and the test
# that holds this definition to the ORM's).
CHAIN_AGREEMENT_SQL = f"""
    UPDATE {Chain._meta.db_table} SET agreement = CASE
        WHEN finished_count < 2 THEN NULL ELSE {_agreement_sql(chain="%(chain)s")}
    END
    WHERE id = %(chain)s
"""
# PostgreSQL: the chain's count and agreement in the submit's one statement
# (``SUBMIT_WRITE_SQL``), for a pass that makes two or more count. Its sub-statements
# share a snapshot that does not hold the new ratings, so they come from the ratings
# insert's RETURNING (``r``). Parameters: finished_count, is_finished, the chain three
# times. A gold chain's pass counts for nothing: it writes the count it read and keeps its
# agreement, worked out all the same (in FROM, which runs either way, where a CASE would
# skip it) so that it costs what a real pass does (``submit_writes.Standing``).
CHAIN_COUNTED_AGREEMENT_SQL = f"""
    UPDATE {Chain._meta.db_table} SET finished_count = %s, is_finished = %s,
        agreement = CASE WHEN is_gold THEN agreement ELSE g.worked_out END
    FROM (
        SELECT {_agreement_sql(chain="%s", more="UNION ALL SELECT step_id, rating FROM r")}
            AS worked_out
        FROM {Chain._meta.db_table} WHERE id = %s
    ) g
    WHERE id = %s
"""
# The submit that finishes a chain takes it out of its annotators' sets of closed leases
# on open chains (``Assignment.chain_open``). In the submit's WITH, the lease being
# submitted still reads as ACTIVE, so this leaves it to ``LEASE_SUBMITTED_SQL``.
CHAIN_SHUT_SQL = (
    f"UPDATE {Assignment._meta.db_table} SET chain_open = FALSE "
    f"WHERE chain_id = %s AND chain_open "
    f"AND status IN ('{AssignmentStatus.SUBMITTED}', '{AssignmentStatus.SKIPPED}')"
)


# The steps with their chain's answer and problem, in one plain query (no queryset to build).
LEASE_CHAIN_SQL = f"""
    SELECT s.id, s."index", s.text, c.final_answer, p.text, p.reference_answer
    FROM {Chain._meta.db_table} c
    JOIN {Problem._meta.db_table} p ON p.id = c.problem_id
    LEFT JOIN {Step._meta.db_table} s ON s.chain_id = c.id
    WHERE c.id = %s
    ORDER BY s."index"
"""


# --- submit --------------------------------------------------------------------------------


def insert_statement(obj: Model) -> tuple[str, list]:
    """The INSERT of a new ``obj`` (``RETURNING`` its id) and its parameters: what
    ``Model.save()`` sends, field by field (``pre_save`` fills ``auto_now_add``,
    ``get_db_prep_save`` adapts), as plain SQL, since building the ORM's insert cost more
    than running it on every submit."""
    model = type(obj)
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    params = [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = (
        f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {model._meta.pk.column}"
    )
    return sql, params


RATINGS_INSERT = (
    f"INSERT INTO {StepRating._meta.db_table} "
    "(annotation_id, step_id, rating, comment, duration_ms, prelabel, prelabel_source) "
)
# PostgreSQL: the annotation, its ratings, the lease's close and the chain's count (and
# agreement: ``CHAIN_COUNTED_AGREEMENT_SQL``) in one statement (one round trip). The
# ratings come as six arrays (step ids, ratings, comments, durations, pre-label outcomes
# and their sources) zipped by ``unnest``, so the statement's text and parameter count
# are the same for every chain length: psycopg converts and PostgreSQL prepares it once.
SUBMIT_WRITE_SQL = f"""
    WITH n AS ({{annotation}}),
    r AS (
        {RATINGS_INSERT}
        SELECT n.id, v.step_id, v.rating, v.comment, v.duration_ms, v.prelabel,
               v.prelabel_source
        FROM n CROSS JOIN unnest(
            %s::bigint[], %s::smallint[], %s::text[], %s::integer[], %s::text[], %s::text[]
        ) AS v (step_id, rating, comment, duration_ms, prelabel, prelabel_source)
        RETURNING step_id, rating
    ),
    l AS ({LEASE_SUBMITTED_SQL})
    {{count}}
    SELECT id{{hooks}} FROM n
"""

# PostgreSQL, in the submit's WITH: a pass shaped as the one that finishes its chain, in a
# project with an active webhook. ``h``: the webhooks subscribed to ``chain.finished``;
# ``w``: their outbox rows (``webhooks.events``), written only when the chain did finish
# (the last parameter: false for a gold pass, which writes none; the submit sends as many
# messages either way). Parameters: the project, the event as a JSON list, the event, the
# payload (JSON text), the time twice, whether to write.
CHAIN_FINISHED_HOOKS_SQL = f"""
    , h AS (
        SELECT id FROM {Webhook._meta.db_table}
        WHERE project_id = %s AND active AND events @> CAST(%s AS jsonb)
    ),
    w AS (
        INSERT INTO {WebhookDelivery._meta.db_table}
            (webhook_id, event, message_id, payload, status, attempts, next_attempt_at,
             last_error, created_at)
        SELECT h.id, %s, 'msg_' || replace(CAST(gen_random_uuid() AS text), '-', ''),
               CAST(%s AS jsonb), '{WebhookDeliveryStatus.PENDING}', 0, %s, '', %s
        FROM h WHERE %s
        RETURNING id
    )
"""
# What the submit's statement returns beside the annotation's id with ``h`` and ``w``: the
# outbox rows written and how many webhooks are subscribed.
CHAIN_FINISHED_HOOKS_RETURNING = ", ARRAY(SELECT id FROM w), (SELECT COUNT(*) FROM h)"


# --- the queue's order (``priorities``) -----------------------------------------------------

# PostgreSQL: one statement per chunk, the chunk's (id, priority) pairs as a VALUES list.
PRIORITIES_FROM_VALUES_SQL = (
    f"UPDATE {Chain._meta.db_table} AS c SET priority = v.priority "
    "FROM (VALUES {values}) AS v(id, priority) WHERE c.id = v.id AND c.project_id = %s"
)
# SQLite (the demo) has no column list on a VALUES alias: one statement per chain.
PRIORITY_SQL = f"UPDATE {Chain._meta.db_table} SET priority = %s WHERE id = %s AND project_id = %s"
