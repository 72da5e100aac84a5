"""Model-free baselines: what a PRM must beat to be worth training.

Both are fitted on labeled chains (the simulation's pool, a run's training chains) and
give step probabilities, so they are scored by ``metrics.evaluate`` exactly as a PRM is,
readout included (with the answer-aware readout the position prior places a wrong
answer's error where errors are most likely; the outcome rule reads the same either way):

* ``outcome_rule``: reads only the final answer. A chain graded right has no error; a
  chain graded wrong has its first error at step k, the k (counted from the chain's end,
  or from its start, whichever fits better) that is most often the first error among the
  labeled chains graded wrong; an ungraded chain falls back on the position prior. P(step
  correct) is 1 before the predicted error and 0 from it on.
* ``position_prior``: P(step i correct) = the share of labeled steps at index i (capped at
  the last index seen) that are correct, the same for every chain whatever its text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .data import ChainExample
from .metrics import labeled_first_error

BASELINES = ("outcome_rule", "position_prior")
BASELINE_NAMES = {"outcome_rule": "the outcome rule", "position_prior": "the step-position prior"}
# What a version must beat every rule on, held-out, to count as better than no model.
VERDICT_METRICS = (("processbench_f1", "F1"), ("step_auroc", "AUROC"))


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
    raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(BASELINES)}")


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
    """{baseline: held-out metrics} for every baseline fitted on ``fitted_on``, read as a
    PRM's probabilities are (``metrics.choose_readout`` on the chains it was fitted on;
    ``answer_aware`` as ``PRMConfig.outcome_readout``)."""
    from .metrics import choose_readout, evaluate
    from .score import ChainScores

    results = {}
    for name in BASELINES:
        fitted = baseline_step_probs(name, fitted_on, fitted_on, answers_correct)
        readout = choose_readout(fitted_on, fitted, answer_aware=answer_aware)
        probs = baseline_step_probs(name, fitted_on, heldout, answers_correct)
        scores = [
            ChainScores(chain_id=example.chain_id, step_probs=p, member_probs=None)
            for example, p in zip(heldout, probs, strict=True)
        ]
        results[name] = evaluate(heldout, scores, readout)
    return results


@dataclass(frozen=True)
class RulesVerdict:
    beaten: bool | None  # None: the metrics hold no comparison with the rules
    text: str


def verdict_against_rules(metrics: Mapping[str, float]) -> RulesVerdict:
    """Whether a version's held-out metrics beat every model-free rule scored on the same
    chains (``baseline_<rule>_<metric>``, as ``train_prm`` stores them) on F1 and on
    AUROC, said plainly: against the first rule it falls short of, or the strongest rule
    (by F1) it beats.

    >>> verdict_against_rules({"processbench_f1": 0.40, "step_auroc": 0.79,
    ...     "baseline_outcome_rule_processbench_f1": 0.38,
    ...     "baseline_outcome_rule_step_auroc": 0.77}).text
    'beats the outcome rule (F1 0.400 vs 0.380, AUROC 0.790 vs 0.770)'
    >>> verdict_against_rules({"processbench_f1": 0.40, "step_auroc": 0.70,
    ...     "baseline_outcome_rule_processbench_f1": 0.38,
    ...     "baseline_outcome_rule_step_auroc": 0.77}).text
    'does not beat the outcome rule (AUROC 0.700 vs 0.770)'
    """
    shortfalls: list[tuple[str, str]] = []
    compared: list[tuple[float, str, str]] = []  # (the rule's F1, rule, comparison)
    for rule in BASELINES:
        pairs = [
            (label, metrics.get(key), metrics.get(f"baseline_{rule}_{key}"))
            for key, label in VERDICT_METRICS
        ]
        pairs = [(label, ours, theirs) for label, ours, theirs in pairs if theirs is not None]
        if not pairs:
            continue
        lost = [
            f"{label} {ours:.3f} vs {theirs:.3f}" if ours is not None else f"no {label}"
            for label, ours, theirs in pairs
            if ours is None or theirs is None or ours <= theirs
        ]
        if lost:
            shortfalls.append((rule, ", ".join(lost)))
        compared.append(
            (
                metrics.get(f"baseline_{rule}_processbench_f1", 0.0),
                rule,
                ", ".join(f"{label} {ours:.3f} vs {theirs:.3f}" for label, ours, theirs in pairs),
            )
        )
    if not compared:
        return RulesVerdict(None, "no held-out comparison with the rules")
    if shortfalls:
        rule, detail = shortfalls[0]
        return RulesVerdict(False, f"does not beat {BASELINE_NAMES[rule]} ({detail})")
    _, strongest, detail = max(compared)
    return RulesVerdict(True, f"beats {BASELINE_NAMES[strongest]} ({detail})")
