"""Weka's agentic traces (KV-cache-tester format: a conversation whose sub-agents fan out and join) replayed on the
simulator and over HTTP against `kneecap serve`: every request sent, each one after every answer it waits for plus
its think time, sub-agents started together and the parent resumed only once all of them are done, the replay's lag
(scheduled vs sent) in summary.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.workload.agentic import MAX_THINK_S, parse_agentic
from kneecap.workload.traces import plan_replay, read_trace
from tests.clitools import run_cli

SAMPLE = Path(__file__).parent / "data" / "weka" / "trace_0010_head.json"


def _flat(entries: list) -> list[dict]:
    """The file's requests, sub-agents' included, each with its sub-agent path, in file order."""
    out = []
    for e in entries:
        out.extend(_flat(e["requests"]) if e["type"] == "subagent" else [e])
    return out


def test_a_conversation_parses_with_its_fan_out_and_join():
    raw = json.loads(SAMPLE.read_text())
    trace = read_trace(SAMPLE)
    assert trace.format == "weka" and trace.block_tokens == raw["block_size"] == 64
    assert len(trace.rows) == len(_flat(raw["requests"])) == 22
    replay = plan_replay(trace)
    by_id = {r.spec.request_id: r.spec for r in replay.requests}
    # the parent's request after three sub-agent markers waits for its own previous answer and all three sub-agents
    join = [s for s in by_id.values() if len(s.after_ids) == 4]
    assert len(join) == 1
    starts = [s for s in by_id.values() if s.after_ids == join[0].after_ids[:1]]
    assert len(starts) == 3  # the three sub-agents' first requests wait for the same parent answer
    assert all(s.think_s <= MAX_THINK_S for s in by_id.values())
    assert sum(1 for s in by_id.values() if not s.after_ids) == 1  # one conversation, one root


def test_local_hash_ids_of_two_conversations_are_different_blocks_and_global_ones_the_same():
    raw = json.loads(SAMPLE.read_text())
    local = parse_agentic([("a", raw), ("b", raw)], "two")
    first = {h for r in local.rows[:22] for h in r.hash_ids}
    second = {h for r in local.rows[22:] for h in r.hash_ids}
    assert first and not first & second
    shared = dict(raw, hash_id_scope="global")
    both = parse_agentic([("a", shared), ("b", shared)], "two")
    assert {h for r in both.rows[:22] for h in r.hash_ids} == {h for r in both.rows[22:] for h in r.hash_ids}


@pytest.mark.parametrize(
    "requests,needle",
    [
        ([{"type": "n", "in": 0, "out": 5}], "in must be a whole number"),
        ([{"type": "subagent"}], "needs its own requests list"),
        ([{"type": "n", "in": 5, "out": 5, "think_time": -1}], "think_time must be a number of seconds"),
    ],
)
def test_broken_requests_are_one_line_errors(requests, needle):
    with pytest.raises(KneecapError, match=needle):
        parse_agentic([("t.json", {"block_size": 64, "requests": requests})], "t.json")


def test_a_folder_of_conversations_with_other_block_sizes_is_refused(tmp_path):
    raw = json.loads(SAMPLE.read_text())
    (tmp_path / "a.json").write_text(json.dumps(raw))
    (tmp_path / "b.json").write_text(json.dumps(dict(raw, block_size=32)))
    with pytest.raises(KneecapError, match="different sizes"):
        read_trace(tmp_path)


def _check(folder: Path, speeds: list[float]) -> dict:
    """Every request of every level sent and answered, each after every answer it waits for plus its think time."""
    replay = plan_replay(read_trace(SAMPLE))
    index = {r.spec.request_id: i for i, r in enumerate(replay.requests)}
    recs = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    for lv, speed in enumerate(speeds):
        mine = [r for r in recs if r["level"] == lv]
        by_row = {int(r["request_id"].rsplit("r", 1)[1]) % 1_000_000: r for r in mine}
        assert len(by_row) == 22 and all(r["status"] == "ok" for r in mine), lv
        for i, timed in enumerate(replay.requests):
            waits = [by_row[index[a]]["end_at"] for a in timed.spec.after_ids]
            if waits:
                earliest = max(waits) + timed.spec.think_s / speed
                assert by_row[i]["sent_at"] >= earliest - 1e-6, (lv, i, by_row[i]["sent_at"], earliest)
    summary = json.loads((folder / "summary.json").read_text())
    for lv in summary["levels"]:
        assert lv["completed"] == 22 and lv["schedule_lag_ms"]["n"] == 22
        assert math.isfinite(lv["schedule_lag_ms"]["p99"])
    return summary


def test_simulated_replay_keeps_every_request_after_the_answers_it_waits_for(tmp_path):
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--replay",
        str(SAMPLE),
        "--replay-speed",
        "20,10000",  # at 10,000x the answers, not the trace's times, decide when each request goes
        "--out",
        str(tmp_path / "sim"),
        "--no-report",
        "--quiet",
    )
    assert r.code == 0, r.stderr
    _check(tmp_path / "sim", [20, 10000])


def test_bench_replay_on_kneecap_serve_keeps_every_request_after_the_answers_it_waits_for(tmp_path):
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--time-scale", "0.5"])
    try:
        r = run_cli(
            "bench",
            "--base-url",
            url,
            "--replay",
            str(SAMPLE),
            "--replay-speed",
            "1000",
            "--out",
            str(tmp_path / "bench"),
            "--no-report",
            "--quiet",
        )
    finally:
        stop_server(proc)
    assert r.code == 0, r.stderr
    summary = _check(tmp_path / "bench", [1000])
    assert summary["levels"][0]["schedule_lag_ms"]["p99"] >= 0


def test_the_docs_worked_example_runs(tmp_path):
    import re
    import shlex

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "traces.md").read_text()
    command = re.search(r"```bash\n(kneecap simulate [^`]*?weka[^`]*?)\n```", text, re.S).group(1).replace("\\\n", " ")
    args = shlex.split(command)[1:]
    args[args.index("--out") + 1] = str(tmp_path / "weka")
    args[args.index("--replay") + 1] = str(root / args[args.index("--replay") + 1])
    r = run_cli(*args, "--no-report", "--quiet")
    assert r.code == 0, r.stderr
    _check(tmp_path / "weka", [20, 10000])
