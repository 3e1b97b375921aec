"""kneecap.workload.traces: Mooncake JSONL and BurstGPT CSV replay, context check, hash-id block prompts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.workload import TRACE_BLOCK_TOKENS
from kneecap.workload.traces import parse_burstgpt, parse_mooncake, parse_trace, plan_replay, read_trace

DATA = Path(__file__).parent / "data"


def test_mooncake_head_parses_as_published():
    trace = read_trace(DATA / "mooncake_conversation_head.jsonl")
    assert trace.format == "mooncake" and len(trace.rows) == 6
    first = trace.rows[0]
    assert (first.timestamp_s, first.input_tokens, first.output_tokens) == (0.0, 6758, 500)
    # the published trace has one hash id per 512-token block: ceil(input_length / 512)
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / TRACE_BLOCK_TOKENS) for r in trace.rows)
    assert trace.rows[-1].timestamp_s == 3.0  # 3000 ms


def test_replay_offsets_scale_with_speed():
    trace = read_trace(DATA / "mooncake_conversation_head.jsonl")
    assert [t.send_at_s for t in plan_replay(trace).requests] == [0, 0, 0, 0, 0, 3.0]
    fast = plan_replay(trace, replay_speed=2.0)
    assert fast.requests[-1].send_at_s == 1.5
    assert [t.spec.input_tokens for t in fast.requests][:2] == [6758, 7322]
    with pytest.raises(KneecapError, match="replay speed"):
        plan_replay(trace, replay_speed=0)


def test_equal_hash_ids_give_equal_blocks_so_the_prefix_cache_hits():
    """The token-id prompts bench sends for a replayed trace (client.prompts.RandomTokenPrompts)."""
    from kneecap.client.prompts import RandomTokenPrompts

    specs = [t.spec for t in plan_replay(read_trace(DATA / "mooncake_conversation_head.jsonl")).requests]

    def ids(spec, seed=1):
        return RandomTokenPrompts(seed=seed).prompt_for(spec).content

    a, b = ids(specs[0]), ids(specs[1])
    assert len(a) == 6758 and len(b) == 7322  # exact input_length, last block partial
    assert a[:512] == b[:512]  # both start with hash id 0
    assert a[512:1024] != b[512:1024]  # hash ids 1 and 14 differ
    assert ids(specs[0]) == a  # deterministic
    assert ids(specs[0], seed=2)[:512] != a[:512]
    short = specs[5]  # 915 tokens over hash ids [0, 462]: one full block, one of 403
    s = ids(short)
    assert len(s) == 915 and s[:512] == a[:512]


def test_broken_mooncake_lines_name_file_and_line():
    good = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
    for bad, fragment in [
        ('{"timestamp": 5, "input_length": 10}', "lacks output_length"),
        ('{"timestamp": 5, "input_length": 10, "output_length": 2', "not valid JSON"),
        ('{"timestamp": -1, "input_length": 10, "output_length": 2}', "timestamp"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 2}', "input_length"),
        ('{"timestamp": 1, "input_length": 3, "output_length": 2, "hash_ids": ["a"]}', "hash_ids"),
    ]:
        with pytest.raises(KneecapError) as err:
            parse_mooncake(good + bad + "\n", "t.jsonl")
        assert "t.jsonl line 2" in err.value.one_line() and fragment in err.value.one_line()


def test_burstgpt_csv_columns_and_failures():
    trace = read_trace(DATA / "burstgpt_shape.csv")
    assert trace.format == "burstgpt"
    assert [(r.line, r.timestamp_s, r.input_tokens, r.output_tokens) for r in trace.rows][:3] == [
        (2, 5.0, 472, 18),
        (3, 45.0, 1087, 230),
        (4, 118.0, 417, 276),
    ]
    assert trace.failed_rows == (5,)  # 0 response tokens: BurstGPT's failed request
    assert [t.spec.input_tokens for t in plan_replay(trace).requests] == [472, 1087, 417, 20000]
    assert [t.send_at_s for t in plan_replay(trace, replay_speed=10).requests] == [0.0, 4.0, 11.3, 11.6]


def test_rows_longer_than_the_context_raise_unless_skipped():
    trace = read_trace(DATA / "burstgpt_shape.csv")
    with pytest.raises(KneecapError) as err:
        plan_replay(trace, max_context_tokens=16384)
    msg = err.value.one_line()
    assert "1 of 4 trace rows exceed the 16384-token context" in msg and "lines 6" in msg
    kept = plan_replay(trace, max_context_tokens=16384, skip_too_long=True)
    assert kept.too_long_lines == (6,) and len(kept.requests) == 3
    mooncake = read_trace(DATA / "mooncake_conversation_head.jsonl")
    with pytest.raises(KneecapError, match=r"4 of 6 trace rows .* lines 1, 2, 3, 5 of"):
        plan_replay(mooncake, max_context_tokens=4096)


def test_burstgpt_bad_rows_and_headers():
    header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    with pytest.raises(KneecapError, match="b.csv line 3"):
        parse_burstgpt(header + "5,ChatGPT,472,18,490,Conversation log\nsoon,ChatGPT,1,1,2,API log\n", "b.csv")
    with pytest.raises(KneecapError, match="no Timestamp column"):
        parse_burstgpt("Time,Request tokens,Response tokens\n1,2,3\n", "b.csv")
    with pytest.raises(KneecapError, match="line 2 has 3 fields"):
        parse_burstgpt(header + "1,2,3\n", "b.csv")
    assert parse_trace(header + "0.5,GPT-4,3,4,7,API log\n").rows[0].timestamp_s == 0.5
    with pytest.raises(KneecapError):
        read_trace(DATA / "missing.csv")


def _prompt_ids(spec, seed=0):
    from kneecap.client.prompts import RandomTokenPrompts

    return RandomTokenPrompts(seed=seed).prompt_for(spec).content


def _spec(index, input_tokens, hash_ids=()):
    from kneecap.workload import RequestSpec

    return RequestSpec(
        index=index,
        request_id=f"r{index}",
        class_name="trace",
        input_tokens=input_tokens,
        output_tokens=1,
        block_hashes=tuple(hash_ids),
    )


def test_burstgpt_prompts_share_nothing():
    specs = [t.spec for t in plan_replay(read_trace(DATA / "burstgpt_shape.csv")).requests]
    a, b = _prompt_ids(specs[0]), _prompt_ids(specs[1])
    assert len(a) == 472 and len(b) == 1087 and a[:16] != b[:16]


@settings(max_examples=60, deadline=None)
@given(
    shared=st.integers(0, 4),
    a_extra=st.integers(0, 3),
    b_extra=st.integers(0, 3),
    a_tail=st.integers(1, 512),
    b_tail=st.integers(1, 512),
    seed=st.integers(0, 50),
)
def test_property_shared_leading_hash_ids_mean_shared_leading_tokens(shared, a_extra, b_extra, a_tail, b_tail, seed):
    ids_a = list(range(shared)) + [100 + i for i in range(a_extra + 1)]
    ids_b = list(range(shared)) + [200 + i for i in range(b_extra + 1)]
    a = _spec(1, (len(ids_a) - 1) * 512 + a_tail, ids_a)
    b = _spec(2, (len(ids_b) - 1) * 512 + b_tail, ids_b)
    ta, tb = _prompt_ids(a, seed=seed), _prompt_ids(b, seed=seed)
    assert len(ta) == a.input_tokens and len(tb) == b.input_tokens
    n = shared * 512
    assert ta[:n] == tb[:n]
    assert ta[n : n + 16] != tb[n : n + 16]  # the first differing block differs from its first tokens
