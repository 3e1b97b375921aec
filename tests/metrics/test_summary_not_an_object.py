"""A summary.json that holds a list, a string or a number is named as such, not in pydantic's words."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.metrics.summary_model import SweepSummary


@pytest.mark.parametrize("doc,kind", [([1, 2], "list"), ("x", "string"), (3, "number"), (None, "null")])
def test_a_summary_that_is_not_an_object_says_what_it_holds(doc, kind):
    with pytest.raises(KneecapError) as exc:
        SweepSummary.read(doc)
    assert exc.value.message == f"the summary is not a kneecap summary.json: it holds a JSON {kind}, not an object"
    assert "Input should be" not in exc.value.one_line()


def test_an_object_still_reads():
    assert SweepSummary.read({"kind": "bench", "levels": []}).to_dict() == {"kind": "bench", "levels": []}
