"""Scoring chains with a loaded PRM (``checkpoint.load_prm``): P(step correct) for every step,
plus each ensemble member's probabilities (the raw material of disagreement).

Batches are length-bucketed: within a chunk of chains, windows are sorted by length before
batching, so padding stays small; results still come back in input order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import PRMConfig
from .data import ChainExample, chains_to_windows, truncation, window_steps
from .features import (
    StepFeatureCache,
    autocast_for,
    bucketed_batches,
    cached_step_features,
    feature_cache,
    pad_token_id,
)
from .inputs import CONTEXT_WIDTH, chain_contexts
from .model import Backbone, EnsembleHead, collate_windows, encode_steps
from .readout import ChainScores, Readout

logger = logging.getLogger(__name__)

# Chains per chunk: bucketing sorts within a chunk, so bigger chunks pad less but hold
# more in memory before the first result comes out.
CHUNK_CHAINS = 4096


def config_feature_cache(
    config: PRMConfig, fingerprint: str, device: torch.device
) -> StepFeatureCache:
    """The feature cache that ``config`` reads and fills for the backbone with this
    fingerprint on ``device`` (window length, pooling, layout, weights' dtype, prior)."""
    return feature_cache(
        fingerprint,
        config.max_length,
        config.cache_dir,
        config.step_pooling,
        config.text_layout(),
        dtype=config.weights_dtype(device.type),
        step_prior=config.step_prior,
    )


def frozen_step_features(
    config: PRMConfig,
    chains: Sequence[ChainExample],
    *,
    fingerprint: str,
    backbone: Backbone,
    kind: str,
    tokenizer: Any,
    device: torch.device,
    step_head: nn.Module | None = None,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Each chain's step features as ``config`` reads them from a frozen backbone, through
    ``config_feature_cache``: the backbone runs only on the chains the cache lacks.
    ``progress`` gets the steps done, a batch at a time (``features.cached_step_features``)."""
    return cached_step_features(
        cache=config_feature_cache(config, fingerprint, device),
        backbone=backbone,
        kind=kind,
        tokenizer=tokenizer,
        examples=chains,
        max_length=config.max_length,
        device=device,
        batch_size=batch_size,
        pad_id=pad_token_id(tokenizer),
        pooling=config.step_pooling,
        layout=config.text_layout(),
        step_head=step_head,
        progress=progress,
    )


@dataclass
class LoadedPRM:
    config: PRMConfig
    tokenizer: Any
    backbone: Backbone
    head: EnsembleHead
    kind: str  # "encoder" | "decoder"
    device: torch.device
    fingerprint: str  # of the frozen backbone's directory (frozen_head mode)
    checkpoint_dir: Path | None = None
    # P(correct) below which a step is called an error (chosen at training time; 0.5 for a
    # checkpoint written before thresholds were stored).
    threshold: float = 0.5
    # The threshold of chains graded right (``metrics.Readout``); None: ``threshold`` reads
    # every chain (outcome_readout off, or a checkpoint from before it).
    threshold_right: float | None = None
    # Platt scaling of every member's logits, P = sigmoid(scale * logit + bias) (fitted at
    # training time; identity for a checkpoint written before it was).
    calibration: tuple[float, float] = (1.0, 0.0)
    # The backbone's own step head (``PRMConfig.step_prior``), else None.
    step_head: nn.Module | None = None

    @property
    def cache(self) -> StepFeatureCache:
        return config_feature_cache(self.config, self.fingerprint, self.device)

    def frozen_features(
        self,
        chains: Sequence[ChainExample],
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> list[np.ndarray]:
        """Each chain's cached step features (frozen_head mode; the backbone runs on the
        chains the cache lacks); ``progress`` gets the steps done, a batch at a time."""
        return frozen_step_features(
            self.config,
            chains,
            fingerprint=self.fingerprint,
            backbone=self.backbone,
            kind=self.kind,
            tokenizer=self.tokenizer,
            device=self.device,
            step_head=self.step_head,
            batch_size=batch_size,
            progress=progress,
        )

    @property
    def readout(self) -> Readout:
        return Readout(self.threshold, self.threshold_right)

    def member_probs(self, features: torch.Tensor, context: np.ndarray | None) -> np.ndarray:
        """[E, N] calibrated P(correct) of every member for [N, width] step features and
        their [N, C] context (ignored by a head without context)."""
        extra = torch.from_numpy(context).to(self.device) if self.head.context else None
        logits = self.head(features, extra).float()  # [E, N]
        scale, bias = self.calibration
        return torch.sigmoid(logits * scale + bias).cpu().numpy()


def score_chains(
    prm: LoadedPRM,
    chains: Iterable[ChainExample],
    *,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
    steps_done: Callable[[int], None] | None = None,
) -> Iterator[ChainScores]:
    """Scores chains in input order. ``progress`` gets the number of chains scored so far
    after each chunk, ``steps_done`` the steps of each batch as it is scored (either may
    raise to stop). In frozen_head mode the step representations come from (and go to)
    the backbone's feature cache."""
    iterator = iter(chains)
    done = 0
    while chunk := list(islice(iterator, CHUNK_CHAINS)):
        member_probs = _member_probs(prm, chunk, batch_size, steps_done)
        offset = 0
        for example in chunk:
            n = len(example.steps)
            members = member_probs[:, offset : offset + n]  # [E, n]
            offset += n
            yield ChainScores(
                chain_id=example.chain_id,
                step_probs=members.mean(axis=0).tolist(),
                member_probs=members.tolist() if members.shape[0] > 1 else None,
            )
        done += len(chunk)
        if progress is not None:
            progress(done)


def prior_scores(
    chains: Sequence[ChainExample], features: Sequence[np.ndarray]
) -> list[ChainScores]:
    """Chain scores read from the step prior, the last column of each chain's features."""
    return [
        ChainScores(
            chain_id=example.chain_id,
            step_probs=(1 / (1 + np.exp(-rows[:, -1].astype(np.float64)))).tolist(),
            member_probs=None,
        )
        for example, rows in zip(chains, features, strict=True)
    ]


def _member_probs(
    prm: LoadedPRM,
    chunk: Sequence[ChainExample],
    batch_size: int,
    steps_done: Callable[[int], None] | None,
) -> np.ndarray:
    """[E, total steps of the chunk] probabilities, steps in chain order."""
    prm.head.eval()
    if prm.config.mode == "frozen_head":
        features = prm.frozen_features(chunk, batch_size, steps_done)
        stacked = np.concatenate(features) if features else np.zeros((0, prm.head.input_width))
        with torch.inference_mode():
            return prm.member_probs(
                torch.from_numpy(stacked).to(prm.device), _context(chunk, prm.config.context)
            )
    return _full_member_probs(prm, chunk, batch_size, steps_done)


def _context(chunk: Sequence[ChainExample], context: str) -> np.ndarray:
    """[total steps, C] context features of a chunk's steps, in chain order."""
    contexts = chain_contexts(chunk, context)
    return np.concatenate(contexts) if contexts else np.zeros((0, CONTEXT_WIDTH), np.float32)


def _full_member_probs(
    prm: LoadedPRM,
    chunk: Sequence[ChainExample],
    batch_size: int,
    steps_done: Callable[[int], None] | None,
) -> np.ndarray:
    starts = np.cumsum([0, *(len(example.steps) for example in chunk)]).tolist()
    out = np.zeros((prm.head.members, int(starts[-1])), dtype=np.float32)
    windows = chains_to_windows(
        prm.tokenizer, chunk, prm.config.max_length, prm.config.text_layout()
    )
    pad_id = pad_token_id(prm.tokenizer)
    context = _context(chunk, prm.config.context)
    prm.backbone.eval()
    with torch.inference_mode(), autocast_for(prm.device):
        for batch_windows in bucketed_batches(windows, batch_size):
            batch = collate_windows(batch_windows, pad_id, prm.device)
            features = encode_steps(prm.backbone, prm.kind, batch, prm.config.step_pooling)
            probs_np = prm.member_probs(features, context[window_steps(batch_windows, starts)])
            column = 0
            for window in batch_windows:
                n = len(window.step_end_positions)
                first = int(starts[window.chain_index]) + window.first_step
                out[:, first : first + n] = probs_np[:, column : column + n]
                column += n
            if steps_done is not None:
                steps_done(column)
    return out


def truncation_counts(
    tokenizer: Any, examples: Sequence[ChainExample], config: PRMConfig
) -> dict[str, float]:
    """What windows of ``config.max_length`` cut from ``examples`` (``data.truncation``)
    as a run's metrics name it, logged as a warning when anything: a scoring run and an
    evaluation report it too."""
    max_length = config.max_length
    cut = truncation(tokenizer, examples, max_length, config.text_layout())
    if cut.chains:
        logger.warning(
            "max_length %d cuts %d of %d chains (%d problems and %d steps keep only their "
            "head and tail; %d steps are scored without some of the steps before them)",
            max_length,
            cut.chains,
            len(examples),
            cut.problems,
            cut.steps,
            cut.context_steps,
        )
    return {
        "truncated_chains": float(cut.chains),
        "truncated_problems": float(cut.problems),
        "truncated_steps": float(cut.steps),
        "truncated_context_steps": float(cut.context_steps),
    }
