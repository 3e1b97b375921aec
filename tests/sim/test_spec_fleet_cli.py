"""`kneecap simulate` with speculative decoding and with replicas behind a router, as a user types it."""

from __future__ import annotations

import json

import pytest

from tests.clitools import run_cli

BASE = ("simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-report")
EAGLE = ("--spec-method", "eagle", "--spec-tokens", "3", "--spec-acceptance", "0.7")


def _level(tmp_path, name: str, *args: str) -> dict:
    r = run_cli(*BASE, *args, "--out", str(tmp_path / name), "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_eagle_speeds_up_decode_most_at_low_concurrency(tmp_path):
    """EAGLE, 3 draft tokens at 0.7 per position: p50 TPOT at least 1.5x lower at C=1; at C=256 the verify pass
    and the drafts over a compute-bound batch leave a smaller gain."""
    gain = {}
    for c, n in (("1", "20"), ("256", "512")):
        plain = _level(tmp_path, f"p{c}", "--isl", "1000", "--osl", "500", "--concurrency", c, "--requests", n)
        spec = _level(tmp_path, f"s{c}", "--isl", "1000", "--osl", "500", "--concurrency", c, "--requests", n, *EAGLE)
        (p,), (s,) = plain["levels"], spec["levels"]
        assert p["spec"] is None and s["spec"]["method"] == "eagle"
        assert abs(s["spec"]["mean_accepted_length"] - (1 + 0.7 + 0.49 + 0.343)) < 0.05
        gain[c] = p["tpot_ms"]["p50"] / s["tpot_ms"]["p50"]
    assert gain["1"] >= 1.5 and gain["256"] < gain["1"], gain


def test_prefix_router_keeps_prefixes_together(tmp_path):
    """--shared-prefix over 4 replicas: the prefix router finds more of the prompts cached than round-robin, which
    sends every group to every replica."""
    rates = {}
    for router in ("round-robin", "prefix"):
        doc = _level(
            tmp_path,
            router,
            "--isl",
            "3000",
            "--osl",
            "200",
            "--rate",
            "30",
            "--requests",
            "800",
            "--shared-prefix",
            "2000x8",
            "--replicas",
            "4",
            "--router",
            router,
        )
        (lv,) = doc["levels"]
        assert doc["fleet"] == {"replicas": 4, "router": router} and sum(lv["server_metrics"]["routed"]) == 800
        assert len(lv["server_metrics"]["replicas"]) == 4
        rates[router] = lv["server_metrics"]["prefix_cache_hit_rate"]
    assert rates["prefix"] > rates["round-robin"], rates


def test_bad_router_and_partial_spec_are_one_line(tmp_path):
    r = run_cli(
        *BASE,
        "--isl",
        "100",
        "--osl",
        "10",
        "--concurrency",
        "1",
        "--replicas",
        "2",
        "--router",
        "random",
        "--out",
        str(tmp_path / "x"),
    )
    assert r.code == 2 and "unknown --router 'random'" in r.stderr
    r = run_cli(
        *BASE, "--isl", "100", "--osl", "10", "--concurrency", "1", "--spec-tokens", "3", "--out", str(tmp_path / "y")
    )
    assert r.code == 2 and "needs --spec-method and --spec-acceptance too" in r.stderr


def test_spec_and_fleet_summaries_validate_against_the_published_schema(tmp_path):
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json").read_text())
    doc = _level(
        tmp_path,
        "both",
        "--isl",
        "500",
        "--osl",
        "50",
        "--rate",
        "4",
        "--requests",
        "40",
        *EAGLE,
        "--replicas",
        "2",
        "--router",
        "least-loaded",
    )
    jsonschema.validate(doc, schema)
    assert doc["levels"][0]["spec"]["method"] == "eagle" and doc["fleet"]["replicas"] == 2
    bad = json.loads(json.dumps(doc))
    bad["levels"][0]["spec"]["acceptance_rate"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
