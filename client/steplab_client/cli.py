"""``steplab``: the command line over ``Client``, one subcommand per call
(``steplab projects list``, ``steplab import PROJECT FILE``, ``steplab export PROJECT
--format trl --out x.jsonl``, ``steplab train PROJECT --follow``...). ``--json`` prints
the API's answer as JSON; otherwise a short table or line. Progress goes to stderr, so
stdout stays the answer. An error prints the server's status and message, never a
traceback: exit 1 for an API error or a failed job, 2 for bad usage or configuration."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from steplab_client import __version__
from steplab_client.client import JSON, Client, Download, token_create
from steplab_client.config import URL_VARIABLE, config_path, config_write
from steplab_client.errors import ApiError, ConfigError, JobFailed, SteplabError

ROLES = ("annotator", "lead", "ml")
EXPORT_FORMATS = (
    "prm800k",
    "trl",
    "processbench",
    "openrlhf",
    "math_shepherd",
    "qwen_prm",
    "csv",
    "parquet",
)
MACHINE_SOURCES = ("monte_carlo", "judge", "prm", "import")
IMPORT_FORMATS = ("auto", "prm800k", "processbench", "trl", "math_shepherd", "generic", "problems")
SPLITS = ("train", "heldout")
WEBHOOK_EVENTS = (
    "chain.finished",
    "snapshot.created",
    "import.finished",
    "import.failed",
    "training_run.finished",
    "model_version.activated",
    "scoring_run.finished",
)

Handler = Callable[[Client, argparse.Namespace], Any]


# --- output ------------------------------------------------------------------------------


class _Progress:
    """One line of progress on stderr, rewritten in place on a terminal, a new line per
    change otherwise (a log keeps every state once)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = ""

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.stream.isatty():
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.last and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def import_progress_line(job: JSON) -> str:
    line = f"import {job['id']} {job['status']}: {job['records_read']:,} records"
    if job.get("size"):
        share = 100.0 * job["bytes_read"] / job["size"]
        line += f", {_megabytes(job['bytes_read'])} of {_megabytes(job['size'])} ({share:.0f}%)"
    return line


def run_progress_line(kind: str, run: JSON) -> str:
    line = f"{kind} {run['id']} {run['status']}"
    phase = run.get("phase")
    if run["status"] == "running" and phase:
        line += f": {phase['name']}"
        if phase.get("total"):
            line += f" {phase['done']}/{phase['total']} {phase.get('unit') or ''}".rstrip()
        if phase.get("detail"):
            line += f" ({phase['detail']})"
        if phase.get("eta_seconds") is not None:
            line += f", about {phase['eta_seconds']:.0f} s left"
    if run.get("error"):
        line += f": {run['error']}"
    return line


def _lookup(row: JSON, column: str) -> Any:
    """A row's value for a column; ``a.b`` reads ``row["a"]["b"]``."""
    value: Any = row
    for key in column.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _table(rows: Sequence[JSON], columns: Sequence[str]) -> str:
    """Rows as aligned columns under a header; "(none)" for no rows."""
    if not rows:
        return "(none)"
    cells = [[_cell(_lookup(row, column)) for column in columns] for row in rows]
    widths = [
        max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)
    ]
    lines = ["  ".join(column.ljust(widths[i]) for i, column in enumerate(columns)).rstrip()]
    lines += [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in cells
    ]
    return "\n".join(lines)


def _cell(value: Any, *, width: int | None = 60) -> str:
    """A value as text; in a table (``width``) cut to fit, so a row stays one line."""
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        text = f"{value:.3g}"
    elif isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    if width is not None:
        text = " ".join(text.split())
        if len(text) > width:
            text = text[: width - 3] + "..."
    return text


def _fields(row: JSON) -> str:
    """An object as `key: value` lines (nested values as compact JSON)."""
    width = max((len(key) for key in row), default=0)
    return "\n".join(
        f"{key.ljust(width)}  {_cell(value, width=None)}" for key, value in row.items()
    )


# --- arguments ---------------------------------------------------------------------------


def _setting(text: str) -> tuple[str, Any]:
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


