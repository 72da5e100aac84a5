#!/usr/bin/env python
"""Sampling engine throughput: ``TransformersEngine.generate`` (per-completion seeds, left
padding, EOS cut) against a bare ``model.generate(do_sample=True)`` of the same decoder,
same batches, same sampling settings, in the same process, in completions/s and
generated tokens/s (target: >= 0.9 of bare).

    .venv/bin/python bench/bench_sampling_engine.py                       # tiny decoder, CPU
    .venv/bin/python bench/bench_sampling_engine.py --shape qwen2.5-math-1.5b --device cuda \\
        --dtype bfloat16 --prompts 64 --n 8 --batch 64 --max-new-tokens 256

The decoder has random weights built from a config (``tiny``: 4 layers of 128; or
Qwen2.5-Math-1.5B's shape) and a word-level tokenizer of ``--vocab`` made-up words, so
nothing is downloaded; a large vocabulary keeps early EOS rare, so both sides generate
about the same number of tokens. After one uncounted warm-up round, each side runs
``--repeats`` times, alternating, and the best run of each counts (a shared machine's
noise only ever slows a run down).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

TITLE = "Steplab sampling engine throughput benchmark"
EOS_ID = 1


def _model_dir(root: Path, shape: str, vocab: int, device: str = "cpu") -> Path:
    """A random-weight decoder of ``shape`` and a word-level tokenizer, saved. Built as a
    Llama with attention biases, which is Qwen2's architecture: as ``qwen2`` the model
    type would make AutoTokenizer load Qwen2's tokenizer class, which ignores this
    word-level vocabulary. The weights are drawn on ``device`` (a 1.5B model takes half a
    minute on a CPU, a second on a GPU); the seed fixes them on either."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    words = {"[UNK]": 0, "</s>": EOS_ID, **{f"w{i}": i for i in range(2, vocab)}}
    backend = Tokenizer(WordLevel(vocab=words, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="</s>", unk_token="[UNK]"
    )
    sizes: dict[str, Any] = (
        {
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
        }
        if shape == "qwen2.5-math-1.5b"
        else {
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
        }
    )
    config = LlamaConfig(
        vocab_size=vocab,
        eos_token_id=EOS_ID,
        bos_token_id=EOS_ID,
        attention_bias=True,
        tie_word_embeddings=shape == "qwen2.5-math-1.5b",
        **sizes,
    )
    with torch.device("cpu" if device == "auto" else device):
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = EOS_ID
    directory = root / shape
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def _prompts(count: int, vocab: int, seed: int) -> list[str]:
    """Prompts of 8 to 40 random words: uneven lengths, so left padding is exercised."""
    import random

    rng = random.Random(seed)
    return [
        " ".join(f"w{rng.randrange(2, vocab)}" for _ in range(rng.randrange(8, 41)))
        for _ in range(count)
    ]


def _bare(engine: Any, prompts: list[str], params: Any) -> tuple[int, int]:
    """(completions, tokens) of ``model.generate(do_sample=True)`` over the same rows the
    engine batches: each prompt ``n`` times, ``batch_size`` rows a batch, sorted by length."""
    import torch

    tokenizer, model = engine.tokenizer, engine.model
    lengths = [len(tokenizer(p)["input_ids"]) for p in prompts]
    rows = sorted(
        ((i, j) for i in range(len(prompts)) for j in range(params.n)),
        key=lambda row: (lengths[row[0]], row),
    )
    completions = tokens = 0
    torch.manual_seed(params.seed)
    for start in range(0, len(rows), engine.batch_size):
        batch = rows[start : start + engine.batch_size]
        encoded = tokenizer([prompts[i] for i, _ in batch], return_tensors="pt", padding=True).to(
            engine.device
        )
        with torch.inference_mode():
            out = model.generate(
                **encoded,
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=None,
                max_new_tokens=params.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=EOS_ID,
            )
        for row in out[:, encoded["input_ids"].shape[1] :].tolist():
            completions += 1
            tokens += row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
    return completions, tokens


def _commit() -> str:
    try:
        result = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        )
    except OSError:  # no git where the bench runs (a GPU node with a copied tree)
        return "unknown"
    return result.stdout.strip() or "unknown"


