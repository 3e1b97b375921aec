"""--export br: one level as an llm-d Benchmark Report (v0.2.1), the format llm-d-benchmark and inference-perf
write, so dashboards and comparisons built on it read kneecap's levels.

Pure: a typed level summary (metrics.summary_model.LevelSummary), its records and the sweep's facts (ReportContext)
in, a dict out; the caller writes the file. Field names, nesting, units and enums follow the report's JSON Schema as its authors publish
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
from dataclasses import dataclass, field
from typing import Iterable

from kneecap.metrics import request as req
from kneecap.metrics.summary_model import (
    DeploymentFields,
    Distribution,
    EngineFields,
    LevelSummary,
    ServerFields,
    WorkloadFields,
)
from kneecap.records import RequestRecord

BR_VERSION = "0.2.1"
ENGINE_LABEL = "engine-0"
# a level summary's distribution keys -> the report's Statistics keys
STAT_KEYS = {"mean": "mean", "min": "min", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}


@dataclass(frozen=True)
class ReportContext:
    """The sweep's facts a report carries beside its level: kind (bench/simulate), run_id (unique to the sweep),
    started_at (ISO-8601), kneecap_version, flags ({flag: value} as typed), and the summary's deployment, server,
    engine and workload."""

    kind: str | None = None
    run_id: object = None
    started_at: str | None = None
    kneecap_version: str | None = None
    flags: dict = field(default_factory=dict)
    model: str | None = None
    deployment: DeploymentFields = field(default_factory=DeploymentFields)
    server: ServerFields = field(default_factory=ServerFields)
    engine: EngineFields = field(default_factory=EngineFields)
    workload: WorkloadFields = field(default_factory=WorkloadFields)


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _stats(dist: Distribution | None, units: str) -> dict | None:
    """A level summary's {mean, p50, ...} as the report's Statistics (None where nothing was measured)."""
    if dist is None or dist.mean is None:
        return None
    out = {"units": units}
    out.update({ours: float(getattr(dist, key)) for key, ours in STAT_KEYS.items() if getattr(dist, key) is not None})
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


def _engine(ctx: ReportContext) -> dict:
    """scenario.stack[0]: the server that was measured (bench) or the simulated deployment (simulate)."""
    dep, server = ctx.deployment, ctx.server
    simulated = ctx.kind == "simulate"
    if simulated:
        tool, version = (
            f"kneecap-simulator ({ctx.engine.defaults or 'vllm'} defaults)",
            str(ctx.kneecap_version or "unknown"),
        )
    else:
        tool, version = str(server.engine or "unknown"), str(server.version or "unknown")
    model = dep.model or server.model_id or ctx.model or "unknown"
    tp, pp, ep = int(dep.tp or 1), int(dep.pp or 1), int(dep.ep or 1)
    standardized = {
        "kind": "inference_engine",
        "tool": tool,
        "tool_version": version,
        "role": "replica",
        "replicas": 1,
        "model": {"name": str(model)},
        "accelerator": {
            "model": str(dep.gpu or "unknown"),
            "count": int(dep.num_gpus or 0),
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
        "native": {"args": ctx.flags or {}},
    }


def _load(level: LevelSummary, ctx: ReportContext, inputs: list[float], outputs: list[float]) -> dict:
    work = ctx.workload
    from_data = bool(work.dataset_requests or work.replay_requests)
    standardized: dict = {
        "tool": "kneecap",
        "tool_version": str(ctx.kneecap_version or "unknown"),
        "source": "sampled" if from_data else "random",
        "input_seq_len": _seq_len(work.isl if not work.isl_dist else None, inputs),
        "output_seq_len": _seq_len(work.osl if not work.osl_dist else None, outputs),
    }
    if work.shared_prefix_tokens:
        standardized["prefix"] = {
            "prefix_len": {"distribution": "fixed", "value": int(work.shared_prefix_tokens)},
            "num_groups": int(work.num_prefix_groups or 1),
            "num_users_per_group": 1,
            "num_prefixes": 1,
        }
    if work.turns:
        standardized["multi_turn"] = {"enabled": True, "max_turns": {"distribution": "fixed", "value": int(work.turns)}}
    if isinstance(level.rate, (int, float)) and level.rate > 0 and level.rate != float("inf"):
        standardized["rate_qps"] = float(level.rate)
    if isinstance(level.concurrency, int) and level.concurrency >= 1:
        standardized["concurrency"] = int(level.concurrency)
    return {
        "metadata": {
            "cfg_id": _digest(standardized),
            "description": f"kneecap {ctx.kind or 'sweep'} level {level.level}",
        },
        "standardized": standardized,
        "native": {"args": dict(ctx.flags or {})},
    }


def _observability(level: LevelSummary) -> dict | None:
    sm = level.server_metrics
    if sm is None:
        return None
    aggregate: dict = {}
    if sm.kv_usage_mean is not None:
        kv = {"units": "percent", "mean": 100.0 * float(sm.kv_usage_mean)}
        if sm.kv_usage_max is not None:
            kv["max"] = 100.0 * float(sm.kv_usage_max)
        aggregate["kv_cache_usage"] = kv
    if sm.prefix_cache_hit_rate is not None:
        aggregate["cache_hit_rate"] = {"units": "percent", "mean": 100.0 * float(sm.prefix_cache_hit_rate)}
    for mean, peak, theirs in (
        (sm.running_mean, sm.running_max, "running_requests"),
        (sm.waiting_mean, sm.waiting_max, "waiting_requests"),
    ):
        if mean is not None:  # the report's Statistics needs a mean: a peak alone is not reported
            aggregate[theirs] = {"units": "count", "mean": float(mean)}
            if peak is not None:
                aggregate[theirs]["max"] = float(peak)
    if sm.preemptions is not None:
        aggregate["preemptions"] = {"units": "count", "mean": float(sm.preemptions)}
    return {"components": [{"component_label": ENGINE_LABEL, "aggregate": aggregate}]} if aggregate else None


def to_benchmark_report(level: LevelSummary, records: Iterable[RequestRecord], ctx: ReportContext) -> dict:
    """The level as an llm-d Benchmark Report v0.2.1 document; warmup records are left out, as in the summary."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    inputs = [float(req.input_tokens(r)) for r in ok]
    outputs = [float(r.num_output_tokens) for r in ok]
    duration = level.duration_s
    rate = lambda key: (
        {"units": "tokens/s" if key != "request_s" else "queries/s", "mean": float(getattr(level, key))}
        if isinstance(getattr(level, key), (int, float))
        else None
    )
    latency = {
        "time_to_first_token": _stats(level.ttft_ms, "ms"),
        "time_per_output_token": _stats(level.tpot_ms, "ms/token"),
        "inter_token_latency": _stats(level.itl_ms, "ms/token"),
        "request_latency": _stats(level.e2e_ms, "ms"),
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
    run_time = {"start": ctx.started_at, "duration": _iso_duration(duration)}
    simulated = ctx.kind == "simulate"
    kind = ctx.kind or "sweep"
    doc = {
        "version": BR_VERSION,
        "run": {
            "uid": _digest([ctx.run_id, level.level]),
            "eid": _digest(ctx.run_id),
            "time": {k: v for k, v in run_time.items() if v is not None},
            "description": (
                f"kneecap {kind}, level {level.level}" + (" (simulated: no model executed)" if simulated else "")
            ),
            "keywords": ["kneecap", kind] + (["simulated"] if simulated else []),
        },
        "scenario": {"stack": [_engine(ctx)], "load": _load(level, ctx, inputs, outputs)},
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
