"""The active-learning simulation: the pure loop on a tiny backbone, and the
``simulate_active_learning`` command end to end on a generated file (no database)."""

from __future__ import annotations

import csv
import json
import math
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from prm_training.ml.config import PRMConfig
from prm_training.ml.data import ChainExample
from prm_training.ml.simulate import (
    ROW_FIELDS,
    SimulationConfig,
    SimulationRow,
    chains_to_reach_baseline,
    oracle_chains,
    simulate,
    split_by_problem,
)
from prm_training.ml.synthetic import synthetic_chains
from tests.prm_training.ml_tiny import tiny_backbone_dir

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_backbone_dir(tmp_path_factory.mktemp("sim-backbone"), "bert")


def _tiny_prm(backbone: Path, cache: Path | None = None) -> PRMConfig:
    return PRMConfig(
        backbone=str(backbone),
        mode="frozen_head",
        head_epochs=10,
        head_hidden=16,
        ensemble_size=3,
        max_length=64,
        device="cpu",
        report_every_s=0.0,
        cache_dir=str(cache) if cache else None,
    )


def _write_generic(path: Path, chains: list[ChainExample], *, labeled: bool = True) -> Path:
    with open(path, "w") as handle:
        for chain in chains:
            record: dict[str, object] = {"problem": chain.problem, "steps": list(chain.steps)}
            if labeled:
                record["labels"] = list(chain.labels or ())
            handle.write(json.dumps(record) + "\n")
    return path


def test_split_by_problem_keeps_every_problem_on_one_side() -> None:
    # Given: 30 chains on 10 problems, three chains each
    chains = [ChainExample(i, f"problem {i % 10}", ("step",), (1,)) for i in range(30)]

    # When: a fifth is held out
    pool, heldout = split_by_problem(chains, 0.2, seed=4)

    # Then: whole problems are held out, at least a fifth of the chains, none in both parts
    assert len(heldout) == 6 and len(pool) == 24
    assert not {c.problem for c in pool} & {c.problem for c in heldout}
    assert sorted(c.chain_id for c in pool + heldout) == list(range(30))
    # And the same seed gives the same split
    assert split_by_problem(chains, 0.2, seed=4)[1] == heldout


def test_oracle_chains_drops_chains_without_any_rated_step() -> None:
    chains = [
        ChainExample(1, "p", ("a", "b"), (1, -1)),
        ChainExample(2, "p", ("a",), None),
        ChainExample(3, "p", ("a", "b"), (None, None)),
        ChainExample(4, "q", ("a",), (-1,)),
    ]
    assert [c.chain_id for c in oracle_chains(chains)] == [1, 4]


def test_chains_to_reach_baseline_reports_not_reached_as_none() -> None:
    # Given: random ends at F1 0.5; entropy holds it from a round earlier; disagreement
    # touches it once (a lucky round 1) and falls back, first_error_entropy never gets there
    def curve(strategy: str, values: tuple[float, ...]) -> list[SimulationRow]:
        return [
            SimulationRow(strategy, seed, r, 10 + 5 * r, value + 0.02 * (seed - 0.5), 0.6, 0.5)
            for seed in (0, 1)
            for r, value in enumerate(values)
        ]

    rows = (
        curve("random", (0.1, 0.3, 0.5))
        + curve("entropy", (0.1, 0.5, 0.6))
        + curve("disagreement", (0.1, 0.55, 0.3))
        + curve("first_error_entropy", (0.1, 0.2, 0.3))
    )

    # When
    target, reached = chains_to_reach_baseline(rows)

    # Then: seeds are averaged before comparing, and only a held level counts
    assert target == pytest.approx(0.5)
    assert reached == {
        "random": 20,
        "entropy": 15,
        "disagreement": None,
        "first_error_entropy": None,
    }


def test_simulation_config_rejects_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'greedy'"):
        SimulationConfig(strategies=("random", "greedy"), rounds=1, batch=1)


def test_simulate_replays_rounds_for_every_strategy_and_seed(tiny_bert: Path) -> None:
    # Given: 60 labeled synthetic chains; ProcessBench-style unrated steps in some of them
    chains = synthetic_chains(60, seed=5, steps=(2, 4), words_per_step=(3, 5))
    chains = [
        ChainExample(c.chain_id, c.problem, c.steps, (*(c.labels or ())[:-1], None))
        if c.chain_id % 4 == 0 and len(c.steps) > 2
        else c
        for c in chains
    ]
    sim = SimulationConfig(
        strategies=("random", "entropy", "disagreement"),
        rounds=2,
        batch=6,
        seeds=(0,),
        seed_size=8,
        heldout_fraction=0.25,
    )
    calls: list[int] = []

    # When
    rows = simulate(chains, sim, _tiny_prm(tiny_bert), progress=lambda: calls.append(1))

    # Then: rounds 0..2 per strategy, labeled chains growing by the batch
    assert [(r.strategy, r.round, r.labeled_chains) for r in rows] == [
        (strategy, round_, 8 + 6 * round_)
        for strategy in ("random", "entropy", "disagreement")
        for round_ in range(3)
    ]
    # And round 0 (the seed set) is trained once and shared by the strategies
    assert len(calls) == 1 + 3 * 2
    first = {(r.processbench_f1, r.step_auroc) for r in rows if r.round == 0}
    assert len(first) == 1
    # And every metric is a probability-like number (the held-out part has both classes)
    for row in rows:
        for name in ("processbench_f1", "step_auroc", "first_error_accuracy"):
            value = getattr(row, name)
            assert not math.isnan(value) and 0.0 <= value <= 1.0
    # And the strategies chose differently: their retrained models score differently
    last = {r.strategy: r.step_auroc for r in rows if r.round == 2}
    assert len(set(last.values())) > 1


