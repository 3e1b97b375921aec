"""`kneecap serve` as a real subprocess on a free 127.0.0.1 port: every endpoint, the SSE wire format, exact
lengths, /metrics under load, aborts, and the real `kneecap bench` CLI against it. The server is stopped by PID."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import aiohttp
import pytest

from kneecap.cli.serve_process import start_server, stop_server
from kneecap.client.server_metrics import parse_prometheus, sample_from_text
from kneecap.serve.pseudo_tokens import filler_text

MODEL = "llama-3.1-8b"
SERVER_METRICS_CONTRACT = (
    "preemptions",
    "kv_usage_max",
    "kv_usage_mean",
    "running_max",
    "waiting_max",
    "prefix_cache_hit_rate",
    "source",
)
SERVER_ARGS = ["--preset", MODEL, "--gpu", "h100-sxm", "--context", "8192"]


@pytest.fixture(scope="module")
def server():
    proc, url = start_server(SERVER_ARGS)
    try:
        yield url
    finally:
        code = stop_server(proc)
        assert code == 0, f"kneecap serve exited {code} on SIGTERM"


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, body, timeout: float = 30.0) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sse_events(raw: bytes) -> list[bytes]:
    """Split an SSE body into event data payloads, checking the framing on the way."""
    assert raw.endswith(b"\n\n"), raw[-40:]
    events = []
    for block in raw.split(b"\n\n")[:-1]:
        assert block.startswith(b"data: "), block[:60]
        assert b"\n" not in block, block[:60]
        events.append(block[len(b"data: ") :])
    return events


def metrics(url: str) -> str:
    code, body = get(url + "/metrics")
    assert code == 200
    return body.decode()


def metric(text: str, name: str) -> float:
    samples = parse_prometheus(text, (name,)).get(name)
    assert samples, f"{name} missing from /metrics"
    return samples[0][1]


def test_info_endpoints(server):
    assert get(server + "/health")[0] == 200
    code, body = get(server + "/v1/models")
    card = json.loads(body)["data"][0]
    assert code == 200 and card["id"] == MODEL and card["max_model_len"] == 8192
    code, body = get(server + "/version")
    doc = json.loads(body)
    assert code == 200 and doc["simulated"] is True and doc["target"]["deployment"]["gpu"] == "h100-sxm"
    code, body = post(
        server + "/tokenize", {"model": MODEL, "prompt": "one two  three\nfour", "add_special_tokens": True}
    )
    doc = json.loads(body)
    assert code == 200 and doc["count"] == 4 and len(doc["tokens"]) == 4 and doc["max_model_len"] == 8192
    code, body = post(server + "/detokenize", {"model": MODEL, "tokens": doc["tokens"]})
    assert code == 200 and len(json.loads(body)["prompt"].split()) == 4
    assert post(server + "/detokenize", {"tokens": ["x"]})[0] == 400


def test_streamed_completion_wire_format_and_exact_length(server):
    ids = list(range(1000, 1137))
    code, raw = post(
        server + "/v1/completions",
        {
            "model": MODEL,
            "prompt": ids,
            "max_tokens": 23,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert code == 200
    events = sse_events(raw)
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    token_chunks, usage_chunk = chunks[:-1], chunks[-1]
    assert len(token_chunks) == 23  # one event per token
    assert all(c["object"] == "text_completion" and c["model"] == MODEL for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["finish_reason"] for c in token_chunks] == [None] * 22 + ["length"]
    assert "".join(c["choices"][0]["text"] for c in token_chunks) == filler_text(23)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 137,
        "completion_tokens": 23,
        "total_tokens": 160,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    # the same prompt again: its 8 whole 16-token blocks are in the prefix cache, and the usage says so (as vLLM's)
    code, raw = post(
        server + "/v1/completions",
        {
            "model": MODEL,
            "prompt": ids,
            "max_tokens": 2,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    again = json.loads(sse_events(raw)[-2])["usage"]
    assert code == 200 and again["prompt_tokens_details"] == {"cached_tokens": 128}, again


def test_streamed_chat_and_continuous_usage(server):
    prompt = "alpha beta gamma delta"
    code, raw = post(
        server + "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 5,
            "min_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    assert code == 200
    chunks = [json.loads(e) for e in sse_events(raw)[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 5 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert [c["usage"]["completion_tokens"] for c in content] == [1, 2, 3, 4, 5]
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 5,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_non_streamed_responses(server):
    code, body = post(server + "/v1/completions", {"model": MODEL, "prompt": "a b c", "max_tokens": 7})
    doc = json.loads(body)
    assert (
        code == 200 and doc["choices"][0]["text"] == filler_text(7) and doc["choices"][0]["finish_reason"] == "length"
    )
    assert doc["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 7,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    code, body = post(
        server + "/v1/chat/completions", {"messages": [{"role": "user", "content": "x y"}], "max_tokens": 3}
    )
    doc = json.loads(body)
    assert code == 200 and doc["object"] == "chat.completion" and doc["usage"]["completion_tokens"] == 3
    assert len(doc["choices"][0]["message"]["content"].split()) == 3


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": MODEL, "prompt": "x " * 8000, "max_tokens": 500}, "max_tokens"),
        ({"model": "other-model", "prompt": "x", "max_tokens": 5}, "model"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 5, "min_tokens": 9}, "min_tokens"),
        ({"model": MODEL, "prompt": ["a", "b"], "max_tokens": 5}, "prompt"),
        ({"model": MODEL, "max_tokens": 5}, "prompt"),
    ],
)
def test_bad_requests_answer_400_with_vllm_error_body(server, body, param):
    code, raw = post(server + "/v1/completions", body)
    doc = json.loads(raw)
    assert code == 400 and doc["object"] == "error" and doc["code"] == 400 and doc["param"] == param and doc["message"]


def test_bad_json_is_400(server):
    code, raw = post(server + "/v1/completions", b"{not json")
    assert code == 400 and json.loads(raw)["object"] == "error"


def test_metrics_names_and_kv_usage_rises_under_load(server):
    idle = metrics(server)
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:cache_config_info",
    ):
        assert f"\n{name}{{" in "\n" + idle, name
    info = parse_prometheus(idle, ("vllm:cache_config_info",))["vllm:cache_config_info"][0][0]
    assert info["block_size"] == "16" and int(info["num_gpu_blocks"]) > 1000
    sample = sample_from_text(idle)  # the bench client's own reader recognises the engine
    assert sample.engine == "vllm" and sample.kv_usage == 0.0
    gen0, prompt0 = metric(idle, "vllm:generation_tokens_total"), metric(idle, "vllm:prompt_tokens_total")

    async def load() -> tuple[list[int], float, float]:
        async with aiohttp.ClientSession() as session:

            async def one(i: int) -> int:
                first = 100_000 + 2000 * i  # unique prompts: no prefix-cache sharing
                body = {"model": MODEL, "prompt": list(range(first, first + 2000)), "max_tokens": 150, "stream": True}
                n = 0
                async with session.post(server + "/v1/completions", json=body) as resp:
                    async for line in resp.content:
                        n += line.startswith(b"data: {")
                return n

            tasks = [asyncio.create_task(one(i)) for i in range(48)]
            kv_max = running_max = 0.0
            while not all(t.done() for t in tasks):
                await asyncio.sleep(0.1)
                async with session.get(server + "/metrics") as resp:
                    s = sample_from_text(await resp.text())
                kv_max, running_max = max(kv_max, s.kv_usage), max(running_max, s.running)
            return [t.result() for t in tasks], kv_max, running_max

    counts, kv_max, running_max = asyncio.run(load())
    assert counts == [150] * 48
    # 48 x 2150 tokens of 16-token blocks over the pool: the gauge must have moved well off zero
    assert kv_max > 0.05 and running_max >= 8
    after = metrics(server)
    assert metric(after, "vllm:kv_cache_usage_perc") == 0.0 and metric(after, "vllm:num_requests_running") == 0
    assert metric(after, "vllm:generation_tokens_total") - gen0 == 48 * 150
    assert metric(after, "vllm:prompt_tokens_total") - prompt0 == 48 * 2000


def test_client_disconnect_aborts_and_frees_blocks(server):
    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            body = {"model": MODEL, "prompt": list(range(1000, 1500)), "max_tokens": 4000, "stream": True}
            resp = await session.post(server + "/v1/completions", json=body)
            seen = 0
            async for line in resp.content:
                seen += line.startswith(b"data: {")
                if seen >= 3:
                    break
            resp.close()  # drop the connection mid-stream

    before = metric(metrics(server), "kneecap:requests_aborted_total")
    asyncio.run(run())
    for _ in range(100):
        text = metrics(server)
        if metric(text, "vllm:num_requests_running") == 0:
            break
        asyncio.run(asyncio.sleep(0.05))
    assert metric(text, "vllm:num_requests_running") == 0 and metric(text, "vllm:kv_cache_usage_perc") == 0.0
    assert metric(text, "kneecap:requests_aborted_total") == before + 1


def test_real_bench_cli_sweep_against_serve(cli, server, tmp_path):
    out = tmp_path / "bench"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--isl",
        "256",
        "--osl",
        "16",
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--out",
        str(out),
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    for lv in doc["levels"]:
        assert (lv["completed"], lv["failed"]) == (8, 0)
        assert lv["output_tok_s"] > 0 and lv["tpot_ms"]["p50"] > 0
    # the client read the served KV pool from vllm:cache_config_info for its preflight
    assert doc["preflight"]["kv_capacity_tokens"] > 100_000
    # served timing follows the simulated engine: compare with `kneecap simulate` on the same flags (generous:
    # the wall clock of a shared 2-core machine adds jitter, never less time)
    sim = cli(
        "simulate",
        *SERVER_ARGS,
        "--isl",
        "256",
        "--osl",
        "16",
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--out",
        str(tmp_path / "sim"),
        "--json",
    )
    assert sim.code == 0, sim.stderr
    sim_doc = json.loads(sim.stdout)
    for served, simulated in zip(doc["levels"], sim_doc["levels"]):
        ratio = served["tpot_ms"]["p50"] / simulated["tpot_ms"]["p50"]
        assert 0.8 < ratio < 2.0, (served["tpot_ms"], simulated["tpot_ms"])
    # one server_metrics shape whatever measured it: scraped /metrics here, the engine's counters in simulate
    for summary, source in ((doc, "prometheus"), (sim_doc, "simulator")):
        for lv in summary["levels"]:
            sm = lv["server_metrics"]
            assert set(SERVER_METRICS_CONTRACT) <= set(sm) and sm["source"] == source, sm
            assert isinstance(sm["preemptions"], int) and sm["preemptions"] == 0
            # scrapes come about once a second, so a short level may be scraped while nothing runs
            assert isinstance(sm["running_max"], int) and (source == "prometheus" or sm["running_max"] >= 1)
            assert sm["running_max"] <= lv["concurrency"] and 0 <= sm["kv_usage_max"] <= 1
    assert doc["levels"][1]["server_metrics"]["kv_usage_mean"] is not None
    # the server said it is kneecap's simulated engine: measured (benchmark_executed) but no model ran
    assert (doc["benchmark_executed"], doc["model_executed"], doc["server"]["simulated"]) == (True, False, True)


def test_health_stays_fast_at_concurrency_1024(server):
    async def run() -> tuple[list[int], float]:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as session:

            async def one(i: int) -> int:
                body = {"model": MODEL, "prompt": list(range(3000, 3032)), "max_tokens": 32, "stream": True}
                n = 0
                async with session.post(server + "/v1/completions", json=body) as resp:
                    async for line in resp.content:
                        n += line.startswith(b"data: {")
                return n

            tasks = [asyncio.create_task(one(i)) for i in range(1024)]
            await asyncio.sleep(0.5)
            loop = asyncio.get_running_loop()
            worst = 0.0
            for _ in range(5):
                t0 = loop.time()
                async with session.get(server + "/health") as resp:
                    assert resp.status == 200
                worst = max(worst, loop.time() - t0)
                await asyncio.sleep(0.1)
            return await asyncio.gather(*tasks), worst

    counts, worst = asyncio.run(run())
    assert counts == [32] * 1024
    assert worst < 3.0, f"/health took {worst:.2f} s under C=1024"


def test_time_scale_maps_virtual_to_wall_time(cli, tmp_path):
    """--time-scale 0.25 on a slow simulated GPU: the stream ends no earlier than a quarter of the simulated
    E2E (tokens are never released before their scaled time), and well before the unscaled E2E. Bounds on
    the whole request, not on token spacing: a loaded machine delays and bunches reads, never advances them."""
    import time

    args = ["--preset", MODEL, "--gpu", "l4", "--context", "2048"]
    sim = cli(
        "simulate",
        *args,
        "--isl",
        "64",
        "--osl",
        "40",
        "--concurrency",
        "1",
        "--requests",
        "1",
        "--out",
        str(tmp_path / "sim"),
        "--json",
        "--no-report",
    )
    assert sim.code == 0, sim.stderr
    virtual_e2e_s = json.loads(sim.stdout)["levels"][0]["e2e_ms"]["p50"] / 1000
    proc, url = start_server([*args, "--time-scale", "0.25"])
    try:
        req = urllib.request.Request(
            url + "/v1/completions",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"prompt": list(range(64)), "max_tokens": 40, "stream": True}).encode(),
        )
        stamps = []
        sent = time.monotonic()
        with urllib.request.urlopen(req, timeout=60) as resp:
            for line in resp:
                if line.startswith(b"data: {"):
                    stamps.append(time.monotonic())
    finally:
        stop_server(proc)
    wall_e2e_s = stamps[-1] - sent
    assert len(stamps) == 40
    assert 0.95 * 0.25 * virtual_e2e_s <= wall_e2e_s < 0.75 * virtual_e2e_s, (wall_e2e_s, virtual_e2e_s)


def test_bench_find_max_and_vllm_export_against_serve(cli, server, tmp_path):
    """bench --find-max through the one level runner against a live server: every probe is a level, the answer met
    the SLO in its run and the next step up did not; --export vllm writes each level; vLLM's flag names work."""
    out = tmp_path / "fm"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--random-input-len",
        "128",
        "--random-output-len",
        "16",
        "--max-concurrency",
        "1,64",
        "--slo",
        "ttft_p50_ms=60",
        "--find-max",
        "concurrency",
        "--export",
        "vllm",
        "--out",
        str(out),
        "--json",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    m = doc["max_load"]
    by_load = {lv["concurrency"]: lv for lv in doc["levels"]}
    assert len(doc["levels"]) == len(m["probes"]) >= 2
    # the simulated 8B on one H100 queues prefills past about C=12 at this size: the search has both ends
    assert m["value"] is not None and m["failed_at"] is not None and m["value"] < m["failed_at"] <= 64
    assert by_load[m["value"]]["ttft_ms"]["p50"] <= 60
    assert by_load[m["failed_at"]]["ttft_ms"]["p50"] > 60 and m["failed_because"].startswith("ttft_p50_ms")
    files = sorted((out / "vllm").glob("level-*.json"))
    assert len(files) == len(doc["levels"])
    exported = json.loads(files[0].read_text())
    assert exported["completed"] == doc["levels"][0]["completed"] and exported["max_concurrency"] == 1
    # vLLM's own flag name for the request count is accepted too
    r = cli(
        "bench",
        "--base-url",
        server,
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--concurrency",
        "2",
        "--num-prompts",
        "6",
        "--out",
        str(tmp_path / "np"),
        "--json",
        "--no-report",
    )
    assert r.code == 0 and json.loads(r.stdout)["levels"][0]["requests"] == 6, r.stderr
