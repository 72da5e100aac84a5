"""Step representations from a backbone, length-bucketed, and the cache that makes
frozen-backbone rounds cheap: each chain goes through the backbone once per
(backbone, max_length, step pooling), after that a round only trains and applies the
small heads.

Entries are keyed by ``chain_content_key`` (problem and steps), so a re-imported or
re-split copy of the same text hits the cache. They are stored as float16 [steps, H]
(half the memory; the heads see the same rounded values whether an entry was just
computed or read back, so scores do not depend on cache state). With a ``cache_dir`` each
computed batch is also written as one ``.npz`` shard, renamed into place when complete,
and every shard is read back when a process first opens that cache.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .data import PLAIN, ChainExample, TextLayout, Window, chain_content_key, chains_to_windows
from .model import Backbone, collate_windows, encode_steps, step_feature_width


class StepFeatureCache:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.entries: dict[str, np.ndarray] = {}
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            for shard in sorted(directory.glob("*.npz")):
                self._load_shard(shard)

    def _load_shard(self, shard: Path) -> None:
        with np.load(shard, allow_pickle=False) as data:
            keys, offsets, features = data["keys"], data["offsets"], data["features"]
        for index, key in enumerate(keys.tolist()):
            self.entries[key] = features[offsets[index] : offsets[index + 1]]

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> np.ndarray | None:
        return self.entries.get(key)

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        if not items:
            return
        self.entries.update(items)
        if self.directory is None:
            return
        keys = list(items)
        offsets = np.cumsum([0, *(len(items[key]) for key in keys)])
        width = next(iter(items.values())).shape[1]
        features = (
            np.concatenate([items[key] for key in keys])
            if offsets[-1]
            else np.zeros((0, width), dtype=np.float16)
        )
        final = self.directory / f"{uuid.uuid4().hex}.npz"
        partial = final.with_suffix(".partial")
        # A reader never sees half a shard: write beside it, then rename.
        with open(partial, "wb") as handle:
            np.savez(handle, keys=np.array(keys), offsets=offsets, features=features)
        os.replace(partial, final)


# Every cache this process has opened, by name, pooling and folder. A process starts with
# none and keeps each for its life (a worker's next run on the same backbone reads it from
# memory); a test empties it to stand for a fresh process.
FEATURE_CACHES: dict[tuple[str, str, str | None], StepFeatureCache] = {}
# How ``data.build_windows`` splits a long chain; part of every cache's name.
WINDOWING = "overlap1"


def feature_cache(
    fingerprint: str,
    max_length: int,
    cache_dir: str | None,
    pooling: str = "mean",
    layout: TextLayout = PLAIN,
    *,
    dtype: str = "float32",
    step_prior: bool = False,
) -> StepFeatureCache:
    """The process-wide cache for one backbone, window length, step pooling, text layout,
    weights' dtype and step prior (one per disk folder). ``WINDOWING`` names how a chain
    longer than the window is split, so features made before overlapping windows
    (``data.build_windows``) are not read as if they were made with them."""
    parts = [fingerprint, str(max_length), pooling, layout.key(), WINDOWING]
    parts += [dtype if dtype != "float32" else "", "prior" if step_prior else ""]
    name = "-".join(filter(None, parts))
    key = (name, pooling, cache_dir)
    if key not in FEATURE_CACHES:
        directory = Path(cache_dir) / name if cache_dir else None
        FEATURE_CACHES[key] = StepFeatureCache(directory)
    return FEATURE_CACHES[key]


def bucketed_batches(windows: Sequence[Window], batch_size: int) -> Iterator[list[Window]]:
    """Windows sorted by length and cut into batches, so a batch pads little."""
    ordered = sorted(windows, key=lambda window: len(window.input_ids))
    for start in range(0, len(ordered), batch_size):
        yield ordered[start : start + batch_size]


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CUDA; full precision on the CPU (bf16 matmuls there are slower)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compute_step_features(
    *,
    backbone: Backbone,
    kind: str,
    tokenizer: Any,
    examples: Sequence[ChainExample],
    max_length: int,
    device: torch.device,
    batch_size: int,
    pad_id: int,
    pooling: str = "mean",
    layout: TextLayout = PLAIN,
    step_head: nn.Module | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Frozen-backbone step representations of each chain: float16 [steps, width], in
    order (with a ``step_head``, its log-odds as the last column). ``progress`` gets the
    number of steps a batch encoded, after each batch (it may raise to stop)."""
    windows = chains_to_windows(tokenizer, examples, max_length, layout)
    width = step_feature_width(int(backbone.config.hidden_size), pooling)
    width += int(step_head is not None)
    out = [np.zeros((len(example.steps), width), dtype=np.float16) for example in examples]
    backbone.eval()
    with torch.inference_mode(), autocast_for(device):
        for batch_windows in bucketed_batches(windows, batch_size):
            batch = collate_windows(batch_windows, pad_id, device)
            encoded = encode_steps(backbone, kind, batch, pooling, step_head)
            features = encoded.float().cpu().numpy()
            row = 0
            for window in batch_windows:
                n = len(window.step_end_positions)
                out[window.chain_index][window.first_step : window.first_step + n] = features[
                    row : row + n
                ]
                row += n
            if progress is not None:
                progress(row)
    return out


def cached_step_features(
    *,
    cache: StepFeatureCache,
    backbone: Backbone,
    kind: str,
    tokenizer: Any,
    examples: Sequence[ChainExample],
    max_length: int,
    device: torch.device,
    batch_size: int,
    pad_id: int,
    pooling: str = "mean",
    layout: TextLayout = PLAIN,
    step_head: nn.Module | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Like ``compute_step_features`` but runs the backbone only on chains the cache lacks;
    ``progress`` counts the cached chains' steps at once, then each batch's."""
    keys = [chain_content_key(example) for example in examples]
    missing = {
        key: example for key, example in zip(keys, examples, strict=True) if cache.get(key) is None
    }
    if progress is not None:
        to_encode = sum(len(example.steps) for example in missing.values())
        progress(sum(len(example.steps) for example in examples) - to_encode)
    if missing:
        fresh = compute_step_features(
            backbone=backbone,
            kind=kind,
            tokenizer=tokenizer,
            examples=list(missing.values()),
            max_length=max_length,
            device=device,
            batch_size=batch_size,
            pad_id=pad_id,
            pooling=pooling,
            layout=layout,
            step_head=step_head,
            progress=progress,
        )
        cache.put_many(dict(zip(missing, fresh, strict=True)))
    return [cache.entries[key] for key in keys]


def pad_token_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0
