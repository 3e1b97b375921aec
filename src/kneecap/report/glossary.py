"""Each metric a report shows, defined once from named timestamps, with its unit.

The formulas follow kneecap's DESIGN.md command-line contract and docs/metrics.md (the
definitions kneecap.metrics computes): TTFT = first token − sent; TPOT = (E2E − TTFT) / (output tokens − 1);
ITL counts a chunk carrying k tokens as k tokens; throughput counts completed requests only.
"""

from __future__ import annotations

from kneecap.report.document import Definitions

# term -> (unit, definition)
TERMS: dict[str, tuple[str, str]] = {
    "TTFT": (
        "ms",
        "Time to first token = first_token_at − sent_at: from the request bytes leaving the client "
        "to the first generated token (reasoning tokens included) arriving.",
    ),
    "TTFT (answer)": ("ms", "first_answer_at − sent_at: time to the first non-reasoning (answer) token."),
    "ITL": (
        "ms",
        "Inter-token latency: the gap between consecutive token-bearing chunks of one stream, "
        "a chunk arriving g ms after the previous one and carrying k tokens counts as k tokens (k samples of g/k ms); "
        "pooled over all requests of a level.",
    ),
    "TPOT": (
        "ms",
        "Time per output token = (E2E − TTFT) / (output tokens − 1), per request; "
        "requests with one output token have none.",
    ),
    "E2E": ("ms", "End-to-end latency = end_at − sent_at: first request byte to last response byte."),
    "TTFT from scheduled": (
        "ms",
        "first_token_at − scheduled_at (open-loop levels): includes any wait before the "
        "client could send, so a stalled client cannot hide a queue.",
    ),
    "E2E from scheduled": ("ms", "end_at − scheduled_at (open-loop levels)."),
    "Schedule lag": ("ms", "sent_at − scheduled_at: how late the client itself sent the request."),
    "Chunk gap": ("ms", "Gap between consecutive token-bearing reads of one stream, not divided by tokens."),
    "Tokens per chunk": ("tokens", "How many output tokens one streamed chunk (socket read) carried."),
    "Output throughput": ("tok/s", "Output tokens of completed requests / the level's wall time (duration)."),
    "Input throughput": ("tok/s", "Prompt tokens of completed requests / the level's wall time."),
    "Total throughput": ("tok/s", "(prompt + output tokens of completed requests) / the level's wall time."),
    "Request throughput": ("req/s", "Completed requests / the level's wall time."),
    "Goodput": (
        "req/s",
        "Completed requests whose own TTFT, TPOT and E2E are each within the SLO's limit for "
        "that metric (the largest limit named for it, e.g. ttft_p99_ms=500 gives 500 ms) / the "
        "level's wall time. ITL and error-rate terms, and the statistic itself (p99 over the level), "
        "are judged on the level: see SLO verdict.",
    ),
    "Duration": ("s", "Wall time of one level: first request scheduled to last request finished."),
    "Requests / completed / failed": (
        "count",
        "Requests sent at the level; of them, finished with status ok; "
        "errored, timed out or cancelled (always counted, never dropped).",
    ),
    "pNN": ("same as the metric", "The NN-th percentile of the level's samples (p50 = median); n = sample count."),
    "Concurrency (C)": ("requests", "Closed loop: requests kept in flight; a new one is sent when one finishes."),
    "Rate": (
        "req/s",
        "Open loop: mean arrival rate of requests, sent on schedule whether or not earlier ones finished.",
    ),
    "Knee": ("—", "The load past which output throughput stops growing in proportion to load (saturation)."),
    "Preflight limit": (
        "requests",
        "The largest concurrency whose worst-case KV footprint (ISL+OSL per request) "
        "fits the KV pool, from the memory plan.",
    ),
    "Suspect level": (
        "—",
        "A level whose client was itself saturated (event-loop lag), so its latencies may "
        "measure the client rather than the server.",
    ),
    "KV usage": ("%", "Fraction of the server's KV-cache blocks in use (server metrics or simulator trace)."),
    "Queue depth": ("requests", "Requests waiting to be scheduled (not yet running)."),
    "Preemptions": ("count", "Running requests evicted from the KV cache to make room (recomputed or swapped later)."),
    "SLO": ("as stated", "Service-level objective, e.g. ttft_p99_ms=500: the p99 TTFT must stay at or under 500 ms."),
    "SLO verdict": (
        "—",
        "Per level: 'met' when every SLO term holds for the level's statistic (its p99 TTFT, p99 "
        "ITL, error rate...); otherwise each breached term with the level's value and the limit. "
        "A term with no data is a breach.",
    ),
    "KV bytes per token": ("bytes", "KV-cache bytes one token of one sequence occupies across all layers."),
    "KV pool": ("GiB", "HBM per GPU left for the KV cache = HBM − weights − overhead − fragmentation headroom."),
    "KV capacity": ("tokens", "Tokens the KV pool holds, counted in whole blocks."),
    "Max sequences": (
        "sequences",
        "Contiguous: pool / (max context × KV bytes per token). "
        "Paged: pool / (mean context × KV bytes per token), in whole blocks.",
    ),
    "Binding": ("—", "Which limit sets max concurrency: 'hbm' (the KV pool) or 'compute' (the batch cap)."),
    "Capacity region": (
        "loads",
        "The loads of one candidate/class/state at which every repetition met every "
        "budget and no limit was crossed; capacity is the highest load with every lower "
        "step also passing.",
    ),
    "Offered vs completed": (
        "req/s",
        "Offered = requests the load plan sent per second; completed = requests that "
        "finished ok per second. A system that drops requests must not look fast.",
    ),
    "Little's law": (
        "—",
        "L = λW: mean requests in flight = arrival rate × mean time in system; checked only on "
        "intervals a stability test accepts, flagged when it does not hold.",
    ),
    "Cost per 1M output tokens": (
        "$",
        "Self-hosted: $/GPU-hour × GPUs / (output tok/s at capacity × 3600 s) × 10^6. "
        "Managed endpoint: its declared $ per 1M output tokens.",
    ),
    "Δ": (
        "as the metric",
        "B − A at the same load; '%' is (B − A) / A. Higher is better for throughput, "
        "lower is better for latency and failures.",
    ),
}

SWEEP_TERMS = (
    "TTFT",
    "TTFT (answer)",
    "ITL",
    "TPOT",
    "E2E",
    "TTFT from scheduled",
    "E2E from scheduled",
    "Schedule lag",
    "Chunk gap",
    "Tokens per chunk",
    "Output throughput",
    "Input throughput",
    "Total throughput",
    "Request throughput",
    "Goodput",
    "Duration",
    "Requests / completed / failed",
    "pNN",
    "Concurrency (C)",
    "Rate",
    "Knee",
    "Preflight limit",
    "Suspect level",
    "KV usage",
    "Queue depth",
    "Preemptions",
    "SLO",
    "SLO verdict",
)
PLAN_TERMS = ("KV bytes per token", "KV pool", "KV capacity", "Max sequences", "Binding")
COMPARE_TERMS = ("Δ",) + SWEEP_TERMS
RUN_TERMS = ("Capacity region", "Offered vs completed", "Little's law", "Cost per 1M output tokens")


def glossary(terms: tuple[str, ...]) -> Definitions:
    """The glossary block for these terms, in the order given (each term once)."""
    return Definitions(items=tuple((t, *TERMS[t]) for t in dict.fromkeys(t for t in terms if t in TERMS)))
