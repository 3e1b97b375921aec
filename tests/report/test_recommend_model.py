"""Typed recommend.json (kneecap.metrics.recommend_model): the document `kneecap recommend --out DIR` writes reads
into RecommendDocument and writes back the same keys and values; every key it writes is named by the model (none
left as an untyped extra); the page renders the same from the typed document as from the dict; a document that is
not recommend.json is a one-line error."""

from __future__ import annotations

import json

import jsonschema
import pytest
from clitools import run_cli
from pydantic import BaseModel

from kneecap.errors import KneecapError
from kneecap.metrics import recommend_model, schemas
from kneecap.metrics.recommend_model import Candidate, RecommendDocument
from kneecap.report.recommend_page import to_html, to_markdown

NAMED = tuple(
    cls
    for cls in vars(recommend_model).values()
    if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == recommend_model.__name__
)


def _extras(value, path="doc"):
    if isinstance(value, NAMED) and value.model_extra:
        yield path, sorted(value.model_extra)
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _extras(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _extras(item, f"{path}[{key}]")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _extras(item, f"{path}[{i}]")


@pytest.fixture(scope="module")
def recommended(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("recommend")
    r = run_cli(
        "recommend",
        *("--model", "llama-3.1-8b", "--rate", "2", "--isl", "500", "--osl", "50"),
        *("--slo", "ttft_p99_ms=1000,tpot_p99_ms=60", "--gpus", "a100-80", "--kv-dtypes", "bf16,fp8"),
        *("--workers", "1", "--out", str(out)),
        timeout=300,
    )
    assert r.code == 0, r.stderr
    return json.loads((out / "recommend.json").read_text())


def test_recommend_json_round_trips(recommended):
    jsonschema.validate(
        recommended, schemas.schema("recommend.schema.json")
    )  # the published docs/recommend.schema.json
    typed = RecommendDocument.read(recommended)
    # the same keys, values and JSON types (an int stays an int, a float a float, None null)
    assert json.dumps(typed.to_dict(), sort_keys=True) == json.dumps(recommended, sort_keys=True)
    assert typed.candidates and all(isinstance(c, Candidate) for c in typed.candidates + typed.frontier)
    best, raw = typed.candidates[0], recommended["candidates"][0]
    assert best.predicted.ttft_p99_ms == raw["predicted"]["ttft_p99_ms"] and best.plan.kv_capacity_tokens > 0
    assert typed.best == best and best in typed.frontier + (typed.throughput_frontier or [])
    assert list(_extras(typed)) == []


def test_the_page_reads_the_typed_document_as_the_dict(recommended):
    typed = RecommendDocument.read(recommended)
    assert to_markdown(typed, []) == to_markdown(recommended, []) and "## Best: " in to_markdown(typed, [])
    assert to_html(typed, []) == to_html(recommended, [])


@pytest.mark.parametrize(
    "bad, where",
    [
        ("[]", "it holds a JSON list, not an object"),
        ('{"candidates": {"best": 1}}', "candidates"),
        ('{"candidates": [{"predicted": {"ttft_p99_ms": "fast"}}]}', "candidates[0].predicted.ttft_p99_ms"),
    ],
)
def test_a_document_that_is_not_recommend_json_is_one_line(bad, where):
    with pytest.raises(KneecapError) as exc:
        to_markdown(json.loads(bad), [])
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"recommend.json is not a kneecap recommend.json: {where}")
