"""The export formats, what each file holds, and how it is served.

Formats (one record per chain unless said otherwise):

- ``prm800k``: PRM800K's raw line shape. Every step is a single completion with
  ``chosen_completion: 0`` and its consensus rating (null where unlabeled); all steps of
  the chain are written, also the unrated ones after a first error, so importing the
  file gives back the very same chains (same content hashes) and labels.
  ``finish_reason``: ``found_error`` with a -1, ``solution`` when every step is rated,
  else ``give_up``.
- ``trl``: TRL stepwise supervision ``{"prompt", "completions", "labels": [bool]}``. A
  trainer needs a boolean for every completion, so the chain is cut before its first
  unrated step; an ambiguous (0) step becomes true (``positive``), false (``negative``)
  or cuts the chain there (``drop``). A chain left with no step is not written.
- ``parquet``: the same TRL rows, in row groups of PARQUET_ROWS_PER_GROUP, with the
  snapshot and the ambiguous mapping in the file's key-value metadata ("steplab").
- ``processbench``: ``{"id", "generator", "problem", "steps", "label",
  "final_answer_correct"}``; ``label`` is the index of the earliest -1 (an ambiguous
  step counts as the error only with ``negative``), or -1 when every step is rated and
  none is wrong. A chain with no error but unrated steps cannot claim "no error" and is
  not written. ``final_answer_correct`` compares the final answer with the problem's
  reference answer (ignoring spaces and $), null when either is missing.
- ``csv``: one row per step: snapshot version, split, chain id and hash, step index and
  text, consensus, support, and ``raw_labels``, a JSON object {voter: rating} of the
  current votes on that step (per-annotator columns would change with every export).
  A step text that a spreadsheet would read as a formula (it begins, after any spaces,
  with ``= + - @``, their fullwidth forms, a tab or a carriage return) is written with a
  leading apostrophe (OWASP's rule against CSV injection, see ``csv_cell``); the JSON
  Lines and Parquet outputs carry every text byte for byte.
"""

EXPORT_FORMATS = ("prm800k", "trl", "processbench", "csv", "parquet")
TEXT_FORMATS = ("prm800k", "trl", "processbench", "csv")
# What each file holds, in a line: the export buttons and the command's help say it.
EXPORT_DESCRIPTIONS = {
    "prm800k": "JSON Lines, a chain a line in PRM800K's shape: every step with its "
    "consensus rating (re-importable as is)",
    "trl": "JSON Lines in TRL's stepwise schema (prompt, completions, labels as booleans), "
    "each chain cut at its first unrated step",
    "processbench": "JSON Lines in ProcessBench's schema: the index of the first wrong "
    "step (-1: none) and whether the final answer is right",
    "csv": "a row a step: split, chain, text, consensus, support and every current vote",
    "parquet": "the TRL rows (same schema) in Parquet, the snapshot named in its metadata",
}
CONTENT_TYPES = {
    "prm800k": "application/x-ndjson",
    "trl": "application/x-ndjson",
    "processbench": "application/x-ndjson",
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
}
EXTENSIONS = {
    "prm800k": "jsonl",
    "trl": "jsonl",
    "processbench": "jsonl",
    "csv": "csv",
    "parquet": "parquet",
}
