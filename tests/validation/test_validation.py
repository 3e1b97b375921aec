"""Validation table: published points with their sources and setups; docs/validation.md's block is exactly what the
simulator produces today; no median (overall or per group) is more than 2 points worse than the committed baseline;
no group of 5 or more points has a signed median beyond +-8% but the known biases listed, each held at its figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.validation import (
    BASELINE_FILE,
    BIAS_LIMIT_PCT,
    DOC_FILE,
    ENGINES,
    GROUPS,
    KNOWN_BIASED,
    POINTS_FILE,
    REGRESSION_POINTS,
    TABLE_BEGIN,
    TABLE_END,
    Point,
    baseline_document,
    bias_failures,
    error_table,
    features,
    load_points,
    median_abs_error_pct,
    predict,
    regressions,
    render_markdown,
    row_cells,
    speed_error_pct,
)


def doc_table() -> str:
    text = DOC_FILE.read_text()
    return text[text.index(TABLE_BEGIN) : text.index(TABLE_END) + len(TABLE_END)]


def test_points_cover_engines_gpus_layouts_and_dtypes():
    points = load_points()
    assert len(points) >= 80
    assert len({p.source_url for p in points}) >= 10
    assert {"vllm", "sglang", "tensorrt-llm", "llama.cpp"} <= {p.engine for p in points}
    assert len({p.gpu for p in points}) >= 5 and any(p.gpu.startswith("mi") for p in points)
    assert any(p.pp > 1 for p in points)
    groups = [features(p) for p in points]
    for g in ("MoE", "MLA", "FP8", "FP4"):
        assert any(f[g] == "yes" for f in groups), g


def test_every_point_names_its_source_and_a_published_value():
    for p in load_points():
        assert p.source_url.startswith("https://") and p.source_title, p.id
        assert p.published > 0 and p.sim_requests >= 1, p.id
        assert p.requests is None or p.sim_requests <= p.requests, p.id


def test_points_with_a_published_request_count_simulate_that_count():
    """Fewer requests than published was an approximation that did not hold (one wave of Qwen3-235B on 8x B200 at
    1000/1000 read -3.8%, the published 3,000 +32.8%): sim_requests is only for points that publish no count."""
    raw = json.loads(POINTS_FILE.read_text())["points"]
    for d in raw:
        assert d.get("requests") is None or "sim_requests" not in d, d["id"]
    for p in load_points():
        assert p.requests is None or p.sim_requests == p.requests, p.id


def test_a_bad_point_is_a_one_line_error_naming_the_field():
    good = json.loads(
        Path(__file__).resolve().parents[2].joinpath("src/kneecap/data/validation/points.json").read_text()
    )["points"][0]
    with pytest.raises(KneecapError, match="unknown engine 'tgi-9'"):
        Point.from_dict({**good, "engine": "tgi-9"})
    with pytest.raises(KneecapError, match="bad or missing field"):
        Point.from_dict({k: v for k, v in good.items() if k != "isl"})
    with pytest.raises(KneecapError, match="unknown engine_overrides max_num_seq"):  # a typo is not dropped silently
        Point.from_dict({**good, "engine_overrides": {"max_num_seq": 64}})


def test_points_needing_a_missing_knob_stay_in_the_table_with_the_reason():
    skipped = [p for p in load_points() if p.not_simulated]
    assert skipped, "the data has points the simulator cannot run"
    rows = error_table(skipped)
    assert len(rows) == len(skipped)
    for p, row in zip(skipped, rows):
        assert row["predicted"] is None and row["error_pct"] is None and row["not_simulated"] == p.not_simulated
        assert f"not simulated: {p.not_simulated}" in row_cells(row)


def test_fast_points_match_the_documented_rows():
    """Cheap closed-loop points, re-simulated, give exactly the documented predictions (the full check is the slow test)."""
    table = doc_table()
    points = [
        p
        for p in load_points()
        if p.concurrency != "max" and p.sim_requests * (p.isl + p.osl) <= 300_000 and not p.not_simulated
    ][:12]
    assert len(points) >= 8
    for p in points:
        row = error_table([p])[0]
        assert row_cells(row) in table, p.id


def test_prediction_is_deterministic():
    p = next(p for p in load_points() if p.concurrency != "max" and not p.not_simulated)
    assert predict(p) == predict(p)


def test_regression_check_fails_when_a_median_worsens_by_more_than_the_margin():
    rows = [
        {
            "error_pct": e,
            "metric": "output_tok_s",
            "groups": {g: "x" for g in ("engine", "GPU vendor", "PP > 1", "MoE", "MLA", "FP8", "FP4")},
        }
        for e in (10.0, 20.0, 30.0)
    ]
    base = baseline_document(rows)
    assert regressions(rows, base, known={}) == []
    worse = [{**r, "error_pct": r["error_pct"] + REGRESSION_POINTS + 0.5} for r in rows]
    found = regressions(worse, base, known={})
    assert found and found[0].startswith("median 20.0% -> 22.5%")
    better = [{**r, "error_pct": r["error_pct"] - 5} for r in rows]
    assert regressions(better, base, known={}) == []


@pytest.fixture(scope="module")
def full_table():
    return error_table()  # every point through the simulator: about 1.5 min of one core


@pytest.mark.slow
def test_documented_table_is_regenerated_by_the_code(full_table):
    assert render_markdown(full_table) == doc_table(), (
        "docs/validation.md is stale: run `python -m kneecap.validation --write`"
    )


@pytest.mark.slow
def test_no_median_worsens_by_more_than_two_points_against_the_baseline(full_table):
    baseline = json.loads(BASELINE_FILE.read_text())
    worse = regressions(full_table, baseline)
    assert not worse, (
        "validation got worse: " + "; ".join(worse) + f" (now {median_abs_error_pct(full_table):.1f}%). "
        "Fix it, or accept it explicitly with `python -m kneecap.validation --write-baseline`"
    )


def test_bias_check_fails_on_any_biased_group_whatever_the_baseline():
    """A group of BIAS_MIN_POINTS or more whose signed median (latencies negated: + = too fast) goes beyond
    +-BIAS_LIMIT_PCT fails the check even where the baseline already records it; only a group listed as a known bias
    passes, and only while it stays at its figure; a listed group back inside the limit fails until it is unlisted."""

    def rows(errors, metric="output_tok_s"):
        return [{"error_pct": e, "metric": metric, "groups": {"engine": "x"}} for e in errors]

    fine = rows([1.0, -2.0, 3.0, 0.0, -1.0])
    assert regressions(fine, baseline_document(fine), known={}) == []
    fast = rows([-10.0, -9.0, -12.0, -11.0, -10.0], "tpot_ms_mean")  # latencies 10% short: the simulator too fast
    assert speed_error_pct(fast[0]) == 10.0
    for base in (baseline_document(fine), baseline_document(fast)):  # accepted in the baseline or not: a failure
        found = regressions(fast, base, known={})
        assert any(f.startswith("bias engine = x") and "+10.0%" in f for f in found), found
    assert bias_failures(fast, known={"engine = x": (10.0, "why")}) == []
    assert bias_failures(fast, known={"engine = x": (9.6, "why")}) == []  # within BIAS_SLACK_POINTS
    worse = rows([-13.0, -12.5, -14.0, -13.0, -13.0], "tpot_ms_mean")
    found = bias_failures(worse, known={"engine = x": (10.0, "why")})
    assert found and "worsened" in found[0]
    found = bias_failures(fine, known={"engine = x": (10.0, "why")})  # fixed: the list must say so
    assert found and "remove it" in found[0]
    assert bias_failures(rows([9.0] * 4), known={}) == []  # under BIAS_MIN_POINTS points


def test_known_biases_name_real_groups_and_a_reason():
    for key, (figure, why) in KNOWN_BIASED.items():
        group, _, value = key.partition(" = ")
        assert group in GROUPS and value, key
        assert abs(figure) > BIAS_LIMIT_PCT and len(why) > 20, key


@pytest.mark.slow
def test_no_group_is_biased_beyond_the_limit_except_the_listed_ones_at_their_figures(full_table):
    failures = bias_failures(full_table)
    assert not failures, "; ".join(failures)


def test_trtllm_bench_runs_take_the_limits_trtllm_bench_computes():
    """tensorrt_llm/bench/build/tuning.py by hand. Qwen3-30B-A3B NVFP4 on one B200, FP8 KV, 1000/1000: 179.06 GiB
    - 30.5e9 x 0.5 B of weights = 164.8 GiB, x 0.95 / (2 x 48 layers x 4 KV heads x 128 x 1 B x 2000 tokens) = 1,710
    requests -> 256 x ceil(1710 / 256) = 1,792 sequences, 1,710 x (1 + 1) = 3,420 -> 3,584 tokens. With PP8 the
    batch is per micro-batch: min(requests, 4096) / 8, at least 2048 tokens."""
    from kneecap.validation import _plan, trtllm_bench_limits

    points = {p.id: p for p in load_points()}
    qwen = points["trtllm-qwen3-30b-a3b-b200-tp1-nvfp4-1000-1000"]
    assert qwen.engine_overrides == {"trtllm_bench": True} and qwen.kv_dtype == "fp8"
    assert trtllm_bench_limits(qwen, _plan(qwen)) == (1792, 3584)
    pp8 = points["trtllm-llama-3.3-70b-rtx-pro-6000-tp1pp8-nvfp4-1000-1000"]
    seqs, tokens = trtllm_bench_limits(pp8, _plan(pp8))
    assert seqs % 8 == 0 and seqs // 8 == 384 and tokens == 2048


def test_a_point_names_the_sampler_its_vllm_server_took():
    """GPUStack's gpt-oss-120b baseline on one H100 (vLLM 0.10.2 at its defaults) started, which the pip wheel's
    sorting sampler leaves no KV cache for; the points name FlashInfer's (--vllm-sampler flashinfer)."""
    import dataclasses

    from kneecap.validation import _plan, command_line

    points = {p.id: p for p in load_points()}
    oss = points["gpustack-vllm-gpt-oss-120b-h100-sxm-tp1-4000-200-tpot_ms_mean"]
    assert oss.engine_overrides == {"vllm_sampler": "flashinfer"}
    assert "--vllm-sampler flashinfer" in command_line(oss)
    _plan(oss)  # plans
    with pytest.raises(KneecapError, match="would have no KV cache"):
        _plan(dataclasses.replace(oss, engine_overrides={}))


