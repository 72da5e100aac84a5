"""Chains as the PRM sees them, and the pure transforms from a chain to token windows.

Layout of one window (TRL's stepwise convention: the label sits on the last token of each
step, which is the separator appended to it)::

    [CLS|BOS]  problem tokens  SEP  step 1 tokens  SEP  step 2 tokens  SEP ...
    segment 0 ..............................  1 .............  2 ..........

Segment ids drive the step-level attention mask of encoders: a token attends to every
token whose segment is <= its own, so the representation at the SEP closing step i sees
the problem and steps 1..i and nothing after. A decoder's causal attention gives the same.

A chain longer than ``max_length`` is split into several windows that overlap: each is
the problem, then as many of the steps before its own as fit in half the room left (read
as context, not scored there), then its own consecutive steps, each scored once. So a
step in a later window still reads what came just before it, and its score still depends
only on the problem and steps up to it (DESIGN.md's invariant 3). What no window can hold
is counted (``truncation``): a problem or a step longer than its share of the window
(kept as its head and tail), and a step scored without some of the steps before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ChainExample:
    """One chain: ``labels[i]`` is step i's rating (+1, 0, -1), None where nobody rated it
    (for example after the first error in first_error labeling), or ``labels`` is None for
    an unlabeled chain. ``answer_correct`` is the source's own verdict on the final answer
    where it gives one (ProcessBench's ``final_answer_correct``); otherwise ``answer`` is
    graded against ``reference_answer`` (``inputs.answer_grade``). ``subset`` names the
    part of a benchmark the chain belongs to (ProcessBench's ``gsm8k``, ``math``, ...):
    ProcessBench reports F1 per subset and their mean (``evaluation``); blank is one
    subset of its own."""

    chain_id: int
    problem: str
    steps: tuple[str, ...]
    labels: tuple[int | None, ...] | None = None
    answer: str = ""
    reference_answer: str = ""
    answer_correct: bool | None = None
    subset: str = ""

    def __post_init__(self) -> None:
        if self.labels is not None and len(self.labels) != len(self.steps):
            raise ValueError(
                f"chain {self.chain_id}: {len(self.labels)} labels for {len(self.steps)} steps"
            )


@dataclass(frozen=True)
class Window:
    """A token sequence for one forward pass: the problem, ``context_steps`` steps before
    ``first_step`` (read, not scored), and the scored steps ``first_step .. first_step +
    len(step_end_positions) - 1`` of chain ``chain_index``."""

    chain_index: int
    first_step: int
    input_ids: tuple[int, ...]
    segment_ids: tuple[int, ...]
    step_end_positions: tuple[int, ...]
    context_steps: int = 0

    @property
    def reads_whole_prefix(self) -> bool:
        """Whether every step before its scored ones is in the window."""
        return self.first_step == self.context_steps


class Tokenizer(Protocol):
    """What the transforms need from a Hugging Face tokenizer."""

    cls_token_id: int | None
    bos_token_id: int | None
    sep_token_id: int | None
    eos_token_id: int | None

    def __call__(self, text: Any, **kwargs: Any) -> Any: ...


def step_target(rating: int | None, ambiguous: str) -> float | None:
    """The training target of one rating: 1.0 correct, 0.0 incorrect, None no loss.

    >>> [step_target(r, "negative") for r in (1, 0, -1, None)]
    [1.0, 0.0, 0.0, None]
    >>> [step_target(r, "ignore") for r in (1, 0, -1)]
    [1.0, None, 0.0]
    """
    if rating is None:
        return None
    if rating == 1:
        return 1.0
    if rating == -1:
        return 0.0
    if rating == 0:
        return {"positive": 1.0, "negative": 0.0, "ignore": None}[ambiguous]
    raise ValueError(f"rating must be -1, 0 or 1, not {rating!r}")


# Qwen2.5-Math's system prompt, which open math PRMs built on it were trained with.
DEFAULT_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class TextLayout:
    """How a chain is laid out for a backbone beyond its tokens: the text that closes each
    step, and whether the problem goes through the tokenizer's chat template (a system
    turn, the problem as the user's turn, the assistant's turn opened), as instruction-tuned
    LLMs and open math PRMs such as Qwen2.5-Math-PRM read it (their step separator:
    ``<extra_0>``). The default is the plain layout of the module docstring."""

    separator: str = ""  # blank: [SEP] for BERT-likes, a blank line (or EOS) for decoders
    chat_template: bool = False
    system_prompt: str = DEFAULT_SYSTEM_PROMPT

    def key(self) -> str:
        """A short digest naming a non-default layout in cache keys ('' for the default)."""
        if self == TextLayout():  # the plain layout
            return ""
        import hashlib

        text = f"{self.separator}\x1f{self.chat_template}\x1f{self.system_prompt}"
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


PLAIN = TextLayout()


def special_ids(tokenizer: Tokenizer, layout: TextLayout = PLAIN) -> tuple[list[int], list[int]]:
    """(prefix ids, separator ids) for a tokenizer: [CLS] and [SEP] for BERT-likes; BOS (if
    any) and the encoding of a blank line for decoders, EOS when that encodes to nothing.
    ``layout.separator`` replaces the separator; with the chat template there is no prefix
    (the template writes its own)."""
    prefix_id = tokenizer.cls_token_id
    if prefix_id is None:
        prefix_id = tokenizer.bos_token_id
    prefix = [prefix_id] if prefix_id is not None and not layout.chat_template else []
    if layout.separator:
        separator = list(tokenizer(layout.separator, add_special_tokens=False)["input_ids"])
        if not separator:
            raise ValueError(f"the step separator {layout.separator!r} encodes to no token")
        return prefix, separator
    if tokenizer.sep_token_id is not None:
        return prefix, [tokenizer.sep_token_id]
    separator = list(tokenizer("\n\n", add_special_tokens=False)["input_ids"])
    if not separator:
        if tokenizer.eos_token_id is None:
            raise ValueError("tokenizer has no SEP or EOS token and encodes '\\n\\n' to nothing")
        separator = [tokenizer.eos_token_id]
    return prefix, separator


def problem_text(tokenizer: Any, problem: str, layout: TextLayout = PLAIN) -> str:
    """The problem as the backbone reads it: as is, or through the chat template."""
    if not layout.chat_template:
        return problem
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; turn chat_template off")
    messages = [{"role": "user", "content": problem}]
    if layout.system_prompt:
        messages.insert(0, {"role": "system", "content": layout.system_prompt})
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens, in one batched tokenizer call."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def problem_budget(max_length: int) -> int:
    """Tokens a problem may keep in a window of ``max_length``: half of it."""
    return max(1, max_length // 2)


def window_budgets(
    *, problem: int, prefix: int, closing: int, separator: int, max_length: int
) -> tuple[int, int]:
    """(problem tokens kept, tokens a step may keep) in a window of ``max_length``: the
    problem keeps at most half, the rest holds a step and its separator. The one rule
    ``build_windows`` packs by and ``truncation`` counts by.

    >>> window_budgets(problem=10, prefix=1, closing=1, separator=1, max_length=16)
    (8, 5)
    """
    kept = min(problem, problem_budget(max_length))
    return kept, max_length - prefix - kept - closing - separator


def clip_tokens(ids: Sequence[int], budget: int) -> list[int]:
    """``ids`` cut to ``budget`` tokens keeping the head and the tail.

    >>> clip_tokens([1, 2, 3, 4, 5], 3), clip_tokens([1, 2], 3)
    ([1, 2, 5], [1, 2])
    """
    if len(ids) <= budget:
        return list(ids)
    tail = budget // 2
    return [*ids[: budget - tail], *ids[len(ids) - tail :]] if tail else list(ids[:budget])


@dataclass(frozen=True)
class Truncation:
    """What windows of ``max_length`` cut from a set of chains."""

    problems: int  # chains whose problem was cut to its head and tail
    steps: int  # steps cut to their head and tail
    chains: int  # chains with any cut
    context_steps: int = 0  # steps scored without some of the steps before them


def truncation(
    tokenizer: Tokenizer,
    examples: Sequence[ChainExample],
    max_length: int,
    layout: TextLayout = PLAIN,
) -> Truncation:
    """Counts what ``chains_to_windows`` cuts (see ``build_windows``).

    >>> truncation(tok, [ChainExample(1, "a b c d e f", ("g h i j k l m n",))], 8)
    Truncation(problems=1, steps=1, chains=1, context_steps=0)
    """
    problems = steps = chains = context = 0
    for _, windows, cut in _chain_windows(tokenizer, examples, max_length, layout):
        lost = sum(len(w.step_end_positions) for w in windows if not w.reads_whole_prefix)
        problems += cut.problems
        steps += cut.steps
        context += lost
        chains += bool(cut.problems or cut.steps or lost)
    return Truncation(problems=problems, steps=steps, chains=chains, context_steps=context)


def build_windows(
    *,
    chain_index: int,
    problem_ids: Sequence[int],
    step_ids: Sequence[Sequence[int]],
    prefix: Sequence[int],
    separator: Sequence[int],
    max_length: int,
    problem_end: Sequence[int] | None = None,
) -> list[Window]:
    """Packs a chain's already-tokenized parts into windows of at most ``max_length`` tokens.
    The problem is closed by ``problem_end`` (default: the separator; a chat template
    ends its prompt with the assistant's turn, so nothing more).

    The problem keeps at most half the window; a step longer than what is left is cut,
    so every step fits in a window of its own at least. A cut keeps the head and the tail
    (a problem's question and a step's conclusion are at their ends) and is counted by
    ``truncation``, which a training run reports. A window after the first opens with the
    steps just before its own that fit in half the room after the problem (module
    docstring), fewer where its first step needs the room.

    >>> [w.input_ids for w in build_windows(chain_index=0, problem_ids=[5, 6],
    ...     step_ids=[[7], [8, 9]], prefix=[1], separator=[2], max_length=16)]
    [(1, 5, 6, 2, 7, 2, 8, 9, 2)]
    >>> w = build_windows(chain_index=0, problem_ids=[5, 6], step_ids=[[7], [8, 9]],
    ...     prefix=[1], separator=[2], max_length=16)[0]
    >>> w.segment_ids, w.step_end_positions
    ((0, 0, 0, 0, 1, 1, 2, 2, 2), (5, 8))
    >>> for w in build_windows(chain_index=0, problem_ids=[5], prefix=[1], separator=[2],
    ...         step_ids=[[7, 7], [8], [9, 9], [6, 6]], max_length=10):
    ...     print(w.first_step, w.context_steps, w.input_ids)
    0 0 (1, 5, 2, 7, 7, 2, 8, 2)
    2 1 (1, 5, 2, 8, 2, 9, 9, 2)
    3 1 (1, 5, 2, 9, 9, 2, 6, 6, 2)
    """
    closing = separator if problem_end is None else problem_end
    kept, step_budget = window_budgets(
        problem=len(problem_ids),
        prefix=len(prefix),
        closing=len(closing),
        separator=len(separator),
        max_length=max_length,
    )
    head = [*prefix, *clip_tokens(problem_ids, kept), *closing]
    if step_budget < 1:
        raise ValueError(f"max_length {max_length} leaves no room for a step")
    pieces = [[*clip_tokens(ids, step_budget), *separator] for ids in step_ids]
    room = max_length - len(head)  # >= the longest piece
    windows: list[Window] = []
    context_from = first = 0
    while first < len(pieces):
        context = sum(len(piece) for piece in pieces[context_from:first])
        while context_from < first and context + len(pieces[first]) > room:
            context -= len(pieces[context_from])
            context_from += 1
        end, used = first, context
        while end < len(pieces) and (end == first or used + len(pieces[end]) <= room):
            used += len(pieces[end])
            end += 1
        windows.append(_window(chain_index, head, pieces, context_from, first, end))
        # The next window's context: the steps just before it that fit in half the room.
        context_from, first, context = end, end, 0
        while context_from > 0 and context + len(pieces[context_from - 1]) <= room // 2:
            context += len(pieces[context_from - 1])
            context_from -= 1
    return windows


def _window(
    chain_index: int,
    head: list[int],
    pieces: list[list[int]],
    context_from: int,
    first: int,
    end: int,
) -> Window:
    """The window of the problem (``head``), context steps ``context_from..first-1`` and
    scored steps ``first..end-1``; segment ids are global step numbers (only their order
    matters to the mask)."""
    input_ids = list(head)
    segments = [0] * len(head)
    ends: list[int] = []
    for index in range(context_from, end):
        input_ids.extend(pieces[index])
        segments.extend([index + 1] * len(pieces[index]))
        if index >= first:
            ends.append(len(input_ids) - 1)
    return Window(
        chain_index, first, tuple(input_ids), tuple(segments), tuple(ends), first - context_from
    )


def _chain_windows(
    tokenizer: Tokenizer,
    examples: Sequence[ChainExample],
    max_length: int,
    layout: TextLayout = PLAIN,
) -> Iterator[tuple[int, list[Window], Truncation]]:
    """(index, windows, cuts of its problem and steps) of each chain, with one batched
    tokenizer call."""
    prefix, separator = special_ids(tokenizer, layout)
    closing = [] if layout.chat_template else separator
    texts: list[str] = []
    for example in examples:
        texts.append(problem_text(tokenizer, example.problem, layout))
        texts.extend(example.steps)
    encoded = iter(encode_texts(tokenizer, texts))
    for index, example in enumerate(examples):
        problem_ids = next(encoded)
        step_ids = [next(encoded) for _ in example.steps]
        kept, budget = window_budgets(
            problem=len(problem_ids),
            prefix=len(prefix),
            closing=len(closing),
            separator=len(separator),
            max_length=max_length,
        )
        windows = build_windows(
            chain_index=index,
            problem_ids=problem_ids,
            step_ids=step_ids,
            prefix=prefix,
            separator=separator,
            max_length=max_length,
            problem_end=[] if layout.chat_template else None,
        )
        cut_steps = sum(len(ids) > budget for ids in step_ids)
        problem_cut = int(len(problem_ids) > kept)
        yield (
            index,
            windows,
            Truncation(problem_cut, cut_steps, int(bool(problem_cut or cut_steps))),
        )


def chains_to_windows(
    tokenizer: Tokenizer,
    examples: Sequence[ChainExample],
    max_length: int,
    layout: TextLayout = PLAIN,
) -> list[Window]:
    """Windows of many chains with one batched tokenizer call; ``chain_index`` is the
    position in ``examples``."""
    return [
        window
        for _, windows, _ in _chain_windows(tokenizer, examples, max_length, layout)
        for window in windows
    ]


def window_steps(windows: Sequence[Window], starts: Sequence[int]) -> list[int]:
    """The steps of ``windows``, in batch order, as indices into their chains' steps laid
    end to end (chain c's first step at ``starts[c]``).

    >>> window_steps([Window(1, 2, (), (), (7, 9)), Window(0, 0, (), (), (4,))], [0, 3])
    [5, 6, 0]
    """
    return [
        int(starts[window.chain_index]) + window.first_step + i
        for window in windows
        for i in range(len(window.step_end_positions))
    ]


def tokenize_chain(
    tokenizer: Tokenizer, example: ChainExample, max_length: int, layout: TextLayout = PLAIN
) -> dict[str, Any]:
    """One chain as a single token sequence (TRL's ``tokenize_row`` for stepwise data):
    ``input_ids``, ``segment_ids``, ``step_end_positions`` (the separator closing each step,
    where its label sits) and ``step_labels`` (the raw ratings, None where unrated).

    Raises ValueError when the chain needs more than one window; use ``chains_to_windows``
    for those. With the bundled MiniLM tokenizer as ``tok``:

    >>> row = tokenize_chain(tok, ChainExample(1, "1+1?", ("1+1=2",), (1,)), 32)
    >>> tok.convert_ids_to_tokens(row["input_ids"])
    ['[CLS]', '1', '+', '1', '?', '[SEP]', '1', '+', '1', '=', '2', '[SEP]']
    >>> row["segment_ids"], row["step_end_positions"], row["step_labels"]
    ([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1], [11], [1])
    """
    windows = chains_to_windows(tokenizer, [example], max_length, layout)
    if len(windows) > 1:
        raise ValueError(f"chain {example.chain_id} needs {len(windows)} windows of {max_length}")
    labels = list(example.labels) if example.labels is not None else [None] * len(example.steps)
    if not windows:
        prefix, separator = special_ids(tokenizer, layout)
        problem = clip_tokens(
            encode_texts(tokenizer, [problem_text(tokenizer, example.problem, layout)])[0],
            problem_budget(max_length),
        )
        ids = [*prefix, *problem, *([] if layout.chat_template else separator)]
        return {
            "input_ids": ids,
            "segment_ids": [0] * len(ids),
            "step_end_positions": [],
            "step_labels": [],
        }
    [window] = windows
    return {
        "input_ids": list(window.input_ids),
        "segment_ids": list(window.segment_ids),
        "step_end_positions": list(window.step_end_positions),
        "step_labels": labels,
    }


def chain_content_key(example: ChainExample) -> str:
    """A stable digest of what the PRM reads from a chain (problem and steps, not labels or
    ids), so the same text imported twice shares one cached representation."""
    import hashlib

    digest = hashlib.blake2b(digest_size=16)
    digest.update(example.problem.encode())
    for step in example.steps:
        digest.update(b"\x1f")
        digest.update(step.encode())
    return digest.hexdigest()


def labeled_steps(examples: Iterable[ChainExample]) -> int:
    return sum(
        sum(1 for rating in example.labels if rating is not None)
        for example in examples
        if example.labels is not None
    )
