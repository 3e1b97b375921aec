"""The pure parts of bench's workloads: each level's work (kneecap.sweep.bench_workload), splitting it over
worker processes, a concurrency ramp's stream windows, trace blocks as prompts, --goodput and --isl specs."""

from __future__ import annotations

import json

import pytest

from kneecap.workload.ramps import user_windows
from kneecap.client.prompts import RandomTextPrompts, RandomTokenPrompts
from kneecap.errors import KneecapError
from kneecap.levels import sweep_levels
from kneecap.sweep.bench_workload import BenchWorkload, LevelWork, load_workload
from kneecap.sweep.level import LevelTask
from kneecap.metrics.goodput import parse_goodput
from kneecap.sweep.options import BenchOptions
from kneecap.workload.lengthspec import parse_length_flag
from kneecap.sweep.workers import split_task
from kneecap.workload import TRACE_BLOCK_TOKENS, RequestSpec
from kneecap.workload.multiturn import grow_prompt
from kneecap.workload.ramps import concurrency_schedule, parse_ramp

URL = "http://127.0.0.1:1"


def replay_opts(path, speeds=(1.0, 2.0)) -> BenchOptions:
    from kneecap.sweep.bench_workload import replay_schedule

    trace = replay_schedule(str(path), None, False)
    return BenchOptions(
        base_url=URL,
        replay=str(path),
        replay_speeds=speeds,
        trace_rate=trace.rate,
        replay_requests=len(trace.schedule),
        rate=tuple(s * trace.rate for s in speeds),
    )


def test_replay_levels_send_the_trace_at_each_speed_with_blocks_of_their_own(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": 1000 * i, "input_length": 600, "output_length": 4, "hash_ids": [7, 8 + i]}) + "\n"
            for i in range(4)
        )
    )
    opts = replay_opts(path)
    assert opts.trace_rate == 1.0 and opts.rate == (1.0, 2.0) and opts.level_label(2.0) == "replay x2"
    work = load_workload(opts, context_tokens=8192)
    slow, fast = (work.level(p, warmup=False) for p in sweep_levels(opts))
    assert slow.offsets == (0.0, 1.0, 2.0, 3.0) and fast.offsets == (0.0, 0.5, 1.0, 1.5)
    assert [s.input_tokens for s in slow.specs] == [600] * 4
    assert len({s.block_hashes[0] for s in slow.specs}) == 1  # hash id 7 everywhere within a level
    assert {s.block_hashes[0] for s in slow.specs}.isdisjoint({s.block_hashes[0] for s in fast.specs})


def test_trace_blocks_are_equal_prompts_where_hash_ids_are_equal():
    a = RequestSpec(index=1, request_id="a", class_name="t", input_tokens=700, output_tokens=1, block_hashes=(5, 6))
    b = RequestSpec(index=2, request_id="b", class_name="t", input_tokens=600, output_tokens=1, block_hashes=(5, 9))
    for source in (RandomTokenPrompts(salt="s"), RandomTextPrompts(salt="s")):
        pa, pb = source.prompt_for(a).content, source.prompt_for(b).content
        if isinstance(pa, str):
            pa, pb = pa.split(), pb.split()
        assert len(pa) == 700 and len(pb) == 600
        assert pa[:TRACE_BLOCK_TOKENS] == pb[:TRACE_BLOCK_TOKENS]  # the shared block
        assert pa[TRACE_BLOCK_TOKENS:600] != pb[TRACE_BLOCK_TOKENS:600]  # and nothing after it
    assert (
        RandomTokenPrompts(salt="other").prompt_for(a).content[:8]
        != RandomTokenPrompts(salt="s").prompt_for(a).content[:8]
    )


