"""The API server's event loop in front of the simulated engine (kneecap.sim.frontend): the rounds rule, its online
form the virtual clock runs, the engine fed through it, and the chat-endpoint cost by engine release."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simkit import deployment, sim_of

from kneecap.errors import KneecapError
from kneecap.sim.config import (
    CHAT_PARSE,
    CHAT_RENDER,
    CHAT_TEMPLATE_PARSE_MS,
    DEFAULT_CHAT_TEMPLATE_PARSE_MS,
    HARMONY_RENDER_MS,
    EngineConfig,
    at_release,
    chat_frontend_ms,
    chat_frontend_ms_per_prompt_token,
    sglang_defaults,
    vllm_defaults,
)
from kneecap.sim.frontend import EventLoopFrontEnd, engine_arrivals
from kneecap.sim.sweep import LevelSpec, simulate_level
from kneecap.units import GiB
from kneecap.workload import RequestSpec

times = st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=60).map(sorted)
costs = st.floats(min_value=1e-4, max_value=1.0, allow_nan=False)


@given(times, costs)
@settings(max_examples=300, deadline=None)
def test_rounds_never_early_keep_order_and_are_work_conserving(arrivals, cost):
    out = engine_arrivals(arrivals, cost)
    assert len(out) == len(arrivals)
    for a, e in zip(arrivals, out):
        assert e >= a + cost - 1e-9  # each request costs the loop c before it is handed on
    assert out == sorted(out)  # first in, first to the engine
    # the loop is never idle while a request waits: the last request reaches the engine no later than if every
    # request were handled one after another from the first arrival on, and no earlier than N x c after it
    if arrivals:
        busy = arrivals[0]
        for a in arrivals:
            busy = max(busy, a) + cost
        assert out[-1] == pytest.approx(busy)
        assert out[-1] >= arrivals[0] + len(arrivals) * cost - 1e-9


@given(st.floats(min_value=0, max_value=1e3, allow_nan=False), costs)
def test_a_lone_request_waits_exactly_its_cost(at, cost):
    assert engine_arrivals([at], cost) == [at + cost]


@given(st.integers(min_value=1, max_value=2000), costs, st.floats(min_value=0, max_value=10, allow_nan=False))
def test_a_burst_of_n_all_wait_n_times_the_cost(n, cost, at):
    assert engine_arrivals([at] * n, cost) == pytest.approx([at + n * cost] * n)


@given(times)
def test_zero_cost_is_the_identity(arrivals):
    assert engine_arrivals(arrivals, 0.0) == arrivals


def test_rounds_as_asyncio_runs_them():
    # 3 at once (one round: all at 3c), one during that round (the next round, alone), one long after (alone)
    assert engine_arrivals([0, 0, 0, 0.015, 1.0], 0.01) == pytest.approx([0.03, 0.03, 0.03, 0.04, 1.01])
    with pytest.raises(ValueError):
        engine_arrivals([0.0], -1.0)


def _drive(front: EventLoopFrontEnd[int], arrivals: list[float], tokens: list[int]) -> list[tuple[float, int]]:
    """Feed `front` request i (sent at arrivals[i], tokens[i] prompt tokens) as the virtual clock goes, every send at
    or before `now` known at `now`; what it releases, in order."""
    got: list[tuple[float, int]] = []
    i, now = 0, 0.0
    while i < len(arrivals) or front.held:
        nxt = min(arrivals[i] if i < len(arrivals) else math.inf, front.next_s())
        now = max(now, nxt)
        while i < len(arrivals) and arrivals[i] <= now:
            front.arrive(arrivals[i], i, tokens[i])
            i += 1
        got += front.release(now)
    return got


@given(times, costs)
@settings(max_examples=300, deadline=None)
def test_the_online_loop_is_the_rounds_rule(arrivals, cost):
    """Fed arrival by arrival as the virtual clock goes (every send at or before `now` known at `now`), the event loop
    hands out exactly engine_arrivals' times, in order."""
    got = _drive(EventLoopFrontEnd(cost), arrivals, [0] * len(arrivals))
    assert [item for _, item in got] == list(range(len(arrivals)))
    assert [t for t, _ in got] == pytest.approx(engine_arrivals(arrivals, cost))


