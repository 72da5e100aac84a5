"""A log handler left on a test's closed stderr capture must not spill "--- Logging error ---"
into the next test's stderr (``conftest.logging_streams_open``). The two tests run in
file order: the first leaves such a handler, the second logs through it."""

from __future__ import annotations

import io
import logging

import pytest

LOGGER = "steplab.tests.logging_streams"


def test_a_test_leaves_a_handler_on_a_stream_it_closes() -> None:
    # A text file over bytes, as pytest's own capture is: flushing it once closed raises.
    stream = io.TextIOWrapper(io.BytesIO())
    logging.getLogger(LOGGER).addHandler(logging.StreamHandler(stream))
    stream.close()


def test_the_next_test_logs_through_it_without_a_logging_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger = logging.getLogger(LOGGER)
    try:
        logger.error("a record")
        assert "Logging error" not in capsys.readouterr().err
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
