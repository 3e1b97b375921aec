"""`kneecap bench --replay` and `--turns` against llama.cpp's real server (the tiny random-weight GGUF):
a trace's rows sent at their times with exactly their lengths, and conversations whose prompts grow by the
answers llama.cpp streamed (turned into token ids by llama.cpp's own /tokenize), each turn finding the earlier
prompt in llama.cpp's cache (its own per-request cached_tokens).

Depends on (other parts of kneecap): the `kneecap bench` command, kneecap.records.read_records.
"""

from __future__ import annotations

import json

import pytest

from kneecap.records import read_records

pytestmark = pytest.mark.slow

TIMER_RESOLUTION_S = 0.0015  # uvloop's timers fire on whole milliseconds


def _bench(cli, llamacpp, out_dir, *extra: str):
    result = cli(
        "bench",
        "--base-url",
        llamacpp.base_url,
        "--model",
        llamacpp.model_path,
        "--out",
        str(out_dir),
        "--json",
        "--quiet",
        "--no-report",
        *extra,
        timeout=240,
    )
    assert result.code == 0, result.stderr
    return json.loads(result.stdout), list(read_records(out_dir / "requests.jsonl"))


def test_replay_on_llamacpp_sends_rows_at_their_times_with_their_lengths(llamacpp, cli, tmp_path):
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"timestamp": 300 * i, "input_length": 100 + 10 * i, "output_length": 4 + i % 3, "hash_ids": [0, 1 + i]}
        for i in range(8)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary, records = _bench(cli, llamacpp, tmp_path / "replay", "--replay", str(trace), "--replay-speed", "2")
    level = summary["levels"][0]
    assert level["completed"] == 8 and level["failed"] == 0, level["errors"]
    worker = level["client"]["per_worker"][0]
    t0, lag_s = worker["started_at"], worker["schedule_lag_max_ms"] / 1000
    mine = sorted(records, key=lambda r: int(r.request_id.split("r")[-1]))
    for i, (r, row) in enumerate(zip(mine, rows)):
        assert r.prompt_tokens == row["input_length"] and r.output_tokens == row["output_length"], r
        assert r.scheduled_at - t0 == pytest.approx(0.15 * i, abs=1e-6)  # 300 ms apart, twice as fast
        assert -TIMER_RESOLUTION_S <= r.sent_at - r.scheduled_at <= lag_s + 1e-9


def test_turns_on_llamacpp_append_the_streamed_answer(llamacpp, cli, tmp_path):
    isl = 40
    summary, records = _bench(
        cli,
        llamacpp,
        tmp_path / "turns",
        "--concurrency",
        "2",
        "--turns",
        "3",
        "--requests",
        "6",
        "--isl",
        str(isl),
        "--osl",
        "8",
        "--no-keepalive",
    )
    assert summary["levels"][0]["completed"] == 6, summary["levels"][0]["errors"]
    convs: dict = {}
    for r in records:
        convs.setdefault(r.conversation_id, {})[r.turn] = r
    assert len(convs) == 2 and all(sorted(c) == [1, 2, 3] for c in convs.values())
    for turns in convs.values():
        assert turns[1].prompt_tokens == isl
        for k in (2, 3):
            r, before = turns[k], turns[k - 1]
            assert r.prompt_tokens == r.expected_input_tokens  # the server counted the ids kneecap sent
            grown = r.prompt_tokens - before.prompt_tokens - isl  # the answer's ids, as llama.cpp tokenized its text
            assert grown > 0, (r, before)
            assert r.sent_at >= before.end_at
            # llama.cpp says what its slot's cache held (usage.prompt_tokens_details.cached_tokens): at least the
            # whole earlier prompt. (The answer's ids come from re-tokenizing its text, which need not be the ids
            # the model generated, so the cache may stop at the answer.)
            assert r.extra["cached_tokens"] >= before.prompt_tokens, (r.extra, before.prompt_tokens)
        assert turns[1].extra["cached_tokens"] < isl


