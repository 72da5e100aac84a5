"""Datasets: chains in, examples out.

- In: ``importers/`` (file formats, pure: records in, ``ParsedChain`` out), ``imports``
  (parse, dedupe, COPY, all or nothing per file), ``import_jobs`` (the job on a worker)
  and ``import_job_reads``.
- Out: ``snapshots`` (a frozen set of examples with consensus and machine labels),
  ``snapshot_reads`` (listing, diffing, streaming a snapshot's examples), ``exports``
  and ``exporters/`` (file formats, pure: rows in, lines or Parquet out).
- ``evaluation_sets`` and ``evaluation_set_reads``: held-out chains a model is measured on.
- ``api/`` the HTTP doors of each, ``urls`` their routes.
"""
