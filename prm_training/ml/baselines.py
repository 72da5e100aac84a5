"""Baselines: what a PRM must beat to be worth training, all fitted on the chains it
learned from (the simulation's pool, a run's training chains) and scored by
``metrics.evaluate`` exactly as a PRM is, readout included:

* ``outcome_rule``: reads only the final answer. A chain graded right has no error; a
  chain graded wrong has its first error at step k, the k (counted from the chain's end,
  or from its start, whichever fits better) that is most often the first error among the
  labeled chains graded wrong; an ungraded chain falls back on the position prior. P(step
  correct) is 1 before the predicted error and 0 from it on.
* ``position_prior``: P(step i correct) = the share of labeled steps at index i (capped at
  the last index seen) that are correct, the same for every chain whatever its text.
* ``text_blind``: the PRM's own head reading everything the PRM reads but the step (the
  answer's grade, the step's place, the chain's length): ``text_blind``. The strongest of
  the three; it needs torch, so it is fitted by ``train.fit_baselines``.

"Beats the baselines" means beating the strongest of them on each figure
(``verdict_against_baselines``). With the answer-aware readout the position prior places
a wrong answer's error where errors are most likely; the outcome rule reads the same
either way.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .data import ChainExample
from .readout import Readout, labeled_first_error

RULES = ("outcome_rule", "position_prior")
BASELINES = (*RULES, "text_blind")
BASELINE_NAMES = {
    "outcome_rule": "the outcome rule",
    "position_prior": "the step-position prior",
    "text_blind": "the text-blind head",
}
# What a version must beat the strongest baseline on, held-out, to count as better than
# no model (F1 first: what the platform's first-error calls are judged by).
VERDICT_METRICS = (("processbench_f1", "F1"), ("step_auroc", "AUROC"))
# The figures a run's metrics keep of each baseline (``baseline_<name>_<figure>``).
BASELINE_FIGURES = (
    "processbench_f1",
    "step_auroc",
    "first_error_accuracy",
    "mean_subset_f1",
    "right_answer_recall",
    "prmscore",
)


@dataclass(frozen=True)
class PositionPrior:
    correct_share: tuple[float, ...]  # by step index; the last one holds for longer chains

    def step_probs(self, n_steps: int) -> list[float]:
        if not self.correct_share:
            return [1.0] * n_steps
        last = len(self.correct_share) - 1
        return [self.correct_share[min(i, last)] for i in range(n_steps)]


def fit_position_prior(examples: Sequence[ChainExample]) -> PositionPrior:
    """The share of correct steps by index.

    >>> prior = fit_position_prior([ChainExample(1, "p", ("a", "b"), (1, -1)),
    ...                             ChainExample(2, "p", ("a", "b", "c"), (1, 1, 1))])
    >>> prior.step_probs(4)
    [1.0, 0.5, 1.0, 1.0]
    """
    correct: Counter[int] = Counter()
    rated: Counter[int] = Counter()
    for example in examples:
        for index, rating in enumerate(example.labels or ()):
            if rating in (1, -1):
                rated[index] += 1
                correct[index] += rating == 1
    if not rated:
        return PositionPrior(())
    shares = [correct[i] / rated[i] if rated[i] else 1.0 for i in range(max(rated) + 1)]
    return PositionPrior(tuple(shares))


@dataclass(frozen=True)
class OutcomeRule:
    offset: int  # the first error's index: from the start if from_end is False
    from_end: bool
    prior: PositionPrior

    def first_error(self, n_steps: int) -> int:
        index = n_steps - 1 - self.offset if self.from_end else self.offset
        return min(max(index, 0), n_steps - 1)

    def step_probs(self, n_steps: int, correct: bool | None) -> list[float]:
        if correct is None:
            return self.prior.step_probs(n_steps)
        if correct or n_steps == 0:
            return [1.0] * n_steps
        error = self.first_error(n_steps)
        return [1.0] * error + [0.0] * (n_steps - error)


def fit_outcome_rule(
    examples: Sequence[ChainExample], answers_correct: Mapping[int, bool | None]
) -> OutcomeRule:
    """The offset that places the most labeled first errors of wrong-answer chains.

    >>> wrong = [ChainExample(i, "p", ("a",) * n, (1,) * (n - 1) + (-1,))
    ...          for i, n in enumerate((3, 4, 5))]
    >>> rule = fit_outcome_rule(wrong, {0: False, 1: False, 2: False})
    >>> rule.from_end, rule.offset, rule.step_probs(3, False), rule.step_probs(2, True)
    (True, 0, [1.0, 1.0, 0.0], [1.0, 1.0])
    """
    from_start: Counter[int] = Counter()
    from_end: Counter[int] = Counter()
    for example in examples:
        truth = labeled_first_error(example.labels)
        if answers_correct.get(example.chain_id) is False and truth is not None and truth >= 0:
            from_start[truth] += 1
            from_end[len(example.steps) - 1 - truth] += 1
    prior = fit_position_prior(examples)
    if not from_start:
        return OutcomeRule(offset=0, from_end=True, prior=prior)
    (start, start_hits), (end, end_hits) = from_start.most_common(1)[0], from_end.most_common(1)[0]
    if end_hits >= start_hits:
        return OutcomeRule(offset=end, from_end=True, prior=prior)
    return OutcomeRule(offset=start, from_end=False, prior=prior)


def baseline_step_probs(
    name: str,
    fitted_on: Sequence[ChainExample],
    chains: Sequence[ChainExample],
    answers_correct: Mapping[int, bool | None],
) -> list[list[float]]:
    """Step probabilities of baseline ``name`` fitted on ``fitted_on`` for ``chains``."""
    if name == "position_prior":
        prior = fit_position_prior(fitted_on)
        return [prior.step_probs(len(chain.steps)) for chain in chains]
    if name == "outcome_rule":
        rule = fit_outcome_rule(fitted_on, answers_correct)
        return [
            rule.step_probs(len(chain.steps), answers_correct.get(chain.chain_id))
            for chain in chains
        ]
    raise ValueError(f"unknown baseline {name!r}; the rules are {', '.join(RULES)}")


def graded_answers(examples: Sequence[ChainExample]) -> dict[int, bool | None]:
    """chain_id -> the chain's final answer graded right/wrong (``inputs.answer_grade``;
    None where it cannot be graded): what the outcome rule reads."""
    from .inputs import answer_grade

    return {example.chain_id: answer_grade(example) for example in examples}


def baseline_metrics(
    fitted_on: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    answers_correct: Mapping[int, bool | None],
    *,
    answer_aware: bool = True,
) -> dict[str, dict[str, float]]:
    """{rule: held-out metrics} for the two rules fitted on ``fitted_on``, read as a PRM's
    probabilities are (``metrics.choose_readout`` on the chains it was fitted on;
    ``answer_aware`` as ``PRMConfig.outcome_readout``). The text-blind head needs torch:
    ``train.fit_baselines``."""
    fitted = fit_rules(fitted_on, answers_correct, answer_aware=answer_aware)
    return baseline_figures(fitted, heldout, answers_correct)


@dataclass
class FittedBaselines:
    """The baselines fitted on one set of training chains, each with the readout chosen on
    them, ready to score any chains (a run's held-out chains, an evaluation set). A
    checkpoint keeps them (``save``/``load``), so a version is compared with the
    baselines of its own training data wherever it is scored. ``text_blind`` is the torch
    head of ``text_blind`` (None where it was not fitted: a checkpoint from before it)."""

    prior: PositionPrior
    rule: OutcomeRule | None  # None: no training chain's final answer could be graded
    readouts: dict[str, Readout]
    text_blind: Any = None

    def scorers(
        self,
        chains: Sequence[ChainExample],
        answers_correct: Mapping[int, bool | None] | None = None,
    ) -> dict[str, tuple[list[list[float]], Readout]]:
        """{baseline: (step probabilities of ``chains`` in order, its readout)}."""
        graded = answers_correct if answers_correct is not None else graded_answers(chains)
        out: dict[str, tuple[list[list[float]], Readout]] = {
            "position_prior": (
                [self.prior.step_probs(len(chain.steps)) for chain in chains],
                self.readouts["position_prior"],
            )
        }
        if self.rule is not None:
            rule = self.rule
            out["outcome_rule"] = (
                [rule.step_probs(len(c.steps), graded.get(c.chain_id)) for c in chains],
                self.readouts["outcome_rule"],
            )
        if self.text_blind is not None:
            out["text_blind"] = (self.text_blind.step_probs(chains), self.text_blind.readout)
        return {name: out[name] for name in BASELINES if name in out}

    def to_json(self) -> dict[str, Any]:
        return {
            "position_prior": list(self.prior.correct_share),
            "outcome_rule": None
            if self.rule is None
            else {"offset": self.rule.offset, "from_end": self.rule.from_end},
            "readouts": {
                name: [readout.threshold, readout.threshold_right]
                for name, readout in self.readouts.items()
            },
        }

    def save(self, directory: Path) -> None:
        """Into ``directory`` (a checkpoint being written): baselines.json, and the
        text-blind head's files."""
        (directory / "baselines.json").write_text(json.dumps(self.to_json()))
        if self.text_blind is not None:
            self.text_blind.save(directory)


def load_baselines(directory: str | Path) -> FittedBaselines | None:
    """The baselines a checkpoint kept, or None for a checkpoint from before it kept them.
    Loads the text-blind head (torch) only when the checkpoint has one."""
    root = Path(directory)
    path = root / "baselines.json"
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    prior = PositionPrior(tuple(float(x) for x in stored["position_prior"]))
    rule = stored.get("outcome_rule")
    blind = None
    if (root / "text_blind.json").is_file():
        from .text_blind import load_text_blind

        blind = load_text_blind(root)
    return FittedBaselines(
        prior=prior,
        rule=None
        if rule is None
        else OutcomeRule(offset=int(rule["offset"]), from_end=bool(rule["from_end"]), prior=prior),
        readouts={
            name: Readout(float(threshold), right)
            for name, (threshold, right) in stored["readouts"].items()
        },
        text_blind=blind,
    )


def fit_rules(
    examples: Sequence[ChainExample],
    answers_correct: Mapping[int, bool | None] | None = None,
    *,
    answer_aware: bool = True,
) -> FittedBaselines:
    """The outcome rule and the position prior fitted on ``examples``, each with the
    readout chosen on them (``metrics.choose_readout``; ``answer_aware`` as
    ``PRMConfig.outcome_readout``). The outcome rule only where some final answer can be
    graded: without one it would be the position prior under another name."""
    from .metrics import choose_readout

    graded = answers_correct if answers_correct is not None else graded_answers(examples)
    labeled = [example for example in examples if example.labels is not None]
    prior = fit_position_prior(labeled)
    can_grade = any(graded.get(example.chain_id) is not None for example in labeled)
    rule = fit_outcome_rule(labeled, graded) if can_grade else None
    fitted = FittedBaselines(prior=prior, rule=rule, readouts={})
    for name in RULES:
        if name == "outcome_rule" and rule is None:
            continue
        probs = baseline_step_probs(name, labeled, labeled, graded)
        fitted.readouts[name] = choose_readout(labeled, probs, answer_aware=answer_aware)
    return fitted


def baseline_figures(
    fitted: FittedBaselines,
    heldout: Sequence[ChainExample],
    answers_correct: Mapping[int, bool | None] | None = None,
) -> dict[str, dict[str, float]]:
    """{baseline: ``metrics.evaluate`` of it on the labeled ``heldout`` chains}."""
    from .metrics import evaluate
    from .readout import ChainScores

    labeled = [example for example in heldout if example.labels is not None]
    out: dict[str, dict[str, float]] = {}
    for name, (probs, readout) in fitted.scorers(labeled, answers_correct).items():
        scores = [
            ChainScores(chain_id=example.chain_id, step_probs=p, member_probs=None)
            for example, p in zip(labeled, probs, strict=True)
        ]
        out[name] = evaluate(labeled, scores, readout)
    return out


def scored_baseline_metrics(
    fitted: FittedBaselines,
    heldout: Sequence[ChainExample],
    answers_correct: Mapping[int, bool | None] | None = None,
) -> dict[str, float]:
    """``baseline_<name>_<figure>`` of every fitted baseline on the labeled ``heldout``
    chains (``BASELINE_FIGURES``; per subset as ``baseline_<name>_subset_f1:<subset>``)."""
    return {
        f"baseline_{name}_{figure}": value
        for name, figures in baseline_figures(fitted, heldout, answers_correct).items()
        for figure, value in figures.items()
        if figure in BASELINE_FIGURES or figure.startswith("subset_f1:")
    }


@dataclass(frozen=True)
class RulesVerdict:
    beaten: bool | None  # None: the metrics hold no comparison with the baselines
    text: str


def strongest_baseline(metrics: Mapping[str, float], key: str) -> tuple[str, float] | None:
    """(the baseline with the best held-out ``key``, its value), or None without any.

    >>> strongest_baseline({"baseline_outcome_rule_step_auroc": 0.7,
    ...                     "baseline_text_blind_step_auroc": 0.75}, "step_auroc")
    ('text_blind', 0.75)
    """
    rivals = [
        (float(metrics[f"baseline_{name}_{key}"]), name)
        for name in BASELINES
        if f"baseline_{name}_{key}" in metrics
    ]
    if not rivals:
        return None
    value, name = max(rivals)
    return name, value


def verdict_against_baselines(metrics: Mapping[str, float]) -> RulesVerdict:
    """Whether a version's held-out F1 and AUROC beat the strongest baseline on each,
    said plainly. With the paired interval the run stored (``vs_strongest_<key>_low`` and
    ``_high``: the problem bootstrap of ``evaluation.evaluation_report``) "beats" means
    the interval lies above 0; a version measured before intervals were stored is judged
    on its point estimates.

    >>> print(verdict_against_baselines({"processbench_f1": 0.40, "step_auroc": 0.79,
    ...     "baseline_outcome_rule_processbench_f1": 0.38,
    ...     "baseline_outcome_rule_step_auroc": 0.77}).text)  # doctest: +NORMALIZE_WHITESPACE
    beats the strongest baseline (F1 0.400 vs 0.380 the outcome rule;
    AUROC 0.790 vs 0.770 the outcome rule)
    >>> print(verdict_against_baselines({"processbench_f1": 0.40, "step_auroc": 0.79,
    ...     "baseline_text_blind_processbench_f1": 0.39,
    ...     "baseline_text_blind_step_auroc": 0.77, "vs_strongest_processbench_f1_low": -0.02,
    ...     "vs_strongest_processbench_f1_high": 0.04}).text)  # doctest: +NORMALIZE_WHITESPACE
    does not beat the strongest baseline: F1 0.400 vs 0.390 the text-blind head,
    +0.010 [-0.020, +0.040]: no difference
    """
    shortfalls: list[str] = []
    compared: list[str] = []
    for key, label in VERDICT_METRICS:
        strongest = strongest_baseline(metrics, key)
        if strongest is None:
            continue
        name, theirs = strongest
        ours = metrics.get(key)
        if ours is None or not math.isfinite(float(ours)):
            shortfalls.append(f"no {label} of its own against {BASELINE_NAMES[name]}")
            continue
        detail = f"{label} {ours:.3f} vs {theirs:.3f} {BASELINE_NAMES[name]}"
        low, high = metrics.get(f"vs_strongest_{key}_low"), metrics.get(f"vs_strongest_{key}_high")
        if low is not None and high is not None:
            detail += f", {ours - theirs:+.3f} [{low:+.3f}, {high:+.3f}]"
            lost = low <= 0
            if lost:
                detail += ": no difference" if high >= 0 else ": worse"
        else:
            lost = ours <= theirs
        (shortfalls if lost else compared).append(detail)
    if not shortfalls and not compared:
        return RulesVerdict(None, "no held-out comparison with the baselines")
    if shortfalls:
        return RulesVerdict(False, f"does not beat the strongest baseline: {'; '.join(shortfalls)}")
    return RulesVerdict(True, f"beats the strongest baseline ({'; '.join(compared)})")
