"""The PRM network: a Hugging Face backbone (encoder or decoder) and an ensemble of small
MLP heads reading each step's representation.

A step's representation (``PRMConfig.step_pooling``):

* ``mean`` (the default): the mean of the hidden states of the step's own tokens, then
  the hidden state at the separator that closes it, [2H]. The tokens see the problem and
  the steps before (the prefix-only mask), so the mean carries what the step says in its
  context. The separator alone carries little of it: with the bundled MiniLM "So the
  answer is 5." and "So the answer is 7." after the same problem give separator states
  with cosine 0.99.
* ``separator``: the separator's hidden state only, [H] (TRL's stepwise convention and
  this project's checkpoints before 2026-11-25).

Shapes: B windows, L tokens, H backbone width, E heads, N steps in the batch, C context
features per step (``context``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import STEP_POOLINGS, PRMConfig
from .data import Window

# A transformers model (or peft's wrapper of one): its config and methods (save_pretrained,
# activation checkpointing, merge_and_unload) are looked up at run time, so it is Any here.
Backbone = Any

# Bidirectional model types: they need the step-level mask to stay prefix-only.
ENCODER_TYPES = frozenset(
    {
        "albert",
        "bert",
        "camembert",
        "deberta",
        "deberta-v2",
        "distilbert",
        "electra",
        "ernie",
        "modernbert",
        "mpnet",
        "nomic_bert",
        "roberta",
        "xlm-roberta",
    }
)


def backbone_kind(model_config: Any, requested: str = "auto") -> str:
    """'encoder' or 'decoder' for a transformers config (``requested`` wins unless 'auto')."""
    if requested != "auto":
        return requested
    if getattr(model_config, "is_encoder_decoder", False):
        raise ValueError("encoder-decoder backbones are not supported; use an encoder or decoder")
    return "encoder" if model_config.model_type in ENCODER_TYPES else "decoder"


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@lru_cache(maxsize=16)
def _fingerprint_cached(path: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for name, _, _ in stamp:
        if name.endswith((".json", ".txt", ".model")):
            digest.update(name.encode())
            digest.update((Path(path) / name).read_bytes())
    for name, size, _ in stamp:
        if name.endswith((".safetensors", ".bin")):
            digest.update(f"{name}:{size}".encode())
            # The first and last MiB of each weight file: enough to tell two models apart
            # without reading gigabytes on every load.
            with open(Path(path) / name, "rb") as handle:
                digest.update(handle.read(1 << 20))
                handle.seek(max(0, size - (1 << 20)))
                digest.update(handle.read(1 << 20))
    return digest.hexdigest()


def backbone_fingerprint(path: str | Path) -> str:
    """A digest of a model directory's configs and weights, to key caches and to check that
    a frozen-head checkpoint is loaded over the backbone it was trained on."""
    root = Path(path)
    stamp = tuple(
        sorted(
            (item.name, item.stat().st_size, item.stat().st_mtime_ns)
            for item in root.iterdir()
            if item.is_file()
        )
    )
    return _fingerprint_cached(str(root.resolve()), stamp)


def _tokenizer_dir(path: str | Path, tokenizer_path: str | Path | None) -> str:
    """Where the tokenizer of ``path`` is: ``tokenizer_path`` when given, else the model
    directory, else (a checkpoint's ``backbone/`` written before it held one) the
    checkpoint's ``tokenizer/`` beside it."""
    if tokenizer_path is not None:
        return str(tokenizer_path)
    beside = Path(path).parent / "tokenizer"
    if not (Path(path) / "tokenizer_config.json").exists() and beside.is_dir():
        return str(beside)
    return str(path)


def load_backbone(
    path: str | Path,
    requested_kind: str = "auto",
    *,
    tokenizer_path: str | Path | None = None,
    dtype: str = "float32",
) -> tuple[Any, Backbone, str]:
    """(tokenizer, bare backbone, kind) from local directories; never touches a hub."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        _tokenizer_dir(path, tokenizer_path), local_files_only=True
    )
    backbone = AutoModel.from_pretrained(
        str(path), local_files_only=True, dtype=getattr(torch, dtype)
    )
    return tokenizer, backbone, backbone_kind(backbone.config, requested_kind)


def load_backbone_with_step_head(
    path: str | Path,
    requested_kind: str = "auto",
    *,
    tokenizer_path: str | Path | None = None,
    dtype: str = "float32",
) -> tuple[Any, Backbone, str, nn.Module]:
    """(tokenizer, bare backbone, kind, step head) of a PRM that scores steps itself: a
    two-label token classifier (``...ForTokenClassification``, or a class of the
    directory's own code named in its ``auto_map``, as Qwen2.5-Math-PRM's
    ``Qwen2ForProcessRewardModel``). The head maps a separator's hidden state to the two
    logits (label 1 = correct)."""
    from transformers import AutoModel, AutoModelForTokenClassification, AutoTokenizer

    declared = json.loads((Path(path) / "config.json").read_text())
    architectures = declared.get("architectures") or []
    options: dict[str, Any] = {"local_files_only": True, "dtype": getattr(torch, dtype)}
    if any(name.endswith("ForTokenClassification") for name in architectures):
        model = AutoModelForTokenClassification.from_pretrained(str(path), **options)
    elif "AutoModel" in (declared.get("auto_map") or {}):
        model = AutoModel.from_pretrained(str(path), trust_remote_code=True, **options)
    else:
        raise ValueError(
            f"{path} has no step head (architectures {architectures}): step_prior needs a "
            "PRM whose model scores tokens, such as a ...ForTokenClassification"
        )
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    linears = [
        module for module in (head.modules() if head else ()) if isinstance(module, nn.Linear)
    ]
    if head is None or not linears or linears[-1].out_features != 2 or model.base_model is model:
        raise ValueError(f"{path}'s model has no two-label step head to read")
    tokenizer = AutoTokenizer.from_pretrained(
        _tokenizer_dir(path, tokenizer_path), local_files_only=True
    )
    base = model.base_model
    return tokenizer, base, backbone_kind(base.config, requested_kind), head


def load_configured_backbone(
    config: PRMConfig,
    device: torch.device,
    *,
    path: str | Path | None = None,
    requested_kind: str | None = None,
    tokenizer_path: str | Path | None = None,
) -> tuple[Any, Backbone, str, nn.Module | None]:
    """(tokenizer, bare backbone, kind, step head or None) as ``config`` reads them: the
    weights in ``config.weights_dtype`` for ``device``, the step head when
    ``config.step_prior`` (frozen, like the backbone in frozen_head mode)."""
    source = path or config.backbone
    kind = requested_kind or config.backbone_kind
    dtype = config.weights_dtype(device.type)
    if config.step_prior:
        tokenizer, backbone, kind, head = load_backbone_with_step_head(
            source, kind, tokenizer_path=tokenizer_path, dtype=dtype
        )
        return tokenizer, backbone, kind, head.requires_grad_(False).eval()
    tokenizer, backbone, kind = load_backbone(
        source, kind, tokenizer_path=tokenizer_path, dtype=dtype
    )
    return tokenizer, backbone, kind, None


def step_attention_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """[B, L] segment ids (-1 = padding) -> [B, 1, L, L] bool, True where query q may attend
    key k: k is not padding and segment(k) <= segment(q). Padding queries see the problem
    only, so no attention row is empty (an empty row gives NaN in SDPA)."""
    query = torch.where(segment_ids < 0, torch.zeros_like(segment_ids), segment_ids)
    keys = segment_ids
    allowed = (keys[:, None, :] <= query[:, :, None]) & (keys[:, None, :] >= 0)  # [B, L, L]
    return allowed[:, None, :, :]


def step_feature_width(hidden_size: int, pooling: str) -> int:
    """Width of one step's representation under ``pooling`` (without a step prior's
    column)."""
    if pooling not in STEP_POOLINGS:
        raise ValueError(f"step_pooling must be one of {STEP_POOLINGS}, not {pooling!r}")
    return 2 * hidden_size if pooling == "mean" else hidden_size


@dataclass
class WindowBatch:
    input_ids: torch.Tensor  # [B, L]
    segment_ids: torch.Tensor  # [B, L], -1 on padding
    step_rows: torch.Tensor  # [N] window row of each step
    step_cols: torch.Tensor  # [N] position of each step's closing separator
    step_of_token: torch.Tensor  # [B, L] the batch's step index a token belongs to, else -1
    tokens: int  # real (non-padding) tokens


def collate_windows(windows: list[Window], pad_id: int, device: torch.device) -> WindowBatch:
    """Right-pads windows to the longest one; steps are listed window by window, in order."""
    length = max(len(window.input_ids) for window in windows)
    input_ids = torch.full((len(windows), length), pad_id, dtype=torch.long)
    segment_ids = torch.full((len(windows), length), -1, dtype=torch.long)
    rows: list[int] = []
    cols: list[int] = []
    for row, window in enumerate(windows):
        n = len(window.input_ids)
        input_ids[row, :n] = torch.tensor(window.input_ids)
        segment_ids[row, :n] = torch.tensor(window.segment_ids)
        rows.extend([row] * len(window.step_end_positions))
        cols.extend(window.step_end_positions)
    # Segment s > first_step of a window is its chain's scored step s - 1, listed at the
    # batch index (steps of earlier windows) + (s - 1 - first_step); segments 1..first_step
    # are the context steps before them (read, not scored: no step of their own here).
    first = torch.tensor([window.first_step + 1 for window in windows], dtype=torch.long)  # [B]
    base = (
        torch.tensor(
            np.cumsum([0, *(len(window.step_end_positions) for window in windows[:-1])]),
            dtype=torch.long,
        )
        - first
    )  # [B]
    step_of_token = torch.where(segment_ids >= first[:, None], segment_ids + base[:, None], -1)
    return WindowBatch(
        input_ids=input_ids.to(device),
        segment_ids=segment_ids.to(device),
        step_rows=torch.tensor(rows, dtype=torch.long, device=device),
        step_cols=torch.tensor(cols, dtype=torch.long, device=device),
        step_of_token=step_of_token.to(device),
        tokens=sum(len(window.input_ids) for window in windows),
    )


def encode_steps(
    backbone: Backbone,
    kind: str,
    batch: WindowBatch,
    pooling: str = "mean",
    step_head: nn.Module | None = None,
) -> torch.Tensor:
    """Every step's representation (module docstring): [N, 2H] for 'mean', [N, H] for
    'separator'; with a ``step_head`` one more column, the backbone's own log-odds that
    the step is correct."""
    if kind == "encoder":
        mask = step_attention_mask(batch.segment_ids)  # [B, 1, L, L]
    else:
        mask = (batch.segment_ids >= 0).long()  # [B, L]; causal attention does the rest
    hidden = backbone(input_ids=batch.input_ids, attention_mask=mask).last_hidden_state
    at_separator = hidden[batch.step_rows, batch.step_cols]  # [N, H]
    parts = [at_separator]
    if pooling == "mean":
        steps = batch.step_rows.shape[0]
        inside = batch.step_of_token >= 0  # [B, L]
        index = batch.step_of_token[inside]  # [T] step of each step token
        sums = hidden.new_zeros((steps, hidden.shape[-1])).index_add_(0, index, hidden[inside])
        counts = torch.bincount(index, minlength=steps).clamp_min(1).to(hidden.dtype)  # [N]
        parts.insert(0, sums / counts[:, None])
    if step_head is not None:
        logits = step_head(at_separator).float()  # [N, 2]
        parts.append((logits[:, 1:] - logits[:, :1]).to(hidden.dtype))  # [N, 1]
    return torch.cat(parts, dim=-1) if len(parts) > 1 else at_separator


class EnsembleHead(nn.Module):
    """E independent two-layer MLPs evaluated together: [N, H] (and [N, C] context) ->
    [E, N] logits.

    The step representation is layer-normed; the context features (a step's place in its
    chain, the final answer's grade: ``inputs.step_context``) join it after the norm, so a
    few 0/1 inputs are not drowned by hundreds of hidden units. With ``prior`` the
    representation's last column is the backbone's own log-odds (``encode_steps``' step
    head): it joins the context and is also added to every member's logit with a learned
    weight that starts at 1, so an untrained head already scores like the backbone. The
    first layers of all members are one [H + C, E*Hh] matrix, so the expensive part is a
    single well-shaped GEMM rather than E small ones (faster on a CPU: BENCHMARKS.md,
    "Figures from the code's comments")."""

    def __init__(
        self,
        width: int,
        hidden: int,
        members: int,
        dropout: float = 0.0,
        context: int = 0,
        prior: bool = False,
    ) -> None:
        super().__init__()
        self.width, self.hidden, self.members, self.context = width, hidden, members, context
        self.prior = prior
        inputs = width + context + int(prior)
        self.w1 = nn.Parameter(torch.empty(inputs, members * hidden))  # [H+C, E*Hh]
        self.b1 = nn.Parameter(torch.zeros(members * hidden))  # [E*Hh]
        self.w2 = nn.Parameter(torch.empty(members, hidden))  # [E, Hh]
        self.b2 = nn.Parameter(torch.zeros(members))  # [E]
        if prior:
            self.prior_weight = nn.Parameter(torch.ones(members))  # [E]
        self.norm = nn.LayerNorm(width)
        self.dropout = nn.Dropout(dropout)
        bound1, bound2 = 1 / width**0.5, 1 / hidden**0.5
        nn.init.uniform_(self.w1, -bound1, bound1)
        nn.init.uniform_(self.w2, -bound2, bound2)

    @property
    def input_width(self) -> int:
        """Columns of the step features it reads (the representation and the prior)."""
        return self.width + int(self.prior)

    def forward(self, features: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        features = features.float()
        parts = [self.norm(features[:, : self.width])]  # [N, H]
        if self.context:
            if context is None:
                raise ValueError(f"this head reads {self.context} context features per step")
            parts.append(context.float())
        if self.prior:
            parts.append(features[:, self.width :])  # [N, 1]
        x = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]  # [N, H+C(+1)]
        h = torch.addmm(self.b1, x, self.w1)  # [N, E*Hh]
        h = self.dropout(nn.functional.gelu(h)).view(-1, self.members, self.hidden)  # [N, E, Hh]
        logits = torch.einsum("neh,eh->en", h, self.w2) + self.b2[:, None]  # [E, N]
        if self.prior:
            logits = logits + self.prior_weight[:, None] * features[:, self.width]
        return logits

    @torch.no_grad()
    def pass_prior_through(self) -> EnsembleHead:
        """Every member's logit becomes the prior's log-odds exactly: the MLP's output
        layer at zero and the prior's weight at 1 (the weight it starts from), so the head
        scores as the backbone's own step head does (a zero-shot version,
        ``PRMConfig.zero_shot``). Returns the head."""
        if not self.prior:
            raise ValueError("a head without a prior column has nothing to pass through")
        self.w2.zero_()
        self.b2.zero_()
        self.prior_weight.fill_(1.0)
        return self

    def describe(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "hidden": self.hidden,
            "members": self.members,
            "context": self.context,
            "prior": self.prior,
        }


def save_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
