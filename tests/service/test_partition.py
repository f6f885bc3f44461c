"""``service.inference.partition``: accepted items scored in one call, rejections kept in their places.

Pure-Python inputs (strings as accepted items, a small rejection class) so each expected list is written
out by hand; one test runs the real path (decoded images, the tiny model) with a corrupt upload between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from service.inference.imaging import ImageRejected
from service.inference.loading import load_scorer
from service.inference.partition import Accepted, accepted, merge_in_order, score_accepted
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.spec import ScorerSpec
from support.images import encode, fundus_like


@dataclass(frozen=True)
class Rejected:
    reason: str


class CountingScorer:
    """Scores a list of strings by their length; records every call so the tests can count them."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, items: list[str]) -> list[int]:
        self.calls.append(list(items))
        return [len(s) for s in items]


def test_rejections_interleaved_keep_their_places_and_scores_follow_their_items() -> None:
    outcomes: list[str | Rejected] = [Rejected("r0"), "a", "bbb", Rejected("r3"), "cc", Rejected("r5"), "dddd"]
    score = CountingScorer()
    merged = score_accepted(outcomes, str, Rejected, score)
    assert merged == [Rejected("r0"), Accepted("a", 1), Accepted("bbb", 3), Rejected("r3"), Accepted("cc", 2),
                      Rejected("r5"), Accepted("dddd", 4)]
    assert score.calls == [["a", "bbb", "cc", "dddd"]]  # ONE call, accepted items only, in order


def test_all_rejected_never_calls_the_scorer() -> None:
    outcomes: list[str | Rejected] = [Rejected("x"), Rejected("y")]
    score = CountingScorer()
    assert score_accepted(outcomes, str, Rejected, score) == [Rejected("x"), Rejected("y")]
    assert score.calls == []


def test_none_rejected_scores_everything_in_order() -> None:
    score = CountingScorer()
    assert score_accepted(["ab", "c", "def"], str, Rejected, score) == [
        Accepted("ab", 2), Accepted("c", 1), Accepted("def", 3)]
    assert score.calls == [["ab", "c", "def"]]


def test_empty_group() -> None:
    score = CountingScorer()
    assert score_accepted([], str, Rejected, score) == [] and score.calls == []


def test_split_and_merge_separately_as_an_async_caller_does() -> None:
    outcomes: list[str | Rejected] = ["x", Rejected("bad"), "yy"]
    items = accepted(outcomes, str)
    assert items == ["x", "yy"]
    assert merge_in_order(outcomes, str, Rejected, [10, 20]) == [Accepted("x", 10), Rejected("bad"),
                                                                 Accepted("yy", 20)]


@pytest.mark.parametrize("scores", [[1], [1, 2, 3]])
def test_a_missing_or_extra_score_is_an_error_not_a_shift(scores: list[int]) -> None:
    with pytest.raises(ValueError, match=f"{len(scores)} scores for 2 accepted items"):
        merge_in_order(["a", Rejected("r"), "b"], str, Rejected, scores)


def test_an_outcome_of_neither_type_is_refused() -> None:
    with pytest.raises(TypeError, match="outcome int is neither str nor Rejected"):
        merge_in_order(["a", 7], str, Rejected, [1])  # type: ignore[list-item]


def test_real_images_with_a_corrupt_one_between_them(tiny_artifact: Path) -> None:
    """Decoded images and an undecodable upload: each score equals that image's own lone score."""
    scorer = load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu"))
    outcomes: list[PreparedImage | ImageRejected] = []
    for data in (encode(fundus_like(1)), b"\xff\xd8\xff\xe0 not a jpeg", encode(fundus_like(2))):
        try:
            outcomes.append(prepare_image(data, scorer.pipeline))
        except ImageRejected as exc:
            outcomes.append(exc)
    merged = score_accepted(outcomes, PreparedImage, ImageRejected, scorer.score_batch)
    assert isinstance(merged[1], ImageRejected) and merged[1].problem_type == "undecodable-image"
    alone = {i: scorer.score_batch([outcomes[i]])[0] for i in (0, 2)}  # type: ignore[list-item]
    assert abs(alone[0].probability - alone[2].probability) > 1e-4  # a swap would be seen
    for i in (0, 2):
        m = merged[i]
        assert isinstance(m, Accepted) and m.item is outcomes[i]
        # batch composition changes float rounding only (fp32 forward)
        assert m.score.probability == pytest.approx(alone[i].probability, abs=1e-6)
        assert m.score.mutual_information == pytest.approx(alone[i].mutual_information, abs=1e-6)
