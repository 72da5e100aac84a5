"""Import parsers: stream reasoning chains out of PRM800K, ProcessBench, TRL, Math-Shepherd
and generic files. Pure Python (no Django), so they are unit-tested and benchmarked alone;
the import service turns their output into rows."""

from annotation.datasets.importers.formats import (
    FORMATS,
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_LINE_BYTES,
    STEP_SPLITS,
    FormatDetectionError,
    detect_format,
    iter_chains,
)
from annotation.datasets.importers.records import (
    LineError,
    ParsedChain,
    ParsedProblem,
    content_hash,
)

__all__ = [
    "FORMATS",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "MAX_LINE_BYTES",
    "STEP_SPLITS",
    "FormatDetectionError",
    "LineError",
    "ParsedChain",
    "ParsedProblem",
    "content_hash",
    "detect_format",
    "iter_chains",
]
