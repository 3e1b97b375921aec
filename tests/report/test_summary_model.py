"""Typed summary.json (kneecap.metrics.summary_model): every summary bench and simulate write here reads into
SweepSummary and writes back the same keys and values (whole numbers whole), each valid against the published
docs/summary.schema.json; a document that is not a summary is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from clitools import run_cli

from kneecap.errors import KneecapError
from kneecap.metrics.summary_model import Distribution, LevelSummary, SweepSummary

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json").read_text())
SIM = ["simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-report", "--quiet", "--isl", "500"]


def _round_trip(doc: dict) -> SweepSummary:
    jsonschema.validate(doc, SCHEMA)
    typed = SweepSummary.read(doc)
    back = typed.to_dict()
    # the same keys, values and JSON types (an int stays an int, a float a float, None null)
    assert json.dumps(back, sort_keys=True) == json.dumps(doc, sort_keys=True)
    return typed


@pytest.mark.parametrize("fixture", ["bench_run", "scripted_bench", "refused_bench", "pressured_sim", "rate_sim"])
def test_every_report_summary_round_trips(fixture, request):
    folder = request.getfixturevalue(fixture)
    doc = json.loads((folder / "summary.json").read_text())
    typed = _round_trip(doc)
    assert typed.kind == doc["kind"] and len(typed.levels) == len(doc["levels"]) > 0
    for lv, raw in zip(typed.levels, doc["levels"]):
        assert isinstance(lv, LevelSummary)
        assert isinstance(lv.ttft_ms, Distribution) and lv.ttft_ms.p99 == raw["ttft_ms"]["p99"]
        assert lv.stability is not None and lv.stability.verdict == raw["stability"]["verdict"]


@pytest.mark.parametrize(
    "args",
    [
        ["--osl", "100", "--rate", "1,4", "--find-max", "rate", "--slo", "ttft_p99_ms=300", "--requests", "100"],
        ["--osl", "50", "--concurrency", "2,max", "--requests", "40", "--replicas", "2", "--router", "least-loaded"],
        ["--osl", "50", "--ramp", "linear:1:4:20"],
        [
            "--osl",
            "50",
            "--concurrency",
            "2",
            "--turns",
            "2",
            "--requests",
            "20",
            "--spec-method",
            "eagle",
            "--spec-tokens",
            "3",
            "--spec-acceptance",
            "0.7",
        ],
    ],
    ids=["find-max", "fleet-max", "ramp", "turns-spec"],
)
def test_simulate_summaries_round_trip(args, tmp_path):
    r = run_cli(*SIM, *args, "--out", str(tmp_path / "s"))
    assert r.code == 0, r.stderr
    doc = json.loads((tmp_path / "s" / "summary.json").read_text())
    _round_trip(doc)


def test_a_set_field_is_written_and_nothing_is_added():
    doc = {"kind": "simulate", "levels": [{"concurrency": 4, "completed": 3, "ttft_ms": {"p99": 12.5, "n": 3}}]}
    typed = SweepSummary.read(doc)
    assert typed.to_dict() == doc and typed.levels[0].ttft_ms.mean is None
    typed.levels[0].completed = 4
    assert typed.to_dict()["levels"][0]["completed"] == 4
    assert "status" not in typed.to_dict()  # a key the document did not hold stays absent


@pytest.mark.parametrize("bad", [[], {"levels": "four"}, {"levels": [{"completed": "many"}]}])
def test_a_document_that_is_not_a_summary_is_one_line(bad):
    with pytest.raises(KneecapError) as exc:
        SweepSummary.read(bad, "summary.json")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("summary.json is not a kneecap summary.json")


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        # a number field holding a string fails both branches of int | float: one problem, no branch names
        ({"levels": [{"ttft_ms": {"p99": "slow"}}]}, "levels[0].ttft_ms.p99: expected a number, got the string 'slow'"),
        (
            {"levels": [{}, {"concurrency": [4]}]},
            "levels[1].concurrency: expected a whole number or a string, got a list",
        ),
        ({"levels": [{"ttft_ms": {"n": 1.5}}]}, "levels[0].ttft_ms.n: expected a whole number, got 1.5"),
        ({"levels": [{"preflight": 7}]}, "levels[0].preflight: expected an object or a string, got 7"),
    ],
)
def test_a_wrong_type_deep_inside_names_the_users_path_and_the_type(bad, said):
    with pytest.raises(KneecapError) as exc:
        SweepSummary.read(bad, "summary.json")
    assert said in exc.value.message, exc.value.message
    for branch in (".int", ".float", ".str", "LevelPreflight", "function-"):
        assert branch not in exc.value.message