def test_simulate_refuses_a_pool_too_small_for_the_rounds(tiny_bert: Path) -> None:
    chains = synthetic_chains(20, seed=1)
    sim = SimulationConfig(strategies=("random",), rounds=3, batch=5, seeds=(0,), seed_size=5)
    with pytest.raises(ValueError, match="too few labeled chains"):
        simulate(chains, sim, _tiny_prm(tiny_bert))


def test_command_writes_csv_png_and_summary_without_a_database(
    tiny_bert: Path, tmp_path: Path
) -> None:
    # Given: a generic JSONL file of 60 labeled chains (no django_db mark: any query fails)
    source = _write_generic(
        tmp_path / "chains.jsonl", synthetic_chains(60, seed=9, steps=(2, 4), words_per_step=(3, 5))
    )
    out = tmp_path / "sim"
    stdout, stderr = StringIO(), StringIO()

    # When
    call_command(
        "simulate_active_learning",
        str(source),
        "--strategy",
        "random,entropy",
        "--rounds",
        "2",
        "--batch",
        "5",
        "--seeds",
        "2",
        "--seed-size",
        "10",
        "--backbone",
        str(tiny_bert),
        "--head-epochs",
        "10",
        "--out",
        str(out),
        stdout=stdout,
        stderr=stderr,
    )

    # Then: one CSV row per (strategy, seed, round) with the agreed columns
    with open(out / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == ROW_FIELDS
        rows = list(reader)
    assert sorted((r["strategy"], r["seed"], r["round"]) for r in rows) == sorted(
        (s, str(seed), str(round_))
        for s in ("random", "entropy")
        for seed in (0, 1)
        for round_ in range(3)
    )
    assert {r["labeled_chains"] for r in rows if r["round"] == "2"} == {"20"}
    assert all(0.0 <= float(r["step_auroc"]) <= 1.0 for r in rows)
    # And a real PNG, and the feature cache on disk for a rerun
    assert (out / "learning_curve.png").read_bytes()[:8] == PNG_MAGIC
    assert list((out / "cache").rglob("*.npz"))
    # And the summary table and the one-line summary
    text = stdout.getvalue()
    assert "labeled chains needed to reach random's final mean ProcessBench F1" in text
    assert text.strip().splitlines()[-1].startswith("simulated 2 strategies x 2 seeds x 2 rounds")
    assert any(line.split()[:1] == ["entropy"] for line in text.splitlines())


def test_command_rejects_an_unknown_strategy(tmp_path: Path) -> None:
    source = _write_generic(tmp_path / "c.jsonl", synthetic_chains(5))
    with pytest.raises(CommandError, match="unknown strategy 'uncertainty'"):
        call_command(
            "simulate_active_learning",
            str(source),
            "--strategy",
            "random,uncertainty",
            "--rounds",
            "1",
            "--batch",
            "1",
            "--out",
            str(tmp_path / "o"),
        )


def test_command_rejects_a_file_without_labels(tmp_path: Path) -> None:
    source = _write_generic(tmp_path / "c.jsonl", synthetic_chains(30), labeled=False)
    with pytest.raises(CommandError, match="no step labels"):
        call_command(
            "simulate_active_learning",
            str(source),
            "--strategy",
            "random",
            "--rounds",
            "1",
            "--batch",
            "1",
            "--out",
            str(tmp_path / "o"),
        )


def test_command_rejects_too_few_chains(tiny_bert: Path, tmp_path: Path) -> None:
    source = _write_generic(tmp_path / "c.jsonl", synthetic_chains(12))
    with pytest.raises(CommandError, match="too few labeled chains: 12"):
        call_command(
            "simulate_active_learning",
            str(source),
            "--strategy",
            "random",
            "--rounds",
            "2",
            "--batch",
            "5",
            "--seed-size",
            "5",
            "--backbone",
            str(tiny_bert),
            "--out",
            str(tmp_path / "o"),
        )
    assert not (tmp_path / "o" / "results.csv").exists()


def test_command_reports_rejected_records_with_their_lines(tmp_path: Path) -> None:
    source = tmp_path / "c.jsonl"
    source.write_text(
        '{"problem": "p", "steps": ["a"], "labels": [1]}\n{"problem": "p", "steps": []}\n'
    )
    with pytest.raises(CommandError, match=r"1 record\(s\) rejected: .*c\.jsonl:2: "):
        call_command(
            "simulate_active_learning",
            str(source),
            "--strategy",
            "random",
            "--rounds",
            "1",
            "--batch",
            "1",
            "--out",
            str(tmp_path / "o"),
        )
