"""bench asks a server that looks like vLLM for usage in every chunk, so a chunk of several tokens
counts them all; a server not recognised as vLLM or SGLang is not sent the option.
(The real vLLM with --stream-interval 3: tests/vllm/test_vllm_chunks.py.)"""

from __future__ import annotations

import itertools
import json

import pytest

from servers.scripted import start_scripted_server


@pytest.fixture
def server():
    url, srv = start_scripted_server(tokens_per_chunk=3, reasoning_tokens=4, itl_s=0.02)
    yield url, srv
    srv.stop()


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_bench_counts_three_tokens_per_chunk_from_the_usage_of_each_chunk(cli, server, tmp_path, endpoint):
    url, srv = server
    out = tmp_path / "o"
    r = cli(
        "bench",
        "--base-url",
        url,
        "--endpoint",
        endpoint,
        "--isl",
        "16",
        "--osl",
        "10",
        "--concurrency",
        "1",
        "--requests",
        "3",
        "--out",
        str(out),
        "--json",
        "--no-report",
        "--quiet",
    )
    assert r.code == 0, r.stderr
    sent = [e for e in srv.log() if e.get("path", "").startswith("/v1/") and e["path"] != "/v1/models"]
    levels = [e["body"] for e in sent if e.get("body", {}).get("max_tokens") == 10]  # not the setup's checks
    assert len(levels) == 3 and all(
        b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True} for b in levels
    ), levels[:1]
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    recs = [x for x in recs if not x.get("warmup")]
    assert len(recs) == 3 and all(x["output_tokens"] == 10 for x in recs), recs
    for x in recs:  # chunks of 3, 3, 3, 1 (a late read may hold two of them: the running sums still fall on these)
        assert set(itertools.accumulate(x["chunk_tokens"])) <= {3, 6, 9, 10} and sum(x["chunk_tokens"]) == 10, x
    lv = json.loads(r.stdout)["levels"][0]
    assert lv["token_mismatch"]["output_vs_chunks"] == 0, lv["token_mismatch"]
    assert lv["itl_ms"]["n"] == sum(10 - x["chunk_tokens"][0] for x in recs) and lv["tokens_per_chunk"]["mean"] > 2
    if endpoint == "chat":  # 4 reasoning tokens first: the answer starts in the second chunk
        assert all(x["first_answer_at"] > x["first_token_at"] for x in recs)
