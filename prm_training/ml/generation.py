"""Text generation for machine labels (issue 23): sampling chains from problems, Monte-Carlo
rollouts from a step's prefix, a judge's critiques. One interface, ``GenerationEngine``;
its implementations (transformers ``generate`` always, vLLM where it is installed on the
GPU node) live beside it and return the same things for the same inputs.

Torch-free at import: the web process imports this module for its dataclasses."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``n`` completions per prompt, each from its own seed
    (``seed`` + the completion's index within its prompt), so a resumed run draws the
    same completions it would have drawn the first time."""

    n: int = 1
    temperature: float = 0.7
    top_p: float = 0.95
    max_new_tokens: int = 512
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Completion:
    """One sampled continuation: its text, how many tokens it took, and whether it ended
    by itself (an end-of-sequence token) rather than at ``max_new_tokens``."""

    text: str
    tokens: int
    finished: bool


class GenerationEngine(Protocol):
    """Generates completions of prompts. ``model_name`` is what provenance records."""

    model_name: str
    # How many completions one ``generate`` call batches well: callers with several small
    # prompts (a chain's step prefixes) send this many rows at once.
    rows_per_call: int

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions for each prompt, in the prompts' order."""
        ...


# Names ``engine_load`` accepts.
ENGINES = ("auto", "transformers", "vllm")


def _torch_dtype(dtype: str, device: Any) -> Any:
    """The torch dtype for ``dtype``: "auto" is bfloat16 on a GPU that has it, else
    float32 (half precision on a CPU is slower than float32, not faster)."""
    import torch

    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, not {dtype!r}")
    return getattr(torch, dtype)


def _row_sampler(params: SamplingParams, seeds: Sequence[int]) -> Any:
    """A transformers logits processor that draws each row's next token from that row's own
    ``torch.Generator`` (seeded with ``seeds[row]``) by temperature and nucleus (top-p)
    sampling, and answers a score of 0 for the drawn token and -inf for every other, so a
    greedy ``generate`` takes exactly the drawn token.

    Why not ``generate(do_sample=True)``: it draws every row of a batch from one global
    generator, so a completion depends on its batch neighbours and on the batch size.
    Here the t-th token of a completion uses the t-th uniform of its own generator, so the
    same (prompt, params, seed + index) gives the same completion in any batch, and a
    resumed run redraws exactly the completions it had drawn. Rows of one batch still
    share the forward pass; only the draw is per row (one uniform per row and step)."""
    import torch
    from transformers import LogitsProcessor

    generators = [torch.Generator().manual_seed(seed) for seed in seeds]

    class RowSampler(LogitsProcessor):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            # scores: [rows, vocab] float32 logits of the next token
            if params.temperature <= 0:
                chosen = scores.argmax(dim=-1)  # [rows]
            else:
                probs = torch.softmax(scores.float() / params.temperature, dim=-1)
                sorted_probs, order = probs.sort(dim=-1, descending=True)  # [rows, vocab]
                cumulative = sorted_probs.cumsum(dim=-1)
                # Nucleus: keep the smallest prefix whose mass reaches top_p (at least one).
                keep = (cumulative - sorted_probs) < params.top_p
                kept = torch.where(keep, sorted_probs, 0.0).cumsum(dim=-1)  # [rows, vocab]
                uniforms = torch.cat([torch.rand(1, generator=g) for g in generators])
                target = uniforms.to(kept.device, kept.dtype) * kept[:, -1]  # [rows]
                position = torch.searchsorted(kept, target.unsqueeze(-1), right=True)
                position = position.clamp(max=scores.shape[-1] - 1)
                # A draw can land past the nucleus only by rounding: take its last token.
                position = torch.minimum(position, keep.sum(dim=-1, keepdim=True) - 1)
                chosen = order.gather(-1, position).squeeze(-1)  # [rows]
            out = torch.full_like(scores, float("-inf"))
            out.scatter_(-1, chosen.unsqueeze(-1), 0.0)
            return out

    return RowSampler()


