"""`kneecap bench` with the workloads users bring, against a real `kneecap serve` subprocess (its prefix cache
shows in server_metrics): a replayed trace, multi-turn conversations, a dataset with its own lengths, rate and
concurrency ramps, length distributions and vLLM's --goodput. The server is stopped by its PID."""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path

import pytest

from kneecap.cli.serve_process import start_server, stop_server

DATA = Path(__file__).resolve().parents[1] / "workload" / "data"
SERVER_ARGS = ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192"]
BLOCK = 512  # a trace's hash id stands for this many prompt tokens
CACHE_BLOCK = 16  # kneecap serve's KV block (the prefix cache hits whole blocks)
TIMER_RESOLUTION_S = 0.0015  # libuv (uvloop) timers fire on whole milliseconds, rounded either way


@pytest.fixture(scope="module")
def server():
    proc, url = start_server(SERVER_ARGS)
    try:
        yield url
    finally:
        assert stop_server(proc) == 0


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def write_trace(path: Path, rows: int, gap_ms: int, shared: bool) -> Path:
    """rows requests gap_ms apart, 1,200 tokens each: two shared 512-token blocks (or all distinct ids) + the rest."""
    lines = [
        {
            "timestamp": i * gap_ms,
            "input_length": 1200,
            "output_length": 8,
            "hash_ids": [0, 1, 100 + i] if shared else [3 * i, 3 * i + 1, 3 * i + 2],
        }
        for i in range(rows)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_replay_sends_each_row_at_its_time_and_equal_hash_ids_hit_the_prefix_cache(cli, server, tmp_path):
    trace = write_trace(tmp_path / "trace.jsonl", rows=12, gap_ms=250, shared=True)
    out = tmp_path / "replay"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--replay",
        str(trace),
        "--replay-speed",
        "1,2",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    s = summary(out)
    assert [lv["rate"] for lv in s["levels"]] == [4.0, 8.0]  # 11 gaps over 2.75 s = 4 req/s, then twice as fast
    assert s["workload"]["replay_requests"] == 12 and s["workload"]["replay_speeds"] == [1.0, 2.0]
    recs = records(out)
    for lv, speed in zip(s["levels"], (1.0, 2.0)):
        mine = sorted((x for x in recs if x["level"] == lv["level"]), key=lambda x: int(x["request_id"].split("r")[-1]))
        assert len(mine) == 12 and all(x["status"] == "ok" for x in mine)
        worker = lv["client"]["per_worker"][0]
        t0, lag_s = worker["started_at"], worker["schedule_lag_max_ms"] / 1000
        for i, x in enumerate(mine):
            assert x["scheduled_at"] - t0 == pytest.approx(i * 0.25 / speed, abs=1e-6)  # the trace's time
            # sent then, within the lag measured (uvloop's timers are whole milliseconds: a wake may come < 1 ms early)
            assert -TIMER_RESOLUTION_S <= x["sent_at"] - x["scheduled_at"] <= lag_s + 1e-9
            assert x["prompt_tokens"] == 1200 and x["output_tokens"] == 8
        assert lag_s < 0.25 / speed  # each row left before the next one was due
        # every row after the first finds the two shared 512-token blocks (whole 16-token cache blocks)
        expected = 11 * (2 * BLOCK // CACHE_BLOCK * CACHE_BLOCK) / (12 * 1200)
        assert lv["server_metrics"]["prefix_cache_hit_rate"] == pytest.approx(expected, abs=0.01)
        assert lv["server_metrics"]["prefix_cache_hit_rate_source"] == "prometheus"  # its own counters
        # and each response says what it found (usage.prompt_tokens_details.cached_tokens, as vLLM reports it)
        assert [x["extra"]["cached_tokens"] for x in mine] == [0] + [2 * BLOCK] * 11
    # the same trace with no hash id in common: nothing to reuse
    control = tmp_path / "control"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--replay",
        str(write_trace(tmp_path / "distinct.jsonl", 12, 250, False)),
        "--replay-speed",
        "2",
        "--out",
        str(control),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    assert summary(control)["levels"][0]["server_metrics"]["prefix_cache_hit_rate"] < 0.01


def test_replay_rows_past_the_context_stop_before_anything_or_are_skipped(cli, server, tmp_path):
    trace = tmp_path / "long.jsonl"
    trace.write_text(
        json.dumps({"timestamp": 0, "input_length": 100, "output_length": 8, "hash_ids": [1]})
        + "\n"
        + json.dumps({"timestamp": 100, "input_length": 9000, "output_length": 8, "hash_ids": list(range(18))})
        + "\n"
        + json.dumps({"timestamp": 200, "input_length": 100, "output_length": 8, "hash_ids": [2]})
        + "\n"
    )
    out = tmp_path / "stop"
    r = cli("bench", "--base-url", server, "--replay", str(trace), "--out", str(out), "--quiet", "--no-report")
    assert r.code == 2 and "exceed the 8192-token context" in r.stderr and "line" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()
    out = tmp_path / "skip"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--replay",
        str(trace),
        "--skip-too-long",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    assert "skipped 1 trace rows" in r.stderr and "lines 2" in r.stderr
    assert len(records(out)) == 2 and summary(out)["workload"]["skipped_too_long"] == 1


def test_turns_grow_the_prompt_by_the_answer_and_the_prefix_cache_sees_it(cli, server, tmp_path):
    out = tmp_path / "turns"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "2",
        "--turns",
        "3",
        "--requests",
        "6",
        "--isl",
        "1500",
        "--osl",
        "16",
        "--think-time-s",
        "0.05",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    recs = records(out)
    convs: dict = {}
    for x in recs:
        convs.setdefault(x["conversation_id"], {})[x["turn"]] = x
    assert len(convs) == 2 and all(sorted(c) == [1, 2, 3] for c in convs.values())
    for turns in convs.values():
        for k in (2, 3):  # turn k = turn k-1's prompt + its answer (as the server gave it) + 1,500 new tokens
            assert turns[k]["prompt_tokens"] == turns[k - 1]["prompt_tokens"] + turns[k - 1]["output_tokens"] + 1500
            assert turns[k]["sent_at"] - turns[k - 1]["end_at"] >= 0.05  # the think time
    # the cache holds each earlier prompt + answer: the hit rate is near its ceiling (whole blocks, no last token)
    most = sum(t[k]["prompt_tokens"] - 1500 for t in convs.values() for k in (2, 3)) / sum(
        t[k]["prompt_tokens"] for t in convs.values() for k in (1, 2, 3)
    )
    rate = summary(out)["levels"][0]["server_metrics"]["prefix_cache_hit_rate"]
    assert most - 0.02 < rate <= most + 1e-9
    assert summary(out)["workload"]["turns"] == 3
    # a fresh prompt as long as turn 3's takes longer to its first token than turn 3 with its history cached
    fresh = tmp_path / "fresh"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "1",
        "--requests",
        "3",
        "--isl",
        str(next(iter(convs.values()))[3]["prompt_tokens"]),
        "--osl",
        "16",
        "--out",
        str(fresh),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    ttft = lambda x: x["first_token_at"] - x["sent_at"]  # noqa: E731
    assert statistics.median(ttft(t[3]) for t in convs.values()) < statistics.median(ttft(x) for x in records(fresh))


def test_dataset_lengths_come_from_the_data_and_records_keep_hashes(cli, server, tmp_path):
    from kneecap.workload.datasets import estimate_tokens, read_dataset, sample_dataset

    path = DATA / "sharegpt_v3_shape.json"
    out = tmp_path / "data"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "2",
        "--requests",
        "4",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(path),
        "--seed",
        "3",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    sample = sample_dataset(read_dataset(path), 4, estimate_tokens, seed=3)  # simulate samples the same way
    recs = {int(x["request_id"].split("r")[-1]): x for x in records(out)}
    for i, want in enumerate(sample.requests):
        got = recs[i]
        assert got["expected_output_tokens"] == want.spec.output_tokens == got["output_tokens"]
        assert got["prompt"] is None and got["prompt_hash"] == hashlib.sha256(want.prompt.encode()).hexdigest()
    assert summary(out)["workload"]["dataset_requests"] == 4 and summary(out)["workload"]["osl"] is None
    kept = tmp_path / "kept"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--dataset",
        str(path),
        "--osl",
        "5",
        "--keep-prompts",
        "--seed",
        "3",
        "--out",
        str(kept),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    for x in records(kept):  # --osl replaces the data's output lengths; --keep-prompts keeps the text
        assert x["output_tokens"] == 5 and hashlib.sha256(x["prompt"].encode()).hexdigest() == x["prompt_hash"]


def test_rate_ramp_writes_slices_whose_load_follows_the_ramp(cli, server, tmp_path):
    out = tmp_path / "ramp"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--rate",
        "1",
        "--ramp",
        "linear:2:10:4",
        "--isl",
        "100",
        "--osl",
        "4",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    lv = summary(out)["levels"][0]
    assert lv["rate"] == 6.0  # the ramp's mean rate
    rows = lv["slices"]
    assert [row["index"] for row in rows] == list(range(10))
    assert [round(row["target_rate"], 6) for row in rows] == [round(2 + 8 * (k + 0.5) / 10, 6) for k in range(10)]
    assert sum(row["requests"] for row in rows) == lv["requests"]
    first, last = sum(row["requests"] for row in rows[:5]), sum(row["requests"] for row in rows[5:])
    assert last > first  # about 2x: 4..6 vs 6..10 req/s (a Poisson draw)


def test_concurrency_ramp_adds_streams_over_time(cli, server, tmp_path):
    out = tmp_path / "cramp"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "1",
        "--ramp",
        "linear:1:4:3",
        "--isl",
        "100",
        "--osl",
        "30",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    lv = summary(out)["levels"][0]
    rows = lv["slices"]
    assert len(rows) == 10 and rows[0]["target_concurrency"] == pytest.approx(1.15)
    assert rows[-1]["output_tok_s"] > rows[0]["output_tok_s"]  # four streams decode more than one
    t0 = lv["client"]["per_worker"][0]["started_at"]
    recs = records(out)
    assert max(x["sent_at"] for x in recs) - t0 <= 3.0 + 0.05  # nothing starts after the ramp's end (a stamp's slack)
    # the 4th stream starts when the target reaches 4, at 3 s: before 2 s at most 2 requests are in flight
    early = [x for x in recs if x["sent_at"] - t0 < 1.9]
    assert max(sum(1 for y in early if y["sent_at"] <= x["sent_at"] < y["end_at"]) for x in early) <= 2


def test_length_distributions_and_goodput(cli, server, tmp_path):
    from kneecap.workload import make_requests
    from kneecap.sweep.bench_workload import BenchWorkload
    from kneecap.sweep.options import BenchOptions

    out = tmp_path / "dist"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "2",
        "--requests",
        "12",
        "--isl",
        "uniform:100:300",
        "--osl",
        "normal:mean=8,std=2,min=2",
        "--goodput",
        "ttft:60000 tpot:60000",
        "--seed",
        "5",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    opts = BenchOptions(
        base_url="http://x",
        concurrency=(2,),
        isl=200,
        osl=8,
        isl_dist="uniform:100:300",
        osl_dist="normal:mean=8,std=2,min=2",
        seed=5,
    )
    want = make_requests(BenchWorkload(opts).workload(), 12, seed=5, start_index=0, id_prefix="L0r")
    got = {x["request_id"]: x for x in records(out)}
    assert len({w.input_tokens for w in want}) > 3
    for w in want:
        assert got[w.request_id]["prompt_tokens"] == w.input_tokens and 100 <= w.input_tokens <= 300
        assert got[w.request_id]["output_tokens"] == w.output_tokens >= 2
    s = summary(out)
    assert s["workload"]["isl"] is None and s["workload"]["isl_dist"] == "uniform:100:300"
    lv = s["levels"][0]
    assert lv["goodput"]["requests"] == 12 and lv["slo"]["met"] is True  # a minute each: every request is good
    assert s["slo"] == {"ttft_max_ms": 60000.0, "tpot_max_ms": 60000.0}


def test_until_stable_ends_a_level_once_its_p99s_settle_and_says_so(cli, server, tmp_path):
    out = tmp_path / "stable"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "4",
        "--duration",
        "40",
        "--until-stable",
        "0.2",
        "--stable-window-s",
        "1",
        "--isl",
        "100",
        "--osl",
        "20",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    lv = summary(out)["levels"][0]
    verdict = lv["stable_p99"]
    assert verdict["stable"] is True and lv["wall_s"] < 40  # ended well before the cap
    assert verdict["steady_state"] == "stable"  # on the steady-state rule every level is judged by, too
    for series in (verdict["ttft_p99_ms"], verdict["itl_p99_ms"]):  # the last 3 windows each moved < 20%
        assert len(series) == 4 and all(abs(b - a) / a < 0.2 for a, b in zip(series, series[1:]))
    # a tolerance no level meets: the level runs its whole --duration and says why it did not settle
    out = tmp_path / "never"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--concurrency",
        "2",
        "--duration",
        "4",
        "--until-stable",
        "0.000001",
        "--stable-window-s",
        "0.5",
        "--isl",
        "100",
        "--osl",
        "20",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    lv = summary(out)["levels"][0]
    assert lv["stable_p99"]["stable"] is False and lv["stable_p99"]["why"] and lv["wall_s"] >= 4


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ("--until-stable", "0.05", "--concurrency", "2", "--requests", "8", "--isl", "10", "--osl", "4"),
            "--duration",
        ),
        (("--replay", "/nonexistent/trace.jsonl"), "trace.jsonl"),
        (("--replay", str(DATA / "mooncake_conversation_head.jsonl"), "--rate", "2"), "--replay-speed"),
        (("--turns", "3", "--concurrency", "2", "--requests", "7", "--isl", "10", "--osl", "4"), "multiple of 3"),
        (("--turns", "2", "--rate", "2", "--requests", "4", "--isl", "10", "--osl", "4"), "closed loop"),
        (("--think-time-s", "1", "--concurrency", "2", "--isl", "10", "--osl", "4"), "--turns"),
        (("--ramp", "linear:1:4", "--rate", "1", "--isl", "10", "--osl", "4"), "KIND:START:END:SECONDS"),
        (("--ramp", "linear:1:4:10", "--isl", "10", "--osl", "4"), "--concurrency 1 or --rate 1"),
        (("--isl", "uniform:300:100", "--concurrency", "1", "--osl", "4"), "--isl"),
        (("--goodput", "ttft=200", "--concurrency", "1", "--isl", "10", "--osl", "4"), "KEY:VALUE"),
        (("--dataset", "sharegpt", "--concurrency", "1"), "--dataset-path"),
    ],
)
def test_bad_workload_flags_are_one_line(cli, server, tmp_path, args, needle):
    out = tmp_path / "bad"
    r = cli("bench", "--base-url", server, *args, "--out", str(out), "--quiet", "--no-report")
    assert r.code == 2, (r.code, r.stderr)
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "flag, text",
    [
        (
            "--replay",
            '{"timestamp": 0, "input_length": 10, "output_length": 4, "hash_ids": [0]}\n{"timestamp": 5, "input_len\n',
        ),
        ("--dataset", '{"prompt": "one", "output_len": 4}\n{"prompt": "two", "output_len": "four"}\n'),
    ],
)
def test_a_broken_line_in_a_trace_or_dataset_is_named_before_anything_is_sent(cli, server, tmp_path, flag, text):
    path = tmp_path / "broken.jsonl"
    path.write_text(text)
    out = tmp_path / "bad"
    extra = ("--replay-speed", "1") if flag == "--replay" else ("--concurrency", "1", "--requests", "2")
    r = cli("bench", "--base-url", server, flag, str(path), *extra, "--out", str(out), "--quiet", "--no-report")
    assert r.code == 2, (r.code, r.stderr)
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "broken.jsonl" in line and "line 2" in line, r.stderr
    assert not out.exists()  # stopped before the first level: nothing measured, nothing written


