"""The labeling queue: lease a chain, renew the lease, skip it, submit its ratings.

- ``claim``: ``next`` and ``prefetch``; ``leases``: the caller's own lease (renew, skip,
  the lock every lease change takes); ``submit``: the ratings; ``access``: who may label
  (a token's user, the project); ``priorities``: the order the claim walks, written by
  scoring runs; ``closed_leases``: the hint the claim walks by;
  ``errors``: what the queue refuses with; ``sql``: every statement it runs; ``rows``:
  models from plain rows.
- What it answers with: ``lease_next`` and ``lease_prefetch`` a ``Lease`` (the assignment
  and what it shows of its chain, read in the same trip as a new lease on PostgreSQL),
  ``assignment_submit`` a ``Submitted`` (the annotation, whether this call created it,
  its ratings in step order): the API's answers are built from these, with no query.
- Why plain SQL here and the ORM everywhere else: ``next`` and ``submit`` are what every
  annotator waits on, many times a minute, and building their querysets cost more than
  running them (BENCHMARKS.md, "Foundation"). So the queue writes its statements by hand,
  one round trip where it can, and reads rows into model instances itself (``rows``);
  every other room of the app (pages, review, exports, training) uses the ORM.

Invariant 2 (a chain is never leased to more annotators than its overlap allows, counting
finished annotations, and never twice to the same annotator) and invariant 1 (no label is
lost or overwritten) live here. Every function is one transaction.

Locking protocol, which every writer of a chain's places follows:

* A chain's places are ``finished_count`` plus its live leases (ACTIVE, unexpired).
  Whoever takes a place (claim, renewing or submitting an expired lease) or fills one
  (submit) holds that chain's row lock (``SELECT ... FOR NO KEY UPDATE``) until commit,
  and decides only on rows read by a statement that started *after* the lock was
  granted. Under READ COMMITTED each statement sees everything committed before it
  began, so such a fresh statement sees every earlier holder's lease or submit. (The
  statement that takes the lock does not: its subqueries use the snapshot from before
  the lock, which is why the claim checks its candidate again.)
* A claim marks the chain's stale ACTIVE leases EXPIRED before it takes their place,
  while holding the lock. So a lease whose place went to someone else is never ACTIVE
  again, and a submit or renew under the same lock can trust an ACTIVE, unexpired lease.
* An annotator holds at most ``MAX_LIVE_LEASES`` (2) live leases per project: the chain
  being labeled and the one the workspace prefetched. ``next`` answers with the oldest,
  ``prefetch`` with the newest or a new one on another chain. Both decide under the
  caller's user-row lock (``_claim_once``), so concurrent requests of one annotator
  (tabs, double clicks) cannot take a third lease. A prefetched lease is an ordinary
  live lease: it takes a place in the overlap, expires and renews like any other.
* Lock order: the caller's user row, then one chain, then that chain's assignment rows.
  A claim that must wait for a chain holds no other chain lock while it waits, so
  claims cannot deadlock one another.
* Every change of a lease's status (submit, skip, renew, flag) holds its chain's lock and
  decides on the lease as read after it, so two of them on one lease are serialized and
  the later one sees the earlier one's outcome: a skip racing a submit of the same lease
  loses with LeaseClosed (or wins, and the submit does), never both.

``FOR NO KEY UPDATE`` rather than ``FOR UPDATE``: it still conflicts with every other
claim, submit and row update, but not with the key-share locks that inserting an
assignment or annotation takes on its chain and user through their foreign keys.

On SQLite (the demo default) ``select_for_update`` is a no-op; the settings open every
transaction with ``BEGIN IMMEDIATE``, which serializes writers, so the same code holds.
"""