class TransformersEngine:
    """A causal LM from a local directory, sampled with transformers ``generate``.

    Prompts are left-padded (a decoder continues from the right end of its input); a
    tokenizer without a pad token pads with its EOS token. Each completion is drawn with
    its own seed, ``params.seed`` + its index within its prompt (see ``_row_sampler``),
    so the result does not depend on ``batch_size`` or on which other prompts share a
    batch, up to the floating-point differences of batched matrix products: none in the
    CPU tests, but on a GPU in bf16 a batch's size changes the kernels and so the logits'
    last bits, which can change a draw (BENCHMARKS.md, machine labels). ``finished`` is
    True when the completion ended with EOS.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.model_name = model_name(model_dir)
        self.batch_size = batch_size
        self.rows_per_call = batch_size
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        )
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=_torch_dtype(dtype, self.device)
        )
        self.model = model.to(self.device).eval()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        if not self.eos_ids:
            raise ValueError(f"{model_dir}: neither the model nor its tokenizer names an EOS token")

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError("n and max_new_tokens must be at least 1")
        # One row per (prompt, completion index); rows of similar length batch together so
        # padding stays small. The order of rows changes no completion (see _row_sampler).
        lengths = [len(self.tokenizer(p)["input_ids"]) for p in prompts]
        rows = sorted(
            ((i, j) for i in range(len(prompts)) for j in range(params.n)),
            key=lambda row: (lengths[row[0]], row),
        )
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=params.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_ids),
        )
        out: list[list[Completion | None]] = [[None] * params.n for _ in prompts]
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            encoded = self.tokenizer(
                [prompts[i] for i, _ in batch], return_tensors="pt", padding=True
            ).to(self.device)
            sampler = _row_sampler(params, [params.seed + j for _, j in batch])
            with torch.inference_mode():
                sequences = self.model.generate(
                    **encoded,
                    generation_config=config,
                    logits_processor=LogitsProcessorList([sampler]),
                )
            new_tokens = sequences[:, encoded["input_ids"].shape[1] :].tolist()  # [rows, <=max]
            for (i, j), tokens in zip(batch, new_tokens, strict=True):
                out[i][j] = self._completion(tokens)
        return [[c for c in row if c is not None] for row in out]

    def chat_prompt(self, text: str) -> str:
        """``text`` as a user message in the model's chat template, ready to generate the
        assistant's answer (as it is when the tokenizer has no chat template)."""
        if not getattr(self.tokenizer, "chat_template", None):
            return text
        message = [{"role": "user", "content": text}]
        return str(
            self.tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
        )

    def _completion(self, tokens: list[int]) -> Completion:
        """A row's new tokens cut after its first EOS (``generate`` pads finished rows)."""
        end = next((k for k, token in enumerate(tokens) if token in self.eos_ids), None)
        kept = tokens if end is None else tokens[: end + 1]
        text = str(self.tokenizer.decode(kept, skip_special_tokens=True))
        return Completion(text=text, tokens=len(kept), finished=end is not None)


VLLM_ROWS_PER_CALL = 256


class VllmEngine:
    """The same interface on vLLM, for the GPU node where the optional ``vllm`` extra is
    installed. Each completion is its own request with seed ``params.seed`` + its index
    within its prompt, as in ``TransformersEngine``, so a resumed run redraws the same
    completions; prefix caching is on, since rollouts from one chain share its prefix.

    Not tested here: vLLM is not installed on the development machines or in CI, and the
    two engines' completions are the same in distribution, not token for token (their
    samplers differ)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
    ) -> None:
        from vllm import LLM

        del device  # vLLM places requests itself
        self.model_name = model_name(model_dir)
        # vLLM schedules any number of requests itself; a call still takes a bounded
        # number, so a cancel or a kill loses at most this much work.
        self.rows_per_call = max(batch_size, VLLM_ROWS_PER_CALL)
        self.llm = LLM(model=str(model_dir), dtype=dtype, enable_prefix_caching=True)

    def chat_prompt(self, text: str) -> str:
        """``text`` as a user message in the model's chat template (see TransformersEngine)."""
        tokenizer = self.llm.get_tokenizer()
        if not getattr(tokenizer, "chat_template", None):
            return text
        message = [{"role": "user", "content": text}]
        return str(
            tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
        )

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        from vllm import SamplingParams as VllmSamplingParams

        requests = [(i, j) for i in range(len(prompts)) for j in range(params.n)]
        outputs = self.llm.generate(
            [prompts[i] for i, _ in requests],
            [
                VllmSamplingParams(
                    n=1,
                    temperature=params.temperature,
                    top_p=params.top_p,
                    max_tokens=params.max_new_tokens,
                    seed=params.seed + j,
                )
                for _, j in requests
            ],
            use_tqdm=False,
        )
        out: list[list[Completion]] = [[] for _ in prompts]
        for (i, _), output in zip(requests, outputs, strict=True):
            sample = output.outputs[0]
            out[i].append(
                Completion(
                    text=sample.text,
                    tokens=len(sample.token_ids),
                    finished=sample.finish_reason == "stop",
                )
            )
        return out


def model_name(model_dir: str | Path) -> str:
    """What provenance records as the model: the directory's name (a backbone directory is
    named after its model, e.g. ``Qwen2.5-Math-1.5B``)."""
    return Path(model_dir).resolve().name


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def engine_load(
    model_dir: str | Path,
    *,
    engine: str = "auto",
    device: str = "auto",
    dtype: str = "auto",
    batch_size: int = 8,
) -> GenerationEngine:
    """The engine named by ``engine``: "auto" is vLLM where it is installed and a CUDA
    device is there to run it, else transformers."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if engine == "auto":
        import torch

        on_gpu = torch.cuda.is_available() and (device == "auto" or device.startswith("cuda"))
        engine = "vllm" if vllm_available() and on_gpu else "transformers"
    chosen = VllmEngine if engine == "vllm" else TransformersEngine
    return chosen(model_dir, device=device, dtype=dtype, batch_size=batch_size)
