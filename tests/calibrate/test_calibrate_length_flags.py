"""calibrate's --isl/--osl, when given, replace every level's mean lengths: 0 is refused, not read as 'not given'."""

from __future__ import annotations

import pytest

from kneecap.calibrate import levels_from_summary
from kneecap.errors import KneecapError

LEVEL = {
    "concurrency": 4,
    "completed": 10,
    "input_tokens": 10_000,
    "output_tokens": 1_000,
    "ttft_ms": {"mean": 50.0},
    "tpot_ms": {"mean": 10.0},
    "itl_ms": {"p50": 9.5},
    "output_tok_s": 300.0,
}


@pytest.mark.parametrize(
    "flags,said",
    [
        ({"isl": 0}, "--isl must be a whole number >= 1, got 0"),
        ({"osl": 1}, "--osl must be a whole number >= 2, got 1"),
    ],
)
def test_lengths_too_short_name_calibrates_own_flag(flags, said):
    with pytest.raises(KneecapError) as exc:
        levels_from_summary({"levels": [LEVEL]}, **flags)
    assert exc.value.message == said
    assert "leave" in exc.value.hint


def test_given_lengths_replace_the_means():
    (level,) = levels_from_summary({"levels": [LEVEL]}, isl=64, osl=32)
    assert (level.isl, level.osl) == (64, 32)
