"""/metrics of the simulated server in vLLM's Prometheus names (text exposition format 0.0.4).

Owns the metric names, types and help strings; the numbers come from RealtimeEngine. vllm:* names as vLLM V1
exports them (vllm/v1/metrics/loggers.py PrometheusStatLogger; vllm:kv_cache_usage_perc is a 0-1 fraction despite
the name; vllm:cache_config_info's labels are CacheConfig.metrics_info()); kneecap:* are this server's own.
"""

from __future__ import annotations


def _label_value(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(model_name: str, gauges: dict, counters, engine_name: str = "0") -> str:
    """The /metrics body. gauges: RealtimeEngine.gauges(); counters: ServerCounters."""
    labels = f'engine="{engine_name}",model_name="{_label_value(model_name)}"'
    rows = [
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", gauges["num_running"]),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", gauges["num_waiting"]),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", gauges["kv_usage"]),
        (
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "GPU KV-cache usage. 1 means 100 percent usage (deprecated alias).",
            gauges["kv_usage"],
        ),
        (
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            gauges["num_preemptions"],
        ),
        ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", counters.prompt_tokens_total),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            counters.generation_tokens_total,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix-cache queries, in tokens.",
            gauges.get("prefix_cache_queries_tokens", 0),
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix-cache hits, in tokens.",
            gauges.get("prefix_cache_hits_tokens", 0),
        ),
        (
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            counters.requests_finished_total,
        ),
        (
            "kneecap:requests_aborted_total",
            "counter",
            "Requests whose client went away before the end.",
            counters.requests_aborted_total,
        ),
        (
            "kneecap:lag_seconds",
            "gauge",
            "How far the simulated engine runs behind the wall clock (virtual s).",
            counters.lag_s,
        ),
        (
            "kneecap:lag_max_seconds",
            "gauge",
            "The largest lag behind the wall clock so far (virtual s).",
            counters.max_lag_s,
        ),
        ("kneecap:virtual_time_seconds", "gauge", "The simulated engine's clock.", gauges["virtual_s"]),
    ]
    if gauges.get("spec_tokens"):  # vllm/v1/spec_decode/metrics.py SpecDecodingProm, only when speculating
        rows += [
            ("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", gauges["spec_drafts"]),
            (
                "vllm:spec_decode_num_draft_tokens_total",
                "counter",
                "Number of draft tokens.",
                gauges["spec_drafts"] * gauges["spec_tokens"],
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                gauges["spec_accepted"],
            ),
        ]
    out = []
    for name, kind, help_text, value in rows:
        base = name[:-6] if kind == "counter" and name.endswith("_total") else name
        out.append(f"# HELP {base} {help_text}\n# TYPE {base} {kind}\n{name}{{{labels}}} {float(value)!r}\n")
    info = (
        f'block_size="{gauges["block_size"]}",cache_dtype="auto",enable_prefix_caching="{bool(gauges.get("prefix_caching"))}",'
        f'engine="{engine_name}",num_gpu_blocks="{gauges["num_kv_blocks"]}"'
    )
    out.append(
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{info}}} 1.0\n"
    )
    return "".join(out)
