"""Webhooks: a project's events sent to the lab's own systems, signed per the Standard
Webhooks specification (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``).

One slice, by what it does: ``events`` writes the outbox rows in the transaction of the
change they report; ``delivery`` sends them from a Celery task, retries with backoff and
sweeps what the broker lost; ``targets`` decides which URLs may be called; ``services`` and
``selectors`` are the leads' writes and reads; ``api`` and ``views`` their doors."""