def test_every_simulated_point_has_its_command_line():
    """Each simulated point prints the `kneecap simulate` line that reproduces it; a point not simulated prints none."""
    from kneecap.validation import command_line

    points = load_points()
    assert all(command_line(p) for p in points if not p.not_simulated)
    assert all(command_line(p) is None for p in points if p.not_simulated)


def test_chat_endpoint_points_print_it_and_run_through_the_servers_event_loop():
    """The sources that state /v1/chat/completions (GPUStack's performance lab: `vllm bench serve --backend openai-chat
    --endpoint /v1/chat/completions`) are chat points; their command lines say so and their simulated deployment puts
    the release's per-request chat-template cost in front of the engine (vLLM 0.11.0: a parse; gpt-oss: the harmony
    render, a fixed part and a part per prompt token)."""
    from kneecap.sim.config import CHAT_TEMPLATE_PARSE_MS, HARMONY_RENDER_MS
    from kneecap.validation import command_line, sim_deployment

    points = {p.id: p for p in load_points()}
    chat = [p for p in points.values() if p.endpoint == "chat"]
    assert chat and all("/gpustack/gpustack/" in p.source_url for p in chat)
    assert all("--endpoint chat" in command_line(p) for p in chat)
    assert not any("--endpoint" in (command_line(p) or "") for p in points.values() if p.endpoint != "chat")
    qwen = sim_deployment(points["gpustack-vllm-qwen3-235b-a22b-h100-sxm-tp8-128-4-ttft_ms_mean"])
    assert qwen.config.frontend_s_per_request == pytest.approx(CHAT_TEMPLATE_PARSE_MS["qwen3"] / 1e3)
    oss = sim_deployment(points["gpustack-vllm-gpt-oss-20b-h100-128-4-ttft_ms_mean"])
    assert oss.config.frontend_s_per_request == pytest.approx(HARMONY_RENDER_MS["fixed"] / 1e3)
    assert oss.config.frontend_s_per_prompt_token == pytest.approx(HARMONY_RENDER_MS["per_token"] / 1e3)
    assert "harmony" in oss.config.frontend_note
    assert qwen.config.frontend_s_per_prompt_token == 0.0


