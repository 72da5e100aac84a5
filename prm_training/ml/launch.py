"""Training over several processes of one node (``PRMConfig.processes``): one process per
GPU (NCCL), or per CPU slot (gloo, which the tests use), data-parallel with PyTorch's
DistributedDataParallel.

Every process builds the same windows and the same shuffled batches from the same seed and
trains on every ``world``-th batch, so an optimizer step sees ``world`` batches and DDP
averages their gradients; the weights start equal (DDP broadcasts rank 0's) and stay
equal. Rank 0 writes the checkpoint, the others wait for it.

``train_prm`` is where every caller starts training: it chooses how. A zero-shot
configuration is written without training (``train.zero_shot_prm``); one process trains
in the caller's (``train.train_in_process``); ``processes`` > 1 from a caller that has no
process group (the Celery worker) goes to ``train_prm_processes``, which relays rank 0's
progress and phases back to the caller and polls its ``should_stop``; a stop, or a
failure of any rank, ends every process. Under ``torchrun`` the launcher's group is used
as it is and each process trains in its own. Which rank a process is and its share of
the batches: ``ranks``.
"""

from __future__ import annotations

import os
import queue
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import distributed as dist

from .config import PRMConfig
from .data import ChainExample
from .fitting import TrainingCancelled, TrainProgress
from .progress import PhaseReport
from .ranks import process_group
from .train import TrainResult, train_in_process, zero_shot_prm

# How often the launching process looks at its children, the progress queue and
# should_stop.
POLL_S = 0.2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(
    rank: int,
    world: int,
    port: int,
    config: PRMConfig,
    train: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    out_dir: str,
    events: Any,
) -> None:
    from dataclasses import replace

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = config.device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
        config = replace(config, device=f"cuda:{rank}")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        progress = (lambda event: events.put(("progress", event))) if rank == 0 else None
        phase = (lambda event: events.put(("phase", event))) if rank == 0 else None
        result = train_in_process(config, train, heldout, out_dir, progress=progress, phase=phase)
        if rank == 0:
            events.put(("result", result))
    finally:
        dist.destroy_process_group()


def train_prm_processes(
    config: PRMConfig,
    train: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    out_dir: str | Path,
    *,
    progress: Callable[[Any], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    phase: Callable[[Any], None] | None = None,
) -> Any:
    """``train_in_process`` in ``config.processes`` processes (module docstring); returns rank 0's
    TrainResult, relaying its ``progress`` and ``phase`` reports (a report that raises
    stops every process). Raises TrainingCancelled when ``should_stop()`` turns true,
    RuntimeError when a process fails."""
    from torch import multiprocessing

    world = config.processes
    if config.device != "cpu" and torch.cuda.is_available():
        if torch.cuda.device_count() < world:
            raise ValueError(
                f"processes={world} but this node has {torch.cuda.device_count()} GPUs"
            )
    elif world > (os.cpu_count() or 1):
        # On the CPU each process loads the whole backbone: more than the cores is only
        # memory (64 asked for once spawned 64 backbones and took the node down).
        raise ValueError(f"processes={world} but this node has {os.cpu_count()} CPU cores")
    spawn = multiprocessing.get_context("spawn")
    events = spawn.Queue()
    context = multiprocessing.start_processes(
        _worker,
        args=(world, _free_port(), config, list(train), list(heldout), str(out_dir), events),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    result = None
    try:
        while result is None:
            if should_stop is not None and should_stop():
                raise TrainingCancelled("training stopped on request")
            try:
                kind, payload = events.get(timeout=POLL_S)
            except queue.Empty:
                # join() raises ProcessRaisedException when a rank failed.
                if context.join(timeout=0) and result is None:
                    raise RuntimeError("the training processes ended without a result") from None
                continue
            if kind == "progress" and progress is not None:
                progress(payload)
            elif kind == "phase" and phase is not None:
                phase(payload)
            elif kind == "result":
                result = payload
        context.join()  # every rank returns once the checkpoint is written
        return result
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()


def train_prm(
    config: PRMConfig,
    train: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    out_dir: str | Path,
    *,
    progress: Callable[[TrainProgress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    baselines: bool = True,
    phase: PhaseReport | None = None,
) -> TrainResult:
    """Trains a PRM on ``train``, evaluated on ``heldout``, into the checkpoint directory
    ``out_dir`` (``train.train_in_process`` says what each argument does), choosing how
    (module docstring). Raises TrainingCancelled once ``should_stop()`` is true."""
    if config.zero_shot:
        return zero_shot_prm(config, train, heldout, out_dir, should_stop=should_stop, phase=phase)
    if config.processes > 1 and process_group()[1] == 1:
        result: TrainResult = train_prm_processes(
            config, train, heldout, out_dir, progress=progress, should_stop=should_stop, phase=phase
        )
        return result
    return train_in_process(
        config,
        train,
        heldout,
        out_dir,
        progress=progress,
        should_stop=should_stop,
        baselines=baselines,
        phase=phase,
    )
