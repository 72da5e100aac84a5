"""A backbone root holding a tiny causal LM (built from a config, random weights), for the
machine-label run tests; import the fixtures into a test module to use them. The
directory is made once per session and the root is set per test, so a worker subprocess
started afterwards inherits it."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from prm_training.ml.generation import Completion, SamplingParams

LM = "tiny-llama-lm"


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.prm_training.ml_tiny import tiny_causal_lm_dir

    return tiny_causal_lm_dir(tmp_path_factory.mktemp("lm-root"))


@pytest.fixture
def lm_root(tiny_lm_dir: Path, tiny_bert_dir: Path, monkeypatch: Any) -> Path:
    """STEPLAB_BACKBONE_DIR for the test: the tiny causal LM (named LM) and, beside it, a
    copy of the tiny BERT (named "bert": an encoder, which no machine-label run takes)."""
    root = tiny_lm_dir.parent
    if not (root / "bert").exists():
        shutil.copytree(tiny_bert_dir, root / "bert")
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(root))
    return root


@dataclass
class ScriptedEngine:
    """A generation engine whose completions a test writes: ``answer(prompt, j)`` is the
    text of completion j of ``prompt``. It stands in for a model that would have to be
    trained to say something a test can check (a judge naming a step, rollouts that
    reach the answer only before a planted error)."""

    answer: Any
    model_name: str = "scripted"
    prompts: list[str] = field(default_factory=list)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        self.prompts.extend(prompts)
        return [
            [Completion(text=self.answer(p, j), tokens=3, finished=True) for j in range(params.n)]
            for p in prompts
        ]


class Killed(BaseException):
    """What a SIGKILL would be, in process: no handler of the run sees it."""


@dataclass
class RecordingEngine:
    """Wraps a real engine: records every prompt, and is killed (``Killed``) at call
    ``kill_at`` (1-based) when set."""

    engine: Any
    kill_at: int | None = None
    prompts: list[str] = field(default_factory=list)
    calls: int = 0

    @property
    def model_name(self) -> str:
        return str(self.engine.model_name)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        self.calls += 1
        if self.kill_at is not None and self.calls >= self.kill_at:
            raise Killed
        self.prompts.extend(prompts)
        return list(self.engine.generate(prompts, params))