def _spec(i: int) -> RequestSpec:
    return RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=64, output_tokens=8)


def _run(level: LevelSpec, cost_s: float):
    sim = sim_of(deployment(), EngineConfig(max_num_seqs=64, frontend_s_per_request=cost_s), 4096)
    return {r.request_id: r for r in simulate_level(sim, None, level).records}


def test_the_engine_sees_a_burst_after_the_loop_has_handled_all_of_it():
    n, cost = 40, 0.005
    level = LevelSpec(all_at_once=True, num_requests=n, specs=tuple(_spec(i) for i in range(n)))
    base, front = _run(level, 0.0), _run(level, cost)
    for rid, rec in front.items():
        assert rec.sent_at == base[rid].sent_at == 0.0  # TTFT still counts from the client's send
        # the same engine run, n x c later
        assert rec.first_token_at - rec.sent_at == pytest.approx(base[rid].first_token_at + n * cost)
        assert rec.end_at == pytest.approx(base[rid].end_at + n * cost)


def test_a_closed_loop_of_one_pays_the_cost_once_per_request():
    level = LevelSpec(concurrency=1, num_requests=5, specs=tuple(_spec(i) for i in range(5)))
    base, front = _run(level, 0.0), _run(level, 0.003)
    for rid, rec in front.items():
        ttft, base_ttft = rec.first_token_at - rec.sent_at, base[rid].first_token_at - base[rid].sent_at
        assert ttft == pytest.approx(base_ttft + 0.003)


def test_chat_cost_by_engine_release_and_template():
    vllm = vllm_defaults(80 * GiB, "h100-sxm")
    assert vllm.profile.chat_template == CHAT_RENDER  # no release named: a cached template, rendered
    assert at_release(vllm, "0.11.0").profile.chat_template == CHAT_PARSE
    for release in ("0.10.2", "0.11.1", "0.12.0", "0.17.0", "0.7.3"):
        assert at_release(vllm, release).profile.chat_template == CHAT_RENDER, release
    parse = at_release(vllm, "0.11.0").profile
    assert chat_frontend_ms(parse, "qwen3-235b-a22b")[0] == CHAT_TEMPLATE_PARSE_MS["qwen3"]
    assert chat_frontend_ms(parse, "deepseek-v3")[0] == CHAT_TEMPLATE_PARSE_MS["deepseek-r1"]
    ms, what = chat_frontend_ms(parse, "llama-3.1-8b")
    assert ms == DEFAULT_CHAT_TEMPLATE_PARSE_MS and "not measured" in what
    assert chat_frontend_ms(parse, "gpt-oss-120b")[0] == HARMONY_RENDER_MS["fixed"]  # openai-harmony, not Jinja
    assert chat_frontend_ms(vllm.profile, "qwen3-235b-a22b")[0] < 0.1  # a render, not a parse
    ms, what = chat_frontend_ms(sglang_defaults(80 * GiB, 100_000, 4096).profile, "qwen3-235b-a22b")
    assert ms == 0.0 and "not modelled" in what


@given(times, st.lists(costs, min_size=60, max_size=60))
@settings(max_examples=200, deadline=None)
def test_a_round_lasts_the_sum_of_its_requests_costs(arrivals, per_request):
    """Costs that differ by request (a prompt-length part): the online loop, fed each request's prompt tokens, hands
    out engine_arrivals' times for those costs, and a burst reaches the engine after the sum of them."""
    per_token = 1e-4
    tokens = [int(c * 1e4) for c in per_request[: len(arrivals)]]
    cost_of = [0.001 + k * per_token for k in tokens]
    got = _drive(EventLoopFrontEnd(0.001, per_token), arrivals, tokens)
    assert [item for _, item in got] == list(range(len(arrivals)))
    assert [t for t, _ in got] == pytest.approx(engine_arrivals(arrivals, cost_of))
    if arrivals:
        assert engine_arrivals([0.0] * len(cost_of), cost_of)[-1] == pytest.approx(math.fsum(cost_of))


