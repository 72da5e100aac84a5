"""The active-learning simulation: the pure loop on a tiny backbone, and the
``simulate_active_learning`` command end to end on a generated file (no database)."""

from __future__ import annotations

import csv
import doctest
import json
import math
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from prm_training.ml import simulation_plot
from prm_training.ml.config import PRMConfig
from prm_training.ml.data import ChainExample
from prm_training.ml.machine_labeler import MachineArm, prm_machine_labels
from prm_training.ml.oracle import oracle_chains, split_by_problem
from prm_training.ml.readout import Readout
from prm_training.ml.simulate import ROW_FIELDS, SimulationConfig, SimulationRow, simulate
from prm_training.ml.simulation_report import summarize, summary_table
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


def _curve(strategy: str, values: tuple[float, ...], noise: float = 0.02) -> list[SimulationRow]:
    # Four seeds around ``values``, 10 chains and 40 steps more per round
    return [
        SimulationRow(
            strategy, seed, r, 10 + 10 * r, 40 + 40 * r, value + noise * (seed - 1.5), 0.6, 0.5
        )
        for seed in range(4)
        for r, value in enumerate(values)
    ]


def test_reaching_random_s_final_f1_is_read_from_the_mean_curves() -> None:
    # Given: random ends at F1 0.5; entropy holds it from round 1; disagreement touches it
    # once (round 1) and falls back; first_error_entropy never gets there
    rows = (
        _curve("random", (0.1, 0.3, 0.5))
        + _curve("entropy", (0.1, 0.5, 0.6))
        + _curve("disagreement", (0.1, 0.55, 0.3))
        + _curve("first_error_entropy", (0.1, 0.2, 0.3))
    )

    # When
    lines = {line.name: line for line in summarize(rows)}

    # Then: only a level held to the last round counts, with its cost in labeled steps
    # (a point estimate: whether a saving is real is saves_steps's question)
    assert lines["random"].reach.labeled_steps == 120
    assert lines["entropy"].reach.labeled_steps == 80
    assert lines["disagreement"].reach is None
    assert lines["first_error_entropy"].reach is None
    # And each difference with random is paired by seed: the seeds' shared noise cancels
    entropy = lines["entropy"].versus["processbench_f1"]
    assert entropy.mean == pytest.approx(0.1) and entropy.half_width == pytest.approx(0.0)
    assert entropy.verdict == "better"
    assert lines["first_error_entropy"].versus["processbench_f1"].verdict == "worse"


def test_a_difference_inside_the_noise_is_no_difference() -> None:
    # Given: entropy ends 0.01 above random, but its seeds scatter by ±0.05
    rows = _curve("random", (0.3, 0.5))
    rows += [
        SimulationRow(
            "entropy",
            seed,
            r,
            10 + 10 * r,
            40 + 40 * r,
            v + (0.05 if seed % 2 else -0.05),
            0.6,
            0.5,
        )
        for seed in range(4)
        for r, v in enumerate((0.3, 0.51))
    ]

    # When
    line = {line.name: line for line in summarize(rows)}["entropy"]

    # Then: the interval holds 0 and the table says so
    assert line.versus["processbench_f1"].verdict == "no difference"
    assert "95% interval" in summary_table(rows)


def _steps_curve(
    strategy: str, points: tuple[tuple[int, float], ...], noise: float = 0.01
) -> list[SimulationRow]:
    """Four seeds of (labeled steps, F1) per round, 10 chains more per round."""
    return [
        SimulationRow(strategy, seed, r, 10 + 10 * r, steps, value + noise * (seed - 1.5), 0.6, 0.5)
        for seed in range(4)
        for r, (steps, value) in enumerate(points)
    ]


