"""What a cell observed beyond latency: queue time, batch sizes, KV high-water mark, cancellations. Pure.

Sources: the simulator's per-step trace and its records' `extra.queue_s`, or a live server's
/metrics samples (kneecap.sweep.server_watch). Fields a source cannot observe are None, never 0.
"""

from __future__ import annotations

from kneecap.metrics.stats import distribution
from kneecap.records import CANCELLED, RequestRecord


def observe_cell(records: list[RequestRecord], trace: list[dict], server_metrics: dict | None) -> dict:
    recs = [r for r in records if not r.warmup]
    queue = [r.extra["queue_s"] * 1e3 for r in recs if (r.extra or {}).get("queue_s") is not None]
    out: dict = {
        "scheduled": len(recs),
        "completed": sum(1 for r in recs if r.ok),
        "cancelled": sum(1 for r in recs if r.status == CANCELLED),
        "prompt_tokens": sum(r.prompt_tokens or 0 for r in recs if r.ok),
        "output_tokens": sum(r.num_output_tokens for r in recs if r.ok),
        "queue_ms": distribution(queue) if queue else None,
    }
    if trace:
        total = sum(row["duration_s"] for row in trace) or 1.0
        sizes = [(row["num_prefill_seqs"] + row["num_decode_seqs"], row["duration_s"]) for row in trace]
        out["batch_size"] = {
            "mean_time_weighted": sum(n * d for n, d in sizes) / total,
            "max": max(n for n, _ in sizes),
            "steps": len(trace),
        }
        out["kv_blocks_high_water"] = max(row["kv_blocks_used"] for row in trace)
        out["queue_depth_max"] = max(row["num_waiting"] for row in trace)
    else:
        out.update(batch_size=None, kv_blocks_high_water=None, queue_depth_max=None)
    sm = server_metrics or {}
    out.update({key: sm.get(key) for key in ("kv_usage_max", "running_max", "waiting_max")})
    out["preemptions"] = sm.get("preemptions", sm.get("preemptions_delta"))
    out["spec"] = sm.get("spec")  # speculative decoding: drafts, accepted tokens, acceptance (None: not speculating)
    return out
