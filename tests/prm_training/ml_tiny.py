"""Tiny backbones built from a config and a word-level tokenizer, saved as local model
directories, so ml/ tests run in seconds on a CPU and never touch a hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prm_training.ml.synthetic import ERROR_WORD, WORDS

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "<s>", "</s>"]
VOCAB_WORDS = [*WORDS, ERROR_WORD, "what", "is", "a", "b", "c", "d", "e"]


def tiny_tokenizer(kind: str):  # noqa: ANN201 - a transformers tokenizer
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([*SPECIALS, *VOCAB_WORDS])}
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    if kind == "encoder":
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            cls_token="[CLS]",
            sep_token="[SEP]",
            pad_token="[PAD]",
            unk_token="[UNK]",
        )
    # A decoder tokenizer without SEP or PAD: the separator falls back to EOS.
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="[UNK]",
    )


def tiny_backbone_dir(
    root: Path, model_type: str, *, seed: int = 0, bert_positions: int = 128
) -> Path:
    """Saves a randomly initialised 2-layer model of ``model_type`` (bert, gpt2 or llama)
    and its tokenizer under ``root / model_type`` and returns that directory.
    ``bert_positions``: the BERT's positions (512 lets a run started from the ML page,
    with the page's default max_length, train on it)."""
    import torch
    from transformers import (
        BertConfig,
        BertModel,
        GPT2Config,
        GPT2Model,
        LlamaModel,
    )

    torch.manual_seed(seed)
    kind = "encoder" if model_type == "bert" else "decoder"
    tokenizer = tiny_tokenizer(kind)
    vocab_size = len(tokenizer)
    if model_type == "bert":
        model = BertModel(
            BertConfig(
                vocab_size=vocab_size,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                max_position_embeddings=bert_positions,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
        )
    elif model_type == "gpt2":
        model = GPT2Model(
            GPT2Config(
                vocab_size=vocab_size,
                n_embd=32,
                n_layer=2,
                n_head=2,
                n_positions=128,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                bos_token_id=4,
                eos_token_id=5,
            )
        )
    elif model_type == "llama":
        model = LlamaModel(tiny_llama_config(vocab_size))
    else:
        raise ValueError(model_type)
    directory = root / model_type
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def tiny_llama_config(vocab_size: int, **extra: Any):  # noqa: ANN201 - a LlamaConfig
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        **extra,
    )


def tiny_settings(backbone: Path, **extra: Any) -> dict[str, Any]:
    """Training settings that train in about a second on the tiny BERT. A run names its
    backbone (prm_training/services/backbones.py): the directory's name, with the
    backbone root pointing at its parent (tests/prm_training/conftest.py does)."""
    return {
        "backbone": backbone.name,
        "mode": "frozen_head",
        "head_epochs": 3,
        "head_hidden": 8,
        "ensemble_size": 2,
        "max_length": 64,
        "device": "cpu",
        **extra,
    }


def tiny_step_prm_dir(root: Path, *, steps: int = 150, seed: int = 0) -> Path:
    """A tiny Llama PRM with its own step head (``LlamaForTokenClassification``, two
    labels, label 1 = correct, as Qwen2.5-Math-PRM's), taught on synthetic chains to
    score each step at its separator, saved under ``root / "llama-prm"``: a backbone
    whose zero-shot step scores already find the synthetic errors."""
    import torch
    from transformers import LlamaForTokenClassification

    from prm_training.ml.data import chains_to_windows
    from prm_training.ml.model import collate_windows
    from prm_training.ml.synthetic import synthetic_chains

    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer("decoder")
    model = LlamaForTokenClassification(tiny_llama_config(len(tokenizer), num_labels=2))
    chains = synthetic_chains(64, seed=seed + 100)
    windows = chains_to_windows(tokenizer, chains, 128)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        batch_windows = [windows[(step * 16 + i) % len(windows)] for i in range(16)]
        batch = collate_windows(batch_windows, int(tokenizer.eos_token_id), torch.device("cpu"))
        labels = torch.tensor(
            [
                int(chains[window.chain_index].labels[window.first_step + i] > 0)
                for window in batch_windows
                for i in range(len(window.step_end_positions))
            ]
        )
        logits = model(
            input_ids=batch.input_ids, attention_mask=(batch.segment_ids >= 0).long()
        ).logits[batch.step_rows, batch.step_cols]
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    directory = root / "llama-prm"
    model.eval().save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def tiny_causal_lm_dir(root: Path, *, seed: int = 0) -> Path:
    """A randomly initialised 2-layer Llama with its LM head and the word-level decoder
    tokenizer (EOS ``</s>``, no pad token), saved under ``root / "tiny-llama-lm"``: a
    generator whose completions are random words that sometimes end with EOS."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer("decoder")
    model = LlamaForCausalLM(
        tiny_llama_config(len(tokenizer), bos_token_id=4, eos_token_id=5, tie_word_embeddings=False)
    )
    model.generation_config.eos_token_id = 5
    directory = root / "tiny-llama-lm"
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory
