"""Live-server capacity and Prometheus scraping, on documented / captured payloads of each engine."""

from __future__ import annotations

import asyncio
import math
import socket
import time

import pytest

from kneecap.client.driver import ClientConfig, run_closed_loop, run_sync
from kneecap.client.server_info import (
    LLAMACPP,
    SGLANG,
    VLLM,
    combine,
    fetch_server_info,
    parse_llamacpp_props,
    parse_sglang_server_info,
    parse_vllm_cache_config,
)
from kneecap.client.server_metrics import MetricsPoller, parse_prometheus, sample_from_text, summarize_samples
from kneecap.errors import KneecapError
from kneecap.workload import Workload, make_requests
from servers.scripted import start_scripted_server

# vLLM (V0 engine) as captured in the AIBrix docs ("Unified metrics", vLLM serving
# Qwen/Qwen2.5-Coder-1.5B-Instruct): cache_config_info labels = CacheConfig fields.
VLLM_V0_METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="False",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="9362",num_gpu_blocks="81767",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1.0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.25
vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 3.0
vllm:num_preemptions_total{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 7.0
"""

# vLLM V1 with two data-parallel engines (engine label, vllm/v1/metrics/loggers.py) and the newer exact
# kv_cache_size_tokens label (vLLM PR #42206; a hybrid model's block_size of 832 as in the wild).
VLLM_V1_DP_METRICS = """\
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="832",cache_dtype="bfloat16",engine="0",kv_cache_size_tokens="619479",num_gpu_blocks="745"} 1.0
vllm:cache_config_info{block_size="832",cache_dtype="bfloat16",engine="1",kv_cache_size_tokens="619479",num_gpu_blocks="745"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.61
vllm:num_requests_running{engine="0",model_name="m"} 12.0
vllm:num_requests_running{engine="1",model_name="m"} 10.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 100.0
"""

# SGLang GET /get_server_info as printed by SGLang's docs ("Native APIs", qwen2.5-0.5b-instruct),
# trimmed to the keys read here (the full object is ~15 KB of server args).
SGLANG_SERVER_INFO = {
    "model_path": "qwen/qwen2.5-0.5b-instruct",
    "page_size": 1,
    "max_running_requests": 128,
    "context_length": None,
    "status": "ready",
    "max_total_num_tokens": 20480,
    "max_req_input_len": 20474,
    "internal_states": [
        {
            "max_running_requests": 128,
            "memory_usage": {"weight": 0.98, "kvcache": 0.23, "token_capacity": 20480, "graph": 0},
        }
    ],
    "version": "0.0.0.dev1+g54b06f199",
}

# SGLang /metrics names (python/sglang/srt/metrics/collector.py), labels as SGLang 0.5 emits them.
SGLANG_METRICS = """\
# HELP sglang:token_usage The token usage
sglang:token_usage{engine_type="unified",model_name="qwen",tp_rank="0"} 0.52
sglang:num_running_reqs{engine_type="unified",model_name="qwen",tp_rank="0"} 8.0
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",tp_rank="0"} 4.0
"""

# llama.cpp GET /props (tools/server get_props: default_generation_settings.n_ctx is the per-slot
# context; total_slots = -np), values from a b8681 server (-c 65536 -np 4 would give 16384 per slot).
LLAMACPP_PROPS = {
    "default_generation_settings": {"params": {"n_predict": -1, "temperature": 0.8}, "n_ctx": 16384},
    "total_slots": 4,
    "model_alias": "unsloth/Qwen3.6-35B-A3B-GGUF",
    "model_path": "/models/q.gguf",
    "modalities": {"vision": True, "audio": False},
    "build_info": "b8681-Debian",
    "eos_token": "<|im_end|>",
}

# llama.cpp /metrics (tools/server README, --metrics)
LLAMACPP_METRICS = """\
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.63
llamacpp:requests_processing 2
llamacpp:requests_deferred 1
llamacpp:tokens_predicted_total 5000
"""


def test_prometheus_parser_edge_cases():
    text = (
        '# HELP x y\nm{a="q\\"uote",b="back\\\\slash",c="new\\nline"} 1.5e+03 1700000000\n'
        'm 2\nbad line\nn{le="+Inf"} +Inf\nnan_metric NaN\nbroken{a="x} 3\n'
    )
    samples = parse_prometheus(text)
    assert samples["m"] == [({"a": 'q"uote', "b": "back\\slash", "c": "new\nline"}, 1500.0), ({}, 2.0)]
    assert samples["n"][0][1] == math.inf and math.isnan(samples["nan_metric"][0][1])
    assert "broken" not in samples and "bad" not in samples
    assert parse_prometheus(text, names=("n",)) == {"n": [({"le": "+Inf"}, math.inf)]}


@pytest.mark.parametrize(
    "text,engine,kv,running,waiting,preempt",
    [
        (VLLM_V0_METRICS, "vllm", 0.25, 0.0, 3.0, 7.0),
        (VLLM_V1_DP_METRICS, "vllm", 0.61, 22.0, 1.0, 5.0),
        (SGLANG_METRICS, "sglang", 0.52, 8.0, 4.0, None),
        (LLAMACPP_METRICS, "llama.cpp", 0.63, 2.0, 1.0, None),
        ("# nothing here\nfoo 1\n", None, None, None, None, None),
    ],
)
def test_engine_gauges_from_metrics_text(text, engine, kv, running, waiting, preempt):
    s = sample_from_text(text)
    assert (s.engine, s.kv_usage, s.running, s.waiting, s.preemptions_total) == (engine, kv, running, waiting, preempt)


def test_level_summary_takes_maxima_and_counter_delta():
    a, b, c = (
        sample_from_text(VLLM_V0_METRICS, 1.0),
        sample_from_text(VLLM_V1_DP_METRICS, 2.0),
        sample_from_text(VLLM_V0_METRICS, 3.0),
    )
    summary = summarize_samples([a, b, c])
    assert (summary.kv_usage_max, summary.running_max, summary.waiting_max, summary.preemptions_delta) == (
        0.61,
        22.0,
        3.0,
        0.0,
    )
    assert summarize_samples([]).to_dict()["kv_usage_max"] is None


def test_vllm_capacity_blocks_times_block_size_and_exact_label():
    assert parse_vllm_cache_config(VLLM_V0_METRICS)["kv_capacity_tokens"] == 81767 * 16
    dp = parse_vllm_cache_config(VLLM_V1_DP_METRICS)
    assert dp["kv_capacity_tokens"] == 2 * 619479 and dp["num_engines"] == 2
    info = combine(
        "http://x",
        models={"data": [{"id": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "owned_by": "vllm", "max_model_len": 32768}]},
        version={"version": "0.6.4"},
        metrics_text=VLLM_V0_METRICS,
    )
    assert (info.engine, info.kv_capacity_tokens, info.block_size, info.max_model_len, info.version) == (
        VLLM,
        1308272,
        16,
        32768,
        "0.6.4",
    )
    assert "num_gpu_blocks x block_size" in info.kv_capacity_source


def test_vllm_without_blocks_yet_says_so():
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    info = combine("http://x", metrics_text=text)
    assert info.engine == VLLM and info.kv_capacity_tokens is None and info.notes


def test_sglang_server_info():
    parsed = parse_sglang_server_info(SGLANG_SERVER_INFO)
    assert parsed["kv_capacity_tokens"] == 20480 and parsed["num_slots"] == 128
    newer = dict(SGLANG_SERVER_INFO)
    del newer["max_total_num_tokens"]  # only the per-rank view
    assert parse_sglang_server_info(newer)["kv_capacity_tokens"] == 20480
    info = combine(
        "http://x",
        sglang_info=SGLANG_SERVER_INFO,
        models={"data": [{"id": "qwen/qwen2.5-0.5b-instruct", "owned_by": "sglang"}]},
    )
    assert (info.engine, info.kv_capacity_tokens, info.version) == (SGLANG, 20480, "0.0.0.dev1+g54b06f199")


def test_llamacpp_props_and_slots():
    parsed = parse_llamacpp_props(LLAMACPP_PROPS)
    assert (parsed["kv_capacity_tokens"], parsed["num_slots"], parsed["slot_context_tokens"]) == (65536, 4, 16384)
    slots_only = parse_llamacpp_props({"build_info": "b1"}, slots=[{"id": 0, "n_ctx": 2048}, {"id": 1, "n_ctx": 2048}])
    assert slots_only["kv_capacity_tokens"] == 4096
    info = combine(
        "http://x",
        props=LLAMACPP_PROPS,
        models={"data": [{"id": "q", "owned_by": "llamacpp", "meta": {"n_vocab": 151936}}]},
    )
    assert (info.engine, info.kv_capacity_tokens, info.version, info.vocab_size) == (
        LLAMACPP,
        65536,
        "b8681-Debian",
        151936,
    )
    assert info.max_model_len == 16384


def test_unknown_engine():
    info = combine("http://x", models={"data": [{"id": "gpt-x", "owned_by": "someone"}]})
    assert info.engine is None and info.kv_capacity_tokens is None and info.model_id == "gpt-x"


def test_fetch_from_a_live_server_and_poll_metrics_during_a_level():
    url, srv = start_scripted_server(ttft_s=0.3, itl_s=0.01, kv_capacity_tokens=32768)
    try:
        info = fetch_server_info(url + "/v1", api_key="k")
        assert (info.engine, info.kv_capacity_tokens, info.model_id, info.max_model_len) == (
            VLLM,
            32768,
            "scripted-model",
            8192,
        )

        async def go():
            poller = MetricsPoller(url, 0.05)
            poller.start()
            cfg = ClientConfig(base_url=url, model="m")
            await run_closed_loop(
                cfg,
                make_requests(Workload.fixed(4, 20), 6),
                3,
                level=0,
                epoch=time.perf_counter(),
                on_record=lambda r: None,
            )
            return await poller.stop()

        level = run_sync(go())
        assert level.engine == "vllm" and level.num_samples >= 3 and level.running_max >= 1
        assert level.preemptions_delta is not None and level.preemptions_delta >= 1  # the scripted counter = served
    finally:
        srv.stop()


def test_poller_on_a_server_without_metrics_reports_nothing_and_never_raises():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go():
        poller = MetricsPoller(f"http://127.0.0.1:{port}", 0.05, timeout_s=0.5)
        poller.start()
        await asyncio.sleep(0.2)
        return await poller.stop()

    level = run_sync(go())
    assert level.num_samples == 0 and level.num_failed_scrapes >= 2 and level.kv_usage_max is None


def test_fetch_from_nothing_is_a_one_line_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(KneecapError) as err:
        fetch_server_info(f"http://127.0.0.1:{port}", timeout_s=1)
    assert "--kv-tokens" in err.value.one_line()


def test_prefix_cache_hit_rate_is_the_level_delta_of_hits_over_lookups():
    def vllm(hits, queries):
        return (
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
        )

    def sglang(cached_device, cached_host, prompt):
        return (
            f'sglang:prompt_tokens_total{{model_name="m"}} {prompt}\n'
            f'sglang:cached_tokens_total{{model_name="m",cache_source="device"}} {cached_device}\n'
            f'sglang:cached_tokens_total{{model_name="m",cache_source="host"}} {cached_host}\n'
            'sglang:num_running_reqs{model_name="m"} 1\n'
        )

    level = summarize_samples([sample_from_text(vllm(100, 1000), 1.0), sample_from_text(vllm(3172, 4600), 2.0)])
    assert level.to_dict()["prefix_cache_hit_rate"] == pytest.approx(3072 / 3600)
    level = summarize_samples([sample_from_text(sglang(10, 0, 100), 1.0), sample_from_text(sglang(50, 20, 300), 2.0)])
    assert level.engine == "sglang" and level.prefix_cache_hit_rate == pytest.approx(60 / 200)
    idle = summarize_samples([sample_from_text(vllm(5, 50), 1.0), sample_from_text(vllm(5, 50), 2.0)])
    assert idle.prefix_cache_hit_rate is None  # no lookups in the level: no rate, not 0
