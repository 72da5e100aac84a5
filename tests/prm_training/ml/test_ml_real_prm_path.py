"""The GPU node's path on tiny decoders built from a config, on the CPU: backbone weights in
bfloat16, an open PRM's own step head read as a zero-shot prior and as the heads' starting
point, and training data-parallel over two processes (gloo)."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from prm_training.ml.checkpoint import load_prm
from prm_training.ml.config import PRMConfig
from prm_training.ml.launch import train_prm
from prm_training.ml.metrics import evaluate
from prm_training.ml.score import score_chains
from prm_training.ml.synthetic import synthetic_chains
from tests.prm_training.ml_tiny import tiny_backbone_dir, tiny_step_prm_dir
from tests.prm_training.zero_shot_reference import zero_shot_scores


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_backbone_dir(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_step_prm_dir(tmp_path_factory.mktemp("llama-prm"))


def _frozen(directory: Path, **overrides: object) -> PRMConfig:
    """Small settings on a tiny backbone: frozen_head unless ``overrides`` say 'full'."""
    settings: dict[str, object] = dict(
        backbone=str(directory),
        mode="frozen_head",
        head_epochs=10,
        head_hidden=16,
        ensemble_size=2,
        max_length=64,
        device="cpu",
        report_every_s=0.0,
    )
    settings.update(overrides)
    return PRMConfig(**settings)  # type: ignore[arg-type]


def test_auto_weights_are_bfloat16_on_cuda_where_the_backbone_does_not_train() -> None:
    assert PRMConfig(mode="frozen_head").weights_dtype("cuda") == "bfloat16"
    assert PRMConfig(mode="full", lora_r=8).weights_dtype("cuda") == "bfloat16"
    assert PRMConfig(mode="full").weights_dtype("cuda") == "float32"
    assert PRMConfig(mode="frozen_head").weights_dtype("cpu") == "float32"
    with pytest.raises(ValueError, match="full fine-tuning keeps float32"):
        PRMConfig(mode="full", dtype="bfloat16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        PRMConfig(dtype="float16")


def test_a_backbone_in_bfloat16_trains_scores_and_reloads_in_bfloat16(
    llama_dir: Path, tmp_path: Path
) -> None:
    # Given: a tiny Llama whose weights load in bfloat16 (what 'auto' does on a GPU)
    chains = synthetic_chains(60, seed=21)
    config = _frozen(llama_dir, dtype="bfloat16", cache_dir=str(tmp_path / "cache"))

    # When
    result = train_prm(config, chains[:48], chains[48:], tmp_path / "bf16")
    prm = load_prm(result.checkpoint_dir)

    # Then: the weights are bfloat16 from loading on, the metrics are real numbers, the
    # cache is kept apart from float32 features, and the checkpoint scores the same
    assert {p.dtype for p in prm.backbone.parameters()} == {torch.bfloat16}
    assert 0.0 <= result.metrics["step_auroc"] <= 1.0
    assert [path.name for path in (tmp_path / "cache").iterdir()][0].endswith("bfloat16")
    scores = list(score_chains(prm, chains[48:]))
    assert evaluate(chains[48:], scores, prm.readout)["step_auroc"] == pytest.approx(
        result.metrics["step_auroc"], abs=1e-6
    )


def test_an_open_prm_s_own_step_scores_are_a_zero_shot_prior(prm_dir: Path) -> None:
    # Given: a tiny PRM whose step head was taught that "wrong" marks an error
    chains = synthetic_chains(80, seed=22)
    config = _frozen(prm_dir, step_prior=True)

    # When: its own scores are read, no head trained, no label seen
    scores = zero_shot_scores(config, chains)

    # Then: they find the errors, P(correct) is label 1's probability
    metrics = evaluate(chains, scores, 0.5)
    assert metrics["step_auroc"] > 0.9, metrics
    pairs = [
        (p, y)
        for s, c in zip(scores, chains, strict=True)
        for p, y in zip(s.step_probs, c.labels or (), strict=True)
    ]
    wrong, right = [p for p, y in pairs if y < 0], [p for p, y in pairs if y > 0]
    assert np.mean(wrong) < 0.5 < np.mean(right)


def test_the_heads_start_from_the_prior_and_the_run_reports_it_beside_the_rules(
    prm_dir: Path, tmp_path: Path
) -> None:
    # Given: the tiny PRM as the backbone, with its step prior
    chains = synthetic_chains(100, seed=23)
    config = _frozen(prm_dir, step_prior=True, head_epochs=5)

    # When: a version is trained
    result = train_prm(config, chains[:80], chains[80:], tmp_path / "prior")

    # Then: the run's metrics hold the zero-shot prior's held-out scores beside its own (a
    # trained head is not always better than where it started: on an AMD EPYC CPU, 5 epochs
    # took this one from AUROC 0.984 to 0.952 while another CPU's stayed within 0.02; the
    # report is what lets ML staff see it), and the checkpoint reads the PRM's own directory
    zero_shot = evaluate(chains[80:], zero_shot_scores(config, chains[80:]), 0.5)
    assert result.metrics["zero_shot_step_auroc"] == pytest.approx(zero_shot["step_auroc"])
    assert 0.5 < result.metrics["step_auroc"] <= 1.0
    stored = json.loads((Path(result.checkpoint_dir) / "config.json").read_text())
    assert (
        stored["head"]["prior"] is True and not (Path(result.checkpoint_dir) / "backbone").exists()
    )
    prm = load_prm(result.checkpoint_dir)
    assert prm.step_head is not None
    scores = list(score_chains(prm, chains[80:]))
    assert evaluate(chains[80:], scores, prm.readout)["step_auroc"] == pytest.approx(
        result.metrics["step_auroc"], abs=1e-6
    )


def test_an_untrained_head_scores_like_the_prior(prm_dir: Path) -> None:
    from prm_training.ml.model import EnsembleHead

    # Given: a head whose MLP outputs nothing (its last layer zeroed)
    head = EnsembleHead(8, 4, 3, context=0, prior=True)
    with torch.no_grad():
        head.w2.zero_()
    features = torch.randn(5, 9)  # [N, 8 + the prior's column]

    # Then: every member's logit is the prior's log-odds
    assert torch.allclose(head(features), features[:, -1].expand(3, 5))


def test_a_zero_shot_version_scores_every_step_with_the_prm_s_own_head(
    prm_dir: Path, tmp_path: Path
) -> None:
    # Given: the tiny PRM and chains nobody labeled
    chains = synthetic_chains(30, seed=26)
    unlabeled = [replace(chain, labels=None) for chain in chains]
    config = _frozen(prm_dir, step_prior=True, zero_shot=True)

    # When: a zero-shot version is made (train_prm hands it to zero_shot_prm)
    result = train_prm(config, unlabeled[:20], unlabeled[20:], tmp_path / "zero")

    # Then: its checkpoint scores every step as the backbone's own step head does, with
    # one head (nothing to disagree), and its metrics say zero-shot with no held-out ones
    prm = load_prm(result.checkpoint_dir)
    ours = [p for item in score_chains(prm, chains) for p in item.step_probs]
    own = [p for item in zero_shot_scores(config, chains) for p in item.step_probs]
    assert ours == pytest.approx(own, abs=1e-6)
    assert prm.head.members == 1 and prm.readout.threshold == 0.5
    assert result.metrics["zero_shot"] == 1.0
    assert "train_loss" not in result.metrics and "step_auroc" not in result.metrics

    # ...and with labeled chains: the readout is chosen on them and the held-out metrics
    # are the prior's, beside the rules'
    labeled = train_prm(config, chains[:20], chains[20:], tmp_path / "zero-labeled")
    assert labeled.metrics["step_auroc"] == pytest.approx(labeled.metrics["zero_shot_step_auroc"])
    assert "baseline_position_prior_step_auroc" in labeled.metrics
    with pytest.raises(ValueError, match="set step_prior"):
        PRMConfig(zero_shot=True)


def test_a_backbone_without_a_step_head_is_refused_for_the_prior(llama_dir: Path) -> None:
    with pytest.raises(ValueError, match="has no step head"):
        zero_shot_scores(_frozen(llama_dir, step_prior=True), synthetic_chains(2))
    with pytest.raises(ValueError, match="frozen_head"):
        PRMConfig(mode="full", step_prior=True)


def test_a_prm_shipping_its_own_code_is_loaded_with_it(prm_dir: Path, tmp_path: Path) -> None:
    # Given: the PRM's directory declares its model class through auto_map, as
    # Qwen2.5-Math-PRM's does (Qwen2ForProcessRewardModel), with the code beside it
    directory = tmp_path / "custom-prm"
    shutil.copytree(prm_dir, directory)
    (directory / "modeling_tiny_prm.py").write_text(
        "from transformers import LlamaForTokenClassification\n\n\n"
        "class TinyForProcessRewardModel(LlamaForTokenClassification):\n"
        "    pass\n"
    )
    declared = json.loads((directory / "config.json").read_text())
    declared["architectures"] = ["TinyForProcessRewardModel"]
    declared["auto_map"] = {"AutoModel": "modeling_tiny_prm.TinyForProcessRewardModel"}
    (directory / "config.json").write_text(json.dumps(declared))
    chains = synthetic_chains(20, seed=24)

    # When / Then: its step scores are the same as the plain token classifier's
    ours = zero_shot_scores(_frozen(directory, step_prior=True), chains)
    plain = zero_shot_scores(_frozen(prm_dir, step_prior=True), chains)
    flat = [p for scores in ours for p in scores.step_probs]
    assert flat == pytest.approx([p for scores in plain for p in scores.step_probs])


def test_more_processes_than_cpu_cores_is_refused_before_any_starts(
    llama_dir: Path, tmp_path: Path
) -> None:
    # Given: a CPU run asking one process more than the node has cores (each would load
    # the backbone: 64 once took a node down)
    cores = os.cpu_count() or 1
    config = _frozen(llama_dir, mode="full", processes=cores + 1)
    chains = synthetic_chains(8, seed=3)
    # When / Then: refused, naming the cores, and no process was started
    before = multiprocessing.active_children()
    with pytest.raises(ValueError, match=f"this node has {cores} CPU cores"):
        train_prm(config, chains[:6], chains[6:], tmp_path / "ddp")
    assert multiprocessing.active_children() == before


def test_full_mode_trains_data_parallel_in_two_processes(llama_dir: Path, tmp_path: Path) -> None:
    from prm_training.ml.fitting import TrainProgress

    # Given: LoRA on the tiny Llama, spread over two processes (gloo on the CPU; NCCL and
    # one GPU each on a node)
    chains = synthetic_chains(160, seed=25)
    config = _frozen(
        llama_dir,
        mode="full",
        processes=2,
        lora_r=4,
        lora_alpha=8.0,
        epochs=6,
        batch_size=8,
        learning_rate=5e-3,
        head_learning_rate=5e-3,
    )
    events: list[TrainProgress] = []

    # When
    result = train_prm(config, chains[:128], chains[128:], tmp_path / "ddp", progress=events.append)

    # Then: rank 0's progress came back, each rank took half the steps, the PRM learned
    # the signal, and the one checkpoint it wrote scores the same
    # 6 epochs x 16 batches of 8 windows, half of them on each rank
    assert events and events[-1].total_steps == 6 * 16 // 2
    assert result.metrics["step_auroc"] > 0.85, result.metrics
    prm = load_prm(result.checkpoint_dir)
    scores = list(score_chains(prm, chains[128:]))
    assert evaluate(chains[128:], scores, prm.readout)["step_auroc"] == pytest.approx(
        result.metrics["step_auroc"], abs=1e-5
    )


def test_a_stop_ends_every_training_process_and_writes_nothing(
    llama_dir: Path, tmp_path: Path
) -> None:
    from prm_training.ml.fitting import TrainingCancelled

    config = _frozen(llama_dir, mode="full", processes=2, epochs=50)
    seen: list[object] = []
    with pytest.raises(TrainingCancelled):
        train_prm(
            config,
            synthetic_chains(60, seed=26),
            [],
            tmp_path / "stopped",
            progress=seen.append,
            should_stop=lambda: bool(seen),
        )
    assert not (tmp_path / "stopped").exists()


def test_a_lora_run_resumes_from_an_earlier_version_s_backbone(
    llama_dir: Path, tmp_path: Path
) -> None:
    # Given: a first LoRA round on the tiny Llama, its adapters merged into the checkpoint
    chains = synthetic_chains(80, seed=27)
    lora = dict(mode="full", lora_r=4, lora_alpha=8.0, epochs=2, learning_rate=5e-3)
    first = train_prm(_frozen(llama_dir, **lora), chains[:64], chains[64:], tmp_path / "v1")
    merged = Path(first.checkpoint_dir) / "backbone"

    # When: the next round names that version's backbone (what `version:<id>` resolves to)
    seen: dict[str, torch.Tensor] = {}
    import peft

    original = peft.get_peft_model

    def remember(model: torch.nn.Module, adapters: object) -> object:
        seen.update({name: w.detach().clone() for name, w in model.state_dict().items()})
        return original(model, adapters)

    from unittest.mock import patch

    with patch("peft.get_peft_model", remember):
        second = train_prm(_frozen(merged, **lora), chains[:64], chains[64:], tmp_path / "v2")

    # Then: it starts from the first round's merged weights, not from the base model,
    # trains new adapters on them, and its checkpoint loads and scores as it reported
    first_weights = load_prm(first.checkpoint_dir).backbone.state_dict()
    assert seen and all(torch.equal(seen[name], first_weights[name]) for name in first_weights)
    prm = load_prm(second.checkpoint_dir)
    scores = list(score_chains(prm, chains[64:]))
    assert evaluate(chains[64:], scores, prm.readout)["step_auroc"] == pytest.approx(
        second.metrics["step_auroc"], abs=1e-5
    )
    # And a checkpoint written before backbone/ held its tokenizer still resumes: the
    # tokenizer saved beside it is read
    from prm_training.ml.model import load_backbone

    for stale in [*merged.glob("tokenizer*"), *merged.glob("special_tokens_map.json")]:
        stale.unlink()
    tokenizer, _, _ = load_backbone(merged)
    assert len(tokenizer) == len(prm.tokenizer)