def test_strategies_are_compared_at_equal_labeled_steps_not_equal_chains() -> None:
    # Given: random labels 40 steps a round; "entropy" is ahead at every round but pays
    # twice the steps for it; "disagreement" is ahead at equal steps
    rows = _steps_curve("random", ((40, 0.1), (80, 0.3), (120, 0.5)))
    rows += _steps_curve("entropy", ((40, 0.1), (120, 0.45), (200, 0.6)))
    rows += _steps_curve("disagreement", ((40, 0.1), (60, 0.3), (80, 0.4)))

    # When
    lines = {line.name: line for line in summarize(rows)}

    # Then: at random's 120 steps entropy is 0.45 against random's 0.5 (worse, though it
    # is 0.1 ahead at its last round's chains), and it saves nothing; disagreement is 0.1
    # ahead at its 80 steps and never below: it saves steps, and the table says which
    entropy = lines["entropy"].versus["processbench_f1"]
    assert entropy.mean == pytest.approx(-0.05) and entropy.verdict == "worse"
    assert lines["entropy"].saves_steps is False
    assert lines["disagreement"].versus["processbench_f1"].mean == pytest.approx(0.1)
    assert lines["disagreement"].saves_steps is True
    assert "disagreement saves labeled steps over random" in summary_table(rows)


def test_a_strategy_below_random_at_some_round_does_not_save_steps() -> None:
    # Given: a strategy below random at round 1 at equal steps, above it at the last
    rows = _steps_curve("random", ((40, 0.1), (80, 0.3), (120, 0.5)))
    rows += _steps_curve("convincing_wrong", ((40, 0.1), (80, 0.2), (120, 0.6)))

    # When
    line = {line.name: line for line in summarize(rows)}["convincing_wrong"]

    # Then: above at the last round is not enough ('auto' would not take it)
    assert line.versus["processbench_f1"].verdict == "better"
    assert line.below["processbench_f1"] == (1,)
    assert line.saves_steps is False
    assert "no strategy saves steps over random" in summary_table(rows)


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

    # Then: rounds 0..2 per strategy, labeled chains growing by the batch, and the
    # baselines fitted on the pool (no final answer to grade: no outcome rule)
    assert [
        (r.strategy, r.round, r.labeled_chains) for r in rows if r.strategy in sim.strategies
    ] == [
        (strategy, round_, 8 + 6 * round_)
        for strategy in ("random", "entropy", "disagreement")
        for round_ in range(3)
    ]
    assert [(r.strategy, r.round) for r in rows if r.strategy not in sim.strategies] == [
        ("position_prior", 2),
        ("text_blind", 2),
    ]
    # And the cost in labeled steps counts the rated steps only (unrated ones are free)
    for row in rows:
        assert row.labeled_chains <= row.labeled_steps <= 4 * row.labeled_chains
    # And round 0 (the seed set) is trained once and shared by the strategies
    assert len(calls) == 1 + 3 * 2
    first = {(r.processbench_f1, r.step_auroc) for r in rows if r.round == 0}
    assert len(first) == 1
    # And every metric is a probability-like number (the held-out part has both classes)
    for row in rows:
        for name in ("processbench_f1", "step_auroc", "first_error_accuracy"):
            value = getattr(row, name)
            assert not math.isnan(value) and 0.0 <= value <= 1.0, (row.strategy, name)
    # And the strategies chose differently: their retrained models score differently
    last = {r.strategy: r.step_auroc for r in rows if r.round == 2 and r.strategy in sim.strategies}
    assert len(set(last.values())) > 1