def _settings(pairs: Sequence[tuple[str, Any]] | None) -> dict[str, Any]:
    return dict(pairs or [])


# --- commands ----------------------------------------------------------------------------


def _tokens_list(client: Client, args: argparse.Namespace) -> Any:
    columns = ["id", "name", "scope", "prefix", "state", "expires_at", "last_used_at"]
    return client.tokens.list(), columns


def _tokens_create(client: Client, args: argparse.Namespace) -> Any:
    return client.tokens.create(name=args.name, scope=args.scope)


def _tokens_revoke(client: Client, args: argparse.Namespace) -> Any:
    client.tokens.revoke(args.token_id)
    return {"revoked": args.token_id}


def _projects_list(client: Client, args: argparse.Namespace) -> Any:
    columns = ["id", "name", "role", "overlap", "labeling_mode"]
    return client.projects.list(), [*columns, "progress.chains_total", "progress.percent"]


def _projects_show(client: Client, args: argparse.Namespace) -> Any:
    return client.projects.show(args.project)


def _projects_create(client: Client, args: argparse.Namespace) -> Any:
    settings = _settings(args.set)
    if args.guidelines_file:
        settings["guidelines"] = Path(args.guidelines_file).read_text(encoding="utf-8")
    return client.projects.create(
        name=args.name, overlap=args.overlap, labeling_mode=args.labeling_mode, **settings
    )


def _projects_settings(client: Client, args: argparse.Namespace) -> Any:
    settings = _settings(args.set)
    if not settings:
        return client.projects.show(args.project)
    return client.projects.update(args.project, **settings)


def _members_list(client: Client, args: argparse.Namespace) -> Any:
    return client.members.list(args.project), ["user_id", "username", "role", "created_at"]


def _members_add(client: Client, args: argparse.Namespace) -> Any:
    return client.members.add(args.project, username=args.username, role=args.role)


def _members_role(client: Client, args: argparse.Namespace) -> Any:
    return client.members.set_role(args.project, user_id=args.user_id, role=args.role)


def _members_remove(client: Client, args: argparse.Namespace) -> Any:
    client.members.remove(args.project, user_id=args.user_id)
    return {"removed": args.user_id}


_INVITE_COLUMNS = ["id", "email", "username", "name", "role", "state", "expires_at"]


def _invites_list(client: Client, args: argparse.Namespace) -> Any:
    return client.invites.list(args.project), _INVITE_COLUMNS


def _invites_create(client: Client, args: argparse.Namespace) -> Any:
    return client.invites.create(
        args.project,
        role=args.role,
        email=args.email,
        username=args.username,
        name=args.name,
        expires_in_days=args.days,
    )


def _invites_bulk(client: Client, args: argparse.Namespace) -> Any:
    text = Path(args.file).read_text(encoding="utf-8")
    issued = client.invites.bulk(args.project, text=text, role=args.role, expires_in_days=args.days)
    if args.json:
        return issued
    rows = [{**item["invite"], "link": item["link"]} for item in issued["invites"]]
    return rows, ["id", "email", "username", "role", "link"]


def _invites_revoke(client: Client, args: argparse.Namespace) -> Any:
    return client.invites.revoke(args.project, invite_id=args.invite_id)


def _follow_import(
    client: Client, project: int, job: JSON, follow: bool, timeout: float | None = None
) -> JSON:
    progress = _Progress(sys.stderr)
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


def _import(client: Client, args: argparse.Namespace) -> Any:
    project = client.projects.resolve(args.project)
    job = client.imports.upload(project, args.file, format=args.format)
    return _follow_import(client, project, job, follow=not args.no_follow, timeout=args.timeout)


def _imports_show(client: Client, args: argparse.Namespace) -> Any:
    project = client.projects.resolve(args.project)
    job = client.imports.show(project, args.job_id)
    return _follow_import(client, project, job, follow=args.follow, timeout=args.timeout)


