"""kneecap.workload.multiturn: conversations whose turn k prompt extends turn k-1's prompt and answer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.workload import LengthDist
from kneecap.workload.multiturn import expected_turns, plan_conversations


def plan(**kw):
    args = dict(
        requests=48, turns=3, new_input=LengthDist.fixed(100), output=LengthDist.fixed(20), seed=7, think_time_s=1.5
    )
    args.update(kw)
    return plan_conversations(**args)


def test_requests_count_turns():
    p = plan()
    assert len(p.conversations) == 16 and all(c.turns == 3 for c in p.conversations)
    assert [c.conversation_id for c in p.conversations[:3]] == ["c0", "c1", "c2"]
    with pytest.raises(KneecapError, match="not a whole number of 3-turn conversations"):
        plan(requests=50)
    with pytest.raises(KneecapError):
        plan(turns=0)
    with pytest.raises(KneecapError):
        plan(think_time_s=-1)


def test_turn_k_input_is_previous_input_plus_answer_plus_new_input():
    p = plan()
    conv = p.conversations[2]
    t1, t2, t3 = expected_turns(p, conv)
    assert t1.spec.turn == 1 and t1.spec.conversation_id == "c2" and t1.think_time_s == 0.0
    assert t1.spec.input_tokens == 100 and t1.spec.output_tokens == 20
    assert t2.spec.input_tokens == 220 and t2.spec.turn == 2 and t2.think_time_s == 1.5
    assert t2.spec.prefix_group == conv.index and t2.spec.prefix_tokens == 219
    assert t3.spec.input_tokens == 340 and t3.spec.prefix_tokens == 339
    # global request indexes: conversation i's turns are 3i, 3i+1, 3i+2
    assert [t.spec.index for t in (t1, t2, t3)] == [6, 7, 8] and t2.spec.request_id == "r7"


def test_planner_is_pure_and_seeded():
    lengths = dict(
        new_input=LengthDist(kind="uniform", low=10, high=90), output=LengthDist(kind="uniform", low=1, high=30)
    )
    p = plan(**lengths)
    assert plan(**lengths) == p and expected_turns(p, p.conversations[0]) == expected_turns(p, p.conversations[0])
    assert plan(seed=8, **lengths).conversations != p.conversations


def test_lengths_come_from_distributions():
    p = plan(
        requests=300,
        turns=3,
        new_input=LengthDist(kind="uniform", low=10, high=50),
        output=LengthDist(kind="uniform", low=1, high=9),
    )
    ins = [x for c in p.conversations for x in c.new_input_tokens]
    assert min(ins) >= 10 and max(ins) <= 50 and len(set(ins)) > 10
    again = plan(
        requests=300,
        turns=3,
        new_input=LengthDist(kind="uniform", low=10, high=50),
        output=LengthDist(kind="uniform", low=1, high=9),
    )
    assert again == p


@settings(max_examples=50, deadline=None)
@given(turns=st.integers(1, 6), conversations=st.integers(1, 4), seed=st.integers(0, 100))
def test_property_every_turn_extends_the_previous_prompt_and_answer(turns, conversations, seed):
    p = plan_conversations(
        turns * conversations,
        turns,
        LengthDist(kind="uniform", low=1, high=30),
        LengthDist(kind="uniform", low=1, high=30),
        seed=seed,
        think_time_s=0.5,
    )
    for conv in p.conversations:
        seen = expected_turns(p, conv)
        for t, nxt in zip(seen, seen[1:]):
            k = nxt.spec.turn
            assert (
                nxt.spec.input_tokens == t.spec.input_tokens + conv.output_tokens[k - 2] + conv.new_input_tokens[k - 1]
            )
            assert nxt.spec.prefix_tokens == nxt.spec.input_tokens - 1 and nxt.think_time_s == 0.5
        assert [s.spec.turn for s in seen] == list(range(1, turns + 1))
        assert {s.spec.conversation_id for s in seen} == {conv.conversation_id}


def test_a_warmup_that_is_not_whole_conversations_names_warmup(cli, tmp_path):
    """--warmup counts turns as --requests does: the error names the flag that is wrong."""
    r = cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--turns",
        "3",
        "--warmup",
        "8",
        "--requests",
        "9",
        "--concurrency",
        "2",
        "--out",
        str(tmp_path / "o"),
        "--no-report",
    )
    assert r.code == 2 and "--warmup 8 is not a whole number of 3-turn conversations" in r.stderr, r.stderr
    assert "--requests" not in r.stderr.splitlines()[0].split("—")[0]