def test_dataset_on_llamacpp_takes_each_output_length_from_the_data(llamacpp, cli, tmp_path):
    import hashlib

    data = tmp_path / "prompts.jsonl"
    rows = [
        {"prompt": f"Question {i}: name {i + 2} colours of the rainbow, one per line.", "output_len": 3 + i % 4}
        for i in range(6)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary, records = _bench(
        cli,
        llamacpp,
        tmp_path / "data",
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--dataset",
        "jsonl",
        "--dataset-path",
        str(data),
        "--seed",
        "1",
    )
    level = summary["levels"][0]
    assert level["completed"] == 6 and level["failed"] == 0, level["errors"]
    by_hash = {hashlib.sha256(r["prompt"].encode()).hexdigest(): r for r in rows}
    for r in records:  # each request is one of the file's prompts (kept as its hash), at that row's output length
        row = by_hash[r.prompt_hash]
        assert r.prompt is None and r.output_tokens == r.expected_output_tokens == row["output_len"], r
        assert r.prompt_tokens and r.prompt_tokens > 5  # llama.cpp counted the text
    assert summary["workload"]["osl"] is None


def test_rate_ramp_and_length_distributions_on_llamacpp(llamacpp, cli, tmp_path):
    summary, records = _bench(
        cli,
        llamacpp,
        tmp_path / "ramp",
        "--rate",
        "1",
        "--ramp",
        "linear:2:8:3",
        "--isl",
        "uniform:20:60",
        "--osl",
        "uniform:2:6",
        "--seed",
        "4",
    )
    level = summary["levels"][0]
    assert level["failed"] == 0, level["errors"]
    rows = level["slices"]
    assert len(rows) == 10 and rows[0]["target_rate"] < rows[-1]["target_rate"]
    assert sum(row["requests"] for row in rows) == level["requests"] == len(records)
    assert {r.prompt_tokens for r in records} - set(range(20, 61)) == set()  # the server counted each drawn length
    assert len({r.prompt_tokens for r in records}) > 3
    assert all(2 <= r.output_tokens == r.expected_output_tokens <= 6 for r in records)


def test_find_max_on_llamacpp_answers_a_load_that_met_the_slo(llamacpp, cli, tmp_path):
    # the budget: four times this server's own TTFT at one request (its four slots queue requests past C=4)
    one, _ = _bench(
        cli, llamacpp, tmp_path / "one", "--concurrency", "1", "--requests", "6", "--isl", "64", "--osl", "16"
    )
    budget_ms = 4 * one["levels"][0]["ttft_ms"]["p50"]
    summary, _ = _bench(
        cli,
        llamacpp,
        tmp_path / "fm",
        "--concurrency",
        "1,64",
        "--requests",
        "16",
        "--isl",
        "64",
        "--osl",
        "16",
        "--slo",
        f"ttft_p50_ms={budget_ms:.3f}",
        "--find-max",
        "concurrency",
    )
    m = summary["max_load"]
    by_load = {lv["concurrency"]: lv for lv in summary["levels"]}
    assert len(summary["levels"]) == len(m["probes"]) >= 2
    assert m["value"] is not None and by_load[m["value"]]["ttft_ms"]["p50"] <= budget_ms
    if m["failed_at"] is not None:  # the next step up failed it, and says why: its TTFT, or its steady-state verdict
        failed = by_load[m["failed_at"]]
        st = failed.get("stability") or {}
        assert m["value"] < m["failed_at"]
        if failed["ttft_ms"]["p50"] > budget_ms:
            assert "ttft_p50_ms" in m["failed_because"]  # (after the level's verdict, when it has one)
        else:  # a 16-request level past the server's 4 slots can be too short to judge: that fails it too
            assert st.get("verdict") != "stable" or st.get("client_behind"), (m, failed)
            assert m["failed_because"].startswith(("client behind", str(st.get("verdict")))), m


def test_replay_on_llamacpp_equal_hash_ids_are_prefix_cache_hits(llamacpp, cli, tmp_path):
    # every row shares its first 512-token block (hash id 0) and has one of its own: llama.cpp's slot cache
    # (its own usage.prompt_tokens_details.cached_tokens) finds that block for every row after the first. It may find
    # a token or two more: a row's own block is drawn at random, and its first tokens can equal those its slot last
    # held (a clean-clone run logged 513 once), so the own block counts as matched only by that chance
    trace = tmp_path / "shared.jsonl"
    rows = [{"timestamp": 300 * i, "input_length": 600, "output_length": 4, "hash_ids": [0, 1 + i]} for i in range(6)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary, records = _bench(cli, llamacpp, tmp_path / "shared", "--replay", str(trace))
    assert summary["levels"][0]["completed"] == 6, summary["levels"][0]["errors"]
    mine = sorted(records, key=lambda r: r.scheduled_at)
    assert [r.prompt_tokens for r in mine] == [600] * 6
    cached = [r.extra.get("cached_tokens") for r in mine]
    assert cached[0] == 0 and all(512 <= c <= 516 for c in cached[1:]), cached
    # llama.cpp's /metrics has no prefix-cache counters: the level's hit rate is those counts over its prompt tokens
    sm = summary["levels"][0]["server_metrics"]
    assert sm["source"] == "prometheus" and sm["prefix_cache_hit_rate_source"] == "usage", sm
    assert sm["prefix_cache_hit_rate"] == pytest.approx(sum(cached) / (6 * 600), abs=1e-6)
