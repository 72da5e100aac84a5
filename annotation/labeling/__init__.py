"""Labeling: an annotator takes a chain, rates its steps and hands it in.

- ``queue/``: the hot path, in hand-written SQL (claim, leases, submit, access,
  priorities, closed_leases, prelabels, rows, errors, sql; its docstring has the
  locking protocol).
- ``workspace`` (submit and take the next, flags) and ``workspace_reads``;
  ``history`` (an annotator's own submitted chains) and ``revisions`` (changing a
  submitted label: a new revision, never an overwrite).
- ``api/``: ``assignments`` (the queue's token door: next, prefetch, submit, renew,
  skip), ``workspace``, ``history``; ``urls`` their routes.
"""