_CHAIN_FILTERS = (
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


def _chains_list(client: Client, args: argparse.Namespace) -> Any:
    filters: dict[str, Any] = {name: getattr(args, name) for name in _CHAIN_FILTERS}
    filters.update(status=args.status or None, q=args.search, sort=args.sort, limit=args.limit)
    for name in _CHAIN_SWITCHES:
        if getattr(args, name):
            filters[name] = "true"
    # Any other filter the API takes, as it names it.
    filters.update(_settings(args.filter))
    if args.all:
        rows = list(client.chains.list(args.project, **filters))
    else:
        rows = client.chains.page(args.project, **filters)["results"]
    columns = ["id", "status", "step_count", "finished_count", "needed", "agreement"]
    return rows, [*columns, "prm_score", "problem"]


def _chains_show(client: Client, args: argparse.Namespace) -> Any:
    return client.chains.show(args.chain_id)


def _chains_labels(client: Client, args: argparse.Namespace) -> Any:
    return client.chains.labels(args.chain_id)


_SNAPSHOT_COLUMNS = ["id", "kind", "label", "created_at", "created_by", "content_hash"]


def _snapshots_list(client: Client, args: argparse.Namespace) -> Any:
    return client.snapshots.list(args.project, kind=args.kind), _SNAPSHOT_COLUMNS


def _snapshots_create(client: Client, args: argparse.Namespace) -> Any:
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


def _export(client: Client, args: argparse.Namespace) -> Any:
    progress = _Progress(sys.stderr)

    def received(size: int) -> None:
        # A line per megabyte at most: a large export stays a short log.
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


def _follow_run(
    client: Client, kind: str, run: JSON, follow: bool, timeout: float | None = None
) -> JSON:
    runs = {
        "training run": client.training_runs,
        "scoring run": client.scoring_runs,
        "simulation run": client.simulation_runs,
        "machine-label run": client.machine_label_runs,
    }[kind]
    progress = _Progress(sys.stderr)
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


def _train(client: Client, args: argparse.Namespace) -> Any:
    run = client.training_runs.start(args.project, **_settings(args.set))
    return _follow_run(client, "training run", run, args.follow, args.timeout)


def _score(client: Client, args: argparse.Namespace) -> Any:
    run = client.scoring_runs.start(
        args.project,
        strategy=args.strategy,
        random_fraction=args.random_fraction,
        model_version=args.model_version,
    )
    return _follow_run(client, "scoring run", run, args.follow, args.timeout)


def _simulate(client: Client, args: argparse.Namespace) -> Any:
    run = client.simulation_runs.start(
        args.project, size=args.size, seeds=args.seeds, rounds=args.rounds
    )
    return _follow_run(client, "simulation run", run, args.follow, args.timeout)


def _machine_label(client: Client, args: argparse.Namespace) -> Any:
    # The ids name problems for a sample run, chains for rollout and judge runs.
    ids = {("problems" if args.kind == "sample" else "chains"): args.ids} if args.ids else {}
    run = client.machine_label_runs.start(
        args.project,
        kind=args.kind,
        model=args.model,
        filter=args.filter,
        **ids,
        **_settings(args.set),
    )
    return _follow_run(client, "machine-label run", run, args.follow, args.timeout)


def _id_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected ids separated by commas, got {text!r}"
        ) from None


def _run_commands(kind: str, attribute: str) -> dict[str, Handler]:
    def runs(client: Client) -> Any:
        return getattr(client, attribute)

    return {
        "list": lambda client, args: (runs(client).list(args.project), _RUN_COLUMNS),
        "show": lambda client, args: _follow_run(
            client, kind, runs(client).show(args.run_id), args.follow, args.timeout
        ),
        "cancel": lambda client, args: runs(client).cancel(args.run_id),
        "retry": lambda client, args: runs(client).retry(args.run_id),
    }


def _versions_list(client: Client, args: argparse.Namespace) -> Any:
    rows = client.model_versions.list(args.project)
    columns = ["id", "version", "is_active", "snapshot_label", "zero_shot", "created_at"]
    return rows, [*columns, "against_rules.beaten"]


def _versions_activate(client: Client, args: argparse.Namespace) -> Any:
    return client.model_versions.activate(args.version_id)


def _training_settings(client: Client, args: argparse.Namespace) -> Any:
    settings = _settings(args.set)
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


def _webhook_changes(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "url": args.url_to,
        "events": args.event,
        "description": args.description,
        "active": args.active,
    }


