"""Public ids: the ids of chains, steps and assignments as annotators read and send them.

Row ids grow in insertion order, so shown as they are they order work by when it came
in: gold chains imported after the real work had the larger chain and step ids, and an
annotator could tell them apart by id alone (issue 22). Every such id an annotator reads
(the queue's answers on both doors, the workspace, the history) and every one they send
back (a lease in a path, a step in a submit) is therefore a public id: a keyed
permutation of the row id, one key per kind, so that the public id of one row reveals
nothing about another's, nor the order in which rows were written, to anyone without the
key. A step's public id is its chain's permutation (a kind of its own, over 36 bits)
followed by the step's index (16 bits): one permutation per chain, not per step, on the
queue's hot path, and it says no more than what the answer shows beside it (which chain,
which step). Leads and ML staff keep reading row ids in their own rooms (the data
manager, review, gold and training), which never show the public ones.

Chain and step ids are also the viewer's own: their permutation is keyed by the
annotator who reads them (``viewer``), so one chain has a different id for each
annotator. With one id for everyone, annotators who pooled the ids they had seen could
count how many of them met each chain, and a chain met by more of them than the overlap
was gold (a gold chain is offered to every annotator). An assignment is one annotator's
own row, so its id needs no viewer: no two annotators ever read the same one. Outside an
annotator's door (a webhook's payload) a chain is shown with ``viewer=None``, the lab's
own permutation, which matches no annotator's.

The permutation is a six-round Feistel network with keyed BLAKE2b as its round function
(a pseudo-random permutation by Luby and Rackoff's construction), over 52 bits, so a
public id stays below 2**53 and survives a JavaScript number. Its keys come from
``SECRET_KEY``: rotating the secret changes every public id (a lease an annotator holds
is then found again through ``next``, under its new id).

>>> ids = PublicIds("example")
>>> ids.read(ids.show(42, viewer=5), viewer=5) == 42
True
>>> ids.show(42, viewer=5) != ids.show(42, viewer=6)
True
>>> ids.read(0, viewer=5) is None and ids.read(2**52 + 1, viewer=5) is None
True
>>> STEP_IDS.read(STEP_IDS.show(7, 3, viewer=5), viewer=5) == (7, 3)
True
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from typing import Any

from django.conf import settings

# Row ids 1 .. 2**52 map onto public ids 1 .. 2**52 (zero is neither).
PUBLIC_ID_BITS = 52
PUBLIC_ID_MAX = 1 << PUBLIC_ID_BITS
_ROUNDS = 6


def purpose_key(purpose: str) -> bytes:
    """A secret key for one purpose, derived from ``SECRET_KEY``: the keys of two purposes
    are unrelated, and none can be worked out from what an annotator reads."""
    return _purpose_key(settings.SECRET_KEY, purpose)


def keyed_share(purpose: str, *parts: object) -> float:
    """A uniform number in [0, 1) fixed by ``parts`` (joined with ":") and keyed with
    ``purpose``'s secret: the draws annotators must not be able to work out from the ids
    they know (the gold draw, a gold pass's place, pre-label holdout, routing's spot
    checks).

    >>> keyed_share("example", 1, 2) == keyed_share("example", 1, 2)
    True
    >>> 0.0 <= keyed_share("example", 1, 2) < 1.0
    True
    """
    message = ":".join(str(part) for part in parts).encode()
    digest = hmac.digest(purpose_key(purpose), message, "sha256")
    return int.from_bytes(digest[:8], "big") / 2**64


@functools.cache
def _purpose_key(secret: str, purpose: str) -> bytes:
    return hmac.digest(secret.encode(), f"steplab.{purpose}".encode(), "sha256")


@functools.lru_cache(maxsize=16_384)
def _round_functions(secret: str, kind: str, viewer: int | None) -> tuple[Any, ...]:
    """The keyed round functions of ``kind``'s permutation for ``viewer``, ready to be
    copied (a bounded cache: one entry per kind and annotator seen lately)."""
    purpose = f"public-ids.{kind}" if viewer is None else f"public-ids.{kind}.viewer-{viewer}"
    key = _purpose_key(secret, purpose)
    return tuple(
        hashlib.blake2b(key=key, digest_size=4, person=f"round-{i}".encode())
        for i in range(_ROUNDS)
    )


class PublicIds:
    """The public ids of one kind of row (``"chain"``, ``"assignment"``): a keyed
    permutation of 1 .. 2**bits."""

    def __init__(self, kind: str, bits: int = PUBLIC_ID_BITS) -> None:
        assert bits % 2 == 0, "a balanced Feistel network: two halves of equal width"
        self.kind = kind
        self.max = 1 << bits
        self._half_bits = bits // 2
        self._half_mask = (1 << self._half_bits) - 1

    def _rounds(self, viewer: int | None) -> tuple[Any, ...]:
        return _round_functions(settings.SECRET_KEY, self.kind, viewer)

    def show(self, pk: int, *, viewer: int | None) -> int:
        """The public id of the row ``pk`` (1 .. 2**bits) as the user ``viewer`` reads it
        (None: the lab's own permutation, no annotator's)."""
        if not 1 <= pk <= self.max:
            raise ValueError(f"A {self.kind} id past {self.max} has no public id.")
        half, mask = self._half_bits, self._half_mask
        left, right = (pk - 1) >> half, (pk - 1) & mask
        for round_function in self._rounds(viewer):
            h = round_function.copy()
            h.update(right.to_bytes(4, "little"))
            left, right = right, left ^ (int.from_bytes(h.digest(), "little") & mask)
        return ((left << half) | right) + 1

    def read(self, public: int, *, viewer: int | None) -> int | None:
        """The row id whose public id for ``viewer`` is ``public``; None for a number that
        is no public id at all. Any number in range reads as some row id, existing or not:
        the caller looks the row up and answers for it as for any id it does not know."""
        if not 1 <= public <= self.max:
            return None
        half, mask = self._half_bits, self._half_mask
        left, right = (public - 1) >> half, (public - 1) & mask
        for round_function in reversed(self._rounds(viewer)):
            h = round_function.copy()
            h.update(left.to_bytes(4, "little"))
            left, right = right ^ (int.from_bytes(h.digest(), "little") & mask), left
        return ((left << half) | right) + 1


class StepPublicIds:
    """Steps' public ids: the chain's own permutation (``"step"``, 36 bits) in the high
    bits, the step's index in the low 16. The public id of step ``i`` of a chain is
    ``base(chain) + i``: one permutation per chain, however many steps it has."""

    INDEX_BITS = 16

    def __init__(self) -> None:
        self._chains = PublicIds("step", bits=PUBLIC_ID_BITS - self.INDEX_BITS)

    def base(self, chain_pk: int, *, viewer: int | None) -> int:
        """The public id of the chain's step 0 for ``viewer``; step ``i``'s is this plus
        ``i``."""
        return ((self._chains.show(chain_pk, viewer=viewer) - 1) << self.INDEX_BITS) + 1

    def show(self, chain_pk: int, index: int, *, viewer: int | None) -> int:
        if not 0 <= index < 1 << self.INDEX_BITS:
            raise ValueError(f"A step index past {1 << self.INDEX_BITS} has no public id.")
        return self.base(chain_pk, viewer=viewer) + index

    def of(self, step: Any, *, viewer: int | None) -> int:
        """The public id of a Step (its ``chain_id`` and ``index``) for ``viewer``."""
        return self.show(step.chain_id, step.index, viewer=viewer)

    def read(self, public: int, *, viewer: int | None) -> tuple[int, int] | None:
        """(chain row id, step index) of ``viewer``'s public id of a step; None for a
        number that is none."""
        if not 1 <= public <= PUBLIC_ID_MAX:
            return None
        high, index = (public - 1) >> self.INDEX_BITS, (public - 1) & ((1 << self.INDEX_BITS) - 1)
        chain_pk = self._chains.read(high + 1, viewer=viewer)
        return None if chain_pk is None else (chain_pk, index)


CHAIN_IDS = PublicIds("chain")
STEP_IDS = StepPublicIds()
ASSIGNMENT_IDS = PublicIds("assignment")
