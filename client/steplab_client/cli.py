"""``steplab``: the command line over ``Client``, one subcommand per call
(``steplab projects list``, ``steplab import PROJECT FILE``, ``steplab export PROJECT
--format trl --out x.jsonl``, ``steplab train PROJECT --follow``...). ``--json`` prints
the API's answer as JSON; otherwise a short table or line. Progress goes to stderr, so
stdout stays the answer. An error prints the server's status and message, never a
traceback: exit 1 for an API error or a failed job, 2 for bad usage or configuration."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from steplab_client.cli_output import print_result
from steplab_client.cli_parser import build_parser, login
from steplab_client.client import Client
from steplab_client.config import TOKEN_WARNING
from steplab_client.errors import ApiError, ConfigError, JobFailed, SteplabError


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status (0, 1 for an API error or a failed job, 2 for
    bad usage or configuration)."""
    args = build_parser().parse_args(argv)
    handler: Callable[[Any, argparse.Namespace], Any] = args.handler
    try:
        if handler is login:
            result = login(None, args)
        else:
            if args.token:
                sys.stderr.write(f"steplab: warning: {TOKEN_WARNING}\n")
            with Client(args.url, args.token, token_file=args.token_file) as client:
                result = handler(client, args)
        print_result(result, as_json=args.json, out=sys.stdout)
    except ConfigError as exc:
        sys.stderr.write(f"steplab: {exc}\n")
        return 2
    except JobFailed as exc:
        if args.json:
            print_result(exc.job, as_json=True, out=sys.stdout)
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