def test_per_request_costs_are_checked():
    assert engine_arrivals([0.0, 0.0, 5.0], [0.1, 0.2, 0.3]) == pytest.approx([0.3, 0.3, 5.3])
    with pytest.raises(ValueError, match="one cost per request"):
        engine_arrivals([0.0, 1.0], [0.1])
    with pytest.raises(ValueError):
        EventLoopFrontEnd(0.0, 0.0)
    with pytest.raises(ValueError):
        EventLoopFrontEnd(0.0, -1.0)


def test_the_engine_sees_a_burst_after_each_prompt_is_rendered():
    """A cost per prompt token (gpt-oss's harmony render): n requests of 64 tokens sent together reach the engine
    after n x (fixed + 64 x per token)."""
    n, fixed, per_token = 40, 0.0003, 1e-5
    level = LevelSpec(all_at_once=True, num_requests=n, specs=tuple(_spec(i) for i in range(n)))
    base = _run(level, 0.0)
    sim = sim_of(
        deployment(),
        EngineConfig(max_num_seqs=64, frontend_s_per_request=fixed, frontend_s_per_prompt_token=per_token),
        4096,
    )
    front = {r.request_id: r for r in simulate_level(sim, None, level).records}
    for rid, rec in front.items():
        assert rec.first_token_at == pytest.approx(base[rid].first_token_at + n * (fixed + 64 * per_token))


