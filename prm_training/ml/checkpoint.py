"""A PRM checkpoint on disk: its layout, its writer (``write_checkpoint``, called by
``train``) and its reader (``load_prm``, for scoring, evaluation and the next run).

Checkpoint layout (a directory; written beside ``out_dir`` under a temporary name and
renamed into place only when complete, so a crash or cancellation never leaves a partial
checkpoint at ``out_dir``; an existing ``out_dir`` is replaced)::

    out_dir/
      config.json        {"format", "prm_config" (PRMConfig as JSON), "seed", "mode",
                          "backbone_kind", "backbone_fingerprint", "head" (shape),
                          "threshold", "threshold_right" (null: the readout
                          ignores answers), "calibration" ([scale, bias]),
                          "train_chains", "heldout_chains"}
      head.safetensors   the ensemble heads' weights
      tokenizer/         the tokenizer (save_pretrained)
      backbone/          the backbone and its tokenizer (save_pretrained): always in
                         "full" mode; in "frozen_head" mode only with save_backbone, else
                         config.json's prm_config.backbone path is used and its
                         fingerprint verified
      metrics.json       held-out metrics (see ``metrics.evaluate``) and train_loss
      baselines.json     the rules fitted on the training chains and their readouts,
      text_blind.*       and the text-blind head (``baselines.load_baselines``), so the
                         version is compared with its own baselines wherever it is scored
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from .baselines import FittedBaselines
from .config import PRMConfig
from .model import (
    Backbone,
    EnsembleHead,
    backbone_fingerprint,
    load_configured_backbone,
    resolve_device,
    save_json,
)
from .score import LoadedPRM

CHECKPOINT_FORMAT = "steplab-prm/1"


# How a checkpoint was trained when its config predates these fields (2026-11-25).
CHECKPOINT_DEFAULTS_BEFORE: dict[str, Any] = {
    "step_pooling": "separator",
    "context": "none",
    "calibrate": False,
    "lora_r": 0,
    "outcome_readout": False,
    "gradient_checkpointing": False,
    "dtype": "float32",
    "step_prior": False,
    "processes": 1,
}


def checkpoint_config(data: dict[str, Any]) -> PRMConfig:
    """A checkpoint's stored config: one written before a field existed was trained the
    way that field's old behaviour says (separator states, no context features, no
    calibration), not as today's default."""
    return PRMConfig.from_dict({**CHECKPOINT_DEFAULTS_BEFORE, **data})


def write_checkpoint(
    *,
    out_dir: Path,
    config: PRMConfig,
    kind: str,
    fingerprint: str,
    head: EnsembleHead,
    backbone: Backbone,
    tokenizer: Any,
    metrics: dict[str, float],
    train_chains: int,
    heldout_chains: int,
    baselines: FittedBaselines | None,
) -> None:
    from safetensors.torch import save_file

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = out_dir.parent / f".{out_dir.name}.partial-{uuid.uuid4().hex}"
    partial.mkdir()
    try:
        save_json(
            partial / "config.json",
            {
                "format": CHECKPOINT_FORMAT,
                "prm_config": config.to_dict(),
                "seed": config.seed,
                "mode": config.mode,
                "backbone_kind": kind,
                "backbone_fingerprint": fingerprint,
                "head": head.describe(),
                "threshold": metrics["threshold"],
                "threshold_right": metrics.get("threshold_right"),
                "calibration": [metrics["calibration_scale"], metrics["calibration_bias"]],
                "train_chains": train_chains,
                "heldout_chains": heldout_chains,
            },
        )
        save_file(
            {name: value.detach().cpu().contiguous() for name, value in head.state_dict().items()},
            str(partial / "head.safetensors"),
        )
        tokenizer.save_pretrained(str(partial / "tokenizer"))
        if config.mode == "full" or config.save_backbone:
            # A whole model directory (with its tokenizer), so a later run can name it as
            # its backbone (``version:<id>``) and go on from these weights.
            backbone.save_pretrained(str(partial / "backbone"))
            tokenizer.save_pretrained(str(partial / "backbone"))
        save_json(partial / "metrics.json", metrics)
        if baselines is not None:
            baselines.save(partial)
        if out_dir.exists():
            # Replace a previous attempt's checkpoint (a redelivered task) in two renames.
            stale = out_dir.parent / f".{out_dir.name}.stale-{uuid.uuid4().hex}"
            os.replace(out_dir, stale)
            os.replace(partial, out_dir)
            shutil.rmtree(stale, ignore_errors=True)
        else:
            os.replace(partial, out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def load_prm(
    checkpoint_dir: str | Path, *, device: str | None = None, cache_dir: str | None = None
) -> LoadedPRM:
    """Loads a checkpoint written by ``train_prm`` (layout in this module's docstring);
    ``cache_dir`` replaces the feature cache folder it was trained with (this machine's)."""
    root = Path(checkpoint_dir)
    meta = json.loads((root / "config.json").read_text())
    config = checkpoint_config(meta["prm_config"])
    if cache_dir is not None:
        config = replace(config, cache_dir=cache_dir)
    torch_device = resolve_device(device or config.device)
    backbone_dir = root / "backbone"
    if backbone_dir.is_dir() and not config.step_prior:
        path = backbone_dir
    else:
        fingerprint = backbone_fingerprint(config.backbone)
        if fingerprint != meta["backbone_fingerprint"]:
            raise ValueError(
                f"{config.backbone} is not the backbone this checkpoint was trained on "
                f"(fingerprint {fingerprint}, expected {meta['backbone_fingerprint']})"
            )
        path = Path(config.backbone)
    tokenizer, backbone, kind, step_head = load_configured_backbone(
        config,
        torch_device,
        path=path,
        requested_kind=meta["backbone_kind"],
        tokenizer_path=root / "tokenizer",
    )
    shape = meta["head"]
    head = EnsembleHead(
        shape["width"],
        shape["hidden"],
        shape["members"],
        config.head_dropout,
        context=shape.get("context", 0),
        prior=shape.get("prior", False),
    )
    from safetensors.torch import load_file

    head.load_state_dict(load_file(str(root / "head.safetensors")))
    return LoadedPRM(
        config=config,
        tokenizer=tokenizer,
        backbone=backbone.to(torch_device).eval(),
        head=head.to(torch_device).eval(),
        kind=kind,
        device=torch_device,
        fingerprint=meta["backbone_fingerprint"],
        checkpoint_dir=root,
        threshold=float(meta.get("threshold", 0.5)),
        threshold_right=meta.get("threshold_right"),
        calibration=tuple(meta.get("calibration", (1.0, 0.0))),
        step_head=step_head.to(torch_device) if step_head is not None else None,
    )
