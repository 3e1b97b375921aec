"""docs/run.schema.json and docs/recommend.schema.json are generated from the readers (kneecap.metrics.schemas): the
committed files are what the code generates, and they refuse what the readers refuse. That the documents kneecap
writes validate against them is held where those documents are made (tests/report/test_run_model.py,
tests/report/test_recommend_model.py)."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from kneecap.metrics import schemas

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", sorted(schemas.DOCUMENTS))
def test_committed_schema_is_generated(name):
    assert (DOCS / name).read_text() == schemas.render(name), "run python -m kneecap.metrics.schemas --write"
    jsonschema.Draft202012Validator.check_schema(schemas.schema(name))


def test_check_mode_names_a_stale_file(tmp_path, capsys):
    for name in schemas.DOCUMENTS:
        (tmp_path / name).write_text(schemas.render(name))
    assert schemas.main(["--docs", str(tmp_path)]) == 0
    (tmp_path / "run.schema.json").write_text("{}\n")
    assert schemas.main(["--docs", str(tmp_path)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "run.schema.json" in out[0] and "--write" in out[0]


@pytest.mark.parametrize(
    "name, bad",
    [
        ("run.schema.json", {"cells": "not a list"}),
        ("run.schema.json", {"cells": [{"verdict": 3}]}),
        ("recommend.schema.json", {"candidates": [{"plan": {"kv_capacity_tokens": "many"}}]}),
        ("recommend.schema.json", {"isl": 1.5}),
    ],
)
def test_schema_refuses_a_wrong_type(name, bad):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas.schema(name))
