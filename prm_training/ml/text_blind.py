"""The text-blind baseline: the default head with the step's text taken away.

The default PRM reads, beside each step's representation, the final answer's grade, the
step's index, the steps after it and the chain's length (``inputs``). A head that reads
those and nothing of the step is the strongest thing that does not read the step, so it
is the baseline a PRM's text must beat: the outcome rule reads one fitted position, the
position prior none of the answer. On ProcessBench-format chains it comes within about
0.02 AUROC of the default (issue #26), so "beats the baselines" means beating it too.

It is the same ``EnsembleHead`` (members, hidden width, dropout, context features, epochs,
learning rate, class weighting, bootstrap resamples and seed of the run's config),
trained the same way on the same chains, with the step representation replaced by one
zero column: a zero vector of any width adds nothing to the first layer that its bias
does not, so one column is the same model at a fraction of the cost. It is calibrated
and read out as the PRM is (out-of-bag Platt scaling, ``metrics.choose_readout``). No
prior column (``step_prior``): an open PRM's own step score reads the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import PRMConfig
from .data import ChainExample
from .fitting import Reporter, class_weights, train_frozen_head
from .inputs import CONTEXT_WIDTH, chain_contexts
from .metrics import choose_readout, fit_platt
from .model import EnsembleHead, save_json
from .readout import Readout

WIDTH = 1  # the zero column that stands for the step's representation


@dataclass
class TextBlindHead:
    head: EnsembleHead
    context: str  # PRMConfig.context it reads
    calibration: tuple[float, float]
    readout: Readout

    def logits(self, chains: Sequence[ChainExample]) -> np.ndarray:
        """[E, total steps] uncalibrated logits of the chains' steps, in chain order."""
        contexts = chain_contexts(chains, self.context)
        context = np.concatenate(contexts) if contexts else np.zeros((0, CONTEXT_WIDTH))
        zeros = torch.zeros((len(context), WIDTH))
        extra = (
            torch.from_numpy(np.asarray(context, dtype=np.float32)) if self.head.context else None
        )
        self.head.eval()
        with torch.inference_mode():
            return self.head(zeros, extra).float().numpy()

    def step_probs(self, chains: Sequence[ChainExample]) -> list[list[float]]:
        """Each chain's calibrated P(step correct), the mean over members."""
        scale, bias = self.calibration
        probs = 1 / (1 + np.exp(-(self.logits(chains) * scale + bias)))  # [E, N]
        mean = probs.mean(axis=0)
        out: list[list[float]] = []
        offset = 0
        for chain in chains:
            out.append(mean[offset : offset + len(chain.steps)].tolist())
            offset += len(chain.steps)
        return out

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        save_file(
            {
                name: value.detach().cpu().contiguous()
                for name, value in self.head.state_dict().items()
            },
            str(directory / "text_blind.safetensors"),
        )
        save_json(
            directory / "text_blind.json",
            {
                "head": self.head.describe(),
                "context": self.context,
                "calibration": list(self.calibration),
                "threshold": self.readout.threshold,
                "threshold_right": self.readout.threshold_right,
            },
        )


def load_text_blind(directory: Path) -> TextBlindHead | None:
    """The text-blind head a checkpoint saved beside its PRM, or None (a checkpoint from
    before it was saved)."""
    import json

    from safetensors.torch import load_file

    meta_path = directory / "text_blind.json"
    if not meta_path.is_file():
        return None
    meta: dict[str, Any] = json.loads(meta_path.read_text())
    shape = meta["head"]
    head = EnsembleHead(shape["width"], shape["hidden"], shape["members"], context=shape["context"])
    head.load_state_dict(load_file(str(directory / "text_blind.safetensors")))
    scale, bias = meta["calibration"]
    return TextBlindHead(
        head=head.eval(),
        context=meta["context"],
        calibration=(float(scale), float(bias)),
        readout=Readout(float(meta["threshold"]), meta.get("threshold_right")),
    )


def fit_text_blind(
    config: PRMConfig,
    examples: list[ChainExample],
    targets: list[list[float | None]],
    chain_weights: np.ndarray,
) -> TextBlindHead:
    """The text-blind head trained on ``examples`` (their step ``targets`` and the
    ensemble's bootstrap ``chain_weights``, as the PRM was), on the CPU: it is small."""
    torch.manual_seed(config.seed)
    blind_config = replace(config, step_prior=False, zero_shot=False)
    head = EnsembleHead(
        WIDTH,
        config.head_hidden,
        chain_weights.shape[0],
        config.head_dropout,
        context=CONTEXT_WIDTH if config.context != "none" else 0,
    )
    contexts = chain_contexts(examples, config.context)
    zeros = [np.zeros((len(example.steps), WIDTH), dtype=np.float32) for example in examples]
    train_frozen_head(
        config=blind_config,
        head=head,
        features=zeros,
        contexts=contexts,
        targets=targets,
        chain_weights=chain_weights,
        weight_by_class=class_weights(targets, config.class_weight),
        device=torch.device("cpu"),
        report=Reporter(config.report_every_s, None, None),
    )
    blind = TextBlindHead(
        head=head.eval(), context=config.context, calibration=(1.0, 0.0), readout=Readout()
    )
    logits = blind.logits(examples)  # [E, N]
    starts = np.cumsum([0, *(len(example.steps) for example in examples)])
    out_of_bag: list[np.ndarray] = []
    for index in range(len(examples)):
        members = logits[:, starts[index] : starts[index + 1]]
        left_out = chain_weights[:, index] == 0
        if members.shape[0] > 1 and left_out.any():
            members = members[left_out]
        out_of_bag.append(members.mean(axis=0))
    if config.calibrate:
        pairs = [
            (logit, target)
            for chain_logits, chain_targets in zip(out_of_bag, targets, strict=True)
            for logit, target in zip(chain_logits, chain_targets, strict=True)
            if target is not None
        ]
        blind.calibration = fit_platt([p[0] for p in pairs], [p[1] for p in pairs])
    scale, bias = blind.calibration
    probs = [(1 / (1 + np.exp(-(scale * chain + bias)))).tolist() for chain in out_of_bag]
    blind.readout = choose_readout(
        examples, probs, answer_aware=config.outcome_readout, threshold=config.threshold
    )
    return blind
