"""The broker of the embedded default (`config/broker.py`, kombu's filesystem transport
with atomic writes and takes): several processes sending and several taking from one
queue at once, every message arrives whole, exactly once. No Redis, no database."""

from __future__ import annotations

import multiprocessing
import queue
from pathlib import Path
from typing import Any

from kombu import Connection, Consumer, Producer, Queue

from config.broker import TRANSPORT, folder_options

SENDERS = 3
TAKERS = 3
PER_SENDER = 200
BODY = "x" * 20_000  # larger than one write of a pipe, so a half-written file can be seen


def _connection(root: Path) -> Connection:
    options = {**folder_options(root), "polling_interval": 0.01}
    return Connection("filesystem://", transport=TRANSPORT, transport_options=options)


def _send(root: Path, sender: int) -> None:
    with _connection(root) as connection:
        producer = Producer(connection.default_channel)
        for index in range(PER_SENDER):
            producer.publish(
                {"id": f"{sender}-{index}", "body": BODY},
                routing_key="work",
                declare=[Queue("work", routing_key="work")],
            )


def _take(root: Path, seen: Any, stop: Any) -> None:
    def got(body: dict[str, Any], message: Any) -> None:
        assert body["body"] == BODY
        seen.put(body["id"])
        message.ack()

    with _connection(root) as connection:
        with Consumer(connection, [Queue("work", routing_key="work")], callbacks=[got]):
            while not stop.is_set():
                try:
                    connection.drain_events(timeout=0.1)
                except TimeoutError:
                    continue


def test_messages_from_several_processes_arrive_whole_and_exactly_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    seen = context.Queue()
    stop = context.Event()
    takers = [context.Process(target=_take, args=(tmp_path, seen, stop)) for _ in range(TAKERS)]
    senders = [context.Process(target=_send, args=(tmp_path, n)) for n in range(SENDERS)]
    for process in [*takers, *senders]:
        process.start()
    received: list[str] = []
    try:
        for process in senders:
            process.join(timeout=120)
            assert process.exitcode == 0
        while len(received) < SENDERS * PER_SENDER:
            try:
                received.append(seen.get(timeout=30))
            except queue.Empty:
                break
    finally:
        stop.set()
        for process in takers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    assert all(process.exitcode == 0 for process in takers), [p.exitcode for p in takers]
    expected = {f"{sender}-{index}" for sender in range(SENDERS) for index in range(PER_SENDER)}
    assert sorted(received) == sorted(expected)
    # Nothing left behind: no message, no half-written or taken file.
    assert not any((tmp_path / "messages").iterdir())
    assert not any((tmp_path / "taken").iterdir())
