"""A backbone's own step scores read straight from its directory, no checkpoint between:
the reference a zero-shot version (``ml.train.zero_shot_prm``) is checked against.

Production reads the same prior through a checkpoint whose head passes it through
(``EnsembleHead.pass_prior_through``, then ``score.score_chains``); this reads it from the
backbone as a configuration names it, so the two paths meet only in the feature code."""

from __future__ import annotations

from collections.abc import Sequence

from prm_training.ml.config import PRMConfig
from prm_training.ml.data import ChainExample
from prm_training.ml.model import backbone_fingerprint, load_configured_backbone, resolve_device
from prm_training.ml.readout import ChainScores
from prm_training.ml.score import frozen_step_features, prior_scores


def zero_shot_scores(
    config: PRMConfig, chains: Sequence[ChainExample], *, batch_size: int = 32
) -> list[ChainScores]:
    """The backbone's own step scores (``PRMConfig.step_prior``), no head trained: P(step
    correct) from its step head, for every chain in order."""
    if not config.step_prior:
        raise ValueError("zero-shot scores need a backbone with its own step head (step_prior)")
    device = resolve_device(config.device)
    tokenizer, backbone, kind, step_head = load_configured_backbone(config, device)
    features = frozen_step_features(
        config,
        chains,
        fingerprint=backbone_fingerprint(config.backbone),
        backbone=backbone.to(device),
        kind=kind,
        tokenizer=tokenizer,
        device=device,
        step_head=step_head.to(device) if step_head is not None else None,
        batch_size=batch_size,
    )
    return prior_scores(chains, features)