def test_each_seed_holds_out_other_problems(tiny_bert: Path) -> None:
    # Given: 80 chains on 40 problems
    chains = synthetic_chains(80, seed=3, steps=(2, 3), words_per_step=(3, 4))
    chains = [
        ChainExample(c.chain_id, f"problem {c.chain_id % 40}", c.steps, c.labels) for c in chains
    ]

    # When split for seeds 0 and 1
    splits = [split_by_problem(chains, 0.25, seed=seed)[1] for seed in (0, 1)]

    # Then: the held-out problems differ, so a result is not one split's luck
    assert {c.problem for c in splits[0]} != {c.problem for c in splits[1]}


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
        "--max-length",
        "128",
        "--out",
        str(out),
        stdout=stdout,
        stderr=stderr,
    )

    # Then: one CSV row per (strategy, seed, round) with the agreed columns and the F1 of
    # each subset (one here: the file's), and one per (baseline, seed); no final answer to
    # grade, so no outcome rule
    with open(out / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == (*ROW_FIELDS, "subset_f1:chains")
        rows = list(reader)
    assert sorted((r["strategy"], r["seed"], r["round"]) for r in rows) == sorted(
        [
            (s, str(seed), str(round_))
            for s in ("random", "entropy")
            for seed in (0, 1)
            for round_ in range(3)
        ]
        + [(b, str(seed), "2") for b in ("position_prior", "text_blind") for seed in (0, 1)]
    )
    assert {
        r["labeled_chains"]
        for r in rows
        if r["round"] == "2" and r["strategy"] in ("random", "entropy")
    } == {"20"}
    assert all(0.0 <= float(r["step_auroc"]) <= 1.0 for r in rows)
    # And a real PNG, and the feature cache on disk for a rerun
    assert (out / "learning_curve.png").read_bytes()[:8] == PNG_MAGIC
    assert list((out / "cache").rglob("*.npz"))
    # And the summary table (in DIR/summary.txt too) and the one-line summary
    text = stdout.getvalue()
    assert "paired difference with random at equal labeled steps" in text
    assert "corrected for the seeds' overlapping splits" in text
    assert text.strip().splitlines()[-1].startswith("simulated 2 strategies x 2 seeds x 2 rounds")
    names = [line.split()[0] for line in text.splitlines()[2:] if line.strip()]
    assert names[:4] == ["random", "entropy", "position_prior", "text_blind"]
    assert (out / "summary.txt").read_text().splitlines()[0] == text.splitlines()[0]


def test_quick_mode_runs_every_strategy_with_small_defaults(
    tiny_bert: Path, tmp_path: Path
) -> None:
    # Given: 80 labeled chains and no sizes given but --quick
    source = _write_generic(
        tmp_path / "chains.jsonl", synthetic_chains(80, seed=2, steps=(2, 4), words_per_step=(3, 5))
    )
    stdout = StringIO()

    # When
    call_command(
        "simulate_active_learning",
        str(source),
        "--quick",
        "--backbone",
        str(tiny_bert),
        "--max-length",
        "128",
        "--out",
        str(tmp_path / "sim"),
        stdout=stdout,
        stderr=StringIO(),
    )

    # Then: every strategy ran 3 seeds x 2 rounds, random first
    assert (
        stdout.getvalue()
        .strip()
        .splitlines()[-1]
        .startswith("simulated 5 strategies x 3 seeds x 2 rounds")
    )


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


def _machine_chains() -> list[ChainExample]:
    return synthetic_chains(60, seed=5, steps=(2, 4), words_per_step=(3, 5))


def _machine_sim(*arms: MachineArm) -> SimulationConfig:
    return SimulationConfig(
        strategies=("random",),
        rounds=2,
        batch=6,
        seeds=(0,),
        seed_size=8,
        heldout_fraction=0.25,
        machine_arms=arms,
    )


def test_a_machine_arm_that_accepts_nothing_is_random_labeled_by_people(tiny_bert: Path) -> None:
    # Given: an arm whose threshold no confidence reaches, beside random
    sim = _machine_sim(MachineArm("prm", 1.0))

    # When
    rows = simulate(_machine_chains(), sim, _tiny_prm(tiny_bert))

    # Then: it labels the very chains random labels, all by people, and learns the same
    by_arm = {(r.strategy, r.round): r for r in rows if r.strategy in ("random", "machine_prm@1")}
    for round_ in range(3):
        ours, theirs = by_arm[("machine_prm@1", round_)], by_arm[("random", round_)]
        assert ours.machine_chains == 0
        assert (ours.labeled_chains, ours.labeled_steps) == (
            theirs.labeled_chains,
            theirs.labeled_steps,
        )
        assert ours.processbench_f1 == theirs.processbench_f1
        assert ours.step_auroc == theirs.step_auroc


def test_a_machine_arm_spends_human_steps_only_where_it_does_not_accept(tiny_bert: Path) -> None:
    # Given: an arm that accepts every PRM call
    sim = _machine_sim(MachineArm("prm", 0.0))

    # When
    rows = simulate(_machine_chains(), sim, _tiny_prm(tiny_bert))

    # Then: people rated the seed set only; every later chain came from the machine, and
    # its calls were checked against the oracle
    arm = [r for r in rows if r.strategy == "machine_prm@0"]
    random = {r.round: r for r in rows if r.strategy == "random"}
    assert [r.labeled_steps for r in arm] == [random[0].labeled_steps] * 3
    assert [r.labeled_chains for r in arm] == [random[r].labeled_chains for r in range(3)]
    assert [r.machine_chains for r in arm] == [0, 6, 12]
    last = arm[-1]
    assert 0 <= last.machine_chain_errors <= last.machine_chains
    assert 0 <= last.machine_step_errors <= last.machine_steps
    # And the summary has a line for it, at equal human cost and on the same chains
    table = summary_table(rows, heldout_fraction=sim.heldout_fraction)
    assert "machine arms at the last round" in table
    assert "machine_prm@0" in table.split("machine arms at the last round")[1]


def test_a_stored_machine_source_is_accepted_at_its_confidence(tiny_bert: Path) -> None:
    # Given: stored labels that call every chain's first step wrong, sure of it on the
    # chains with an odd id and unsure on the others
    chains = _machine_chains()
    stored = {
        chain.chain_id: (
            (-1, *([None] * (len(chain.steps) - 1))),
            0.9 if chain.chain_id % 2 else 0.2,
        )
        for chain in chains
    }
    sim = _machine_sim(MachineArm("judge", 0.5))

    # When
    rows = simulate(chains, sim, _tiny_prm(tiny_bert), machine_labels={"judge": stored})

    # Then: the sure ones were accepted, the rest went to people, and every accepted chain
    # whose oracle has no error at step 0 counts as an error
    last = [r for r in rows if r.strategy == "machine_judge@0.5"][-1]
    random = [r for r in rows if r.strategy == "random"][-1]
    assert 0 < last.machine_chains < 12
    assert last.labeled_steps < random.labeled_steps
    by_id = {chain.chain_id: chain for chain in chains}
    wrong_at_zero = sum(1 for c in by_id.values() if (c.labels or (None,))[0] == -1)
    assert wrong_at_zero < len(chains)  # the oracle disagrees on some chain
    assert last.machine_chain_errors >= 1
    assert last.machine_step_errors >= 1


def test_a_stored_machine_arm_needs_the_stored_labels(tiny_bert: Path) -> None:
    with pytest.raises(ValueError, match="no stored machine labels of judge"):
        simulate(_machine_chains(), _machine_sim(MachineArm("judge", 0.5)), _tiny_prm(tiny_bert))


def test_machine_arms_are_compared_with_random_and_checked() -> None:
    with pytest.raises(ValueError, match="list random too"):
        SimulationConfig(
            strategies=("entropy",), rounds=1, batch=1, machine_arms=(MachineArm("prm", 0.9),)
        )
    with pytest.raises(ValueError, match="within"):
        MachineArm("prm", 1.5)
    with pytest.raises(ValueError, match="a machine source is a name"):
        MachineArm("monte carlo", 0.9)


def test_the_prm_as_a_labeler_reads_its_own_first_error_call() -> None:
    # A chain graded wrong: the answer-aware readout calls the most likely first error,
    # and the confidence is conditional on there being one
    labels, confidence = prm_machine_labels([0.9, 0.3, 0.8], Readout(0.5, 0.2), False)
    assert labels == (1, -1, None)
    assert confidence == pytest.approx((0.9 * 0.7) / (1 - 0.9 * 0.3 * 0.8))
    # A chain graded right with a low right-answer threshold: no error called
    labels, confidence = prm_machine_labels([0.9, 0.3, 0.8], Readout(0.5, 0.2), True)
    assert labels == (1, 1, 1)
    assert confidence == pytest.approx(0.9 * 0.3 * 0.8)


@pytest.mark.parametrize(
    ("arms", "message"), [("0.9,high", "not a confidence: 'high'"), ("1.5", "within")]
)
def test_command_rejects_a_machine_arm_that_is_no_confidence(
    tmp_path: Path, arms: str, message: str
) -> None:
    source = _write_generic(tmp_path / "c.jsonl", synthetic_chains(5))
    with pytest.raises(CommandError, match=message):
        call_command(
            "simulate_active_learning", str(source), "--machine-arms", arms, "--out", str(tmp_path)
        )


def test_baselines_that_score_alike_get_labels_apart() -> None:
    # The learning curves print each baseline's name on its line; two rules 0.004 apart
    # printed over each other (2026-11-26's 10-seed table): the examples hold the rule
    assert simulation_plot.label_heights([0.5, 0.5], 0.0, 1.0) == pytest.approx(
        [0.5, 0.5 + simulation_plot.LABEL_GAP]
    )
    result = doctest.testmod(simulation_plot)
    assert result.attempted and not result.failed