def _webhooks_create(client: Client, args: argparse.Namespace) -> Any:
    changes = _webhook_changes(args)
    changes["url"] = args.target
    return client.webhooks.create(args.project, **changes)


def _webhooks_update(client: Client, args: argparse.Namespace) -> Any:
    return client.webhooks.update(
        args.project,
        args.webhook_id,
        rotate_secret=True if args.rotate_secret else None,
        **_webhook_changes(args),
    )


def _webhooks_delete(client: Client, args: argparse.Namespace) -> Any:
    client.webhooks.delete(args.project, args.webhook_id)
    return {"deleted": args.webhook_id}


_WEBHOOK_HANDLERS: dict[str, Handler] = {
    "list": lambda client, args: (client.webhooks.list(args.project), _WEBHOOK_COLUMNS),
    "show": lambda client, args: client.webhooks.show(args.project, args.webhook_id),
    "create": _webhooks_create,
    "update": _webhooks_update,
    "delete": _webhooks_delete,
    "test": lambda client, args: client.webhooks.test(args.project, args.webhook_id),
    "deliveries": lambda client, args: (
        client.webhooks.deliveries(args.project, args.webhook_id),
        _DELIVERY_COLUMNS,
    ),
    "replay": lambda client, args: client.webhooks.replay(
        args.project, args.webhook_id, args.delivery_id
    ),
}


# --- the parser --------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--url, --token and --json, accepted before or after the subcommand."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument("--url", default=default, help="the server (else STEPLAB_URL)")
    parser.add_argument("--token", default=default, help="an API token (else STEPLAB_TOKEN)")
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print the API's answer as JSON",
    )


class _Commands:
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.groups = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        self, name: str, handler: Handler, help: str, parent: Any = None
    ) -> argparse.ArgumentParser:
        where = parent if parent is not None else self.groups
        command: argparse.ArgumentParser = where.add_parser(name, help=help, description=help)
        _common(command, top=False)
        command.set_defaults(handler=handler)
        return command

    def group(self, name: str, help: str) -> Any:
        parser = self.groups.add_parser(name, help=help, description=help)
        return parser.add_subparsers(dest="action", required=True, metavar="ACTION")


def _project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project", help="a project's id or exact name")


def _set_option(parser: argparse.ArgumentParser, what: str, *, flag: str = "--set") -> None:
    parser.add_argument(
        flag,
        action="append",
        type=_setting,
        metavar="KEY=VALUE",
        help=f"{what} (repeat; VALUE read as JSON when it is JSON)",
    )


def _follow_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--follow", action="store_true", help="wait for the end, with progress")
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="stop following after this long (exit 1; the job goes on)",
    )


