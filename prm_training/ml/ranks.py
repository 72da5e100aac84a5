"""Which process of a data-parallel group this is and what share of the batches it trains
on (``PRMConfig.processes``; ``launch`` starts the group). Training reads these; they
read nothing of training, so ``train`` and ``launch`` form no circle."""

from __future__ import annotations

from typing import Any

from torch import distributed as dist


def process_group() -> tuple[int, int]:
    """(rank, world size) of the process group this process trains in; (0, 1) alone."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_share(batches: list[Any], rank: int, world: int) -> list[Any]:
    """This rank's batches: every ``world``-th, wrapped round so that every rank takes the
    same number of steps (a rank that stopped early would leave the others waiting in an
    all-reduce).

    >>> rank_share(list("abcde"), 1, 2)
    ['b', 'd', 'a']
    """
    if world == 1:
        return batches
    per_rank = -(-len(batches) // world)
    return [batches[(rank + world * i) % len(batches)] for i in range(per_rank)]


def barrier() -> None:
    if process_group()[1] > 1:
        dist.barrier()
