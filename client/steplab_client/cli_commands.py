"""What each ``steplab`` command does: one function per command, taking the client and
the parsed arguments and returning what to print (an object, or rows and their columns).
``cli`` wires them to the parser."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from steplab_client.cli_output import (
    ProgressLine,
    import_progress_line,
    import_said,
    run_progress_line,
)
from steplab_client.client import Client
from steplab_client.datasets import Download
from steplab_client.errors import JobFailed
from steplab_client.resource import JSON

Handler = Callable[[Client, argparse.Namespace], Any]


# --- arguments ---------------------------------------------------------------------------


def setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE read as JSON when it is JSON (3, 0.5, true, null, "x"),
    else as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def settings_dict(pairs: Sequence[tuple[str, Any]] | None) -> dict[str, Any]:
    return dict(pairs or [])


# --- commands ----------------------------------------------------------------------------


def tokens_list(client: Client, args: argparse.Namespace) -> Any:
    columns = ["id", "name", "scope", "prefix", "state", "expires_at", "last_used_at"]
    return client.tokens.list(), columns


def tokens_create(client: Client, args: argparse.Namespace) -> Any:
    return client.tokens.create(name=args.name, scope=args.scope)


def tokens_revoke(client: Client, args: argparse.Namespace) -> Any:
    client.tokens.revoke(args.token_id)
    return {"revoked": args.token_id}


def projects_list(client: Client, args: argparse.Namespace) -> Any:
    columns = ["id", "name", "role", "overlap", "labeling_mode"]
    return client.projects.list(), [*columns, "progress.chains_total", "progress.percent"]


def projects_show(client: Client, args: argparse.Namespace) -> Any:
    return client.projects.show(args.project)


def projects_create(client: Client, args: argparse.Namespace) -> Any:
    settings = settings_dict(args.set)
    if args.guidelines_file:
        settings["guidelines"] = Path(args.guidelines_file).read_text(encoding="utf-8")
    return client.projects.create(
        name=args.name, overlap=args.overlap, labeling_mode=args.labeling_mode, **settings
    )


def projects_settings(client: Client, args: argparse.Namespace) -> Any:
    settings = settings_dict(args.set)
    if not settings:
        return client.projects.show(args.project)
    return client.projects.update(args.project, **settings)


def members_list(client: Client, args: argparse.Namespace) -> Any:
    return client.members.list(args.project), ["user_id", "username", "role", "created_at"]


def members_add(client: Client, args: argparse.Namespace) -> Any:
    return client.members.add(args.project, username=args.username, role=args.role)


def members_role(client: Client, args: argparse.Namespace) -> Any:
    return client.members.set_role(args.project, user_id=args.user_id, role=args.role)


def members_remove(client: Client, args: argparse.Namespace) -> Any:
    client.members.remove(args.project, user_id=args.user_id)
    return {"removed": args.user_id}


_INVITE_COLUMNS = ["id", "email", "username", "name", "role", "state", "expires_at"]


def invites_list(client: Client, args: argparse.Namespace) -> Any:
    return client.invites.list(args.project), _INVITE_COLUMNS


def invites_create(client: Client, args: argparse.Namespace) -> Any:
    return client.invites.create(
        args.project,
        role=args.role,
        email=args.email,
        username=args.username,
        name=args.name,
        expires_in_days=args.days,
    )


def invites_bulk(client: Client, args: argparse.Namespace) -> Any:
    text = Path(args.file).read_text(encoding="utf-8")
    issued = client.invites.bulk(args.project, text=text, role=args.role, expires_in_days=args.days)
    if args.json:
        return issued
    rows = [{**item["invite"], "link": item["link"]} for item in issued["invites"]]
    return rows, ["id", "email", "username", "role", "link"]


def invites_revoke(client: Client, args: argparse.Namespace) -> Any:
    return client.invites.revoke(args.project, invite_id=args.invite_id)


def follow_import(
    client: Client, project: int, job: JSON, follow: bool, timeout: float | None = None
) -> JSON:
    progress = ProgressLine(sys.stderr)
    progress.show(import_progress_line(job))
    if follow:
        job = client.imports.follow(
            project,
            job["id"],
            on_progress=lambda state: progress.show(import_progress_line(state)),
            timeout=timeout,
        )
    progress.end()
    if job["status"] == "failed":
        bad = [f"  {error['where']}: {error['reason']}" for error in job.get("errors", [])]
        if job.get("errors_omitted"):
            bad.append(f"  ... and {job['errors_omitted']:,} more bad lines")
        detail = job.get("detail") or "the import failed"
        raise JobFailed("\n".join([f"Import {job['id']} failed: {detail}", *bad]), job=job)
    return job


def import_file(client: Client, args: argparse.Namespace) -> Any:
    project = client.projects.resolve(args.project)
    job = client.imports.upload(project, args.file, format=args.format)
    job = follow_import(client, project, job, follow=not args.no_follow, timeout=args.timeout)
    return import_said(job)


def imports_show(client: Client, args: argparse.Namespace) -> Any:
    project = client.projects.resolve(args.project)
    job = client.imports.show(project, args.job_id)
    job = follow_import(client, project, job, follow=args.follow, timeout=args.timeout)
    return import_said(job)


CHAIN_FILTERS = (
    "annotator",
    "reviewer",
    "min_score",
    "max_score",
    "min_uncertainty",
    "max_uncertainty",
    "max_agreement",
)


# Filters that only narrow when on.
_CHAIN_SWITCHES = ("machines_disagree", "machines_vs_people")


def chains_list(client: Client, args: argparse.Namespace) -> Any:
    filters: dict[str, Any] = {name: getattr(args, name) for name in CHAIN_FILTERS}
    filters.update(status=args.status or None, q=args.search, sort=args.sort, limit=args.limit)
    for name in _CHAIN_SWITCHES:
        if getattr(args, name):
            filters[name] = "true"
    # Any other filter the API takes, as it names it.
    filters.update(settings_dict(args.filter))
    if args.all:
        rows = list(client.chains.list(args.project, **filters))
    else:
        rows = client.chains.page(args.project, **filters)["results"]
    columns = ["id", "status", "step_count", "finished_count", "needed", "agreement"]
    return rows, [*columns, "prm_score", "problem"]


def chains_show(client: Client, args: argparse.Namespace) -> Any:
    return client.chains.show(args.chain_id)


def chains_labels(client: Client, args: argparse.Namespace) -> Any:
    return client.chains.labels(args.chain_id)


_SNAPSHOT_COLUMNS = ["id", "kind", "label", "created_at", "created_by", "content_hash"]


def snapshots_list(client: Client, args: argparse.Namespace) -> Any:
    return client.snapshots.list(args.project, kind=args.kind), _SNAPSHOT_COLUMNS


def snapshots_create(client: Client, args: argparse.Namespace) -> Any:
    return client.snapshots.create(
        args.project,
        heldout_fraction=args.heldout_fraction,
        seed=args.seed,
        ambiguous=args.ambiguous,
        finished_only=False if args.all_chains else None,
        include_imported=True if args.include_imported else None,
        min_support=args.min_support,
        ties=args.ties,
        machine_sources=args.machine_sources or None,
    )


def export_snapshot(client: Client, args: argparse.Namespace) -> Any:
    progress = ProgressLine(sys.stderr)

    def received(size: int) -> None:
        # A line per megabyte at most: a large export stays a short log, and a small one
        # says only what it wrote.
        if size >= 1_000_000:
            progress.show(f"export: {size // 1_000_000:,} MB received")

    download: Download = client.snapshots.export(
        args.project,
        format=args.format,
        out=args.out,
        split=args.split,
        snapshot=args.snapshot,
        kind=args.kind,
        ambiguous=args.ambiguous,
        provenance=args.provenance,
        soft_labels=args.soft_labels,
        on_progress=received,
    )
    progress.show(
        f"export: wrote {download.path} ({download.bytes:,} bytes, "
        f"snapshot {download.snapshot_label})"
    )
    progress.end()
    return {
        "path": str(download.path),
        "bytes": download.bytes,
        "filename": download.filename,
        "snapshot": download.snapshot_version,
        "snapshot_kind": download.snapshot_kind,
        "snapshot_hash": download.snapshot_hash,
        "ambiguous": download.ambiguous,
    }


def follow_run(
    client: Client, kind: str, run: JSON, follow: bool, timeout: float | None = None
) -> JSON:
    runs = {
        "training run": client.training_runs,
        "scoring run": client.scoring_runs,
        "simulation run": client.simulation_runs,
        "machine-label run": client.machine_label_runs,
        "evaluation run": client.evaluation_runs,
    }[kind]
    progress = ProgressLine(sys.stderr)
    progress.show(run_progress_line(kind, run))
    if follow:
        run = runs.follow(
            run["id"],
            on_progress=lambda state: progress.show(run_progress_line(kind, state)),
            timeout=timeout,
        )
    progress.end()
    if follow and run["status"] != "succeeded":
        raise JobFailed(run_progress_line(kind, run), job=run)
    return run


_RUN_COLUMNS = ["id", "status", "created_at", "finished_at", "error"]


def train_start(client: Client, args: argparse.Namespace) -> Any:
    run = client.training_runs.start(args.project, **settings_dict(args.set))
    return follow_run(client, "training run", run, args.follow, args.timeout)


def score_start(client: Client, args: argparse.Namespace) -> Any:
    run = client.scoring_runs.start(
        args.project,
        strategy=args.strategy,
        random_fraction=args.random_fraction,
        model_version=args.model_version,
    )
    return follow_run(client, "scoring run", run, args.follow, args.timeout)


def simulate_start(client: Client, args: argparse.Namespace) -> Any:
    run = client.simulation_runs.start(
        args.project, size=args.size, seeds=args.seeds, rounds=args.rounds
    )
    return follow_run(client, "simulation run", run, args.follow, args.timeout)


def machine_label_start(client: Client, args: argparse.Namespace) -> Any:
    # The ids name problems for a sample run, chains for rollout and judge runs.
    ids = {("problems" if args.kind == "sample" else "chains"): args.ids} if args.ids else {}
    run = client.machine_label_runs.start(
        args.project,
        kind=args.kind,
        model=args.model,
        filter=args.filter,
        **ids,
        **settings_dict(args.set),
    )
    return follow_run(client, "machine-label run", run, args.follow, args.timeout)


def evaluate_start(client: Client, args: argparse.Namespace) -> Any:
    run = client.evaluation_runs.start(args.project)
    return follow_run(client, "evaluation run", run, args.follow, args.timeout)


def id_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected ids separated by commas, got {text!r}"
        ) from None


def run_commands(kind: str, attribute: str) -> dict[str, Handler]:
    def runs(client: Client) -> Any:
        return getattr(client, attribute)

    return {
        "list": lambda client, args: (runs(client).list(args.project), _RUN_COLUMNS),
        "show": lambda client, args: follow_run(
            client, kind, runs(client).show(args.run_id), args.follow, args.timeout
        ),
        "cancel": lambda client, args: runs(client).cancel(args.run_id),
        "retry": lambda client, args: runs(client).retry(args.run_id),
    }


def versions_list(client: Client, args: argparse.Namespace) -> Any:
    rows = client.model_versions.list(args.project)
    columns = ["id", "version", "is_active", "snapshot_label", "zero_shot", "created_at"]
    return rows, [*columns, "against_rules.beaten"]


def versions_activate(client: Client, args: argparse.Namespace) -> Any:
    return client.model_versions.activate(args.version_id)


def training_settings(client: Client, args: argparse.Namespace) -> Any:
    settings = settings_dict(args.set)
    if not settings:
        return client.training_settings.show(args.project)
    return client.training_settings.update(args.project, **settings)


_WEBHOOK_COLUMNS = ["id", "url", "events", "active", "description", "created_at"]
_DELIVERY_COLUMNS = [
    "id",
    "event",
    "status",
    "attempts",
    "last_status_code",
    "replay_of",
    "created_at",
    "delivered_at",
]


def webhook_changes(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "url": args.url_to,
        "events": args.event,
        "description": args.description,
        "active": args.active,
    }


def webhooks_create(client: Client, args: argparse.Namespace) -> Any:
    changes = webhook_changes(args)
    changes["url"] = args.target
    return client.webhooks.create(args.project, **changes)


def webhooks_update(client: Client, args: argparse.Namespace) -> Any:
    return client.webhooks.update(
        args.project,
        args.webhook_id,
        rotate_secret=True if args.rotate_secret else None,
        **webhook_changes(args),
    )


def webhooks_delete(client: Client, args: argparse.Namespace) -> Any:
    client.webhooks.delete(args.project, args.webhook_id)
    return {"deleted": args.webhook_id}


WEBHOOK_HANDLERS: dict[str, Handler] = {
    "list": lambda client, args: (client.webhooks.list(args.project), _WEBHOOK_COLUMNS),
    "show": lambda client, args: client.webhooks.show(args.project, args.webhook_id),
    "create": webhooks_create,
    "update": webhooks_update,
    "delete": webhooks_delete,
    "test": lambda client, args: client.webhooks.test(args.project, args.webhook_id),
    "deliveries": lambda client, args: (
        client.webhooks.deliveries(args.project, args.webhook_id),
        _DELIVERY_COLUMNS,
    ),
    "replay": lambda client, args: client.webhooks.replay(
        args.project, args.webhook_id, args.delivery_id
    ),
}
