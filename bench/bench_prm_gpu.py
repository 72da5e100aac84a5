#!/usr/bin/env python
"""The GPU node's PRM path at size, through Steplab's own code: a decoder backbone built
from a config in the shape of Qwen2.5-Math-1.5B or -7B (random weights: nothing is
downloaded, so the figures are speed and memory, not quality), weights in bfloat16 on
CUDA, long windows.

    .venv/bin/python bench/bench_prm_gpu.py [--size 1.5b|7b|tiny] [--max-length 4096]
        [--chains 64] [--lora-r 16] [--batch 4] [--device auto] [--out FILE]

Three phases, each timed on its own and with the GPU's peak memory:

* features: the frozen backbone's step features (``compute_step_features``: the
  step-masked forward, mean pooling, the step head's prior read at each separator), real
  tokens per second;
* scoring: a bare forward over the same windows, for the ratio ``score_chains`` must keep
  (the frozen path adds only the pooling and the heads);
* LoRA: ``train_prm`` in 'full' mode with LoRA of rank ``--lora-r`` on every linear layer
  and activation checkpointing, one epoch, tokens per second between its first and last
  optimizer step.

On the CPU ``--size tiny`` runs the same code in seconds (the tests do). The steps are
synthetic words of the tests' word-level tokenizer, one token each, long enough that
windows reach ``--max-length``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

TITLE = "Steplab PRM on the GPU node: features, scoring and LoRA at size"
# Qwen2.5-Math's shapes (config.json of the 1.5B and 7B models); "tiny" for the CPU.
SIZES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
               num_attention_heads=28, num_key_value_heads=4),
}  # fmt: skip


def _peak_gib(device: object) -> float:
    import torch

    if getattr(device, "type", "cpu") != "cuda":
        return float("nan")
    return torch.cuda.max_memory_allocated(device) / 2**30


def _reset_peak(device: object) -> None:
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _build_prm(directory: Path, size: str, positions: int, dtype: str, device: object) -> Path:
    """A Qwen2 token classifier with two labels (Qwen2.5-Math-PRM's layout: a decoder
    and a step head), random weights, saved with the tests' word-level tokenizer. The
    weights are drawn on ``device``: 7B of them take minutes on a CPU, a second on a GPU."""
    import torch
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    from tests.prm_training.ml_tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer("decoder")
    tokenizer.save_pretrained(str(directory))
    config = Qwen2Config(
        # Room for the special tokens a Qwen2 directory's tokenizer gains on loading (Qwen
        # pads its own vocabulary the same way: 151,936 rows for 151,665 tokens).
        vocab_size=len(tokenizer) + 64,
        max_position_embeddings=positions,
        num_labels=2,
        **SIZES[size],
    )
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):  # type: ignore[arg-type]
            model = Qwen2ForTokenClassification(config)
    finally:
        torch.set_default_dtype(previous)
    model.save_pretrained(str(directory))
    return directory


def _time_features(args: argparse.Namespace, chains: list, config: object, device: object) -> dict:
    """The frozen backbone's step features against a bare forward over the same windows."""
    import torch

    from prm_training.ml.data import chains_to_windows
    from prm_training.ml.features import bucketed_batches, compute_step_features, pad_token_id
    from prm_training.ml.model import collate_windows, load_configured_backbone

    tokenizer, backbone, kind, step_head = load_configured_backbone(config, device)
    backbone.to(device).eval()
    step_head = step_head.to(device) if step_head is not None else None
    windows = chains_to_windows(tokenizer, chains, args.max_length)
    tokens = sum(len(window.input_ids) for window in windows)
    pad_id = pad_token_id(tokenizer)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def features() -> float:
        _reset_peak(device)
        began = time.perf_counter()
        compute_step_features(
            backbone=backbone,
            kind=kind,
            tokenizer=tokenizer,
            examples=chains,
            max_length=args.max_length,
            device=device,
            batch_size=args.batch,
            pad_id=pad_id,
            step_head=step_head,
        )
        sync()
        return time.perf_counter() - began

    batches = [
        collate_windows(batch, pad_id, device) for batch in bucketed_batches(windows, args.batch)
    ]

    def bare() -> float:
        began = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                backbone(input_ids=batch.input_ids, attention_mask=(batch.segment_ids >= 0).long())
        sync()
        return time.perf_counter() - began

    features()  # warm-up (kernels, allocator)
    feature_s = min(features() for _ in range(2))
    peak = _peak_gib(device)
    bare_s = min(bare() for _ in range(2))
    return {
        "windows": len(windows),
        "tokens": tokens,
        "features_peak_gib": peak,
        "features_tokens_per_s": tokens / feature_s,
        "bare_tokens_per_s": tokens / bare_s,
        "features_vs_bare": bare_s / feature_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=tuple(SIZES), default="1.5b")
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--chains", type=int, default=64)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4, help="windows per forward / step")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "prm_gpu.json")
    args = parser.parse_args()

    import torch

    from prm_training.ml.config import PRMConfig
    from prm_training.ml.launch import train_prm
    from prm_training.ml.model import resolve_device
    from prm_training.ml.synthetic import synthetic_chains

    device = resolve_device(args.device)
    words = max(4, args.max_length // 12)
    chains = synthetic_chains(
        args.chains, seed=1, steps=(6, 10), words_per_step=(words // 2, words)
    )
    report: dict[str, object] = {
        "size": args.size,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "",
        "max_length": args.max_length,
        "chains": args.chains,
    }
    with tempfile.TemporaryDirectory() as tmp:
        frozen = PRMConfig(
            backbone="",
            mode="frozen_head",
            step_prior=True,
            max_length=args.max_length,
            device=str(device),
        )
        dtype = frozen.weights_dtype(device.type)
        start = time.perf_counter()
        backbone_dir = _build_prm(Path(tmp) / "prm", args.size, args.max_length, dtype, device)
        report["build_s"] = time.perf_counter() - start
        frozen = PRMConfig(**{**frozen.to_dict(), "backbone": str(backbone_dir)})
        report.update(_time_features(args, chains, frozen, device))
        report["weights_dtype"] = dtype
        if device.type == "cuda":
            torch.cuda.empty_cache()

        lora = PRMConfig(
            backbone=str(backbone_dir),
            mode="full",
            lora_r=args.lora_r,
            gradient_checkpointing=True,
            epochs=1,
            batch_size=args.batch,
            max_length=args.max_length,
            heldout_metrics=False,
            calibrate=False,
            device=str(device),
            report_every_s=0.0,
        )
        stamps: list[float] = []
        _reset_peak(device)
        train_prm(
            lora,
            chains,
            [],
            Path(tmp) / "lora",
            progress=lambda _: stamps.append(time.perf_counter()),
        )
        report["lora_peak_gib"] = _peak_gib(device)
        steps = len(stamps)
        if steps > 1:
            # Tokens of the steps after the first (its time holds the warm-up).
            report["lora_tokens_per_s"] = (
                report["tokens"] * (steps - 1) / steps / (stamps[-1] - stamps[0])
            )
        report["lora_steps"] = steps
        report["lora_weights_dtype"] = lora.weights_dtype(device.type)

    def show(value: object, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, float) else str(value)

    rows = [
        (
            "backbone (random weights)",
            f"{args.size}, {report['weights_dtype']}, {report['device']}",
        ),
        (
            "chains / windows / real tokens",
            f"{args.chains} / {report['windows']} / {report['tokens']}",
        ),
        ("frozen features tokens/s", show(report["features_tokens_per_s"], ",.0f")),
        ("bare forward tokens/s", show(report["bare_tokens_per_s"], ",.0f")),
        ("features / bare", show(report["features_vs_bare"], ".3f")),
        ("features peak GiB", show(report["features_peak_gib"], ".1f")),
        (f"LoRA r={args.lora_r} train tokens/s", show(report.get("lora_tokens_per_s"), ",.0f")),
        ("LoRA peak GiB", show(report["lora_peak_gib"], ".1f")),
        ("load average 1/5/15 min", " ".join(f"{x:.1f}" for x in os.getloadavg())),
    ]
    width = max(len(name) for name, _ in rows)
    print(TITLE)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>28}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