def test_replay_of_a_burstgpt_csv_sends_its_rows_at_their_times(cli, server, tmp_path):
    trace = tmp_path / "burst.csv"  # BurstGPT's columns; timestamps in seconds
    rows = [(0, 300, 6), (1, 420, 4), (3, 250, 8), (4, 500, 5)]
    trace.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        + "".join(f"{t},ChatGPT,{i},{o},{i + o},Conversation log\n" for t, i, o in rows)
    )
    out = tmp_path / "burst"
    r = cli(
        "bench",
        "--base-url",
        server,
        "--replay",
        str(trace),
        "--replay-speed",
        "4",
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    lv = summary(out)["levels"][0]
    worker = lv["client"]["per_worker"][0]
    t0, lag_s = worker["started_at"], worker["schedule_lag_max_ms"] / 1000
    mine = sorted(records(out), key=lambda x: int(x["request_id"].split("r")[-1]))
    assert len(mine) == 4 and all(x["status"] == "ok" for x in mine)
    for x, (t, i, o) in zip(mine, rows):
        assert x["scheduled_at"] - t0 == pytest.approx(t / 4, abs=1e-6)  # the trace's second, four times as fast
        assert -TIMER_RESOLUTION_S <= x["sent_at"] - x["scheduled_at"] <= lag_s + 1e-9
        assert (x["prompt_tokens"], x["output_tokens"]) == (i, o)
