"""Typed run document (kneecap.metrics.run_model): the summary.json `kneecap run` writes reads into RunDocument
and writes back the same keys and values; every key the run writes at the levels the report reads is named by the
model (none left as an untyped extra); a document that is not a run's is a one-line error, in Python and from
`kneecap report`."""

from __future__ import annotations

import json

import jsonschema
import pytest
from pydantic import BaseModel

from kneecap.errors import KneecapError
from kneecap.metrics import run_model, schemas
from kneecap.metrics.run_model import CapacityInfo, RunCell, RunDocument
from kneecap.metrics.summary_model import Distribution, LevelSummary

# the run's own objects (a cell's metrics are a sweep level, typed by summary_model, which keeps extras)
NAMED = tuple(
    cls
    for cls in vars(run_model).values()
    if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == run_model.__name__
)


def _run_objects(value, path="doc"):
    """(path, model) for every run_model object in a typed document."""
    if isinstance(value, NAMED):
        yield path, value
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _run_objects(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _run_objects(item, f"{path}[{key}]")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _run_objects(item, f"{path}[{i}]")


@pytest.mark.parametrize("fixture", ["real_run", "run_two"])
def test_a_run_summary_round_trips(fixture, request):
    doc = json.loads((request.getfixturevalue(fixture) / "summary.json").read_text())
    jsonschema.validate(doc, schemas.schema("run.schema.json"))  # the published docs/run.schema.json
    typed = RunDocument.read(doc)
    # the same keys, values and JSON types (an int stays an int, a float a float, None null)
    assert json.dumps(typed.to_dict(), sort_keys=True) == json.dumps(doc, sort_keys=True)
    assert typed.kind == "run" and len(typed.cells) == len(doc["cells"]) > 0 and typed.candidates
    for cell, raw in zip(typed.cells, doc["cells"]):
        assert isinstance(cell, RunCell) and cell.class_name == raw["class"] and cell.verdict == raw["verdict"]
        if raw["metrics"] is None:
            assert cell.metrics is None and cell.verdict == "not_run"
            continue
        assert isinstance(cell.metrics, LevelSummary) and isinstance(cell.metrics.ttft_ms, Distribution)
        assert cell.metrics.ttft_ms.p99 == raw["metrics"]["ttft_ms"]["p99"]
        assert cell.offered.offered_request_s == raw["offered"]["offered_request_s"]
    for cand, raw in zip(typed.candidates, doc["candidates"]):
        assert cand.verdict == raw["verdict"] and cand.reason == raw["reason"]
        for cls, by_state in (cand.capacity or {}).items():
            for state, info in by_state.items():
                assert isinstance(info, CapacityInfo)
                assert info.capacity == raw["capacity"][cls][state]["capacity"]
    unnamed = [(path, sorted(obj.model_extra)) for path, obj in _run_objects(typed) if obj.model_extra]
    unnamed = [(path, keys) for path, keys in unnamed if not path.startswith("doc.identities")]  # engine's own
    assert unnamed == [], unnamed[:3]


def test_a_cell_written_back_keeps_its_document_names():
    raw = {"class": "chat", "load": {"rate": 2.5}, "repetition": 0, "metrics": {"completed": 3}, "extra": [1]}
    cell = RunCell.model_validate(raw)
    assert cell.class_name == "chat" and cell.metrics.completed == 3 and cell.load == {"rate": 2.5}
    assert cell.to_dict() == raw and "class_name" not in RunDocument.read({"cells": [raw]}).to_dict()["cells"][0]


@pytest.mark.parametrize(
    "bad, where",
    [
        ([], "it holds a JSON list, not an object"),
        ({"cells": "twelve"}, "cells"),
        ({"cells": [{"metrics": {"ttft_ms": {"p99": "slow"}}}]}, "cells[0].metrics.ttft_ms.p99"),
        ({"capacity": {"a": {"chat": {"warm": {"region": 4}}}}}, "capacity.a.chat.warm.region"),
    ],
)
def test_a_document_that_is_not_a_run_is_one_line(bad, where):
    with pytest.raises(KneecapError) as exc:
        RunDocument.read(bad, "summary.json")
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"summary.json is not a kneecap run summary.json: {where}")


def test_report_of_a_malformed_run_is_one_line(cli, run_dir):
    doc = json.loads((run_dir / "summary.json").read_text())
    doc["cells"][0]["metrics"]["completed"] = "all of them"
    (run_dir / "summary.json").write_text(json.dumps(doc))
    r = cli("report", str(run_dir))
    assert r.code == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "cells[0].metrics.completed" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_older_run_shapes_render_as_before():
    """What older runs wrote: the load as its own key, Little's check without `applied`, a distribution without n."""
    from kneecap.report.run_page import cells_tables

    raw = {
        "candidate": "a",
        "class": "chat",
        "state": "warm",
        "rate": 2,
        "repetition": 0,
        "verdict": "pass",
        "little": {"stable": False},
        "metrics": {"completed": 3, "ttft_ms": {"p99": 12.5}, "suspect": True},
    }
    verdicts, measured = cells_tables(RunDocument.read({"cells": [raw]}).cells)
    assert verdicts.rows[0][3] == "2 req/s" and verdicts.rows[0][9] == "not applied (interval not stable)"
    assert measured.rows[0][7] == "12.5" and measured.rows[0][10] == "—" and measured.row_tones == ("warning",)
    raw["metrics"]["ttft_ms"]["n"] = 3
    assert cells_tables(RunDocument.read({"cells": [raw]}).cells)[1].rows[0][10] == "3"
