"""The ``steplab`` command line's grammar: every subcommand, its options and the handler
it calls (``cli_commands``), and the login command, the one that needs no token yet.
``cli.main`` parses with it and runs the handler."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from steplab_client import __version__
from steplab_client.cli_commands import (
    CHAIN_FILTERS,
    WEBHOOK_HANDLERS,
    Handler,
    chains_labels,
    chains_list,
    chains_show,
    evaluate_start,
    export_snapshot,
    id_list,
    import_file,
    imports_show,
    invites_bulk,
    invites_create,
    invites_list,
    invites_revoke,
    machine_label_start,
    members_add,
    members_list,
    members_remove,
    members_role,
    projects_create,
    projects_list,
    projects_settings,
    projects_show,
    run_commands,
    score_start,
    setting,
    simulate_start,
    snapshots_create,
    snapshots_list,
    tokens_create,
    tokens_list,
    tokens_revoke,
    train_start,
    training_settings,
    versions_activate,
    versions_list,
)
from steplab_client.client import Client, token_create
from steplab_client.config import (
    TOKEN_FILE_HELP,
    TOKEN_HELP,
    URL_VARIABLE,
    config_path,
    config_write,
)
from steplab_client.errors import ConfigError

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


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--url, --token, --token-file and --json, accepted before or after the subcommand."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument("--url", default=default, help="the server (else STEPLAB_URL)")
    parser.add_argument("--token", default=default, help=TOKEN_HELP)
    parser.add_argument("--token-file", default=default, metavar="PATH", help=TOKEN_FILE_HELP)
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
        type=setting,
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


def _run_group(
    commands: _Commands, name: str, kind: str, attribute: str, *, retry: bool = True
) -> None:
    group = commands.group(
        name, f"{kind}s: list, show (--follow), cancel" + (", retry" if retry else "")
    )
    handlers = run_commands(kind, attribute)
    _project(commands.add("list", handlers["list"], f"the project's latest {kind}s", group))
    actions = [("show", f"one {kind}"), ("cancel", f"cancel a {kind}")]
    if retry:
        actions.append(("retry", f"a new {kind} with the settings of a failed or cancelled one"))
    for action, help in actions:
        command = commands.add(action, handlers[action], help, group)
        command.add_argument("run_id", type=int)
        if action == "show":
            _follow_option(command)


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: a subcommand's option (webhooks update --to) must never be read
    # as a prefix of a global one (--token, --token-file).
    parser = argparse.ArgumentParser(
        prog="steplab", description="Steplab's REST API from the command line.", allow_abbrev=False
    )
    parser.add_argument("--version", action="version", version=f"steplab-client {__version__}")
    _common(parser, top=True)
    commands = _Commands(parser)

    _account_commands(commands)
    _project_commands(commands)
    _data_commands(commands)
    _export_command(commands)
    _model_commands(commands)
    _webhook_group(commands)
    return parser


def _account_commands(commands: _Commands) -> None:
    """The commands for login and your API tokens."""
    login_command = commands.add(
        "login", login, f"make a token from a password, save it ({config_path()})"
    )
    login_command.add_argument("--username", required=True)
    login_command.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin"
    )

    tokens = commands.group("tokens", "your API tokens: list, create, revoke")
    commands.add("list", tokens_list, "your tokens and their states", tokens)
    token = commands.add("create", tokens_create, "a new token (its key shown once)", tokens)
    token.add_argument("name", help="what the token is for")
    token.add_argument("--scope", choices=("read", "full"), default="full")
    revoke_token = commands.add("revoke", tokens_revoke, "revoke one of your tokens", tokens)
    revoke_token.add_argument("token_id", type=int)


def _project_commands(commands: _Commands) -> None:
    """The commands for projects, their members and invitations."""
    projects = commands.group("projects", "projects: list, show, create, settings")
    commands.add("list", projects_list, "your projects, with progress", projects)
    _project(commands.add("show", projects_show, "one project", projects))
    create = commands.add("create", projects_create, "a new project (staff)", projects)
    create.add_argument("name")
    create.add_argument("--overlap", type=int, required=True, help="passes per chain")
    create.add_argument(
        "--labeling-mode", choices=("all_steps", "first_error"), default="all_steps"
    )
    create.add_argument("--guidelines-file", help="Markdown guidelines")
    _set_option(create, "another setting (consensus, gold_rate, step_split, ...)")
    settings = commands.add(
        "settings", projects_settings, "show a project's settings, or change them", projects
    )
    _project(settings)
    _set_option(settings, "a setting to change (leads)")

    members = commands.group("members", "a project's members: list, add, role, remove")
    _project(commands.add("list", members_list, "the project's members", members))
    add = commands.add("add", members_add, "add an existing account", members)
    _project(add)
    add.add_argument("username")
    add.add_argument("--role", choices=ROLES, required=True)
    role = commands.add("role", members_role, "change a member's role", members)
    _project(role)
    role.add_argument("user_id", type=int)
    role.add_argument("role", choices=ROLES)
    remove = commands.add("remove", members_remove, "remove a member", members)
    _project(remove)
    remove.add_argument("user_id", type=int)

    invites = commands.group("invites", "invitations: list, create, bulk (a CSV file), revoke")
    _project(commands.add("list", invites_list, "the open invitations", invites))
    invite = commands.add("create", invites_create, "invite one person", invites)
    _project(invite)
    who = invite.add_mutually_exclusive_group(required=True)
    who.add_argument("--email")
    who.add_argument("--username")
    invite.add_argument("--role", choices=ROLES, required=True)
    invite.add_argument("--name")
    invite.add_argument("--days", type=int, help="how long the link works")
    bulk = commands.add(
        "bulk", invites_bulk, "invite everyone in a list or CSV file, or nobody", invites
    )
    _project(bulk)
    bulk.add_argument("file", help="one person a line, or CSV with email/username/role/name")
    bulk.add_argument("--role", choices=ROLES, help="the role of a line that names none")
    bulk.add_argument("--days", type=int)
    revoke = commands.add("revoke", invites_revoke, "revoke an invitation", invites)
    _project(revoke)
    revoke.add_argument("invite_id", type=int)


def _data_commands(commands: _Commands) -> None:
    """The commands for imports, chains and snapshots."""
    upload = commands.add("import", import_file, "upload a file of chains and follow its import")
    _project(upload)
    upload.add_argument("file")
    upload.add_argument("--format", choices=IMPORT_FORMATS, default="auto")
    upload.add_argument("--no-follow", action="store_true", help="print the queued job, return")
    upload.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="stop following after this long"
    )
    imports = commands.group("imports", "import jobs: show")
    job = commands.add("show", imports_show, "one import job", imports)
    _project(job)
    job.add_argument("job_id", type=int)
    _follow_option(job)

    chains = commands.group("chains", "chains: list (filtered), show, labels")
    listing = commands.add("list", chains_list, "the project's chains (leads)", chains)
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
    for name in CHAIN_FILTERS:
        # annotator and reviewer are user ids; the rest are shares between 0 and 1.
        kind = int if name in ("annotator", "reviewer") else float
        listing.add_argument("--" + name.replace("_", "-"), type=kind, dest=name)
    for action, handler, help in (
        ("show", chains_show, "one chain: steps, status, PRM scores"),
        ("labels", chains_labels, "a chain's annotations side by side, and the consensus"),
    ):
        command = commands.add(action, handler, help, chains)
        command.add_argument("chain_id", type=int)

    snapshots = commands.group("snapshots", "dataset snapshots: list, create")
    snapshot_list = commands.add("list", snapshots_list, "the project's snapshots", snapshots)
    _project(snapshot_list)
    snapshot_list.add_argument("--kind", choices=("dataset", "training"))
    freeze = commands.add("create", snapshots_create, "freeze the consensus labels", snapshots)
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


def _export_command(commands: _Commands) -> None:
    """The commands for a snapshot's export."""
    export = commands.add(
        "export", export_snapshot, "download a snapshot's export, streamed to a file"
    )
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


