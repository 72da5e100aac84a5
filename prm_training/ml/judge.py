"""An LLM judge of a chain's steps (issue 23), in ProcessBench's critique format: the
steps shown as tagged paragraphs indexed from 0, the answer the index of the earliest
wrong paragraph, or -1 when none is wrong, in ``\\boxed{}``. ``n`` samples per chain and
their majority; an answer that cannot be read is recorded as unparsed (None), never
turned into a label."""

from __future__ import annotations

import hashlib
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .generation import GenerationEngine, SamplingParams

# ProcessBench's critique template (QwenLM/ProcessBench, code/templates/
# critique_template.txt; paper arXiv:2412.06559, appendix), written for ``str.format`` with
# ``problem`` and ``tagged_response`` and filled by ``template_fill``.
DEFAULT_TEMPLATE = """The following is a math problem and a solution (split into paragraphs, \
enclosed with tags and indexed from 0):

[Math Problem]

{problem}

[Solution]

{tagged_response}

Your task is to review and critique the solution paragraph by paragraph. Once you \
identify an error in a paragraph, return the index of the paragraph where the earliest \
error occurs. Otherwise, return the index of -1 (which typically denotes "not found").

Please put your final answer (i.e., the index) in \\boxed{{}}.
"""

_BOXED = re.compile(r"\\boxed\s*\{\s*(?:\\text\s*\{)?\s*\$?\s*(-?\d+)\s*\$?\s*\}?\s*\}")


# The fields a judge template names, each at most once ({tagged_response} exactly once).
TEMPLATE_FIELDS = ("problem", "tagged_response")


def template_fields(template: str, allowed: Sequence[str] = TEMPLATE_FIELDS) -> list[str]:
    """The fields ``template`` names, in order. A template is text with ``{name}`` for a
    field of ``allowed`` and ``{{`` and ``}}`` for braces, nothing else: a format spec
    (``{problem:>1000000000}`` is a gigabyte of spaces), a conversion, an index or an
    attribute is a ValueError, as is a lone brace or a field named twice, so what a
    template fills into is never larger than the template and its values once each.

    >>> template_fields("{problem}|{tagged_response} {{x}}")
    ['problem', 'tagged_response']
    >>> template_fields("{problem:>9}")
    Traceback (most recent call last):
    ...
    ValueError: {problem:>9}: a field is {name} alone, without a format, conversion or index
    """
    names: list[str] = []
    for _literal, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if spec or conversion or name not in allowed:
            shown = "{" + name + (f"!{conversion}" if conversion else "")
            shown += (f":{spec}" if spec else "") + "}"
            if name in allowed:
                raise ValueError(
                    f"{shown}: a field is {{name}} alone, without a format, conversion or index"
                )
            raise ValueError(f"{shown}: not a field (the fields: {', '.join(allowed)})")
        if name in names:
            raise ValueError(f"{{{name}}} twice: each field goes in once")
        names.append(name)
    return names


def template_fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each field replaced by its value in ``values`` and ``{{``, ``}}``
    by braces (``template_fields`` says what a template may hold; ValueError otherwise).
    Nothing of ``str.format``'s language runs, so the text is built from the template's
    own pieces and the values, once each.

    >>> template_fill("{{{problem}}}", {"problem": "P"})
    '{P}'
    """
    template_fields(template, tuple(values))
    pieces: list[str] = []
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        pieces.append(literal)
        if name is not None:
            pieces.append(values[name])
    return "".join(pieces)


def template_hash(template: str) -> str:
    """The sha256 hex digest of a template: what a machine label records as its
    configuration, so verdicts from different prompts are never pooled."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def judge_prompt(template: str, problem: str, steps: Sequence[str]) -> str:
    """``template`` filled with the problem and the steps tagged as ProcessBench tags them.

    >>> print(judge_prompt("{problem}|{tagged_response}", "P", ["a", "b"]))
    P|<paragraph_0>
    a
    </paragraph_0>
    <BLANKLINE>
    <paragraph_1>
    b
    </paragraph_1>
    """
    tagged = "\n\n".join(
        f"<paragraph_{index}>\n{step}\n</paragraph_{index}>" for index, step in enumerate(steps)
    )
    return template_fill(template, {"problem": problem, "tagged_response": tagged})


def parse_verdict(text: str, n_steps: int) -> int | None:
    """The verdict in a judge's answer: the integer in its last ``\\boxed{}``, -1 for "no
    step is wrong", 0..n_steps-1 for the earliest wrong step; None when there is no such
    box or the index is out of range.

    >>> parse_verdict(r"Paragraph 2 is wrong. \\boxed{2}", 4), parse_verdict(r"\\boxed{-1}", 4)
    (2, -1)
    >>> parse_verdict(r"\\boxed{4}", 4), parse_verdict("I am not sure.", 4)
    (None, None)
    """
    matches = _BOXED.findall(text)
    if not matches:
        return None
    verdict = int(matches[-1])
    return verdict if -1 <= verdict < n_steps else None


@dataclass
class JudgeResult:
    """One verdict per sample (None = unparsed) and the sampled texts."""

    verdicts: list[int | None]
    texts: list[str]

    @property
    def majority(self) -> int | None:
        """The most common parsed verdict; a tie goes to the earliest error (-1, "none
        wrong", counts as the latest), so a tie never hides an error. None when no sample
        parsed.

        >>> JudgeResult([2, -1, None, -1, 2], []).majority
        2
        """
        counts = Counter(v for v in self.verdicts if v is not None)
        if not counts:
            return None
        return max(counts, key=lambda v: (counts[v], -(v if v >= 0 else float("inf"))))


def judge_chain(
    engine: GenerationEngine,
    template: str,
    problem: str,
    steps: Sequence[str],
    params: SamplingParams,
) -> JudgeResult:
    """``params.n`` critiques of one chain. An engine with a ``chat_prompt`` method (an
    instruction model with a chat template) gets the prompt as a user message, as
    ProcessBench sends it."""
    prompt = judge_prompt(template, problem, steps)
    chat_prompt = getattr(engine, "chat_prompt", None)
    if callable(chat_prompt):
        prompt = chat_prompt(prompt)
    texts = [c.text for c in engine.generate([prompt], params)[0]]
    return JudgeResult(verdicts=[parse_verdict(t, len(steps)) for t in texts], texts=texts)
