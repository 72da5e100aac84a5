"""The options of a snapshot, checked. What a snapshot holds is the lead's choice,
recorded in ``meta["options"]``:

- ``include_imported``: which label sources it reads (``meta["sources"]``). Off (the
  default) only people's: annotators' passes and leads' rulings; labels that came with an
  import (``import:processbench``) are no vote and finish no chain. On, imported labels
  count too, by the project's ``import_labels`` rule (a project that ignores them uses
  them on chains no person labeled, as "fallback" does). ``counts["sources"]`` says how
  many chains rest on each source, and ``imported_left_out`` how many chains only an
  import labeled, which a people-only snapshot leaves out.
- ``machine_sources``: the machine sources (``MachineSource``: monte_carlo, judge, prm,
  import) whose labels the snapshot takes, none by default. Each row then carries those
  sources' labels beside its consensus (``SnapshotChain.machine``: the newest run's per
  step, with value, hard label, model and run), which exports read for provenance,
  Monte-Carlo soft labels and Math-Shepherd's hard labels. A chain no person (and no
  counted import) labeled takes its labels from the first of these sources, in the
  lead's order, that rated it; it then counts as finished like an import's chain. Machine
  labels are never votes: they change no consensus of a chain people labeled.
  ``counts["machine"]`` says how many chains' labels rest on each source and
  ``counts["machine_rows"]`` how many rows carry each source's labels; both only in a
  snapshot that includes a source.
- Machine agreement (routing, ``routing.services``): a row whose labels come from a
  machine source (as above) on a chain routing accepted (``Chain.routing`` agreed, or
  spot_check while no person has labeled it yet) is marked machine-agreed:
  ``SnapshotChain.machine["routing"]`` holds the routing and ``["agreed_first_error"]``
  the first error the sources agreed on, and every export marks the record
  (``exporters.formats``). Only where the row's labels put their first error there, as
  routing reads a source (``annotation.first_error``, "settled"): labels from a source
  that was not among the agreeing ones, or that changed since the routing pass, are not
  what was agreed and carry no mark. A row people labeled is never marked (a spot check
  a person labeled carries their labels).
  ``counts["machine_agreed"]`` says how many rows are marked, in a snapshot that
  includes a machine source. An agreed chain that no included source labeled stays out.
- ``finished_only`` (the default): only finished chains, those whose human passes reached
  the project's overlap (``Chain.is_finished``), that a lead ruled on, gold chains, and,
  with ``include_imported``, chains labeled by an import that no person has started on;
  flagged chains are left out. Off, every chain with a labeled step counts, as in a
  training run's own snapshot (the loop learns from every label as soon as it is given).
- ``min_support``: a step's label needs at least this many votes; below it the step is
  left unlabeled. A lead's ruling settles a step whatever the count.
- ``ties``: a step whose votes tie (no ruling) is left unlabeled (``drop``, the default:
  a tie is not a consensus), keeps the lowest rating (``lowest``, the consensus rule's own
  pick), or keeps the lowest and is listed in the row's ``tied`` (``mark``).
- ``heldout_fraction`` and ``seed``: the split by problem (``snapshot_rows.problem_split``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from annotation.models import AnnotationSource, ImportLabels, MachineSource, Project

# How a TRL export maps an ambiguous (0) step: to a positive or a negative label, or by
# dropping the chain from that step on.
AMBIGUOUS_CHOICES = ("positive", "negative", "drop")
DEFAULT_AMBIGUOUS = "drop"
# What a snapshot does with a step whose votes tie (see the module docstring).
TIE_POLICIES = ("drop", "lowest", "mark")
DEFAULT_TIES = "drop"
TIE_RULES = {
    "drop": "tied steps are left unlabeled",
    "lowest": "lowest rating",
    "mark": "lowest rating, the step listed in the row's tied",
}
# A step label's least number of votes; no project asks for more annotators (overlap).
MIN_SUPPORT_MAX = 50
SEED_MAX = 2**31 - 1  # Snapshot.seed is an integer column


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """What a snapshot holds (the module docstring says what each option does)."""

    finished_only: bool = True
    include_imported: bool = False
    min_support: int = 1
    ties: str = DEFAULT_TIES
    heldout_fraction: float = 0.2
    seed: int = 0
    # MachineSource values, in the lead's order of preference.
    machine_sources: tuple[str, ...] = ()

    @property
    def sources(self) -> list[str]:
        """The label sources the snapshot reads (AnnotationSource values, a lead's ruling
        being a person's, then ``machine:<source>`` per machine source)."""
        return [
            AnnotationSource.HUMAN,
            *([AnnotationSource.IMPORT] * self.include_imported),
            *(f"machine:{source}" for source in self.machine_sources),
        ]

    def import_rule(self, *, project: Project) -> str:
        """How imported labels enter consensus: not at all unless included, then by the
        project's rule, "fallback" where the project ignores them."""
        if not self.include_imported:
            return ImportLabels.IGNORE
        if project.import_labels == ImportLabels.IGNORE:
            return ImportLabels.FALLBACK
        return project.import_labels

    def as_meta(self) -> dict[str, Any]:
        return {
            "finished_only": self.finished_only,
            "include_imported": self.include_imported,
            "min_support": self.min_support,
            "ties": self.ties,
            "heldout_fraction": self.heldout_fraction,
            "seed": self.seed,
            "machine_sources": list(self.machine_sources),
        }


def options_checked(
    *,
    finished_only: bool,
    include_imported: bool,
    min_support: int,
    ties: str,
    heldout_fraction: float,
    seed: int,
    machine_sources: tuple[str, ...] = (),
) -> SnapshotOptions:
    """The options, or ValidationError naming the first one out of its range."""
    unknown = [source for source in machine_sources if source not in MachineSource.values]
    if unknown or len(set(machine_sources)) != len(machine_sources):
        raise ValidationError(
            {
                "machine_sources": "Each at most once, of "
                f"{', '.join(MachineSource.values)}"
                + (f"; unknown: {', '.join(map(str, unknown))}." if unknown else ".")
            }
        )
    if not 0 <= heldout_fraction < 1:
        raise ValidationError({"heldout_fraction": "Must be at least 0 and below 1."})
    if not 0 <= seed <= SEED_MAX:
        raise ValidationError({"seed": f"Must be between 0 and {SEED_MAX}."})
    if ties not in TIE_POLICIES:
        raise ValidationError({"ties": f"Must be one of {', '.join(TIE_POLICIES)}."})
    if not 1 <= min_support <= MIN_SUPPORT_MAX:
        raise ValidationError({"min_support": f"Must be between 1 and {MIN_SUPPORT_MAX}."})
    return SnapshotOptions(
        finished_only=finished_only,
        include_imported=include_imported,
        min_support=min_support,
        ties=ties,
        heldout_fraction=heldout_fraction,
        seed=seed,
        machine_sources=machine_sources,
    )
