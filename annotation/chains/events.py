"""What other apps want done when a chain is finished, without this app knowing them.

The annotation app sits below the training app: it never imports ``prm_training``. An app
that reacts to finished chains registers a hook in its ``AppConfig.ready()``
(``prm_training`` registers the auto-retraining check); the submit path calls
``chain_finished_notify`` after a new annotation finishes a chain. Not a Django signal:
the one call site is explicit, the hooks run in order, in the request, and must be cheap
(the training hook only queues a message on commit).
"""

from __future__ import annotations

from collections.abc import Callable

ChainFinishedHook = Callable[..., None]  # called as hook(project_id=...)

_HOOKS: list[ChainFinishedHook] = []


def chain_finished_register(hook: ChainFinishedHook) -> None:
    """Adds ``hook`` once (``ready()`` may run more than once in tests)."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def chain_finished_notify(*, project_id: int) -> None:
    """Calls every registered hook for a chain of ``project_id`` that was just finished."""
    for hook in _HOOKS:
        hook(project_id=project_id)
