"""The broker that needs no server: kombu's filesystem transport, for `make demo` and any
single host run without ``CELERY_BROKER_URL``. A message is a file in one folder that the
web process writes and the workers read; several processes share it safely.

Two changes to kombu's channel, both about files seen half-way:

* kombu writes a message into its final ``*.msg`` name, so a worker polling the folder at
  that moment can take an empty or half-written file and fail to decode it (the task is
  lost). Here a message is written under a name no reader matches, then renamed into
  place: a reader sees all of it or nothing.
* kombu moves a message it takes to the system's temporary folder, often another file
  system, where the move is a copy then a delete that two readers can both win. Here it
  is renamed inside the broker folder (one atomic step, one winner).

What the file broker does not do: redeliver a message whose worker was killed after
taking it (Redis does, after its visibility timeout). Nothing depends on that: a run
whose worker dies is reaped by its heartbeat (``prm_training.services.runs``) and retried
by hand, an import job by its age (``annotation.datasets.import_jobs``)."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

TRANSPORT = "config.broker:Transport"
MESSAGE_SUFFIX = ".msg"


class Channel(filesystem.Channel):
    # kombu's two base classes name the message differently (payload, message).
    def _put(self, queue: Any, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{int(filesystem.monotonic() * 1000)}_{uuid.uuid4()}.{queue}{MESSAGE_SUFFIX}"
        final = Path(self.data_folder_out) / name
        partial = final.with_name(f".{name}.partial")
        try:
            partial.write_bytes(str_to_bytes(dumps(message)))
            os.replace(partial, final)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise ChannelError(f"Cannot add {final} to the broker folder") from exc

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        wanted = f"{queue}{MESSAGE_SUFFIX}"
        folder = Path(self.data_folder_in)
        taken = Path(self.processed_folder)
        for name in sorted(os.listdir(folder)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            mine = taken / name
            try:
                os.rename(folder / name, mine)
            except OSError:  # another reader took it first
                continue
            try:
                payload = mine.read_bytes()
            except OSError as exc:
                raise ChannelError(f"Cannot read {mine}") from exc
            finally:
                mine.unlink(missing_ok=True)
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel


def folder_options(root: Path) -> dict[str, Any]:
    """The transport options of a file broker in ``root`` (created here): one folder of
    messages for every queue, one for messages being taken, one for exchange tables."""
    messages, taken, control = root / "messages", root / "taken", root / "control"
    for folder in (messages, taken, control):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(messages),
        "data_folder_out": str(messages),
        "processed_folder": str(taken),
        "control_folder": str(control),
        # A worker looks for new messages this often (seconds): a run starts within it.
        "polling_interval": 0.5,
    }


def default_folder(base: Path, database: Mapping[str, Any]) -> Path:
    """``base/var/broker/<database>``: a folder per database, because a message names
    rows by id, and a worker of another database (the demo on SQLite, then on
    PostgreSQL) would run whatever row has that id there."""
    where = "|".join(str(database.get(key) or "") for key in ("ENGINE", "HOST", "PORT", "NAME"))
    return base / "var" / "broker" / hashlib.sha256(where.encode()).hexdigest()[:16]
