"""A training run says what it is doing: its phases in order, each counted in its own
unit to its end (encoding steps, training batches per epoch, evaluating steps), and a phase
report that raises stops the run between two batches with nothing written. Tiny BERT on
the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from prm_training.ml.checkpoint import load_prm
from prm_training.ml.config import PRMConfig
from prm_training.ml.launch import train_prm
from prm_training.ml.progress import Phase, RunCancelled, step_count
from prm_training.ml.score import score_chains
from prm_training.ml.synthetic import synthetic_chains
from tests.prm_training.ml_tiny import tiny_backbone_dir


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_backbone_dir(tmp_path_factory.mktemp("tiny-phases"), "bert")


def _config(bert: Path, **overrides: object) -> PRMConfig:
    settings: dict[str, object] = dict(
        backbone=str(bert),
        mode="frozen_head",
        head_epochs=3,
        head_batch_size=16,
        head_hidden=16,
        ensemble_size=2,
        max_length=64,
        report_every_s=0.0,
    )
    settings.update(overrides)
    return PRMConfig(**settings)  # type: ignore[arg-type]


def _ends(phases: list[Phase]) -> dict[str, Phase]:
    """Each phase's last report."""
    return {phase.name: phase for phase in phases}


@pytest.mark.usefixtures("feature_caches")
def test_a_frozen_head_run_reports_every_phase_to_its_end(bert: Path, tmp_path: Path) -> None:
    # Given 40 training and 12 held-out chains, none of them encoded yet
    chains = synthetic_chains(52, seed=5)
    train, heldout = chains[:40], chains[40:]
    phases: list[Phase] = []

    # When the run trains with a phase report
    train_prm(_config(bert), train, heldout, tmp_path / "ckpt", phase=phases.append)

    # Then the phases came in order, each one's count reaching its total
    order = list(dict.fromkeys(phase.name for phase in phases))
    assert order == ["loading", "encoding", "training", "evaluating", "writing"]
    ends = _ends(phases)
    assert ends["encoding"].done == ends["encoding"].total == step_count(chains)
    assert ends["encoding"].unit == "steps"
    training = ends["training"]
    assert training.done == training.total > 0 and training.unit == "batches"
    assert training.detail == "epoch 3/3"
    assert [p.detail for p in phases if p.name == "training"][0] == "epoch 1/3"
    # Calibration on the training chains, then the held-out chains
    assert ends["evaluating"].done == ends["evaluating"].total == step_count(chains)
    counts = [phase.done for phase in phases if phase.name == "encoding"]
    assert counts == sorted(counts) and len(counts) > 2  # a report per batch


@pytest.mark.usefixtures("feature_caches")
def test_a_second_run_on_the_same_chains_finds_them_encoded(bert: Path, tmp_path: Path) -> None:
    # Given a run that encoded its chains
    chains = synthetic_chains(30, seed=6)
    config = _config(bert, cache_dir=str(tmp_path / "cache"))
    train_prm(config, chains[:24], chains[24:], tmp_path / "first")
    phases: list[Phase] = []

    # When a second run trains on them
    train_prm(config, chains[:24], chains[24:], tmp_path / "second", phase=phases.append)

    # Then its encoding phase counts every step at once, from the cache
    encoding = [phase for phase in phases if phase.name == "encoding"]
    assert [phase.done for phase in encoding] == [0, step_count(chains)]


def test_full_mode_counts_its_evaluation_a_batch_at_a_time(bert: Path, tmp_path: Path) -> None:
    chains = synthetic_chains(40, seed=9)
    phases: list[Phase] = []

    train_prm(
        _config(bert, mode="full", epochs=2, batch_size=8),
        chains[:30],
        chains[30:],
        tmp_path / "ckpt",
        phase=phases.append,
    )

    order = list(dict.fromkeys(phase.name for phase in phases))
    assert order == ["loading", "training", "evaluating", "writing"]  # nothing to encode
    assert _ends(phases)["training"].detail == "epoch 2/2"
    evaluating = [phase.done for phase in phases if phase.name == "evaluating"]
    assert evaluating[-1] == step_count(chains) and len(evaluating) > 3


@pytest.mark.usefixtures("feature_caches")
@pytest.mark.parametrize("stop_in", ["encoding", "training", "evaluating"])
def test_a_report_that_raises_stops_the_run_and_writes_nothing(
    bert: Path, tmp_path: Path, stop_in: str
) -> None:
    # Given a report that asks to stop in the middle of one phase
    seen: list[Phase] = []

    def report(phase: Phase) -> None:
        seen.append(phase)
        if phase.name == stop_in and phase.done > 0:
            raise RunCancelled("cancelled by hand")

    out = tmp_path / "ckpt"
    chains = synthetic_chains(40, seed=11)

    # When / Then: it stops there, at the first report with work done
    with pytest.raises(RunCancelled):
        train_prm(_config(bert), chains[:30], chains[30:], out, phase=report)
    assert seen[-1].name == stop_in
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_scoring_counts_steps_a_batch_at_a_time(bert: Path, tmp_path: Path) -> None:
    chains = synthetic_chains(30, seed=12)
    train_prm(_config(bert), chains[:20], [], tmp_path / "ckpt")
    prm = load_prm(tmp_path / "ckpt")
    done: list[int] = []

    scores = list(score_chains(prm, chains, batch_size=4, steps_done=done.append))

    assert len(scores) == 30
    assert sum(done) == step_count(chains)