def _run_group(commands: _Commands, name: str, kind: str, attribute: str) -> None:
    group = commands.group(name, f"{kind}s: list, show (--follow), cancel, retry")
    handlers = _run_commands(kind, attribute)
    _project(commands.add("list", handlers["list"], f"the project's latest {kind}s", group))
    for action, help in (
        ("show", f"one {kind}"),
        ("cancel", f"cancel a {kind}"),
        ("retry", f"a new {kind} with the settings of a failed or cancelled one"),
    ):
        command = commands.add(action, handlers[action], help, group)
        command.add_argument("run_id", type=int)
        if action == "show":
            _follow_option(command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="steplab", description="Steplab's REST API from the command line."
    )
    parser.add_argument("--version", action="version", version=f"steplab-client {__version__}")
    _common(parser, top=True)
    commands = _Commands(parser)

    login = commands.add(
        "login", _login, f"make a token from a password, save it ({config_path()})"
    )
    login.add_argument("--username", required=True)
    login.add_argument("--password-stdin", action="store_true", help="read the password from stdin")

    tokens = commands.group("tokens", "your API tokens: list, create, revoke")
    commands.add("list", _tokens_list, "your tokens and their states", tokens)
    token = commands.add("create", _tokens_create, "a new token (its key shown once)", tokens)
    token.add_argument("name", help="what the token is for")
    token.add_argument("--scope", choices=("read", "full"), default="full")
    revoke_token = commands.add("revoke", _tokens_revoke, "revoke one of your tokens", tokens)
    revoke_token.add_argument("token_id", type=int)

    projects = commands.group("projects", "projects: list, show, create, settings")
    commands.add("list", _projects_list, "your projects, with progress", projects)
    _project(commands.add("show", _projects_show, "one project", projects))
    create = commands.add("create", _projects_create, "a new project (staff)", projects)
    create.add_argument("name")
    create.add_argument("--overlap", type=int, required=True, help="passes per chain")
    create.add_argument(
        "--labeling-mode", choices=("all_steps", "first_error"), default="all_steps"
    )
    create.add_argument("--guidelines-file", help="Markdown guidelines")
    _set_option(create, "another setting (consensus, gold_rate, step_split, ...)")
    settings = commands.add(
        "settings", _projects_settings, "show a project's settings, or change them", projects
    )
    _project(settings)
    _set_option(settings, "a setting to change (leads)")

    members = commands.group("members", "a project's members: list, add, role, remove")
    _project(commands.add("list", _members_list, "the project's members", members))
    add = commands.add("add", _members_add, "add an existing account", members)
    _project(add)
    add.add_argument("username")
    add.add_argument("--role", choices=ROLES, required=True)
    role = commands.add("role", _members_role, "change a member's role", members)
    _project(role)
    role.add_argument("user_id", type=int)
    role.add_argument("role", choices=ROLES)
    remove = commands.add("remove", _members_remove, "remove a member", members)
    _project(remove)
    remove.add_argument("user_id", type=int)

    invites = commands.group("invites", "invitations: list, create, bulk (a CSV file), revoke")
    _project(commands.add("list", _invites_list, "the open invitations", invites))
    invite = commands.add("create", _invites_create, "invite one person", invites)
    _project(invite)
    who = invite.add_mutually_exclusive_group(required=True)
    who.add_argument("--email")
    who.add_argument("--username")
    invite.add_argument("--role", choices=ROLES, required=True)
    invite.add_argument("--name")
    invite.add_argument("--days", type=int, help="how long the link works")
    bulk = commands.add(
        "bulk", _invites_bulk, "invite everyone in a list or CSV file, or nobody", invites
    )
    _project(bulk)
    bulk.add_argument("file", help="one person a line, or CSV with email/username/role/name")
    bulk.add_argument("--role", choices=ROLES, help="the role of a line that names none")
    bulk.add_argument("--days", type=int)
    revoke = commands.add("revoke", _invites_revoke, "revoke an invitation", invites)
    _project(revoke)
    revoke.add_argument("invite_id", type=int)

    upload = commands.add("import", _import, "upload a file of chains and follow its import")
    _project(upload)
    upload.add_argument("file")
    upload.add_argument("--format", choices=IMPORT_FORMATS, default="auto")
    upload.add_argument("--no-follow", action="store_true", help="print the queued job, return")
    upload.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="stop following after this long"
    )
    imports = commands.group("imports", "import jobs: show")
    job = commands.add("show", _imports_show, "one import job", imports)
    _project(job)
    job.add_argument("job_id", type=int)
    _follow_option(job)

    chains = commands.group("chains", "chains: list (filtered), show, labels")
    listing = commands.add("list", _chains_list, "the project's chains (leads)", chains)
    _project(listing)
    listing.add_argument("--status", action="append", help="repeat for several")
    listing.add_argument("--search", help="words in the problem or a step")
    listing.add_argument("--sort", help="a column, '-' first for descending")
    listing.add_argument("--limit", type=int, help="rows a page (the API's default 50)")
    listing.add_argument("--all", action="store_true", help="every page, not the first")
    listing.add_argument(
        "--machines-disagree",
        action="store_true",
        help="only chains on which two machine sources name different first errors",
    )
    listing.add_argument(
        "--machines-vs-people",
        action="store_true",
        help="only chains on which a machine source and a person's pass part ways",
    )
    _set_option(listing, "any other filter the API takes", flag="--filter")
    for name in _CHAIN_FILTERS:
        # annotator and reviewer are user ids; the rest are shares between 0 and 1.
        kind = int if name in ("annotator", "reviewer") else float
        listing.add_argument("--" + name.replace("_", "-"), type=kind, dest=name)
    for action, handler, help in (
        ("show", _chains_show, "one chain: steps, status, PRM scores"),
        ("labels", _chains_labels, "a chain's annotations side by side, and the consensus"),
    ):
        command = commands.add(action, handler, help, chains)
        command.add_argument("chain_id", type=int)

    snapshots = commands.group("snapshots", "dataset snapshots: list, create")
    snapshot_list = commands.add("list", _snapshots_list, "the project's snapshots", snapshots)
    _project(snapshot_list)
    snapshot_list.add_argument("--kind", choices=("dataset", "training"))
    freeze = commands.add("create", _snapshots_create, "freeze the consensus labels", snapshots)
    _project(freeze)
    freeze.add_argument("--heldout-fraction", type=float)
    freeze.add_argument("--seed", type=int)
    freeze.add_argument("--min-support", type=int)
    freeze.add_argument("--ties", choices=("drop", "lowest", "mark"))
    freeze.add_argument("--ambiguous")
    freeze.add_argument("--include-imported", action="store_true")
    freeze.add_argument(
        "--all-chains", action="store_true", help="every labeled chain, not finished ones only"
    )
    freeze.add_argument(
        "--machine-source",
        dest="machine_sources",
        action="append",
        choices=MACHINE_SOURCES,
        help="take this machine source's labels too (repeat, in order of preference)",
    )

    export = commands.add("export", _export, "download a snapshot's export, streamed to a file")
    _project(export)
    export.add_argument("--format", choices=EXPORT_FORMATS, required=True)
    export.add_argument("--out", help="a file or folder (default: the server's file name)")
    export.add_argument("--split", choices=SPLITS)
    export.add_argument("--snapshot", type=int, help="a version (default: the newest)")
    export.add_argument(
        "--kind",
        choices=("dataset", "training"),
        help="what --snapshot numbers: dataset (v<N>, the default) or training (t<N>)",
    )
    export.add_argument("--ambiguous", help="how ambiguous steps are mapped")
    export.add_argument(
        "--provenance",
        action="store_true",
        help="each record also names its steps' label source and the machines' labels",
    )
    export.add_argument(
        "--soft-labels",
        choices=("votes", "monte_carlo"),
        help="openrlhf: soft labels from the votes or the Monte-Carlo values",
    )

    train = commands.add("train", _train, "start a training run (ML staff)")
    _project(train)
    _set_option(train, "a training setting (backbone, head_epochs, ...)")
    _follow_option(train)
    _run_group(commands, "runs", "training run", "training_runs")

    score = commands.add("score", _score, "start a scoring run (ML staff)")
    _project(score)
    score.add_argument("--strategy")
    score.add_argument("--random-fraction", type=float)
    score.add_argument("--model-version", type=int, help="a version's id (default: the active)")
    _follow_option(score)
    _run_group(commands, "scoring", "scoring run", "scoring_runs")

    simulate = commands.add("simulate", _simulate, "start a simulation run (ML staff)")
    _project(simulate)
    simulate.add_argument("--size", choices=("quick", "full"), default="quick")
    simulate.add_argument("--seeds", type=int)
    simulate.add_argument("--rounds", type=int)
    _follow_option(simulate)
    _run_group(commands, "simulations", "simulation run", "simulation_runs")

    labeling = commands.add(
        "machine-label", _machine_label, "start a machine-label run: sample, rollout or judge"
    )
    _project(labeling)
    labeling.add_argument("--kind", choices=("sample", "rollout", "judge"), required=True)
    labeling.add_argument("--model", required=True, help="a causal LM under the backbone root")
    which = labeling.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--ids", type=_id_list, help="problem ids (sample) or chain ids, separated by commas"
    )
    which.add_argument("--filter", choices=("all", "without_chains", "without_labels"))
    _set_option(labeling, "another parameter (n, temperature, top_p, seed, mode, template...)")
    _follow_option(labeling)
    _run_group(commands, "machine-runs", "machine-label run", "machine_label_runs")

    versions = commands.group("versions", "model versions: list, activate")
    _project(commands.add("list", _versions_list, "the project's model versions", versions))
    activate = commands.add("activate", _versions_activate, "make a version active", versions)
    activate.add_argument("version_id", type=int)

    training = commands.add(
        "training-settings", _training_settings, "show or change a project's training settings"
    )
    _project(training)
    _set_option(training, "a setting to change")
    _webhook_group(commands)
    return parser