def _model_commands(commands: _Commands) -> None:
    """The commands for training, the runs of every kind, model versions and settings."""
    train = commands.add("train", train_start, "start a training run (ML staff)")
    _project(train)
    _set_option(train, "a training setting (backbone, head_epochs, ...)")
    _follow_option(train)
    _run_group(commands, "runs", "training run", "training_runs")

    score = commands.add("score", score_start, "start a scoring run (ML staff)")
    _project(score)
    score.add_argument("--strategy")
    score.add_argument("--random-fraction", type=float)
    score.add_argument("--model-version", type=int, help="a version's id (default: the active)")
    _follow_option(score)
    _run_group(commands, "scoring", "scoring run", "scoring_runs")

    simulate = commands.add("simulate", simulate_start, "start a simulation run (ML staff)")
    _project(simulate)
    simulate.add_argument("--size", choices=("quick", "full"), default="quick")
    simulate.add_argument("--seeds", type=int)
    simulate.add_argument("--rounds", type=int)
    _follow_option(simulate)
    _run_group(commands, "simulations", "simulation run", "simulation_runs")

    labeling = commands.add(
        "machine-label", machine_label_start, "start a machine-label run: sample, rollout or judge"
    )
    _project(labeling)
    labeling.add_argument("--kind", choices=("sample", "rollout", "judge"), required=True)
    labeling.add_argument("--model", required=True, help="a causal LM under the backbone root")
    which = labeling.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--ids", type=id_list, help="problem ids (sample) or chain ids, separated by commas"
    )
    which.add_argument("--filter", choices=("all", "without_chains", "without_labels"))
    _set_option(labeling, "another parameter (n, temperature, top_p, seed, mode, template...)")
    _follow_option(labeling)
    _run_group(commands, "machine-runs", "machine-label run", "machine_label_runs")

    evaluate = commands.add(
        "evaluate",
        evaluate_start,
        "score every model version on the evaluation sets it lacks figures on (ML staff)",
    )
    _project(evaluate)
    _follow_option(evaluate)
    _run_group(commands, "evaluations", "evaluation run", "evaluation_runs", retry=False)

    versions = commands.group("versions", "model versions: list, activate")
    _project(commands.add("list", versions_list, "the project's model versions", versions))
    activate = commands.add("activate", versions_activate, "make a version active", versions)
    activate.add_argument("version_id", type=int)

    training = commands.add(
        "training-settings", training_settings, "show or change a project's training settings"
    )
    _project(training)
    _set_option(training, "a setting to change")


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
    handlers = WEBHOOK_HANDLERS
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


def login(client: Client | None, args: argparse.Namespace) -> Any:
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
