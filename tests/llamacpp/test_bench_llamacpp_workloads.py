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
    result = cli("bench", "--base-url", llamacpp.base_url, "--model", llamacpp.model_path, "--out", str(out_dir),
                 "--json", "--quiet", "--no-report", *extra, timeout=240)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout), list(read_records(out_dir / "requests.jsonl"))


def test_replay_on_llamacpp_sends_rows_at_their_times_with_their_lengths(llamacpp, cli, tmp_path):
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 300 * i, "input_length": 100 + 10 * i, "output_length": 4 + i % 3,
             "hash_ids": [0, 1 + i]} for i in range(8)]
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
    summary, records = _bench(cli, llamacpp, tmp_path / "turns", "--concurrency", "2", "--turns", "3",
                              "--requests", "6", "--isl", str(isl), "--osl", "8", "--no-keepalive")
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
