"""Chains: the data manager, a lead's view of every chain and what they do to it.

- ``selectors`` (filter, search, sort, page by keyset: ``order``; one chain with its
  leases, skips and flag) and ``scores`` (the PRM's scores, through a hook the training
  app registers).
- ``services`` (requeue, reviewer, flags), ``bulk_actions`` (one action on thousands of
  chains, as a job on a worker) and ``changes`` (what every action records in a chain's
  history).
- ``events``: the hook other apps register to hear of finished chains.
- ``api/`` (``chains``, ``bulk``) the HTTP doors, ``urls`` their routes.
"""
