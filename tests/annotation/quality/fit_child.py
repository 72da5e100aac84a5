"""One process of `test_consensus_fit_shared.py`: `python -m tests.annotation.quality.fit_child
PROJECT_ID START_AT`. It sets Django up, waits until the wall-clock time START_AT (so
its siblings ask at the same moment), asks for the project's Dawid-Skene fit and prints
one JSON line: when it asked and got the fit, the fit's vote count, and how many fits
this process ran, counted from the fit log line ``dawid_skene_fit`` writes after each."""

from __future__ import annotations

import json
import logging
import os
import sys
import time


class _FitLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.fits = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Dawid-Skene fit of project"):
            self.fits += 1


def main() -> None:
    project_id, start_at = int(sys.argv[1]), float(sys.argv[2])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    from annotation.models import Project
    from annotation.quality.consensus_fit import dawid_skene_fit

    fit_log = _FitLog()
    consensus_logger = logging.getLogger("annotation.quality.consensus_fit")
    consensus_logger.addHandler(fit_log)
    consensus_logger.setLevel(logging.INFO)
    project = Project.objects.get(pk=project_id)
    time.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    fit = dawid_skene_fit(project=project)
    ended = time.time()
    print(json.dumps({"began": began, "ended": ended, "votes": fit.votes, "fits": fit_log.fits}))


if __name__ == "__main__":
    main()
