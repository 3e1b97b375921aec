"""A scheduler one step ahead (SGLang's overlap event loop, EngineProfile.schedules_ahead): the batch of step n + 1 is
formed when step n starts, so a request that arrives while step n runs is prefilled in step n + 2; an idle engine
takes a new request at once."""

from __future__ import annotations

from dataclasses import replace

from simkit import deployment
from kneecap.sim.config import SGLANG_PROFILE, EngineConfig
from kneecap.sim.engine import Engine
from kneecap.sim.scheduler import BLOCKED_AHEAD
from kneecap.workload import RequestSpec


def _spec(i: int, isl: int, osl: int) -> RequestSpec:
    return RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=isl, output_tokens=osl)


def _engine(ahead: bool) -> Engine:
    cfg = EngineConfig(
        name="sglang",
        max_num_seqs=8,
        max_num_batched_tokens=4096,
        mixed_prefill_decode=False,
        profile=replace(SGLANG_PROFILE, schedules_ahead=ahead),
    )
    return Engine(deployment(block_size=16), cfg, 1000)


def _prefill_step_of_late_arrival(ahead: bool) -> tuple[int, str]:
    """r0 runs alone; r1 arrives in the middle of r0's second decode step. Which step (0-based) prefills r1, and
    why the step before it did not."""
    engine = _engine(ahead)
    engine.add_request(_spec(0, 64, 50), 0.0)
    ends = []
    out = engine.step(0.0)  # step 0: r0's prefill
    ends.append(out.ended_at)
    out = engine.step(out.ended_at)  # step 1: r0's first decode
    engine.add_request(_spec(1, 64, 5), (out.started_at + out.ended_at) / 2)
    blocked = ""
    for step in range(2, 6):
        out = engine.step(out.ended_at)
        if out.num_prefill_seqs:
            return step, blocked
        blocked = engine._last_blocked
    raise AssertionError("r1 never ran")


def test_a_request_arriving_during_a_step_waits_one_more_step_when_the_scheduler_runs_ahead():
    assert _prefill_step_of_late_arrival(ahead=False) == (2, "")  # the next step takes it
    assert _prefill_step_of_late_arrival(ahead=True) == (3, BLOCKED_AHEAD)  # step 2 was formed before it came


def test_an_idle_engine_takes_a_request_at_once():
    engine = _engine(ahead=True)
    engine.add_request(_spec(0, 64, 3), 0.0)
    out = engine.step(0.0)
    while out is not None:
        last = out.ended_at
        out = engine.step(out.ended_at)
    engine.add_request(_spec(1, 64, 3), last + 1.0)
    out = engine.step(last + 1.0)
    assert out.num_prefill_seqs == 1


def test_requests_queued_together_but_left_out_of_a_full_step_join_the_next():
    # the token budget holds one prompt a step; the second was queued with the first, so the loop already has it
    cfg = EngineConfig(
        name="sglang", max_num_seqs=8, max_num_batched_tokens=64, mixed_prefill_decode=False, profile=SGLANG_PROFILE
    )
    engine = Engine(deployment(block_size=16), cfg, 1000)
    engine.add_request(_spec(0, 64, 20), 0.0)
    engine.add_request(_spec(1, 64, 20), 0.0)
    out = engine.step(0.0)
    assert out.num_prefill_seqs == 1
    out = engine.step(out.ended_at)
    assert out.num_prefill_seqs == 1


def test_sglang_profile_schedules_ahead():
    assert SGLANG_PROFILE.schedules_ahead