def _sample(points):
    """The cheapest simulated point of each published engine, of each vLLM release class (V0, synchronous V1, async
    scheduling) and of random lengths, and the cheapest trtllm-bench run."""
    from kneecap.validation import command_line

    cost = sorted((p for p in points if command_line(p)), key=lambda p: p.sim_requests * (p.isl + p.osl))
    wanted = [lambda p, e=e: p.engine == e for e in ENGINES] + [
        lambda p: p.engine == "vllm" and (p.engine_version or "").startswith("V0"),
        lambda p: p.engine == "vllm" and p.engine_version == "0.17.0",
        lambda p: p.isl_low is not None,
        lambda p: "--trtllm-bench" in command_line(p),
        # the chat endpoint at the release that parses its template per request (the API server's event loop)
        lambda p: "--endpoint chat" in command_line(p) and p.engine_version == "0.11.0" and "gpt-oss" not in p.model,
    ]
    sample = []
    for want in wanted:
        p = next(p for p in cost if want(p))
        sample += [p] if p not in sample else []
    return sample


def test_a_sample_of_the_printed_command_lines_reproduce_their_predictions(tmp_path):
    """The `kneecap simulate` line printed for a point, run as a user types it, gives the prediction in the table
    (its first level read the same way): one line of each engine, of each vLLM release class, of random lengths and
    of a trtllm-bench run, the cheapest of each."""
    import shlex
    import subprocess
    import sys

    from kneecap.validation import command_line, metric_value

    sample = _sample(load_points())
    assert {p.engine for p in sample} == set(ENGINES)
    for i, p in enumerate(sample):
        args = shlex.split(command_line(p))
        assert args[:2] == ["kneecap", "simulate"]
        out = subprocess.run(
            [sys.executable, "-m", "kneecap", *args[1:], "--json", "--out", str(tmp_path / str(i))],
            capture_output=True,
            text=True,
            check=True,
        )
        assert metric_value(p, json.loads(out.stdout)["levels"][0]) == pytest.approx(predict(p), rel=1e-9), p.id
