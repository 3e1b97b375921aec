"""--export br: one level as an llm-d Benchmark Report (v0.2.1), the format llm-d-benchmark and inference-perf
write, so dashboards and comparisons built on it read kneecap's levels.

Pure: a level summary (metrics.summarize.summarize_level), its records and the sweep's facts in, a dict out; the
caller writes the file. Field names, nesting, units and enums follow the report's JSON Schema as its authors publish
it (`br_v0_2_json_schema.json` in the llmd-benchmark-report 0.2.1 package, Apache-2.0; a copy, with its source, is
in tests/sweep/data/br/). A report describes one point of a sweep: one file per level.

What goes where:
- run: a uid per level (a hash of the results folder's run and the level), an eid shared by the sweep's levels, the
  level's duration as ISO-8601.
- scenario.stack: one inference_engine component: the server as it said it was (bench), or kneecap's simulated
  engine with the deployment's GPU and parallelism (simulate); native.args holds the command line's flags.
- scenario.load: kneecap as the load generator: lengths, shared prefix, turns, and the level's rate or concurrency.
- results.request_performance.aggregate: request counts, input/output lengths (from the records), TTFT, TPOT, ITL
  and end-to-end latency (the level summary's statistics), token and request rates.
- results.observability: the server's KV usage, queue and preemptions over the level, where they were read.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Mapping

from kneecap.metrics import request as req
from kneecap.records import RequestRecord

BR_VERSION = "0.2.1"
ENGINE_LABEL = "engine-0"
# a level summary's distribution keys -> the report's Statistics keys
STAT_KEYS = {"mean": "mean", "min": "min", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _stats(dist: Mapping | None, units: str) -> dict | None:
    """A level summary's {mean, p50, ...} as the report's Statistics (None where nothing was measured)."""
    if not isinstance(dist, Mapping) or dist.get("mean") is None:
        return None
    out = {"units": units}
    out.update({ours: float(dist[key]) for key, ours in STAT_KEYS.items() if dist.get(key) is not None})
    return out


def _sample_stats(values: list[float], units: str) -> dict | None:
    """Statistics of a sample (numpy's linear percentiles, population stddev)."""
    import numpy as np

    if not values:
        return None
    a = np.asarray(values, dtype=float)
    out = {"units": units, "mean": float(a.mean()), "stddev": float(a.std()), "min": float(a.min())}
    for name, q in (
        ("p1", 1),
        ("p5", 5),
        ("p10", 10),
        ("p25", 25),
        ("p50", 50),
        ("p75", 75),
        ("p90", 90),
        ("p95", 95),
        ("p99", 99),
    ):
        out[name] = float(np.percentile(a, q))
    out["max"] = float(a.max())
    return out


def _seq_len(fixed: int | None, sample: list[float]) -> dict:
    """The report's SequenceLength: fixed when a flag set every request's length, else the sample's mean."""
    if fixed is not None:
        return {"distribution": "fixed", "value": int(fixed)}
    if not sample:
        return {"distribution": "other", "value": 0}
    return {
        "distribution": "other",
        "value": float(sum(sample) / len(sample)),
        "min": int(min(sample)),
        "max": max(1, int(max(sample))),
    }


def _iso_duration(seconds: float | None) -> str | None:
    return None if seconds is None else f"PT{float(seconds):.6f}S"


def _engine(sweep: Mapping) -> dict:
    """scenario.stack[0]: the server that was measured (bench) or the simulated deployment (simulate)."""
    dep, server = sweep.get("deployment") or {}, sweep.get("server") or {}
    simulated = sweep.get("kind") == "simulate"
    if simulated:
        tool, version = (
            f"kneecap-simulator ({(sweep.get('engine') or {}).get('defaults') or 'vllm'} defaults)",
            str(sweep.get("kneecap_version") or "unknown"),
        )
    else:
        tool, version = str(server.get("engine") or "unknown"), str(server.get("version") or "unknown")
    model = dep.get("model") or server.get("model_id") or sweep.get("model") or "unknown"
    tp, pp, ep = int(dep.get("tp") or 1), int(dep.get("pp") or 1), int(dep.get("ep") or 1)
    standardized = {
        "kind": "inference_engine",
        "tool": tool,
        "tool_version": version,
        "role": "replica",
        "replicas": 1,
        "model": {"name": str(model)},
        "accelerator": {
            "model": str(dep.get("gpu") or "unknown"),
            "count": int(dep.get("num_gpus") or 0),
            "parallelism": {"tp": tp, "pp": pp, "ep": ep, "dp": 1},
        },
    }
    description = (
        "kneecap's simulated engine in virtual time: no model executed, no GPU timed"
        if simulated
        else f"the server at the benchmarked endpoint, as it described itself ({tool} {version})"
    )
    return {
        "metadata": {"label": ENGINE_LABEL, "cfg_id": _digest(standardized), "description": description},
        "standardized": standardized,
        "native": {"args": sweep.get("flags") or {}},
    }


def _load(level: Mapping, sweep: Mapping, inputs: list[float], outputs: list[float]) -> dict:
    work = sweep.get("workload") or {}
    from_data = bool(work.get("dataset_requests") or work.get("replay_requests"))
    standardized: dict = {
        "tool": "kneecap",
        "tool_version": str(sweep.get("kneecap_version") or "unknown"),
        "source": "sampled" if from_data else "random",
        "input_seq_len": _seq_len(work.get("isl") if not work.get("isl_dist") else None, inputs),
        "output_seq_len": _seq_len(work.get("osl") if not work.get("osl_dist") else None, outputs),
    }
    if work.get("shared_prefix_tokens"):
        groups = int(work.get("num_prefix_groups") or 1)
        standardized["prefix"] = {
            "prefix_len": {"distribution": "fixed", "value": int(work["shared_prefix_tokens"])},
            "num_groups": groups,
            "num_users_per_group": 1,
            "num_prefixes": 1,
        }
    if work.get("turns"):
        standardized["multi_turn"] = {
            "enabled": True,
            "max_turns": {"distribution": "fixed", "value": int(work["turns"])},
        }
    if isinstance(level.get("rate"), (int, float)) and level["rate"] > 0 and level["rate"] != float("inf"):
        standardized["rate_qps"] = float(level["rate"])
    if isinstance(level.get("concurrency"), int) and level["concurrency"] >= 1:
        standardized["concurrency"] = int(level["concurrency"])
    return {
        "metadata": {
            "cfg_id": _digest(standardized),
            "description": f"kneecap {sweep.get('kind', 'sweep')} level {level.get('level')}",
        },
        "standardized": standardized,
        "native": {"args": dict(sweep.get("flags") or {})},
    }


def _observability(level: Mapping) -> dict | None:
    sm = level.get("server_metrics") or {}
    aggregate: dict = {}
    if sm.get("kv_usage_mean") is not None:
        kv = {"units": "percent", "mean": 100.0 * float(sm["kv_usage_mean"])}
        if sm.get("kv_usage_max") is not None:
            kv["max"] = 100.0 * float(sm["kv_usage_max"])
        aggregate["kv_cache_usage"] = kv
    if sm.get("prefix_cache_hit_rate") is not None:
        aggregate["cache_hit_rate"] = {"units": "percent", "mean": 100.0 * float(sm["prefix_cache_hit_rate"])}
    for ours, theirs in (("running", "running_requests"), ("waiting", "waiting_requests")):
        mean, peak = sm.get(f"{ours}_mean"), sm.get(f"{ours}_max")
        if mean is not None:  # the report's Statistics needs a mean: a peak alone is not reported
            aggregate[theirs] = {"units": "count", "mean": float(mean)}
            if peak is not None:
                aggregate[theirs]["max"] = float(peak)
    if sm.get("preemptions") is not None:
        aggregate["preemptions"] = {"units": "count", "mean": float(sm["preemptions"])}
    return {"components": [{"component_label": ENGINE_LABEL, "aggregate": aggregate}]} if aggregate else None


def to_benchmark_report(level: Mapping, records: Iterable[RequestRecord], sweep: Mapping) -> dict:
    """The level as an llm-d Benchmark Report v0.2.1 document.

    `sweep` holds the sweep's facts: kind (bench/simulate), run_id (unique to the sweep), started_at (ISO-8601),
    kneecap_version, flags ({flag: value} as typed), deployment / server / engine / workload as summary.json has them.
    Warmup records are left out, as in the summary.
    """
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    inputs = [float(req.input_tokens(r)) for r in ok]
    outputs = [float(r.num_output_tokens) for r in ok]
    duration = level.get("duration_s")
    rate = lambda key: (
        {"units": "tokens/s" if key != "request_s" else "queries/s", "mean": float(level[key])}
        if isinstance(level.get(key), (int, float))
        else None
    )
    latency = {
        "time_to_first_token": _stats(level.get("ttft_ms"), "ms"),
        "time_per_output_token": _stats(level.get("tpot_ms"), "ms/token"),
        "inter_token_latency": _stats(level.get("itl_ms"), "ms/token"),
        "request_latency": _stats(level.get("e2e_ms"), "ms"),
    }
    throughput = {
        "input_token_rate": rate("input_tok_s"),
        "output_token_rate": rate("output_tok_s"),
        "total_token_rate": rate("total_tok_s"),
        "request_rate": rate("request_s"),
    }
    requests = {
        "total": len(measured),
        "failures": len(measured) - len(ok),
        "input_length": _sample_stats(inputs, "count"),
        "output_length": _sample_stats(outputs, "count"),
    }
    run_time = {"start": sweep.get("started_at"), "duration": _iso_duration(duration)}
    simulated = sweep.get("kind") == "simulate"
    doc = {
        "version": BR_VERSION,
        "run": {
            "uid": _digest([sweep.get("run_id"), level.get("level")]),
            "eid": _digest(sweep.get("run_id")),
            "time": {k: v for k, v in run_time.items() if v is not None},
            "description": (
                f"kneecap {sweep.get('kind', 'sweep')}, level {level.get('level')}"
                + (" (simulated: no model executed)" if simulated else "")
            ),
            "keywords": ["kneecap", str(sweep.get("kind", "sweep"))] + (["simulated"] if simulated else []),
        },
        "scenario": {"stack": [_engine(sweep)], "load": _load(level, sweep, inputs, outputs)},
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": {k: v for k, v in requests.items() if v is not None},
                    "latency": {k: v for k, v in latency.items() if v is not None},
                    "throughput": {k: v for k, v in throughput.items() if v is not None},
                }
            }
        },
    }
    observability = _observability(level)
    if observability:
        doc["results"]["observability"] = observability
    return doc
