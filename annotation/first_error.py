"""A chain's first error read from its step labels (-1 wrong, 0 unsure, 1 right, None for
a step left unlabeled): the index of the first -1, -1 where the chain has none, None where
the labels do not say. Every Python reader in the app reads it here; they differ only in
what a step left unlabeled means, and that is the caller's ``reading``:

- ``"reference"``: labels meant to cover every step (people's consensus, an export's
  labels). A step left unlabeled before the first -1 could be the error, so the first
  error is unknown. Machine quality's references, routing's spot checks, the review
  page's consensus and the ProcessBench export read this way; so does
  ``prm_training.ml.readout.labeled_first_error``, which cannot import this module (the
  ML core imports nothing of the app).
- ``"stated"``: what a labeler said so far. Its unlabeled steps say nothing (a judge
  labels nothing after the step it names, a person in first_error mode stops at the
  error): any labeled step and no -1 reads as no error, None only where it labeled
  nothing. The review page's machine columns, the data manager's first errors, an
  annotator's reopened pass in their history and the gold first-error match read this
  way, as the data manager's filters do in SQL
  (``routing.machine_labels.machines_disagree``).
- ``"settled"``: a source's verdict that routing may act on. A source that stopped before
  the last step (a cancelled run, an undecided first-error search) has not said the rest
  is right, so no error only once the last step is labeled; and a -1 names the first
  error only where the step before it is labeled (or it is the first step): a first-error
  search that stopped after a -1 probe with steps unprobed just before it has bounded the
  error, not found it (a Monte-Carlo -1 at step q says only that the error is at q or
  earlier). Routing's votes, the export's machine-agreed labels and machine quality's
  first-error accuracy read this way: a chain routed past people needs a verdict on
  every step it sends, and the figure that tells a lead how often a source places the
  first error right should count the verdicts routing acts on.

>>> first_error([1, None, -1], reading="reference")
>>> first_error([1, None, -1], reading="stated"), first_error([1, 1, None], reading="stated")
(2, -1)
>>> first_error([1, 1, None], reading="settled"), first_error([1, 1, 1], reading="settled")
(None, -1)
>>> first_error([1, None, -1], reading="settled"), first_error([None, 1, -1], reading="settled")
(None, 2)
>>> first_error([None, None], reading="stated"), first_error([], reading="reference")
(None, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Reading = Literal["reference", "stated", "settled"]


def first_error(labels: Sequence[int | None], *, reading: Reading) -> int | None:
    """The first -1's index, -1 for none, None where ``labels`` do not say as ``reading``
    reads them (module docstring)."""
    for index, label in enumerate(labels):
        if label == -1:
            if reading == "settled" and index and labels[index - 1] is None:
                return None  # a search's bound, not its answer (module docstring)
            return index
        if label is None and reading == "reference":
            return None
    if reading == "stated":
        return -1 if any(label is not None for label in labels) else None
    # "reference" got here with every step labeled; "settled" needs the last one.
    return -1 if labels and labels[-1] is not None else None