def decoder_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every bench of the generation engine takes: the decoder's shape and
    vocabulary, where and how it runs, the sampling batch, and the repeats."""
    parser.add_argument("--shape", choices=("tiny", "qwen2.5-math-1.5b"), default="tiny")
    parser.add_argument("--vocab", type=int, default=None, help="default: 8192 tiny, 151936")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads: on a shared 2-core machine two OpenMP threads spin against "
        "the neighbours and a tiny model's step takes 30x longer",
    )


def decoder_vocab(args: argparse.Namespace) -> int:
    return args.vocab or (151936 if args.shape == "qwen2.5-math-1.5b" else 8192)


def device_name(engine: Any) -> str:
    """The GPU's name, or the CPU's architecture and torch's thread count."""
    import torch

    if engine.device.type == "cuda":
        return str(torch.cuda.get_device_name(0))
    return f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    decoder_arguments(parser)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "bench" / "out" / "sampling_engine.json"
    )
    args = parser.parse_args()
    vocab = decoder_vocab(args)

    import torch

    from prm_training.ml.generation import SamplingParams, TransformersEngine

    torch.set_num_threads(args.threads)
    params = SamplingParams(
        n=args.n, temperature=1.0, top_p=0.95, max_new_tokens=args.max_new_tokens, seed=0
    )
    prompts = _prompts(args.prompts, vocab, seed=1)
    with tempfile.TemporaryDirectory() as root:
        directory = _model_dir(Path(root), args.shape, vocab, args.device)
        engine = TransformersEngine(
            directory, device=args.device, dtype=args.dtype, batch_size=args.batch
        )
        runs: dict[str, list[tuple[float, int, int]]] = {"engine": [], "bare": []}
        # Round 0 warms both sides at the measured shapes and is not counted: on a GPU the
        # first call at a batch's sizes builds its kernels' plans (attention at each new
        # length), which made the side that ran first 3x slower in a best-of-1 run.
        for repeat in range(args.repeats + 1):
            for side in ("engine", "bare"):
                if engine.device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                if side == "engine":
                    out = engine.generate(prompts, params)
                    done = sum(len(row) for row in out)
                    tokens = sum(c.tokens for row in out for c in row)
                else:
                    done, tokens = _bare(engine, prompts, params)
                if engine.device.type == "cuda":
                    torch.cuda.synchronize()
                if repeat:
                    runs[side].append((time.perf_counter() - start, done, tokens))

    best = {side: min(results) for side, results in runs.items()}
    rates = {
        side: {"completions_s": done / seconds, "tokens_s": tokens / seconds, "seconds": seconds}
        for side, (seconds, done, tokens) in best.items()
    }
    ratio = {
        key: rates["engine"][key] / rates["bare"][key] for key in ("completions_s", "tokens_s")
    }
    device = device_name(engine)
    print(TITLE)
    print(
        f"commit {_commit()}, {device}, {args.shape} decoder (random weights, vocab {vocab}), "
        f"dtype {args.dtype}, torch {torch.__version__}"
    )
    print(
        f"{args.prompts} prompts x n={args.n}, batch {args.batch}, max_new_tokens "
        f"{args.max_new_tokens}, temperature 1.0, top_p 0.95, best of {args.repeats}\n"
    )
    print("side | seconds | completions/s | tokens/s")
    print("--- | --- | --- | ---")
    for side in ("engine", "bare"):
        r = rates[side]
        print(f"{side} | {r['seconds']:.2f} | {r['completions_s']:.1f} | {r['tokens_s']:.0f}")
    print(
        f"engine / bare | | {ratio['completions_s']:.2f} | {ratio['tokens_s']:.2f}"
        f"   (target >= 0.90)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "rates": rates, "ratio": ratio},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
