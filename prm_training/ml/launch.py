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
process group (the Celery worker) goes to ``train_prm_processes``, which starts one
``python -m prm_training.ml.launch`` subprocess per rank (``child_process``: the worker's
prefork children are daemonic, and ``multiprocessing`` may not start children there),
relays rank 0's progress and phases back to the caller over a pipe, and polls its
``should_stop``; a stop, or a failure of any rank, ends every process. Under ``torchrun``
the launcher's group is used as it is and each process trains in its own. Which rank a
process is and its share of the batches: ``ranks``.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
from torch import distributed as dist

from .child_process import exit_when_orphaned, python_child, stop_child
from .config import PRMConfig
from .data import ChainExample
from .fitting import TrainingCancelled, TrainProgress
from .progress import PhaseReport
from .ranks import process_group
from .train import TrainResult, train_in_process, zero_shot_prm

# How often the launching process looks at its children, rank 0's events and
# should_stop.
POLL_S = 0.2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The environment variable naming rank 0's end of the events pipe.
EVENTS_FD = "STEPLAB_RANK_EVENTS_FD"
# How much of a failed rank's output its error carries.
FAILURE_TAIL_CHARS = 2000


def _rank_main(inputs: str) -> None:
    """One rank (``python -m prm_training.ml.launch INPUTS``): its rank, world and rendezvous
    come in the environment as torchrun sets them (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT); the configuration and chains in the pickle ``inputs`` its launcher wrote."""
    from dataclasses import replace

    exit_when_orphaned()
    with open(inputs, "rb") as handle:
        config, train, heldout, out_dir = pickle.load(handle)  # noqa: S301 - our own file
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = config.device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
        config = replace(config, device=f"cuda:{rank}")
    events = Connection(int(os.environ[EVENTS_FD]), readable=False) if rank == 0 else None
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        progress = phase = None
        if events is not None:
            progress = lambda event: events.send(("progress", event))  # noqa: E731
            phase = lambda event: events.send(("phase", event))  # noqa: E731
        result = train_in_process(config, train, heldout, out_dir, progress=progress, phase=phase)
        if events is not None:
            events.send(("result", result))
    finally:
        dist.destroy_process_group()


def _start_ranks(world: int, work: Path, inputs: Path) -> tuple[list[Any], Connection]:
    """Starts ``world`` rank subprocesses; returns them and the read end of rank 0's
    events pipe. Each rank's output goes to ``work/rank<N>.log``."""
    port = _free_port()
    read_fd, write_fd = os.pipe()
    ranks = []
    try:
        for rank in range(world):
            env = {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            }
            if rank == 0:
                env[EVENTS_FD] = str(write_fd)
            with open(work / f"rank{rank}.log", "wb") as log:
                ranks.append(
                    python_child(
                        "prm_training.ml.launch",
                        [str(inputs)],
                        env=env,
                        pass_fds=(write_fd,) if rank == 0 else (),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
    except BaseException:
        os.close(read_fd)
        for process in ranks:
            stop_child(process)
        raise
    finally:
        os.close(write_fd)
    return ranks, Connection(read_fd, writable=False)


def _rank_failure(ranks: Sequence[Any], work: Path) -> RuntimeError | None:
    """An error naming the first rank that ended badly, with the end of its output."""
    for rank, process in enumerate(ranks):
        code = process.poll()
        if code not in (None, 0):
            output = (work / f"rank{rank}.log").read_text(errors="replace")
            tail = output[-FAILURE_TAIL_CHARS:].strip()
            return RuntimeError(f"training process {rank} of {len(ranks)} failed ({code}):\n{tail}")
    return None


def _check_world(config: PRMConfig) -> None:
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
    _check_world(config)
    with tempfile.TemporaryDirectory(prefix="steplab-ranks-") as folder:
        work = Path(folder)
        inputs = work / "inputs.pickle"
        with open(inputs, "wb") as handle:
            pickle.dump((config, list(train), list(heldout), str(out_dir)), handle)
        ranks, events = _start_ranks(config.processes, work, inputs)
        try:
            result = _relay(ranks, events, work, progress, should_stop, phase)
            for process in ranks:  # every rank returns once the checkpoint is written
                process.wait()
            if (failure := _rank_failure(ranks, work)) is not None:
                raise failure
            return result
        finally:
            events.close()
            for process in ranks:
                stop_child(process)


def _relay(
    ranks: Sequence[Any],
    events: Connection,
    work: Path,
    progress: Callable[[Any], None] | None,
    should_stop: Callable[[], bool] | None,
    phase: Callable[[Any], None] | None,
) -> Any:
    """Rank 0's events relayed to the caller until its result comes."""
    while True:
        if should_stop is not None and should_stop():
            raise TrainingCancelled("training stopped on request")
        if (failure := _rank_failure(ranks, work)) is not None:
            raise failure
        if not events.poll(POLL_S):
            continue
        try:
            kind, payload = events.recv()
        except EOFError:
            # Rank 0 closed its end: it ended; its status (or a sibling's) says how.
            ranks[0].wait()
            raise _rank_failure(ranks, work) or RuntimeError(
                "the training processes ended without a result"
            ) from None
        if kind == "progress" and progress is not None:
            progress(payload)
        elif kind == "phase" and phase is not None:
            phase(payload)
        elif kind == "result":
            return payload


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


if __name__ == "__main__":
    _rank_main(sys.argv[1])
