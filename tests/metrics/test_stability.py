"""Steady state, judged once (kneecap.metrics.stability): the rule on records whose answer is known by
construction, then on the real simulator (`kneecap simulate`) and on `kneecap bench` against a real
`kneecap serve` run past its capacity."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kneecap.metrics.stability import OVER_CAPACITY, STABLE, TRANSIENT, is_steady, level_stability, verdict_text
from kneecap.records import RequestRecord


def open_loop(
    n: int, rate: float, service_s: float, *, servers: int | None = None, lag: float = 1.0, ttft_s: float = 0.01
) -> list[RequestRecord]:
    """n requests sent every 1/rate s (scheduled every 1/(rate*lag) s: lag > 1 = the client fell behind),
    each served for service_s once one of `servers` slots is free (None: never waits)."""
    free = [0.0] * (servers or n)
    out = []
    for i in range(n):
        sent = i / rate
        free.sort()
        start = max(sent, free[0])
        free[0] = start + service_s
        out.append(
            RequestRecord(
                request_id=f"r{i}",
                level=0,
                rate=rate,
                scheduled_at=i / (rate * lag),
                sent_at=sent,
                first_token_at=start + ttft_s,
                end_at=start + service_s,
                output_tokens=10,
                expected_output_tokens=10,
            )
        )
    return out


def test_a_server_that_keeps_up_is_stable():
    st = level_stability(open_loop(400, rate=10, service_s=0.5), kind="rate")
    assert st["verdict"] == STABLE, st["rule"]
    assert st["offered_rps"] == pytest.approx(10) and st["sent_rps"] == pytest.approx(10)
    assert st["served_rps"] == pytest.approx(10, rel=0.02)  # completions over the second half (20 s)
    assert st["in_flight_mean"] == pytest.approx(5.0)  # Little: 10 req/s x 0.5 s
    assert st["queue_trend"] == pytest.approx(0, abs=0.1) and st["ttft_trend"] == pytest.approx(1)
    assert st["client_behind"] is None and st["offered_output_tok_s"] == pytest.approx(100)


def test_a_server_slower_than_the_load_is_over_capacity():
    # 2 slots of 0.5 s serve 4 req/s; 10 req/s are offered: the queue grows 6 req/s
    st = level_stability(open_loop(400, rate=10, service_s=0.5, servers=2), kind="rate")
    assert st["verdict"] == OVER_CAPACITY, st["rule"]
    assert st["served_rps"] == pytest.approx(4, rel=0.02)
    assert st["queue_trend"] == pytest.approx(6, rel=0.05)
    assert st["ttft_trend"] > 3


def test_the_same_server_at_a_load_it_carries_is_stable():
    st = level_stability(open_loop(400, rate=3, service_s=0.5, servers=2), kind="rate")
    assert st["verdict"] == STABLE, st["rule"]


def test_a_level_shorter_than_three_lifetimes_is_transient():
    # 10 req/s x 5 s lifetimes = 50 in flight; 100 requests < 150
    st = level_stability(open_loop(100, rate=10, service_s=5.0), kind="rate")
    assert st["verdict"] == TRANSIENT, st["rule"]
    assert st["in_flight_mean"] == pytest.approx(50)
    assert level_stability(open_loop(200, rate=10, service_s=5.0), kind="rate")["verdict"] == STABLE


def test_a_client_behind_its_schedule_is_flagged_and_not_steady():
    st = level_stability(open_loop(400, rate=10, service_s=0.5, lag=1.25), kind="rate")
    assert st["offered_rps"] == pytest.approx(12.5) and st["sent_rps"] == pytest.approx(10)
    assert "20% behind" in st["client_behind"]
    level = {"stability": st}
    assert not is_steady(level) and verdict_text(level) == "stable, client behind"


def test_closed_loop_is_judged_after_its_first_round_and_never_over_capacity():
    # 4 streams, each request 1 s: the first round (4 requests sent at 0) is left out
    recs = []
    for i in range(40):
        k = i // 4  # stream i % 4's k-th request
        recs.append(
            RequestRecord(
                request_id=f"c{i}",
                level=0,
                concurrency=4,
                sent_at=float(k),
                first_token_at=k + 0.1,
                end_at=k + 1.0,
                output_tokens=5,
            )
        )
    st = level_stability(recs, kind="concurrency", value=4)
    assert st["window_requests"] == 36 and st["verdict"] == STABLE, st["rule"]
    assert st["offered_rps"] == st["sent_rps"] == pytest.approx(35 / 8)  # sent at 1 s .. 9 s
    assert level_stability(recs[:12], kind="concurrency", value=4)["verdict"] == TRANSIENT


def test_simulate_marks_a_rate_the_engine_cannot_serve_over_capacity_and_a_light_one_stable(cli, tmp_path):
    r = cli(
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
        "1,50",
        "--requests",
        "800",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert r.code == 0, r.stderr
    levels = json.loads(r.stdout)["levels"]
    assert [lv["stability"]["verdict"] for lv in levels] == [STABLE, OVER_CAPACITY]
    heavy = levels[1]["stability"]
    assert heavy["served_rps"] < 0.2 * heavy["sent_rps"] and heavy["queue_trend"] > 10
    saved = json.loads((tmp_path / "summary.json").read_text())["levels"]
    assert [lv["stability"] for lv in saved] == [lv["stability"] for lv in levels]
    md = (tmp_path / "report.md").read_text()
    assert "Steady state per level" in md and "**OVER CAPACITY**" in md
    assert "OVER CAPACITY" in (tmp_path / "report.html").read_text()


def test_bench_against_kneecap_serve_past_its_capacity_says_over_capacity(cli, tmp_path):
    from kneecap.cli.serve_process import start_server, stop_server

    # two sequences at a time of 100 + 20 tokens: about a dozen requests per second; 150 req/s is far past it
    proc, url = start_server(
        ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "4096", "--max-num-seqs", "2"]
    )
    try:
        r = cli(
            "bench",
            "--base-url",
            url,
            "--rate",
            "6,150",
            "--requests",
            "60",
            "--isl",
            "100",
            "--osl",
            "20",
            "--out",
            str(tmp_path),
            "--no-report",
        )
    finally:
        assert stop_server(proc) == 0
    assert r.code == 0, r.stderr
    assert "OVER CAPACITY" in r.stdout
    doc = json.loads((tmp_path / "summary.json").read_text())
    jsonschema.validate(
        doc, json.loads((Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json").read_text())
    )
    light, heavy = (lv["stability"] for lv in doc["levels"])
    assert light["verdict"] == STABLE, light["rule"]
    assert heavy["verdict"] == OVER_CAPACITY, heavy["rule"]
    assert heavy["served_rps"] < 0.5 * heavy["sent_rps"] and heavy["client_behind"] is None


def test_a_level_over_capacity_never_meets_its_slo(cli, tmp_path):
    # 200 requests at 64 req/s: short enough that the percentiles alone pass; the growing queue does not
    r = cli(
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
        "--slo",
        "ttft_p99_ms=3000,tpot_p99_ms=50",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert r.code == 0, r.stderr
    light, heavy = json.loads(r.stdout)["levels"]
    assert light["slo"]["met"] and light["stability"]["verdict"] == STABLE
    assert heavy["stability"]["verdict"] == OVER_CAPACITY and heavy["ttft_ms"]["p99"] < 3000
    assert not heavy["slo"]["met"]
    assert [b["key"] for b in heavy["slo"]["breaches"]] == ["steady_state"]


def test_summaries_validate_against_the_published_schema(cli, tmp_path):
    """docs/summary.schema.json describes what simulate (find-max included) writes; a level without its
    stability, or with an unknown verdict, does not validate."""
    import copy

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    r = cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "500",
        "--osl",
        "100",
        "--rate",
        "1,8",
        "--find-max",
        "rate",
        "--slo",
        "ttft_p99_ms=1000",
        "--no-report",
        "--out",
        str(tmp_path),
    )
    assert r.code == 0, r.stderr
    doc = json.loads((tmp_path / "summary.json").read_text())
    jsonschema.validate(doc, schema)
    bad = copy.deepcopy(doc)
    bad["levels"][0]["stability"]["verdict"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_verdict_text_and_caption_read_a_typed_level_as_its_dict():
    from kneecap.metrics.stability import stability_caption
    from kneecap.metrics.summary_model import LevelSummary

    over = level_stability(open_loop(400, rate=10, service_s=0.5, servers=2), kind="rate")
    behind = level_stability(open_loop(400, rate=10, service_s=0.5, lag=1.25), kind="rate")
    short = level_stability(open_loop(100, rate=10, service_s=5.0), kind="rate")
    levels = [{"stability": st} for st in (over, behind, short)] + [{"rate": 1}]
    typed = [LevelSummary.model_validate(lv) for lv in levels]
    assert [verdict_text(lv) for lv in typed] == [verdict_text(lv) for lv in levels]
    assert [verdict_text(lv) for lv in typed] == ["OVER CAPACITY", "stable, client behind", "transient", "—"]
    assert stability_caption(typed) == stability_caption(levels)
    assert "1 level(s) over capacity" in stability_caption(typed) and "1 level(s) transient" in stability_caption(typed)
