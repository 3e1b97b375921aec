"""kneecap against a real vLLM (CPU build) that streams several tokens per chunk and reasoning deltas.

The server (conftest.py `vllm_chunked`, flags in vllm_server.CHUNKED_ARGS): --stream-interval 3 (the first
token alone, then a chunk once 3 or more new tokens are out), ngram speculative decoding (a decode step that
accepts drafts emits up to 4 tokens, so a chunk can hold more than the interval) under greedy sampling, and
--reasoning-parser deepseek_r1 on the tiny Llama with <think> tokens: the random model's output streams as
`reasoning` deltas, until it happens to emit </think> (then `content`). Each test checks what vLLM itself
counted (usage, its speculative-decoding counters) against what the client measured per chunk.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from vllm_server import NUM_SPECULATIVE_TOKENS, SPEC_ACCEPTED, STREAM_INTERVAL

ISL, OSL = 40, 24  # the first token alone, then chunks of >= 3 (--stream-interval 3), the rest at the end


def records(out: Path) -> list[dict]:
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in recs if not r.get("warmup")]


def raw_chat_stream(server, max_tokens: int) -> list[dict]:
    """The chunks of one streamed chat request, as vLLM sent them (no kneecap code in between)."""
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": "abc abc abc"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    req = urllib.request.Request(
        server.base_url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        lines = resp.read().decode().splitlines()
    return [json.loads(x[6:]) for x in lines if x.startswith("data: ") and x != "data: [DONE]"]


def bench(cli, server, out: Path, endpoint: str) -> dict:
    accepted = server.metric(SPEC_ACCEPTED)
    r = cli(
        "bench",
        "--base-url",
        server.base_url,
        "--endpoint",
        endpoint,
        "--isl",
        str(ISL),
        "--osl",
        str(OSL),
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--out",
        str(out),
        "--json",
        "--no-report",
        timeout=600,
    )
    assert r.code == 0, r.stderr
    # the drafter's tokens were accepted during these levels: some decode steps emitted several tokens at once
    assert server.metric(SPEC_ACCEPTED) > accepted
    doc = json.loads(r.stdout)
    for lv in doc["levels"]:  # the acceptance the server counted over each level (its /metrics counters)
        spec = lv["spec"]
        assert spec["draft_tokens"] > 0 and 0 <= spec["accepted_tokens"] <= spec["draft_tokens"], spec
        assert spec["acceptance_rate"] == pytest.approx(spec["accepted_tokens"] / spec["draft_tokens"], abs=1e-6)
        assert 1 <= spec["mean_accepted_length"] <= NUM_SPECULATIVE_TOKENS + 1, spec
    return doc


def check_chunks(doc: dict, recs: list[dict]) -> None:
    """Per-chunk token counts exact (vLLM's usage), several tokens per chunk, one ITL sample per token."""
    assert len(recs) == 16 and all(x["status"] == "ok" for x in recs), [x["error_message"] for x in recs]
    for x in recs:
        assert sum(x["chunk_tokens"]) == x["output_tokens"] == OSL, x  # usage.completion_tokens, as vLLM counted
        assert max(x["chunk_tokens"]) > 1, x  # a socket read holds at least one 3-token chunk
    for lv in doc["levels"]:
        assert (lv["completed"], lv["failed"]) == (8, 0), lv
        assert lv["token_mismatch"]["output"] == lv["token_mismatch"]["output_vs_chunks"] == 0, lv["token_mismatch"]
        mine = [x for x in recs if x["concurrency"] == lv["concurrency"]]
        # itl_ms: one sample per token after the first token-bearing chunk (docs/metrics.md)
        assert lv["itl_ms"]["n"] == sum(OSL - x["chunk_tokens"][0] for x in mine), (lv["itl_ms"], mine)
        # one gap per read after the first; on a loaded machine a whole response can come in one read
        assert lv["chunk_gap_ms"]["n"] == sum(len(x["chunk_tokens"]) - 1 for x in mine) <= lv["itl_ms"]["n"]
        assert lv["tokens_per_chunk"]["mean"] > 1 and lv["tokens_per_chunk"]["max"] >= STREAM_INTERVAL, lv
    # No check that the streams came in several reads: how many pieces a stream comes in is the server's doing:
    # vLLM merges the deltas of a request its API server has not yet taken (v1/engine/output_processor.py in vLLM 0.32
    # RequestOutputCollector.put, "RequestOutputs are merged if the producer gets ahead of the consumer"), so on a
    # loaded machine every response of a level can come in one read (gaps 0: seen in a full CI run, with the client
    # of the previous release as well). Each level's gaps and ITL samples are checked against its reads above.


def test_vllm_streams_several_tokens_per_chunk_and_reasoning_deltas(vllm_chunked):
    """The server really does what the bench tests below rely on (read from its raw stream)."""
    n = 40
    accepted = vllm_chunked.metric(SPEC_ACCEPTED)
    chunks = raw_chat_stream(vllm_chunked, n)
    counts = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    steps = [b - a for a, b in zip([0, *counts], counts) if b > a]
    assert sum(steps) == n == chunks[-1]["usage"]["completion_tokens"], counts
    assert steps[0] == 1, counts  # the first token alone
    assert all(s >= STREAM_INTERVAL for s in steps[1:-1]), counts  # then a chunk per >= 3 new tokens
    # one token per decode step would make every such chunk exactly 3: a bigger one is a step that accepted
    # drafted tokens (at most NUM_SPECULATIVE_TOKENS + 1 a step), and vLLM counted them
    assert max(steps) > STREAM_INTERVAL, counts
    assert vllm_chunked.metric(SPEC_ACCEPTED) > accepted
    assert max(steps[1:-1]) <= STREAM_INTERVAL - 1 + NUM_SPECULATIVE_TOKENS + 1, counts
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[1].get("reasoning") and not deltas[1].get("content"), deltas  # the first token: reasoning


def test_bench_counts_every_token_of_multi_token_chunks_on_completions(cli, vllm_chunked, tmp_path):
    out = tmp_path / "completions"
    doc = bench(cli, vllm_chunked, out, "completions")
    recs = records(out)
    check_chunks(doc, recs)
    assert all(x["first_answer_at"] == x["first_token_at"] is not None for x in recs), recs  # no reasoning here
    summary = json.loads((out / "summary.json").read_text())
    assert all(lv["tokens_per_chunk"]["mean"] > 1 for lv in summary["levels"]), summary["levels"]


def test_bench_counts_reasoning_tokens_toward_ttft_and_itl_on_chat(cli, vllm_chunked, tmp_path):
    out = tmp_path / "chat"
    doc = bench(cli, vllm_chunked, out, "chat")
    recs = records(out)
    check_chunks(doc, recs)  # ITL: every token after the first chunk, reasoning tokens included
    assert all(x["first_token_at"] is not None for x in recs)
    # TTFT is the first reasoning token; the answer (after a random </think>, if any) is never earlier
    assert all(x["first_answer_at"] is None or x["first_answer_at"] >= x["first_token_at"] for x in recs), recs
    only_reasoning = [x for x in recs if x["first_answer_at"] is None]
    assert only_reasoning, "every response had an answer: the random model emitted </think> in all 16"
    for lv in doc["levels"]:
        mine = [x for x in recs if x["concurrency"] == lv["concurrency"]]
        assert lv["ttft_ms"]["n"] == 8  # every request, answered or not
        assert lv["ttft_answer_ms"]["n"] == sum(x["first_answer_at"] is not None for x in mine), lv["ttft_answer_ms"]
        if lv["ttft_answer_ms"]["n"] == 0:
            assert lv["ttft_answer_ms"]["mean"] is None
    summary = json.loads((out / "summary.json").read_text())
    assert all(lv["tokens_per_chunk"]["mean"] > 1 for lv in summary["levels"]), summary["levels"]


def test_tokens_per_chunk_is_one_on_the_default_server(cli, vllm, tmp_path):
    """Control: the session's default vLLM (--stream-interval 1) sends one token per chunk, counted so."""
    out = tmp_path / "o"
    r = cli(
        "bench",
        "--base-url",
        vllm.base_url,
        "--isl",
        str(ISL),
        "--osl",
        "6",
        "--concurrency",
        "1",
        "--requests",
        "4",
        "--out",
        str(out),
        "--json",
        "--no-report",
        timeout=300,
    )
    assert r.code == 0, r.stderr
    recs = records(out)
    assert recs and all(sum(x["chunk_tokens"]) == x["output_tokens"] == 6 for x in recs), recs
    lv = json.loads(r.stdout)["levels"][0]
    assert lv["itl_ms"]["n"] == sum(6 - x["chunk_tokens"][0] for x in recs)
    assert lv["tokens_per_chunk"]["mean"] == pytest.approx(6 * len(recs) / lv["tokens_per_chunk"]["n"])