def _webhook_options(parser: argparse.ArgumentParser, *, create: bool) -> None:
    parser.add_argument(
        "--event",
        action="append",
        choices=WEBHOOK_EVENTS,
        required=create,
        help="an event to send (repeat for several)" + ("" if create else "; replaces the list"),
    )
    parser.add_argument("--description")
    active = parser.add_mutually_exclusive_group()
    active.add_argument("--active", dest="active", action="store_const", const=True)
    active.add_argument(
        "--paused", dest="active", action="store_const", const=False, help="send nothing"
    )


def _webhook_group(commands: _Commands) -> None:
    group = commands.group(
        "webhooks",
        "a project's webhooks (leads): list, show, create, update, delete, test, "
        "deliveries, replay",
    )
    handlers = _WEBHOOK_HANDLERS
    _project(commands.add("list", handlers["list"], "the project's webhooks", group))
    create = commands.add("create", handlers["create"], "a new webhook (its secret shown)", group)
    _project(create)
    create.add_argument("target", metavar="URL", help="where messages are posted")
    create.set_defaults(url_to=None)
    _webhook_options(create, create=True)
    update = commands.add("update", handlers["update"], "change, pause or rotate a webhook", group)
    for action, help in (
        ("show", "one webhook, with its secret"),
        ("delete", "delete a webhook and its delivery log"),
        ("test", "send a webhook.test message (a worker sends it)"),
        ("deliveries", "a webhook's delivery log, newest first"),
        ("replay", "send a delivery's message again"),
    ):
        command = commands.add(action, handlers[action], help, group)
        _project(command)
        command.add_argument("webhook_id", type=int)
        if action == "replay":
            command.add_argument("delivery_id", type=int)
    _project(update)
    update.add_argument("webhook_id", type=int)
    update.add_argument("--to", dest="url_to", metavar="URL", help="a new URL")
    update.add_argument(
        "--rotate-secret", action="store_true", help="a new secret; the old one stops verifying"
    )
    _webhook_options(update, create=False)