def test_gpt_oss_chat_cost_by_release():
    """vLLM 0.10.1 through 0.11.0 render a gpt-oss chat request with openai-harmony on the event loop, tokenising the
    prompt there: a fixed part and a part per prompt token; other releases, other models and other engines: none."""
    vllm = vllm_defaults(80 * GiB, "h100-sxm")
    assert HARMONY_RENDER_MS["fixed"] > 0 and HARMONY_RENDER_MS["per_token"] > 0
    for release in ("0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "v0.11.0", "0.10.1+gptoss"):
        profile = at_release(vllm, release).profile
        assert profile.harmony_render, release
        for model in ("gpt-oss-20b", "gpt-oss-120b"):
            ms, what = chat_frontend_ms(profile, model)
            assert ms == HARMONY_RENDER_MS["fixed"] and "openai-harmony" in what, release
            assert chat_frontend_ms_per_prompt_token(profile, model) == HARMONY_RENDER_MS["per_token"]
        assert chat_frontend_ms_per_prompt_token(profile, "qwen3-235b-a22b") == 0.0
    for release in (None, "0.10.0", "0.11.1", "0.11.2", "0.12.0", "0.17.0", "0.7.3"):
        profile = at_release(vllm, release).profile
        assert not profile.harmony_render, release
        ms, what = chat_frontend_ms(profile, "gpt-oss-120b")
        assert ms == 0.0 and "not priced" in what, release
        assert chat_frontend_ms_per_prompt_token(profile, "gpt-oss-120b") == 0.0
    sglang = sglang_defaults(80 * GiB, 100_000, 4096).profile
    assert chat_frontend_ms_per_prompt_token(sglang, "gpt-oss-120b") == 0.0
    with pytest.raises(KneecapError, match="per prompt token"):
        EngineConfig(frontend_s_per_prompt_token=-1e-6)


def test_a_negative_cost_is_refused():
    with pytest.raises(KneecapError, match="--frontend-ms-per-request"):
        EngineConfig(frontend_s_per_request=-1e-3)


QWEN = ["simulate", "--model", "qwen3-235b-a22b", "--gpu", "h100-sxm", "--tp", "8", "--engine-defaults", "vllm"]
BURST = ["--concurrency", "max", "--isl", "128", "--osl", "4", "--requests", "200", "--json", "--no-report"]


def _summary(tmp_path, *args):
    import json

    from clitools import run_cli

    res = run_cli(*QWEN, *BURST, *args, "--out", str(tmp_path / "_".join(args or ("plain",))))
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def test_cli_chat_endpoint_at_the_release_that_parses_per_request(tmp_path):
    """vLLM 0.11.0 through /v1/chat/completions: 200 requests sent at once reach the engine after 200 parses of
    Qwen3's template, so the mean TTFT grows by 200 x its cost; the same release on /v1/completions, and a later
    release on the chat endpoint (a render of the cached template), stay close to the plain run."""
    plain = _summary(tmp_path, "--engine-version", "0.11.0")
    chat = _summary(tmp_path, "--engine-version", "0.11.0", "--endpoint", "chat")
    cached = _summary(tmp_path, "--engine-version", "0.11.1", "--endpoint", "chat")
    assert "frontend" not in plain["engine"]
    front = chat["engine"]["frontend"]
    assert front["ms_per_request"] == CHAT_TEMPLATE_PARSE_MS["qwen3"] and "parse" in front["what"]
    grow_ms = chat["levels"][0]["ttft_ms"]["mean"] - plain["levels"][0]["ttft_ms"]["mean"]
    assert grow_ms == pytest.approx(200 * CHAT_TEMPLATE_PARSE_MS["qwen3"], rel=1e-6)
    grow_ms = cached["levels"][0]["ttft_ms"]["mean"] - plain["levels"][0]["ttft_ms"]["mean"]
    assert 0 < grow_ms < 200 * 0.1


def test_cli_frontend_override_and_errors(tmp_path):
    from clitools import run_cli

    given = _summary(tmp_path, "--frontend-ms-per-request", "2")
    assert given["engine"]["frontend"]["ms_per_request"] == 2.0
    for args, needle in (
        (("--endpoint", "grpc"), "unknown --endpoint 'grpc'"),
        (("--frontend-ms-per-request", "-1"), "--frontend-ms-per-request must be"),
        (("--endpoint", "chat", "--engine-version", "0.11.0", "--replicas", "2"), "one API server's event loop"),
    ):
        res = run_cli(*QWEN, *BURST, *args, "--out", str(tmp_path / "err"))
        assert res.code != 0 and needle in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


GPT_OSS = ["simulate", "--model", "gpt-oss-20b", "--gpu", "h100-sxm", "--tp", "1", "--engine-defaults", "vllm"]


def test_cli_gpt_oss_chat_pays_the_harmony_render_per_prompt_token(tmp_path):
    """gpt-oss-20b on vLLM 0.11.0 through /v1/chat/completions: 100 requests of 2,000 tokens sent at once reach the
    engine after 100 harmony renders of 2,000-token prompts, so the mean TTFT grows by 100 x (fixed + 2,000 x per
    token); the summary names both parts."""
    from clitools import run_cli
    import json

    burst = ["--concurrency", "max", "--isl", "2000", "--osl", "4", "--requests", "100", "--json", "--no-report"]
    out = {}
    for name, extra in (("plain", ()), ("chat", ("--endpoint", "chat"))):
        res = run_cli(*GPT_OSS, *burst, "--engine-version", "0.11.0", *extra, "--out", str(tmp_path / name))
        assert res.code == 0, res.stderr
        out[name] = json.loads(res.stdout)
    front = out["chat"]["engine"]["frontend"]
    assert front["ms_per_request"] == HARMONY_RENDER_MS["fixed"]
    assert front["ms_per_prompt_token"] == pytest.approx(HARMONY_RENDER_MS["per_token"])
    grow_ms = out["chat"]["levels"][0]["ttft_ms"]["mean"] - out["plain"]["levels"][0]["ttft_ms"]["mean"]
    per_request = HARMONY_RENDER_MS["fixed"] + 2000 * HARMONY_RENDER_MS["per_token"]
    assert grow_ms == pytest.approx(100 * per_request, rel=1e-6)
