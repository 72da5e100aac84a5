"""The special tokens a trainer format must not carry as text, from the tokenizers the
format targets (``special_tokens.json`` beside this file: each family's list, the
published tokenizer files it comes from, and which families each format targets).

A Hugging Face tokenizer turns the text of a special token into the token itself: a step
holding ``</s>`` ends the sequence for a Llama 2 or Mistral tokenizer, one holding
``<|im_end|>`` ends the assistant's turn in a Qwen chat, and whatever follows is read as
another turn. No escape survives a chat template, so a chain holding one is left out of
the format. Spaced or invisibly split forms (``<| im_end |>``, ``< / s >``,
``<|\\u200bim_end|>``) are caught too: the text is also searched with the spaces and
default-ignorable characters beside a token's brackets, bars and slashes taken out.

Why a shipped list and not the tokenizers themselves: the web process imports no
transformers and reaches no network, and the trainers' tokenizers are not installed where
exports are written. The Qwen 2.5 list is checked against the Qwen 2.5 tokenizer the
embedded run installs; the others are copied from the files each family names."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import regex

_DATA = Path(__file__).with_name("special_tokens.json")
# Spaces and characters that show nothing, where they stand next to the marks special
# tokens are built of: what a spaced or split form of a token adds.
_GAP = r"[\p{White_Space}\p{Default_Ignorable_Code_Point}]+"
_MARK = r"[<>|\uff5c\[\]/]"
_GAPS_BY_MARKS = regex.compile(rf"(?<={_MARK}){_GAP}|{_GAP}(?={_MARK})")


@cache
def _data() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(_DATA.read_text(encoding="utf-8"))
    return loaded


def special_token_families() -> dict[str, dict[str, Any]]:
    """Each tokenizer family: ``source`` (where its list comes from), ``tokens`` (the
    special tokens, as text) and ``patterns`` (regular expressions for numbered runs)."""
    families: dict[str, dict[str, Any]] = _data()["families"]
    return families


@cache
def reserved_text(fmt: str, markers: tuple[str, ...] = ()) -> regex.Pattern[str]:
    """What format ``fmt`` reserves: the special tokens of the families it targets, and
    the format's own ``markers`` (a placeholder or a separator)."""
    families = special_token_families()
    literals: set[str] = set(markers)
    patterns: list[str] = []
    for name in _data()["formats"][fmt]["families"]:
        literals.update(families[name]["tokens"])
        patterns.extend(families[name]["patterns"])
    # Longest first, so an alternation prefers </tool_call> to a shorter prefix of it.
    escaped = [regex.escape(text) for text in sorted(literals, key=len, reverse=True)]
    return regex.compile("|".join(escaped + patterns))


def holds_reserved(reserved: regex.Pattern[str], text: str) -> bool:
    """Whether ``text`` holds what ``reserved`` matches, as written or with the gaps beside
    a token's marks taken out.

    >>> reserved = reserved_text("qwen_prm")
    >>> [holds_reserved(reserved, t) for t in ("<| im_end |>", "a < b | c > d", "<think>")]
    [True, False, True]
    """
    if reserved.search(text) is not None:
        return True
    squeezed = _GAPS_BY_MARKS.sub("", text)
    return squeezed != text and reserved.search(squeezed) is not None
