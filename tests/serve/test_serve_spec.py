"""`kneecap serve --spec-method ...`: the simulated engine speculates over HTTP as vLLM does: a step's kept tokens go
out in one chunk, /metrics carries vLLM's spec_decode counters, and `kneecap bench` reads the acceptance per level."""

from __future__ import annotations

import json

import pytest

from tests.clitools import run_cli

SPEC = ["--spec-method", "eagle", "--spec-tokens", "3", "--spec-acceptance", "0.7"]


@pytest.fixture(scope="module")
def spec_server():
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--time-scale", "0.2", *SPEC])
    yield url
    stop_server(proc)


def test_bench_sees_multi_token_chunks_and_the_acceptance(spec_server, tmp_path):
    out = tmp_path / "b"
    r = run_cli(
        "bench",
        "--base-url",
        spec_server,
        "--isl",
        "200",
        "--osl",
        "100",
        "--concurrency",
        "1,8",
        "--requests",
        "16",
        "--out",
        str(out),
        "--quiet",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    for lv in doc["levels"]:
        assert lv["token_mismatch"]["output_vs_chunks"] == 0 and lv["completed"] == 16
        assert lv["tokens_per_chunk"]["mean"] > 1.5  # a read holds a step's kept tokens (or several steps')
        spec = lv["spec"]
        # P(kept) per draft = (0.7 + 0.49 + 0.343) / 3 = 0.511; the mean step keeps 2.533 tokens
        assert spec["acceptance_rate"] == pytest.approx(0.511, abs=0.06)
        assert spec["mean_accepted_length"] == pytest.approx(2.533, abs=0.2)
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert all(sum(x["chunk_tokens"]) == x["output_tokens"] == 100 for x in recs)


def test_partial_spec_flags_are_one_line():
    r = run_cli("serve", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--spec-method", "eagle")
    assert r.code == 2 and "needs --spec-tokens and --spec-acceptance too" in r.stderr
