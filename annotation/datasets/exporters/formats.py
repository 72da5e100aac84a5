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
  not written. What came in stays: ``id`` is the source record's own id (a ProcessBench
  or generic file's ``id``, kept in the chain's meta), else ``steplab-<project>-<chain>``;
  ``final_answer_correct`` is the record's own verdict where it gave one, else the final
  answer compared with the problem's reference answer (ignoring spaces and $), null when
  either is missing. A ProcessBench file imported and exported so gives back its records.
- ``openrlhf``: OpenRLHF's process-reward dataset (``openrlhf.cli.train_prm``)
  ``{"input", "value"}``, laid out as Math-Shepherd is, the data OpenRLHF's PRM examples
  train on: the problem, then ``Step k: <step> ки`` a line, the placeholder ``ки`` closing
  every step, and ``value`` a soft label per placeholder: the share of the step's votes
  that call it correct (``soft_labels``; an adjudication counts alone, an ambiguous vote
  counts as correct with ``positive``, wrong with ``negative`` and not at all with
  ``drop``; a row kept from before snapshots held votes falls back on its support). Train
  it with ``--input_key input --label_key value --placeholder_token ки --reward_tokens +
  -`` (soft labels want the positive token first). The steps are TRL's labeled prefix.
  A chain whose text holds ``ки`` itself is not written: its labels would land on the
  wrong placeholders. Nor is one holding a targeted tokenizer's special token (below). The
  ``math_shepherd`` import reads the file back (without labels).
  With ``soft_labels=monte_carlo`` (a snapshot that includes the ``monte_carlo``
  source) ``value`` is each step's Monte-Carlo value instead, the share of rollouts from
  the step's prefix that reached the answer, over the steps that have one.
- ``math_shepherd``: Math-Shepherd's own records ``{"input", "label"}`` from the
  Monte-Carlo hard labels (a snapshot that includes ``monte_carlo``): ``input`` laid out
  as ``openrlhf``'s, ``label`` the same text with ``+`` (some rollout from the step
  reached the answer) or ``-`` in place of each ``ки``, over the steps that have a hard
  label from the first on. The ``math_shepherd`` import reads it back with its labels.
- Provenance (``provenance``, any format but parquet): each JSON record gains
  ``provenance``, one entry per step it writes: the step's label, where it came from
  (``adjudication``, ``human``, ``import`` or ``machine:<source>``) and what every
  machine source in the snapshot said of it (rating, value, hard label, model, run); a
  CSV row gains the same entry as a JSON ``provenance`` column.
- Notes (every format): what the voters behind a row wrote, each annotator's rewrite of
  the step they marked first wrong and their comments on steps, with the voter and their
  rating of that step (``SnapshotChain.notes``, from each voter's current pass). A JSON
  record of a chain with notes on the steps it writes gains ``notes``, a list of
  ``{"step", "by", "source", "rating", "rewrite"?, "comment"?}``, after
  ``machine_agreed`` and before ``provenance``; a record of a chain without keeps the
  format's keys alone. PRM800K also carries a step's rewrite where its own format has
  the place, the step's ``human_completion`` (``{"text", "rating": null, "source":
  "human", "flagged": false}``, as the real files have it; ``chosen_completion`` stays 0,
  so an import follows the chain's own text). A CSV row has a ``notes`` column (the
  step's entries as JSON, empty where none); Parquet a ``notes`` column, a list of
  structs, empty where none.
- Machine agreement (any format, a snapshot that includes a machine source): every
  record says whether its labels are machine labels that routing accepted
  (``routing.services``: the lead's trusted sources agreed on the chain's first error, and
  no person labeled it; ``datasets.snapshot_rows`` marks such a row). A JSON record gains a
  top-level ``machine_agreed``, true or false, after the format's own keys and before
  ``provenance``: a trainer or reader of the format reads its own keys and leaves the
  rest (as it does ``provenance``); a ProcessBench record keeps its six, a PRM800K line
  its ``question`` and ``label``. A CSV row gains a ``machine_agreed`` column (``true`` or
  ``false`` on every step of the chain) after ``source_id`` and before ``provenance``;
  Parquet a boolean ``machine_agreed`` column after TRL's three. A chain people labeled is
  false, a spot check included; an export of a snapshot without machine sources, where
  no row can be machine-agreed, is as it was without the field. Why a field and not a
  separate file: a lead filters or weighs machine-agreed chains in the same dataset.
