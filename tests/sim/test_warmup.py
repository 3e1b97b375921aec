"""A simulated level's warmup is its own phase, as bench runs it (kneecap.sweep.http_levels): a closed loop at
min(C, warmup) in flight (an open loop at the level's rate, with the level's arrival seed), run to its end on the
same engine; the measured requests then start as on a fresh engine (C at once, or their arrivals) from the moment
the warmup's last response is back, and find the prefix cache the warmup left."""

from __future__ import annotations

import pytest
from simkit import deployment, sim_of

from kneecap.sim.config import EngineConfig
from kneecap.sim.sweep import CLIENT_TURNAROUND_S, DELIVERY_SPREAD_S, LevelSpec, simulate_level
from kneecap.workload import LengthDist, RequestClass, Workload, arrival_offsets

CFG = EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096)


def _sim(prefix_caching: bool = True):
    import dataclasses

    return sim_of(deployment(), dataclasses.replace(CFG, enable_prefix_caching=prefix_caching), 20000)


def _split(records):
    return [r for r in records if r.warmup], [r for r in records if not r.warmup]


def _in_flight_max(records) -> int:
    """Most requests between their send and their end at once."""
    events = sorted([(r.sent_at, 1) for r in records] + [(r.end_at, -1) for r in records])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_a_closed_loop_warmup_runs_to_its_end_at_min_c_warmup_then_c_go_at_once():
    res = simulate_level(_sim(), Workload.fixed(300, 20), LevelSpec(concurrency=8, num_requests=24, warmup=5))
    warm, measured = _split(res.records)
    assert len(warm) == 5 and len(measured) == 24
    assert max(sum(1 for r in warm if r.sent_at == t) for t in {r.sent_at for r in warm}) == 5  # all 5 at once
    assert _in_flight_max(warm) == 5
    # the warmup is over (its last response back to its client) before the level sends anything
    last_end = max(r.end_at for r in warm)
    start = min(r.sent_at for r in measured)
    assert start > last_end
    # the k responses of the warmup's last step reach their clients one after another (delivery spread)
    k = sum(1 for r in warm if r.end_at == last_end)
    assert start == pytest.approx(last_end + (k - 1) * DELIVERY_SPREAD_S + CLIENT_TURNAROUND_S, abs=1e-12)
    assert sum(1 for r in measured if r.sent_at == start) == 8  # C at once, as bench's measured phase starts
    assert _in_flight_max(measured) == 8


def test_the_measured_level_is_the_fresh_one_shifted_when_the_warmup_leaves_nothing_behind():
    """Unique prompts and no prefix cache: after its warmup the engine is as fresh, so the measured requests see
    exactly what a level without a warmup sees, later by the warmup's length."""
    level = LevelSpec(concurrency=4, num_requests=12)
    fresh = simulate_level(_sim(prefix_caching=False), Workload.fixed(300, 20), level)
    warmed = simulate_level(
        _sim(prefix_caching=False), Workload.fixed(300, 20), LevelSpec(concurrency=4, num_requests=12, warmup=3)
    )
    _, measured = _split(warmed.records)
    t0 = min(r.sent_at for r in measured)

    def times(records, origin):
        return sorted((r.sent_at - origin, r.first_token_at - origin, r.end_at - origin) for r in records)

    got, want = times(measured, t0), times(fresh.records, 0.0)
    assert len(got) == len(want) == 12
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=1e-9)


def test_the_measured_requests_find_the_prefix_cache_the_warmup_left():
    shared = Workload(
        classes=(RequestClass(input=LengthDist.fixed(600), output=LengthDist.fixed(10), shared_prefix_tokens=512),)
    )
    cold = simulate_level(_sim(), shared, LevelSpec(concurrency=4, num_requests=4))
    warm = simulate_level(_sim(), shared, LevelSpec(concurrency=4, num_requests=4, warmup=1))
    assert all(r.extra["cached_tokens"] == 0 for r in cold.records)  # one wave at once: nothing cached yet
    _, measured = _split(warm.records)
    assert all(r.extra["cached_tokens"] >= 496 for r in measured)  # the prefix's full blocks, from the warmup
    ttft = sorted(r.first_token_at - r.sent_at for r in measured)
    assert max(ttft) < min(r.first_token_at - r.sent_at for r in cold.records)
    # the level's server metrics are its measured requests' (bench scrapes /metrics over the measured phase only)
    sm = warm.server_metrics
    assert sm["prefix_cache_queries_tokens"] == sum(r.prompt_tokens for r in measured)
    assert sm["prefix_cache_hits_tokens"] == sum(r.extra["cached_tokens"] for r in measured)


def test_an_open_loop_warmup_goes_at_the_level_rate_then_the_level_s_arrivals_from_its_end():
    rate, seed = 20.0, 4
    res = simulate_level(_sim(), Workload.fixed(200, 10), LevelSpec(rate=rate, num_requests=10, warmup=6), seed=seed)
    warm, measured = _split(res.records)
    assert sorted(r.scheduled_at for r in warm) == pytest.approx(arrival_offsets(rate, 6, 1.0, seed), abs=1e-12)
    start = max(r.end_at for r in warm) + CLIENT_TURNAROUND_S
    assert sorted(r.scheduled_at for r in measured) == pytest.approx(
        [start + a for a in arrival_offsets(rate, 10, 1.0, seed)], abs=1e-9
    )


def test_all_at_once_with_a_warmup():
    res = simulate_level(_sim(), Workload.fixed(200, 10), LevelSpec(all_at_once=True, num_requests=6, warmup=2))
    warm, measured = _split(res.records)
    assert len({r.sent_at for r in warm}) == len({r.sent_at for r in measured}) == 1
    assert min(r.sent_at for r in measured) > max(r.end_at for r in warm)
    assert {r.concurrency for r in res.records} == {6}


def test_a_duration_counts_from_the_measured_start():
    res = simulate_level(_sim(), Workload.fixed(200, 10), LevelSpec(concurrency=2, duration_s=0.5, warmup=4))
    warm, measured = _split(res.records)
    assert len(warm) == 4
    start = min(r.sent_at for r in measured)
    assert start > max(r.end_at for r in warm)
    last_sent = max(r.sent_at for r in measured)
    assert start + 0.4 < last_sent < start + 0.5  # it sent for the whole 0.5 s from its start, and no longer


def test_a_multi_turn_warmup_holds_whole_conversations_before_the_level():
    from kneecap.workload.multiturn import expected_turns, plan_conversations

    plan = plan_conversations(12, 3, LengthDist.fixed(40), LengthDist.fixed(5), seed=1)
    convs = tuple(tuple(t.spec for t in expected_turns(plan, c)) for c in plan.conversations)
    res = simulate_level(
        _sim(), Workload.fixed(40, 5), LevelSpec(concurrency=2, num_requests=6, warmup=6, conversations=convs)
    )
    warm, measured = _split(res.records)
    assert len(warm) == len(measured) == 6
    assert {r.conversation_id for r in warm}.isdisjoint({r.conversation_id for r in measured})
    assert _in_flight_max(warm) == 2
    assert min(r.sent_at for r in measured) > max(r.end_at for r in warm)
