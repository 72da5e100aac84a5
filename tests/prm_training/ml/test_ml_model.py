"""The PRM on tiny backbones built from a config: the prefix property for an encoder and
for decoders, learning a learnable signal, checkpoint round trip, cancellation."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
import torch

from prm_training.ml.checkpoint import load_prm
from prm_training.ml.config import PRMConfig
from prm_training.ml.data import ChainExample, chains_to_windows
from prm_training.ml.fitting import TrainingCancelled, TrainProgress
from prm_training.ml.inputs import CONTEXT_WIDTH
from prm_training.ml.launch import train_prm
from prm_training.ml.model import (
    EnsembleHead,
    backbone_fingerprint,
    collate_windows,
    encode_steps,
    load_backbone,
    step_attention_mask,
    step_feature_width,
)
from prm_training.ml.score import LoadedPRM, score_chains
from prm_training.ml.synthetic import synthetic_chains
from tests.prm_training.ml_tiny import tiny_backbone_dir


@pytest.fixture(scope="module")
def backbones(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-backbones")
    return {name: tiny_backbone_dir(root, name) for name in ("bert", "gpt2", "llama")}


def _untrained_prm(
    directory: Path,
    *,
    max_length: int = 128,
    mode: str = "full",
    step_pooling: str = "mean",
    context: str = "prefix",
) -> LoadedPRM:
    tokenizer, backbone, kind = load_backbone(directory)
    torch.manual_seed(0)
    width = step_feature_width(int(backbone.config.hidden_size), step_pooling)
    head = EnsembleHead(
        width, 16, 3, dropout=0.0, context=0 if context == "none" else CONTEXT_WIDTH
    )
    config = PRMConfig(
        backbone=str(directory),
        mode=mode,
        max_length=max_length,
        step_pooling=step_pooling,
        context=context,
    )
    return LoadedPRM(
        config=config,
        tokenizer=tokenizer,
        backbone=backbone.eval(),
        head=head.eval(),
        kind=kind,
        device=torch.device("cpu"),
        fingerprint=backbone_fingerprint(directory),
    )


BASE = ChainExample(
    1,
    "what is a",
    ("add the two numbers", "then divide by three", "so we get five", "hence value equals six"),
)
CHANGED = ChainExample(
    2,
    "what is a",
    (
        "add the two numbers",
        "then divide by three",
        "wrong square root",
        "total",
        "sum of each term",
    ),
)
OTHER = ChainExample(3, "what is b plus c plus d", ("multiply both sides " * 5,))


def test_step_mask_lets_a_token_see_the_problem_and_steps_up_to_its_own() -> None:
    segments = torch.tensor([[0, 0, 1, 1, 2, -1]])
    mask = step_attention_mask(segments)[0, 0]
    assert mask.shape == (6, 6)
    assert mask[3].tolist() == [True, True, True, True, False, False]  # step 1 sees 0..1
    assert mask[0].tolist() == [True, True, False, False, False, False]  # problem: itself
    assert mask[5].tolist() == [True, True, False, False, False, False]  # padding row: not empty


@pytest.mark.parametrize("model_type", ["bert", "gpt2", "llama"])
@pytest.mark.parametrize("max_length", [128, 16])
@pytest.mark.parametrize("step_pooling", ["mean", "separator"])
def test_changing_a_later_step_leaves_earlier_scores_unchanged(
    backbones: dict[str, Path], model_type: str, max_length: int, step_pooling: str
) -> None:
    # Given: a prefix-only PRM (DESIGN.md's invariant 3) and two chains that share the
    # problem and the first two steps
    prm = _untrained_prm(backbones[model_type], max_length=max_length, step_pooling=step_pooling)

    # When: both are scored in one padded batch next to an unrelated longer chain
    base, changed, _ = list(score_chains(prm, [BASE, CHANGED, OTHER], batch_size=8))

    # Then: the shared prefix scores the same, the changed step does not
    np.testing.assert_allclose(base.step_probs[:2], changed.step_probs[:2], atol=1e-5)
    np.testing.assert_allclose(
        np.array(base.member_probs)[:, :2], np.array(changed.member_probs)[:, :2], atol=1e-5
    )
    assert abs(base.step_probs[2] - changed.step_probs[2]) > 1e-4
    # ...and a chain scored alone scores as it did in the batch (padding does not leak)
    [alone] = score_chains(prm, [BASE])
    np.testing.assert_allclose(alone.step_probs, base.step_probs, atol=1e-5)


@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_a_step_in_a_later_window_still_reads_the_step_before_it(
    backbones: dict[str, Path], model_type: str
) -> None:
    # Given: 16-token windows, so each step of these chains is scored in a window of its
    # own after the first, and two chains that differ only in their second step
    prm = _untrained_prm(backbones[model_type], max_length=16)
    windows = chains_to_windows(prm.tokenizer, [BASE], 16)
    assert len(windows) > 2 and all(w.context_steps for w in windows[1:])
    other = ChainExample(4, BASE.problem, (BASE.steps[0], "wrong square root", *BASE.steps[2:]))

    # When
    base, changed = score_chains(prm, [BASE, other])

    # Then: the third step, in a later window, reads the second (the windows overlap)
    # while the first, before it, does not move (invariant 3)
    assert abs(base.step_probs[2] - changed.step_probs[2]) > 1e-5
    np.testing.assert_allclose(base.step_probs[0], changed.step_probs[0], atol=1e-5)


def test_without_the_step_mask_an_encoder_would_see_later_steps(
    backbones: dict[str, Path],
) -> None:
    # The control for the test above: a plain padding mask on BERT leaks the future.
    from prm_training.ml.data import chains_to_windows

    prm = _untrained_prm(backbones["bert"])
    windows = chains_to_windows(prm.tokenizer, [BASE, CHANGED], 128)
    batch = collate_windows(windows, 0, prm.device)
    with torch.no_grad():
        masked = encode_steps(prm.backbone, "encoder", batch)
        leaky = encode_steps(prm.backbone, "decoder", batch)  # 2-D mask, bidirectional model
    assert torch.allclose(masked[0], masked[4], atol=1e-5)  # step 1 of BASE vs of CHANGED
    assert not torch.allclose(leaky[0], leaky[4], atol=1e-3)


def test_a_step_is_read_from_its_own_tokens_as_well_as_its_separator(
    backbones: dict[str, Path],
) -> None:
    # Given: the batch of the test above
    from prm_training.ml.data import chains_to_windows

    prm = _untrained_prm(backbones["bert"])
    windows = chains_to_windows(prm.tokenizer, [BASE, OTHER], 128)
    batch = collate_windows(windows, 0, prm.device)

    # When
    with torch.no_grad():
        hidden = prm.backbone(
            input_ids=batch.input_ids, attention_mask=step_attention_mask(batch.segment_ids)
        ).last_hidden_state
        pooled = encode_steps(prm.backbone, "encoder", batch, "mean")
        separator = encode_steps(prm.backbone, "encoder", batch, "separator")

    # Then: [mean of the step's tokens (its separator included), its separator's state]
    width = hidden.shape[-1]
    assert pooled.shape == (len(BASE.steps) + len(OTHER.steps), 2 * width)
    torch.testing.assert_close(pooled[:, width:], separator)
    for step, end in enumerate(windows[0].step_end_positions):
        start = windows[0].segment_ids.index(step + 1)
        torch.testing.assert_close(pooled[step, :width], hidden[0, start : end + 1].mean(0))


def test_the_outcome_context_reads_the_final_answer_and_the_prefix_context_only_at_the_end(
    backbones: dict[str, Path],
) -> None:
    # Given: one chain graded right and the same chain graded wrong
    right, wrong = replace(BASE, answer_correct=True), replace(BASE, answer_correct=False)

    # When: scored with each context
    outcome = _untrained_prm(backbones["bert"], context="outcome")
    prefix = _untrained_prm(backbones["bert"], context="prefix")
    by_outcome = [item.step_probs for item in score_chains(outcome, [right, wrong])]
    by_prefix = [item.step_probs for item in score_chains(prefix, [right, wrong])]

    # Then: with 'outcome' every step moves with the grade; with 'prefix' only the last
    # (the step that states the answer)
    assert all(abs(a - b) > 1e-6 for a, b in zip(*by_outcome, strict=True))
    np.testing.assert_allclose(by_prefix[0][:-1], by_prefix[1][:-1], atol=1e-6)
    assert abs(by_prefix[0][-1] - by_prefix[1][-1]) > 1e-6


def _tiny_config(directory: Path, **overrides: object) -> PRMConfig:
    settings: dict[str, object] = dict(
        backbone=str(directory),
        mode="full",
        epochs=4,
        batch_size=16,
        learning_rate=2e-3,
        head_learning_rate=3e-3,
        head_hidden=32,
        ensemble_size=3,
        max_length=64,
        report_every_s=0.0,
    )
    settings.update(overrides)
    return PRMConfig(**settings)  # type: ignore[arg-type]


def test_full_mode_learns_a_learnable_signal(backbones: dict[str, Path], tmp_path: Path) -> None:
    # Given: steps are wrong exactly when they contain the word "wrong"
    chains = synthetic_chains(260, seed=3)
    train, heldout = chains[:200], chains[200:]
    events: list[TrainProgress] = []

    # When
    config = _tiny_config(backbones["bert"], epochs=10, learning_rate=5e-3, head_learning_rate=5e-3)
    result = train_prm(config, train, heldout, tmp_path / "ckpt", progress=events.append)

    # Then: held-out steps are ranked almost perfectly and progress was reported
    assert result.metrics["step_auroc"] > 0.9, result.metrics
    assert result.metrics["processbench_f1"] > 0.6, result.metrics
    assert result.train_chains == 200 and result.heldout_chains == 60
    assert events[-1].step == events[-1].total_steps
    assert events[-1].epoch == 10
    assert events[-1].loss < events[0].loss


@pytest.mark.parametrize("mode", ["full", "frozen_head"])
def test_checkpoint_round_trip_scores_the_same(
    backbones: dict[str, Path], tmp_path: Path, mode: str, feature_caches: dict[Any, Any]
) -> None:
    # Given: a trained checkpoint (decoder backbone, to cover that path end to end) on
    # chains whose final answers are graded, so its readout has a threshold for right ones
    chains = [
        replace(chain, answer_correct=-1 not in (chain.labels or ()))
        for chain in synthetic_chains(50, seed=5)
    ]
    config = _tiny_config(backbones["llama"], mode=mode, epochs=1, head_epochs=3)
    result = train_prm(config, chains[:40], chains[40:], tmp_path / "ckpt")
    root = Path(result.checkpoint_dir)

    # Then: the documented layout
    for name in ("config.json", "head.safetensors", "metrics.json", "tokenizer"):
        assert (root / name).exists(), name
    assert (root / "backbone").is_dir() == (mode == "full")

    # When: loaded in a fresh cache state and rescored
    feature_caches.clear()
    prm = load_prm(root)
    scores = list(score_chains(prm, chains[40:]))

    # Then: the held-out metrics it stored are reproduced from the loaded checkpoint
    from prm_training.ml.metrics import evaluate

    assert prm.threshold == result.metrics["threshold"]
    assert prm.threshold_right == result.metrics["threshold_right"]
    assert json.loads((root / "config.json").read_text())["threshold"] == prm.threshold
    recomputed = evaluate(chains[40:], scores, prm.readout)
    for key in ("step_auroc", "first_error_accuracy", "processbench_f1"):
        assert recomputed[key] == pytest.approx(result.metrics[key], abs=1e-6)
    assert all(item.member_probs is not None and len(item.member_probs) == 3 for item in scores)
    assert prm.config == config
    assert prm.calibration == (
        result.metrics["calibration_scale"],
        result.metrics["calibration_bias"],
    )


def test_a_checkpoint_from_before_pooling_and_context_loads_as_it_was_trained(
    backbones: dict[str, Path], tmp_path: Path, feature_caches: dict[Any, Any]
) -> None:
    # Given: a checkpoint trained the old way, its stored config stripped of the new keys
    # (as one written before 2026-11-25 is)
    chains = synthetic_chains(30, seed=9)
    config = _tiny_config(
        backbones["bert"],
        mode="frozen_head",
        head_epochs=2,
        step_pooling="separator",
        context="none",
        calibrate=False,
    )
    result = train_prm(config, chains[:24], chains[24:], tmp_path / "old")
    expected = [item.step_probs for item in score_chains(load_prm(result.checkpoint_dir), chains)]
    meta_path = Path(result.checkpoint_dir) / "config.json"
    meta = json.loads(meta_path.read_text())
    for key in ("step_pooling", "context", "calibrate"):
        del meta["prm_config"][key]
    del meta["calibration"], meta["head"]["context"]
    meta_path.write_text(json.dumps(meta))

    # When
    feature_caches.clear()
    prm = load_prm(result.checkpoint_dir)

    # Then: it reads separator states without context, as trained, and scores the same
    assert (prm.config.step_pooling, prm.config.context) == ("separator", "none")
    assert prm.calibration == (1.0, 0.0)
    scores = [item.step_probs for item in score_chains(prm, chains)]
    for got, want in zip(scores, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_calibration_makes_probabilities_match_frequencies(
    backbones: dict[str, Path], tmp_path: Path
) -> None:
    # Given: mostly-correct steps, which the balanced loss pushes towards 0.5
    chains = synthetic_chains(240, seed=10)
    train, heldout = chains[:180], chains[180:]
    settings = dict(mode="frozen_head", head_epochs=30, context="none")

    # When: trained with and without calibration
    raw = train_prm(
        _tiny_config(backbones["bert"], calibrate=False, **settings), train, heldout, tmp_path / "a"
    ).metrics
    calibrated = train_prm(
        _tiny_config(backbones["bert"], **settings), train, heldout, tmp_path / "b"
    ).metrics

    # Then: the held-out calibration error falls; the ranking barely moves (each member is
    # rescaled, so only the mean over members can reorder steps)
    assert calibrated["calibration_error"] < raw["calibration_error"], (calibrated, raw)
    assert calibrated["step_auroc"] == pytest.approx(raw["step_auroc"], abs=0.01)


def test_frozen_checkpoint_refuses_a_different_backbone(
    backbones: dict[str, Path], tmp_path: Path
) -> None:
    chains = synthetic_chains(20, seed=6)
    config = _tiny_config(backbones["bert"], mode="frozen_head", head_epochs=1)
    result = train_prm(config, chains[:15], chains[15:], tmp_path / "ckpt")
    meta_path = Path(result.checkpoint_dir) / "config.json"
    meta = json.loads(meta_path.read_text())
    meta["prm_config"]["backbone"] = str(backbones["gpt2"])
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="not the backbone"):
        load_prm(result.checkpoint_dir)


@pytest.mark.parametrize("mode", ["full", "frozen_head"])
def test_cancellation_raises_and_leaves_no_checkpoint(
    backbones: dict[str, Path], tmp_path: Path, mode: str
) -> None:
    # Given: a stop flag that turns true after the second check
    checks = []

    def should_stop() -> bool:
        checks.append(1)
        return len(checks) > 2

    out = tmp_path / "ckpt"
    config = _tiny_config(backbones["bert"], mode=mode, epochs=5, head_epochs=50)

    # When / Then
    with pytest.raises(TrainingCancelled):
        train_prm(config, synthetic_chains(60, seed=7), [], out, should_stop=should_stop)
    assert len(checks) == 3
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no partial directory either


def test_retraining_into_the_same_directory_replaces_it(
    backbones: dict[str, Path], tmp_path: Path
) -> None:
    chains = synthetic_chains(20, seed=8)
    config = _tiny_config(backbones["bert"], mode="frozen_head", head_epochs=1)
    out = tmp_path / "ckpt"
    train_prm(config, chains[:15], chains[15:], out)
    second = train_prm(replace(config, seed=1), chains[:15], chains[15:], out)
    assert load_prm(second.checkpoint_dir).config.seed == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_training_without_usable_labels_is_refused(
    backbones: dict[str, Path], tmp_path: Path
) -> None:
    chains = [ChainExample(1, "a", ("b",), (0,)), ChainExample(2, "a", ("c",))]
    with pytest.raises(ValueError, match="usable label"):
        train_prm(_tiny_config(backbones["bert"], ambiguous="ignore"), chains, [], tmp_path / "x")


def test_a_window_longer_than_the_backbone_s_positions_is_refused_before_training(
    backbones: dict[str, Path], tmp_path: Path
) -> None:
    config = _tiny_config(backbones["bert"], max_length=4096)
    with pytest.raises(ValueError, match="longer than the backbone's 128 positions"):
        train_prm(config, synthetic_chains(10, seed=1), [], tmp_path / "x")


@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_lora_trains_adapters_only_and_saves_a_merged_backbone_that_scores_the_same(
    backbones: dict[str, Path], tmp_path: Path, model_type: str
) -> None:
    # Given: a decoder and an encoder, LoRA of rank 4 with gradient checkpointing
    import peft

    chains = synthetic_chains(60, seed=11)
    config = _tiny_config(
        backbones[model_type],
        epochs=3,
        learning_rate=5e-3,
        lora_r=4,
        lora_alpha=8.0,
        gradient_checkpointing=True,
    )
    seen: dict[str, int] = {}
    original = peft.get_peft_model

    def counting(model: Any, adapters: Any) -> Any:
        wrapped = original(model, adapters)
        seen["trainable"], seen["total"] = wrapped.get_nb_trainable_parameters()
        return wrapped

    # When
    with patch("peft.get_peft_model", counting):
        result = train_prm(config, chains[:48], chains[48:], tmp_path / "lora")

    # Then: only the adapters trained, and the weights moved
    assert 0 < seen["trainable"] < seen["total"] / 4, seen
    _, before, _ = load_backbone(backbones[model_type])
    prm = load_prm(result.checkpoint_dir)
    moved = [
        name
        for name, weight in prm.backbone.state_dict().items()
        if not torch.allclose(weight, before.state_dict()[name])
    ]
    assert moved and not any("lora" in name for name in prm.backbone.state_dict())
    # ...and the saved (merged) backbone reproduces the run's held-out metrics
    from prm_training.ml.metrics import evaluate

    scores = list(score_chains(prm, chains[48:]))
    recomputed = evaluate(chains[48:], scores, prm.threshold)
    assert recomputed["step_auroc"] == pytest.approx(result.metrics["step_auroc"], abs=1e-5)


def test_a_chat_template_and_a_step_separator_lay_out_the_chain_as_an_open_prm_reads_it(
    backbones: dict[str, Path], tmp_path: Path
) -> None:
    # Given: a decoder whose tokenizer has a chat template, and "e" as the step separator
    # (Qwen2.5-Math-PRM's is "<extra_0>"; the tiny vocabulary has words only)
    import shutil

    from transformers import AutoTokenizer

    from prm_training.ml.data import TextLayout, chains_to_windows

    directory = tmp_path / "chat-llama"
    shutil.copytree(backbones["llama"], directory)
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}b {% endif %}"
    )
    tokenizer.save_pretrained(str(directory))
    layout = TextLayout(separator="e", chat_template=True, system_prompt="c d")

    # When: a chain is laid out
    [window] = chains_to_windows(tokenizer, [BASE], 128, layout)

    # Then: the template's turns come first (no BOS of ours), each step closes with "e"
    words = tokenizer.convert_ids_to_tokens(list(window.input_ids))
    assert words[:9] == ["[UNK]", "c", "d", "[UNK]", "what", "is", "a", "b", "add"]
    assert [words[end] for end in window.step_end_positions] == ["e"] * len(BASE.steps)

    # And: a PRM trained with that layout stores it, and its checkpoint scores the same
    config = _tiny_config(
        directory,
        mode="frozen_head",
        head_epochs=2,
        step_separator="e",
        chat_template=True,
        system_prompt="c d",
    )
    chains = synthetic_chains(30, seed=12)
    # (the plain layout's features of the same chains already cached in this process)
    plain = replace(config, step_separator="", chat_template=False)
    train_prm(plain, chains[:24], chains[24:], tmp_path / "plain")
    result = train_prm(config, chains[:24], chains[24:], tmp_path / "ckpt")
    prm = load_prm(result.checkpoint_dir)
    assert prm.cache is not load_prm(tmp_path / "plain").cache
    assert prm.config.text_layout() == layout
    from prm_training.ml.metrics import evaluate

    scores = list(score_chains(prm, chains[24:]))
    assert evaluate(chains[24:], scores, prm.threshold)["step_auroc"] == pytest.approx(
        result.metrics["step_auroc"], abs=1e-6
    )


def test_a_step_separator_that_encodes_to_nothing_is_refused(backbones: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    from prm_training.ml.data import TextLayout, chains_to_windows

    tokenizer = AutoTokenizer.from_pretrained(str(backbones["llama"]))
    with pytest.raises(ValueError, match="encodes to no token"):
        chains_to_windows(tokenizer, [BASE], 128, TextLayout(separator=" "))
    with pytest.raises(ValueError, match="no chat template"):
        chains_to_windows(tokenizer, [BASE], 128, TextLayout(chat_template=True))
