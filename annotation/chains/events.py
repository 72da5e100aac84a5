"""What other apps want done when a chain is finished, or when a held-out chain's labels
change, without this app knowing them.

The annotation app sits below the training app: it never imports ``prm_training``. An app
that reacts to finished chains registers a hook in its ``AppConfig.ready()``
(``prm_training`` registers the auto-retraining check); the submit path calls
``chain_finished_notify`` after a new annotation finishes a chain, and after a pass over
a gold chain shaped as one (``labeling.queue.submit``: gold must cost and send what real
work does), so a hook is a check that finds out for itself what changed. Not a Django
signal: the one call site is explicit, the hooks run in order, in the request, and must be
cheap (the training hook only queues a message on commit).
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
    """Calls every registered hook for a chain of ``project_id`` that was just finished (or
    a gold pass shaped as the one that finishes its chain)."""
    for hook in _HOOKS:
        hook(project_id=project_id)


# Called as hook(project_id=, evaluation_set_ids=) for a chain of an evaluation set whose
# labels changed.
ChainLabelsHook = Callable[..., object]

_LABEL_HOOKS: list[ChainLabelsHook] = []


def chain_labels_changed_register(hook: ChainLabelsHook) -> None:
    """Adds ``hook`` once; it hears of labels changed on a held-out chain (the training
    app re-measures its versions on the chain's evaluation set with the new labels)."""
    if hook not in _LABEL_HOOKS:
        _LABEL_HOOKS.append(hook)


def chain_labels_changed_notify(*, chain_id: int) -> None:
    """Called in the transaction that gave ``chain_id`` new labels (a lead's ruling, an
    annotator's revision). Only an evaluation set's figures rest on one chain's labels,
    so the hooks hear of held-out chains only; one indexed read tells (set chains are
    never leased, so this is rare)."""
    from annotation.models import Chain

    if not _LABEL_HOOKS:
        return
    held = (
        Chain.objects.filter(pk=chain_id, evaluation_set__isnull=False)
        .values_list("project_id", "evaluation_set_id")
        .first()
    )
    if held is None:
        return
    project_id, set_id = held
    for hook in _LABEL_HOOKS:
        hook(project_id=project_id, evaluation_set_ids=[set_id])
