"""`kneecap simulate --find-max`: the highest load meeting every SLO, found level by level through the one level
runner; the answer met the SLO and the next step up failed it, each checked by simulating that load on its own.
Also `--export vllm` and the flag names users bring from `vllm bench serve`."""

from __future__ import annotations

import html
import json
import math

import pytest

from clitools import run_cli

BASE = [
    "simulate",
    "--preset",
    "llama-3.1-8b",
    "--gpu",
    "h100-sxm",
    "--isl",
    "1000",
    "--osl",
    "200",
    "--no-report",
    "--json",
]
SLO = "ttft_p99_ms=300,itl_p99_ms=40"


def meets(level: dict) -> bool:
    return level["ttft_ms"]["p99"] <= 300 and level["itl_ms"]["p99"] <= 40


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    out = tmp_path_factory.mktemp("findmax")
    r = run_cli(
        *BASE,
        "--max-concurrency",
        "1,256",
        "--slo",
        SLO,
        "--find-max",
        "concurrency",
        "--export",
        "vllm",
        "--out",
        str(out / "run"),
    )
    assert r.code == 0, r.stderr
    return json.loads(r.stdout), out / "run"


def test_the_answer_meets_the_slo_and_the_next_step_does_not(searched):
    doc, _ = searched
    m = doc["max_load"]
    assert m["dimension"] == "concurrency" and m["repeats"] == 1
    assert m["failed_at"] == m["value"] + 1 and m["failed_because"].startswith(("ttft_p99_ms", "itl_p99_ms"))
    by_load = {lv["concurrency"]: lv for lv in doc["levels"]}
    assert meets(by_load[m["value"]]) and not meets(by_load[m["failed_at"]])
    assert all(lv["find_max"]["met"] == meets(lv) for lv in doc["levels"])
    for load, expect in ((m["value"], True), (m["failed_at"], False)):  # each load simulated on its own
        r = run_cli(*BASE, "--concurrency", str(load), "--slo", SLO, "--out", str(searched[1].parent / f"alone-{load}"))
        assert r.code == 0, r.stderr
        assert meets(json.loads(r.stdout)["levels"][0]) is expect, load


def test_every_level_is_exported_in_vllm_result_shape(searched):
    doc, folder = searched
    files = sorted((folder / "vllm").glob("level-*.json"))
    assert len(files) == len(doc["levels"])
    first = json.loads(files[0].read_text())
    for key in (
        "date",
        "backend",
        "model_id",
        "num_prompts",
        "request_rate",
        "max_concurrency",
        "duration",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "output_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "mean_itl_ms",
    ):  # vLLM: ttft,tpot,itl by default
        assert key in first, key
    level0 = doc["levels"][0]
    assert first["max_concurrency"] == level0["concurrency"] and first["completed"] == level0["completed"]
    assert first["mean_ttft_ms"] == pytest.approx(level0["ttft_ms"]["mean"], rel=1e-6)


def test_find_max_needs_an_slo_and_matching_bounds(tmp_path):
    for args, needle in (
        (["--concurrency", "1,64", "--find-max", "concurrency"], "--slo"),
        (["--concurrency", "1,64", "--find-max", "rate", "--slo", SLO], "--find-max"),
        (["--concurrency", "1,64", "--export", "csv"], "--export"),
    ):
        r = run_cli(*BASE, *args, "--out", str(tmp_path / "bad"))
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.code == 2 and len(lines) == 1 and needle in lines[0], r.stderr


def test_rate_search_judges_at_steady_state_and_states_its_bracket(tmp_path):
    """A rate level too short to show its steady state is run again, longer, before it counts; the answer names
    its bracket (last met, first failed) and binding term with the digits the bracket supports."""
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "1000",
        "--osl",
        "1000",
        "--rate",
        "1,64",
        "--find-max",
        "rate",
        "--slo",
        "ttft_p99_ms=2000,tpot_p99_ms=50",
        "--out",
        str(tmp_path / "run"),
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    m = doc["max_load"]
    assert m["last_met"] == m["value"] and m["first_failed"] == m["failed_at"] and m["value"] < m["failed_at"]
    assert m["binding"] == m["failed_because"].split(";")[0]
    gap = m["failed_at"] - m["value"]
    places = max(0, -math.floor(math.log10(gap)))
    assert m["answer"].startswith(f"{m['value']:.{places}f} req/s: the highest load meeting every SLO at steady state")
    for lv in doc["levels"]:  # no load counted as met unless its level was stable
        assert not lv["find_max"]["met"] or lv["stability"]["verdict"] == "stable"
    extended = [lv for lv in doc["levels"] if lv["find_max"].get("extended")]
    assert extended and all(lv["stability"]["verdict"] == "transient" for lv in extended)
    met = [lv for lv in doc["levels"] if lv["rate"] == m["value"]]
    # the answer's level ran longer than a first probe: extended, or sized from a lower probe's stable level
    assert met[-1]["find_max"]["met"] and met[-1]["requests"] > doc["levels"][0]["requests"]
    md = html.unescape((tmp_path / "run" / "report.md").read_text())
    assert f"Find-max: {m['answer']}" in md
    # every load searched met: the answer is a lower bound
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "1000",
        "--osl",
        "1000",
        "--rate",
        "1,2",
        "--find-max",
        "rate",
        "--slo",
        "ttft_p99_ms=2000,tpot_p99_ms=50",
        "--no-report",
        "--out",
        str(tmp_path / "low"),
    )
    assert r.code == 0, r.stderr
    assert "find-max: at least 2 req/s" in r.stdout


def test_a_probe_is_first_sized_from_the_nearest_lower_stable_level():
    """3.5x the requests in flight at the nearest lower stable load, scaled by the load ratio squared; never below
    the base size,
    never above the extension cap; the base size alone when no lower load was stable."""
    from kneecap.metrics.stability import MAX_EXTENDED_REQUESTS
    from kneecap.sweep.find_max import first_size

    assert first_size(200, 8.0, {}) == 200
    assert first_size(200, 8.0, {9.0: 300.0}) == 200  # only lower loads say anything
    assert first_size(200, 8.0, {2.0: 10.0, 4.0: 58.0}) == math.ceil(3.5 * 58.0 * 2**2)
    assert first_size(200, 4.4, {4.0: 10.0}) == 200
    assert first_size(200, 8.0, {4.0: 5000.0}) == MAX_EXTENDED_REQUESTS
    assert first_size(None, 8.0, {4.0: 58.0}) is None
