"""Following a run outlives a database outage: while the server's database is
unreachable it answers 503 with Retry-After (config/errors.py), and the client asks
again instead of giving up, then sees the run end. The outage is real: the live server's
new connections point at a closed local port, so psycopg fails to connect."""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

import pytest
from django.db import connection, connections

from annotation.models import Membership, Project, Role
from prm_training.models import SimulationRun
from prm_training.services.simulation import simulation_run_cancel, simulation_run_start
from tests.client.conftest import Steplab
from tests.factories import UserFactory, api_token_key

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


class _Unavailable(logging.Handler):
    """Sets ``seen`` once the server has answered a 503."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "status_code", None) == 503:
            self.seen.set()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_following_a_run_waits_out_a_database_outage(
    steplab: Steplab, no_worker: None, live_server: Any
) -> None:
    # Given: a queued simulation run (no worker takes it) and its ML staff's token
    project = Project.objects.create(name="Sums", overlap=1)
    user = UserFactory(username="mia")
    Membership.objects.create(project=project, user=user, role=Role.ML)
    token = api_token_key(user)
    run = simulation_run_start(project=project, user=user, size="quick")
    connection.close()  # this thread reconnects only after the outage

    # ...and the server's database gone: every new connection (each request's thread
    # opens one) goes to a port nobody listens on
    database = connections.settings["default"]
    saved_port = database.get("PORT")
    database["PORT"] = str(_closed_port())
    watch = _Unavailable()
    logging.getLogger("django.request").addHandler(watch)

    def database_back_then_cancel() -> None:
        """Once the client has been answered 503: the database back, the run cancelled."""
        try:
            if watch.seen.wait(timeout=120):
                database["PORT"] = saved_port
                simulation_run_cancel(run=SimulationRun.objects.get(pk=run.pk))
        finally:
            database["PORT"] = saved_port
            connection.close()

    restorer = threading.Thread(target=database_back_then_cancel)
    restorer.start()
    try:
        # When: the run is followed through the outage
        followed = steplab(token, "simulations", "show", str(run.pk), "--follow")
    finally:
        restorer.join(timeout=180)
        logging.getLogger("django.request").removeHandler(watch)
        database["PORT"] = saved_port

    # Then: the server did answer 503, and the client waited it out to the run's end
    assert watch.seen.is_set()
    assert f"simulation run {run.pk} cancelled" in followed.err, followed.err
    assert "HTTP 503" not in followed.err
    assert followed.code == 1  # a followed run that did not succeed