def _login(client: Client | None, args: argparse.Namespace) -> Any:
    url = args.url or os.environ.get(URL_VARIABLE)
    if not url:
        raise ConfigError(
            f"steplab login needs --url or {URL_VARIABLE} (the server to sign in to)."
        )
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"Password for {args.username}: ")
    token = token_create(url=url, username=args.username, password=password)
    path = config_write(url=url, token=token)
    return {"url": url, "username": args.username, "config": str(path)}


def _print(result: Any, *, as_json: bool, out: TextIO) -> None:
    if isinstance(result, tuple):
        rows, columns = result
        if as_json:
            out.write(json.dumps(rows, indent=2) + "\n")
        else:
            out.write(_table(rows, columns) + "\n")
        return
    if as_json:
        out.write(json.dumps(result, indent=2) + "\n")
    elif isinstance(result, dict):
        out.write(_fields(result) + "\n")
    else:
        out.write(f"{result}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status (0, 1 for an API error or a failed job, 2 for
    bad usage or configuration)."""
    args = build_parser().parse_args(argv)
    handler: Callable[[Any, argparse.Namespace], Any] = args.handler
    try:
        if handler is _login:
            result = _login(None, args)
        else:
            with Client(args.url, args.token) as client:
                result = handler(client, args)
        _print(result, as_json=args.json, out=sys.stdout)
    except ConfigError as exc:
        sys.stderr.write(f"steplab: {exc}\n")
        return 2
    except JobFailed as exc:
        if args.json:
            _print(exc.job, as_json=True, out=sys.stdout)
        sys.stderr.write(f"steplab: {exc}\n")
        return 1
    except ApiError as exc:
        sys.stderr.write(f"steplab: {exc}\n")
        return 1
    except (SteplabError, OSError) as exc:
        sys.stderr.write(f"steplab: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
