"""Score the accepted images of a group in one call and put the rejected ones back in their places.

A group of uploads (``POST /v1/predict/batch``), a window of the local batch runner and a batch of a Ray
actor all hold a mix of prepared images and rejections (a failed decode, a failed read). Each needs the
same three steps, written here once:

1. take out the accepted ones (``accepted``), in order;
2. score them together (one batched forward of the K draws: the caller's function, sync or async);
3. merge the scores back, in the group's order, each rejection where it was (``merge_in_order``).

``score_accepted`` does all three for a synchronous scorer. The merge checks that exactly one score came
back per accepted item: a lost or extra score is a bug that must not shift answers to the wrong image.

Example::

    outcomes = [prepared_a, ImageRejected("undecodable-image", "..."), prepared_b]
    merged = score_accepted(outcomes, PreparedImage, ImageRejected, scorer.score_batch)
    # [Accepted(prepared_a, score_a), ImageRejected(...), Accepted(prepared_b, score_b)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

A = TypeVar("A")  # an accepted item (e.g. PreparedImage)
X = TypeVar("X")  # a rejection (e.g. ImageRejected, RowError)
S = TypeVar("S")  # the score of one accepted item (e.g. ImageScore)


@dataclass(frozen=True)
class Accepted(Generic[A, S]):
    """An accepted item with the score it got."""

    item: A
    score: S


def accepted(outcomes: Iterable[object], kind: type[A]) -> list[A]:
    """The items of type ``kind`` in ``outcomes``, in order: what to score together."""
    return [o for o in outcomes if isinstance(o, kind)]


def merge_in_order(
    outcomes: Sequence[A | X], kind: type[A], rejection: type[X], scores: Sequence[S]
) -> list[Accepted[A, S] | X]:
    """``outcomes`` with every item of type ``kind`` paired with its score; rejections stay as they are.

    ``scores`` are the scores of ``accepted(outcomes, kind)``, in that order. Raises ``ValueError`` when
    their number differs from the number of accepted items (never pairs a score with the wrong image) and
    ``TypeError`` for an outcome that is neither ``kind`` nor ``rejection``.
    """
    n_accepted = sum(isinstance(o, kind) for o in outcomes)
    if len(scores) != n_accepted:
        raise ValueError(f"{len(scores)} scores for {n_accepted} accepted items")
    it = iter(scores)
    merged: list[Accepted[A, S] | X] = []
    for o in outcomes:
        if isinstance(o, kind):
            merged.append(Accepted(o, next(it)))
        elif isinstance(o, rejection):
            merged.append(o)
        else:
            raise TypeError(f"outcome {type(o).__name__} is neither {kind.__name__} nor {rejection.__name__}")
    return merged


def score_accepted(
    outcomes: Sequence[A | X], kind: type[A], rejection: type[X], score: Callable[[list[A]], Sequence[S]]
) -> list[Accepted[A, S] | X]:
    """Split, score the accepted items with ONE call of ``score``, merge back in order (module docstring).

    ``score`` is not called when nothing was accepted.
    """
    items = accepted(outcomes, kind)
    return merge_in_order(outcomes, kind, rejection, score(items) if items else [])
