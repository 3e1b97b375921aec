"""Pure arithmetic of the client comparison: per-token ITL, the server's own log, and the error a
client adds, request by request (pairs matched by prompt sha256). No processes, no sockets."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def per_token_gaps_ms(times_s: list[float], tokens: list[int]) -> list[float]:
    """Per-token ITL as docs/metrics.md defines `itl_ms`: a token-bearing chunk of k tokens arriving
    g after the previous one gives k samples of g/k; the first chunk gives none; chunks with no
    token are not boundaries. Used alike for every client and for the server's own log."""
    bearing = [(t, k) for t, k in zip(times_s, tokens) if k > 0]
    gaps: list[float] = []
    for (t0, _), (t1, k) in zip(bearing, bearing[1:]):
        gaps.extend([(t1 - t0) * 1000.0 / k] * k)
    return gaps


def server_side(log_path: Path, skip_first: int) -> dict:
    """Server TTFT (first send - request arrival) and per-token ITL from the server's own log."""
    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    rows = sorted((r for r in rows if r["complete"]), key=lambda r: r["id"])[skip_first:]
    ttft = [r["send_ms"][0] - r["recv_ms"] for r in rows if r["send_ms"]]
    itl = [g for r in rows for g in per_token_gaps_ms([t / 1000.0 for t in r["send_ms"]], r["tokens"])]
    return {"requests": len(rows), "ttft_ms": ttft, "itl_ms": itl, "rows": rows}


def paired_errors(client_requests: list[dict], server_rows: list[dict], clock: str) -> dict:
    """Match each finished client request to the server's log entry for the same prompt (sha256)
    and measure what the client added, request by request.

    TTFT error = client TTFT - server TTFT = send lag + receive lag, where send lag = server
    arrival - client send stamp and receive lag = client first-token stamp - server first send.
    The sum needs no common clock; the split does: with clock="monotonic" the client stamped
    CLOCK_MONOTONIC like the server; with "relative" (seconds since an unstated epoch) the offset
    (or wall-clock stamps: aiperf) is estimated as the smallest (arrival - send) over all pairs, so the split's send lags are
    measured from the fastest request's (a loopback trip, tens of microseconds).
    ITL error mean = (client streaming span - server streaming span) / (tokens - 1), summed over
    requests (span = first to last token-bearing chunk): how much the client stretches the stream
    per token, whatever the chunking. Its p1/p99 compare per-token gaps token by token, where both
    sides chunked the stream alike (a read that merges events changes the client's chunking).
    """
    by_sha: dict[str, dict] = {}
    for row in sorted(server_rows, key=lambda r: r["recv_ms"]):
        by_sha[row.get("prompt_sha256", "")] = row  # a repeated prompt (a ready check) keeps the latest
    pairs = [
        (c, by_sha[c["sha256"]])
        for c in client_requests
        if c.get("ok") and c.get("sha256") in by_sha and by_sha[c["sha256"]]["send_ms"]
    ]
    if not pairs:
        return {"paired": 0}
    if clock == "monotonic":  # the client stamped the server's clock
        offset_s = 0.0
    else:
        offset_s = min(s["recv_ms"] / 1000.0 - c["sent_s"] for c, s in pairs)
    ttft_err, send_lag, recv_lag, itl_diffs = [], [], [], []
    itl_client_sum = itl_server_sum = 0.0
    itl_n = 0
    for c, s in pairs:
        c_first = c["chunk_times_s"][0]
        s_recv, s_first = s["recv_ms"], s["send_ms"][0]
        ttft_err.append((c_first - c["sent_s"]) * 1000.0 - (s_first - s_recv))
        send_lag.append(s_recv - (c["sent_s"] + offset_s) * 1000.0)
        recv_lag.append((c_first + offset_s) * 1000.0 - s_first)
        # the streaming span (first to last token-bearing chunk) per token, on each side
        n_tokens = sum(s["tokens"])
        if n_tokens > 1:
            c_last = max(t for t, k in zip(c["chunk_times_s"], c["chunk_tokens"]) if k > 0)
            itl_client_sum += (c_last - c_first) * 1000.0
            itl_server_sum += s["send_ms"][-1] - s_first
            itl_n += n_tokens - 1
        c_gaps = per_token_gaps_ms(c["chunk_times_s"], c["chunk_tokens"])
        s_gaps = per_token_gaps_ms([t / 1000.0 for t in s["send_ms"]], s["tokens"])
        if len(c_gaps) == len(s_gaps):  # the same chunking on both sides: compare token by token
            itl_diffs.extend(a - b for a, b in zip(c_gaps, s_gaps))
    return {
        "paired": len(pairs),
        "clock": clock,
        "ttft_err_mean_ms": mean(ttft_err),
        "ttft_err_p50_ms": pct(ttft_err, 50),
        "ttft_err_p99_ms": pct(ttft_err, 99),
        "ttft_err_max_ms": max(ttft_err),
        "send_lag_mean_ms": mean(send_lag),
        "send_lag_p99_ms": pct(send_lag, 99),
        "recv_lag_mean_ms": mean(recv_lag),
        "recv_lag_p99_ms": pct(recv_lag, 99),
        "itl_err_mean_ms": (itl_client_sum - itl_server_sum) / itl_n if itl_n else float("nan"),
        "itl_err_p99_ms": pct(itl_diffs, 99),
        "itl_err_p1_ms": pct(itl_diffs, 1),
        "itl_tokens": itl_n,
        "itl_tokens_paired_one_to_one": len(itl_diffs),
    }


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))]


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")