- ``qwen_prm``: the chat format of open math PRMs with their own step separator,
  Qwen2.5-Math-PRM's (its model card's usage): ``{"messages", "labels"}`` with a system
  turn (Qwen2.5-Math's prompt), the problem as the user's turn and the steps as the
  assistant's, ``<extra_0>`` after each, and ``labels`` TRL's booleans of that prefix, one
  per separator. A chain whose text holds ``<extra_0>`` itself is not written, nor one
  holding another special token of Qwen's tokenizers (``<extra_N>``, ``<tool_call>``,
  ``<think>``, below).
- Special tokens: text a trainer's tokenizer reads as one of its special tokens, not as
  text (``</s>`` for Llama 2 and Mistral, ``<|im_end|>`` for Qwen, ``<end_of_turn>`` for
  Gemma, ``[INST]``, ``<think>``; also spaced or split by invisible characters, as
  ``<| im_end |>``), would end a sequence or a turn inside what the trainer builds. The
  formats a trainer reads as they are (``openrlhf``, ``math_shepherd``, ``qwen_prm``) leave
  such a chain out (no escape survives a chat template); which tokenizers each targets and
  their tokens are in ``special_tokens.json`` (``special_tokens`` says why a list ships).
  The others carry the text byte for byte, for a reader to tokenize with
  ``split_special_tokens=True``.
- ``csv``: one row per step: snapshot version, split, chain id and hash, step index and
  text, consensus, support, and ``raw_labels``, a JSON object {voter: rating} of the
  current votes on that step (per-annotator columns would change with every export),
  and ``source_id``, the id the chain's source record gave it (empty where none), and
  ``notes`` (above).
  A step text that a spreadsheet would read as a formula (it begins, after any spaces,
  with ``= + - @``, their fullwidth forms, a tab, a carriage return, a line feed or a NUL,
  skipping what a spreadsheet shows nothing for: Unicode's White_Space and
  Default_Ignorable_Code_Point, control and format characters, blanks and fillers such as
  U+200B, U+FEFF, U+3164 and U+2800) is written with a leading apostrophe (OWASP's rule
  against CSV injection, see ``csv_cell``); the other outputs carry every text byte for
  byte.
"""

EXPORT_FORMATS = (
    "prm800k",
    "trl",
    "processbench",
    "openrlhf",
    "math_shepherd",
    "qwen_prm",
    "csv",
    "parquet",
)
TEXT_FORMATS = ("prm800k", "trl", "processbench", "openrlhf", "math_shepherd", "qwen_prm", "csv")
JSON_LINES_FORMATS = ("prm800k", "trl", "processbench", "openrlhf", "math_shepherd", "qwen_prm")
# Where a step's soft label comes from in an openrlhf export.
SOFT_LABEL_SOURCES = ("votes", "monte_carlo")
# The formats that read the snapshot's Monte-Carlo labels (with these options).
MONTE_CARLO_FORMATS = ("math_shepherd",)
# The formats that write a chain's labeled prefix only, and the key of a record's labels:
# the steps such an export counts as labeled are those it wrote.
PREFIX_LABELS = {"trl": "labels", "openrlhf": "value", "qwen_prm": "labels"}
# What each file holds, in a line: the export buttons and the command's help say it.
EXPORT_DESCRIPTIONS = {
    "prm800k": "JSON Lines, a chain a line in PRM800K's shape: every step with its "
    "consensus rating (re-importable as is)",
    "trl": "JSON Lines in TRL's stepwise schema (prompt, completions, labels as booleans), "
    "each chain cut at its first unrated step",
    "processbench": "JSON Lines in ProcessBench's schema: the index of the first wrong "
    "step (-1: none) and whether the final answer is right",
    "openrlhf": "JSON Lines for OpenRLHF's PRM trainer: input holds the problem and the "
    "steps, each closed by the placeholder token ки; value a soft label per step, the share "
    "of votes calling it correct; each chain cut at its first unrated step",
    "math_shepherd": "JSON Lines in Math-Shepherd's schema (input, label with + or - per "
    "step) from the Monte-Carlo hard labels of a snapshot that includes them",
    "qwen_prm": "JSON Lines in Qwen2.5-Math-PRM's chat format: system, user (the problem) "
    "and assistant (the steps, <extra_0> after each) messages, labels as booleans; each "
    "chain cut at its first unrated step",
    "csv": "a row a step: split, chain, text, consensus, support and every current vote",
    "parquet": "the TRL rows (same schema) in Parquet, the snapshot named in its metadata",
}
CONTENT_TYPES = {
    **dict.fromkeys(JSON_LINES_FORMATS, "application/x-ndjson"),
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
}
EXTENSIONS = {
    **dict.fromkeys(JSON_LINES_FORMATS, "jsonl"),
    "csv": "csv",
    "parquet": "parquet",
}
