"""kneecap.workload.multiturn: conversations whose turn k prompt extends turn k-1's prompt and answer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.workload import LengthDist
from kneecap.workload.multiturn import (expected_turns, first_turn, new_input_ids, next_turn, plan_conversations,
                                        synthetic_answer)


def plan(**kw):
    args = dict(requests=48, turns=3, new_input=LengthDist.fixed(100), output=LengthDist.fixed(20), seed=7, think_time_s=1.5)
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


def test_turn_k_prompt_is_previous_prompt_plus_answer_plus_new_input():
    p = plan()
    conv = p.conversations[2]
    t1 = first_turn(p, conv)
    assert t1.spec.turn == 1 and t1.spec.conversation_id == "c2" and t1.think_time_s == 0.0
    assert t1.spec.input_tokens == 100 == len(t1.prompt_tokens)
    answer = [5, 6, 7]  # the server answered 3 tokens, not the 20 asked for: the real answer is what is appended
    t2 = next_turn(p, conv, t1, answer)
    assert t2.prompt_tokens[:100] == t1.prompt_tokens
    assert list(t2.prompt_tokens[100:103]) == answer
    assert list(t2.prompt_tokens[103:]) == new_input_ids(p, conv, 2)
    assert t2.spec.input_tokens == 203 and t2.spec.turn == 2 and t2.think_time_s == 1.5
    assert t2.spec.prefix_group == conv.index and t2.spec.prefix_tokens == 202
    t3 = next_turn(p, conv, t2, [9] * 20)
    assert t3.prompt_tokens[:203] == t2.prompt_tokens and t3.spec.input_tokens == 323
    assert next_turn(p, conv, t3, [1]) is None  # 3 turns only
    # global request indexes: conversation i's turns are 3i, 3i+1, 3i+2
    assert [t.spec.index for t in (t1, t2, t3)] == [6, 7, 8] and t2.spec.request_id == "r7"


def test_planner_is_pure_and_seeded():
    p = plan()
    conv = p.conversations[0]
    t1 = first_turn(p, conv)
    assert first_turn(p, conv) == t1
    assert next_turn(p, conv, t1, [1, 2]) == next_turn(p, conv, t1, [1, 2])
    assert first_turn(p, p.conversations[1]).prompt_tokens != t1.prompt_tokens  # conversations differ
    other_seed = plan(seed=8)
    assert first_turn(other_seed, other_seed.conversations[0]).prompt_tokens != t1.prompt_tokens
    with pytest.raises(KneecapError):
        next_turn(p, p.conversations[1], t1, [1])


def test_lengths_come_from_distributions():
    p = plan(requests=300, turns=3, new_input=LengthDist(kind="uniform", low=10, high=50),
             output=LengthDist(kind="uniform", low=1, high=9))
    ins = [x for c in p.conversations for x in c.new_input_tokens]
    assert min(ins) >= 10 and max(ins) <= 50 and len(set(ins)) > 10
    again = plan(requests=300, turns=3, new_input=LengthDist(kind="uniform", low=10, high=50),
                 output=LengthDist(kind="uniform", low=1, high=9))
    assert again == p


def test_context_limit_ends_a_conversation_early():
    p = plan(max_context_tokens=250)
    turns = expected_turns(p, p.conversations[0])
    # turn 1: 100 + 20 fits; turn 2: 100 + 20 + 100 = 220 prompt + 20 out = 240 fits; turn 3: 340 + 20 does not
    assert [t.spec.input_tokens for t in turns] == [100, 220]
    full = expected_turns(plan(), plan().conversations[0])
    assert [t.spec.input_tokens for t in full] == [100, 220, 340]
    assert len(synthetic_answer(p, p.conversations[0], 1)) == 20


@settings(max_examples=50, deadline=None)
@given(turns=st.integers(1, 6), conversations=st.integers(1, 4), seed=st.integers(0, 100),
       answers=st.lists(st.integers(0, 40), min_size=6, max_size=6))
def test_property_every_turn_extends_the_previous_prompt_and_answer(turns, conversations, seed, answers):
    p = plan_conversations(turns * conversations, turns, LengthDist(kind="uniform", low=1, high=30),
                           LengthDist(kind="uniform", low=1, high=30), seed=seed, think_time_s=0.5)
    for conv in p.conversations:
        t = first_turn(p, conv)
        seen = [t]
        while True:
            answer = list(range(answers[t.spec.turn - 1]))
            nxt = next_turn(p, conv, t, answer)
            if nxt is None:
                break
            assert nxt.prompt_tokens[:len(t.prompt_tokens) + len(answer)] == t.prompt_tokens + tuple(answer)
            assert nxt.spec.input_tokens == len(t.prompt_tokens) + len(answer) + conv.new_input_tokens[nxt.spec.turn - 1]
            seen.append(nxt)
            t = nxt
        assert [s.spec.turn for s in seen] == list(range(1, turns + 1))
        assert {s.spec.conversation_id for s in seen} == {conv.conversation_id}


def test_a_warmup_that_is_not_whole_conversations_names_warmup(cli, tmp_path):
    """--warmup counts turns as --requests does: the error names the flag that is wrong."""
    r = cli("simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--turns", "3", "--warmup", "8",
            "--requests", "9", "--concurrency", "2", "--out", str(tmp_path / "o"), "--no-report")
    assert r.code == 2 and "--warmup 8 is not a whole number of 3-turn conversations" in r.stderr, r.stderr
    assert "--requests" not in r.stderr.splitlines()[0].split("—")[0]