def test_split_task_keeps_each_request_with_its_time_and_each_turn_with_its_conversation():
    specs = tuple(
        RequestSpec(index=i, request_id=f"r{i}", class_name="x", input_tokens=1, output_tokens=1) for i in range(7)
    )
    task = LevelTask(level=0, kind="rate", value=4.0, specs=specs, epoch=0.0, offsets=tuple(0.1 * i for i in range(7)))
    shares = split_task(task, 3)
    pairs = sorted((s.index, t) for share in shares for s, t in zip(share.specs, share.offsets))
    assert pairs == [(i, pytest.approx(0.1 * i)) for i in range(7)]
    assert sum(share.value for share in shares) == pytest.approx(4.0)

    opts = BenchOptions(base_url=URL, concurrency=(2,), isl=10, osl=4, turns=3, requests=12)
    work = BenchWorkload(opts).level(sweep_levels(opts)[0], warmup=False)
    task = LevelTask(
        level=0, kind="concurrency", value=2, specs=work.specs, epoch=0.0, conversations=work.conversations
    )
    shares = split_task(task, 2)
    assert [share.value for share in shares] == [1, 1]
    for share in shares:
        ids = {c.conversation_id for c in share.conversations}
        assert {s.conversation_id for s in share.specs} == ids and len(share.specs) == 3 * len(ids)
    assert sorted(s.index for share in shares for s in share.specs) == [s.index for s in work.specs]


def test_a_concurrency_ramp_gives_each_stream_one_window():
    up = user_windows(concurrency_schedule(parse_ramp("linear:1:4:30")))
    assert up == [(0.0, None), (pytest.approx(10.0), None), (pytest.approx(20.0), None), (pytest.approx(30.0), None)]
    # falling: stream 4 stops when the target drops to 3 (10 s), stream 2 when it drops to 1 (30 s)
    down = user_windows(concurrency_schedule(parse_ramp("linear:4:1:30")))
    assert down == [(0.0, None), (0.0, pytest.approx(30.0)), (0.0, pytest.approx(20.0)), (0.0, pytest.approx(10.0))]


def test_conversations_plan_turns_the_runner_counts():
    opts = BenchOptions(base_url=URL, concurrency=(2,), isl=10, osl=4, turns=2, requests=8, warmup=2)
    plan = sweep_levels(opts)[0]
    work = BenchWorkload(opts).level(plan, warmup=False)
    assert isinstance(work, LevelWork) and len(work.conversations) == 4 and len(work.specs) == 8
    assert [(s.conversation_id, s.turn) for s in work.specs[:2]] == [("L0rc0", 1), ("L0rc0", 2)]
    warm = BenchWorkload(opts).level(plan, warmup=True)
    assert len(warm.conversations) == 1 and {s.index for s in warm.specs}.isdisjoint({s.index for s in work.specs})


def test_grow_prompt_keeps_every_earlier_token_a_prefix():
    assert grow_prompt((1, 2), [3], (4, 5)) == (1, 2, 3, 4, 5)
    text = grow_prompt("hello there", " answer", "next")
    assert text.startswith("hello there answer") and text.endswith("next")


def test_goodput_is_vllms_per_request_objectives_as_slo_terms():
    assert parse_goodput(["ttft:200", "tpot:50"]) == "ttft_max_ms=200,tpot_max_ms=50"
    assert parse_goodput(["ttft:200 e2el:1000"]) == "ttft_max_ms=200,e2e_max_ms=1000"
    for bad in (["ttft=200"], ["itl:20"], ["ttft"]):
        with pytest.raises(KneecapError, match="KEY:VALUE"):
            parse_goodput(bad)


def test_length_flags_take_a_number_or_a_distribution():
    assert parse_length_flag("--isl", "1000") == (1000, None)
    assert parse_length_flag("--isl", "uniform:100:300") == (200, "uniform:100:300")
    assert parse_length_flag("--osl", None) == (None, None)
    with pytest.raises(KneecapError, match="--isl"):
        parse_length_flag("--isl", "uniform:300:100")


def test_a_streams_cached_tokens_are_read_from_usage_prompt_tokens_details():
    from kneecap.client.openai import decode_stream

    last = (
        b'{"choices":[{"index":0,"text":"","finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":89,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":40}}}'
    )
    reads = [
        (0.1, [(None, b'{"choices":[{"index":0,"text":"a"}]}', None)]),
        (0.2, [(None, b'{"choices":[{"index":0,"text":"b"}]}', None), (None, last, None), (None, b"[DONE]", None)]),
    ]
    result = decode_stream(reads)
    assert result.cached_tokens == 40 and result.prompt_tokens == 89 and result.done
    assert decode_stream(reads[:1]).cached_tokens is None  # not reported: unknown, never 0
