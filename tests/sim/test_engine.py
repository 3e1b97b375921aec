"""Engine and scheduler: invariants after every step, budgets, FCFS, preemption, prefix caching, fast path, records."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit import (
    assert_fast_path_matches_step_by_step,
    check_blocks,
    check_engine,
    deployment,
    hybrid_model,
    run_checked,
    sim_of,
    spec,
    tiny_model,
)
from kneecap.sim.config import EngineConfig
from kneecap.sim.engine import Engine
from kneecap.sim.sweep import CLIENT_TURNAROUND_S, LevelSpec, simulate_level
from kneecap.workload import LengthDist, RequestClass, Workload, make_requests


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_blocks=st.integers(8, 60),
    max_seqs=st.integers(1, 6),
    budget=st.integers(4, 48),
    lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30), st.integers(0, 3)), min_size=1, max_size=14),
    gaps=st.lists(st.floats(0, 0.05), min_size=14, max_size=14),
    fast=st.booleans(),
    caching=st.booleans(),
    hybrid=st.booleans(),
)
def test_invariants_hold_after_every_step(num_blocks, max_seqs, budget, lengths, gaps, fast, caching, hybrid):
    cfg = EngineConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget, enable_prefix_caching=caching)
    engine = Engine(deployment(hybrid_model() if hybrid else None, block_size=4), cfg, num_blocks)
    if hybrid:
        assert engine.state_blocks > 0
    t, arrivals = 0.0, []
    for i, (isl, osl, group) in enumerate(lengths):
        t += gaps[i]
        prefix = min(8, isl - 1) if group else 0
        arrivals.append((t, spec(i, isl, osl, group if prefix else None, prefix)))
    records, outcomes = run_checked(engine, arrivals, max_steps=50 if fast else 1)
    assert sorted(r.request_id for r in records) == sorted(s.request_id for _, s in arrivals)
    for r in records:
        if r.ok:
            assert r.output_tokens == r.expected_output_tokens == len(r.token_times())
            assert r.sent_at <= r.first_token_at == r.token_times()[0] <= r.end_at == r.token_times()[-1]
            assert all(a < b for a, b in zip(r.token_times(), r.token_times()[1:]))
        else:
            assert r.error_kind == "kv_capacity"  # only requests larger than the whole pool fail
    check_blocks(engine.blocks)
    assert engine.blocks.num_free == num_blocks  # every block returns


def test_token_budget_and_decodes_first():
    engine = Engine(deployment(block_size=4), EngineConfig(max_num_seqs=8, max_num_batched_tokens=64), 1000)
    for i in range(3):
        engine.add_request(spec(i, 10, 5), 0.0)
    out = engine.step(0.0)
    assert out.prefill_tokens == 30 and out.decode_tokens == 0  # three whole prompts fit 64 tokens
    for i in range(3, 6):
        engine.add_request(spec(i, 100, 5), out.ended_at)
    out = engine.step(out.ended_at)
    # decodes of the first three go first (3 tokens), then one 61-token chunk of the queue head
    assert out.num_decode_seqs == 3 and out.decode_tokens == 3
    assert out.prefill_tokens == 61 and out.num_prefill_seqs == 1
    check_engine(engine)


def test_max_num_seqs_caps_the_batch():
    cfg = EngineConfig(max_num_seqs=2, max_num_batched_tokens=1000)
    engine = Engine(deployment(), cfg, 1000)
    for i in range(5):
        engine.add_request(spec(i, 10, 50), 0.0)
    out = engine.step(0.0)
    assert out.num_running == 2 and out.num_waiting == 3
    assert engine.stats.running_max == 2


def test_fcfs_admission_order():
    cfg = EngineConfig(max_num_seqs=1, max_num_batched_tokens=1000)
    engine = Engine(deployment(), cfg, 1000)
    for i in range(4):
        engine.add_request(spec(i, 10 + i, 3), 0.0)
    records, _ = run_checked(engine, [])
    assert [r.request_id for r in records] == ["r0", "r1", "r2", "r3"]


def test_preemption_takes_the_most_recent_and_requeues_it_first():
    # 4 blocks of 4 tokens: two 6-token prompts take 2 blocks each; the first decode past 8 tokens needs a fifth
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, enable_prefix_caching=False)
    engine = Engine(deployment(block_size=4), cfg, 4)
    engine.add_request(spec(0, 6, 8), 0.0)
    engine.add_request(spec(1, 6, 8), 0.0)
    records, outcomes = run_checked(engine, [])
    preempted = [rid for o in outcomes for rid in o.preempted]
    assert preempted and preempted[0] == "r1"  # the later admission is the victim
    by_id = {r.request_id: r for r in records}
    assert by_id["r0"].extra["preemptions"] == 0 and by_id["r1"].extra["preemptions"] >= 1
    assert by_id["r0"].end_at < by_id["r1"].end_at
    assert engine.stats.preemptions == len(preempted)
    assert all(r.ok and r.output_tokens == 8 for r in records)


def test_prefix_cache_hits_shared_prefix_blocks():
    cfg = EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096)
    engine = Engine(deployment(block_size=16), cfg, 1000)
    engine.add_request(spec(0, 200, 4, group=0, prefix=160), 0.0)
    first = engine.step(0.0)
    engine.add_request(spec(1, 200, 4, group=0, prefix=160), first.ended_at)
    engine.add_request(spec(2, 200, 4, group=1, prefix=160), first.ended_at)
    run_checked(engine, [], max_steps=1)
    # r1 found 10 blocks (160 tokens) of group 0; r2's group was never computed
    assert engine.blocks.hit_tokens == 160
    assert engine.blocks.query_tokens == 600
    assert engine.prefix_cache_hit_rate == pytest.approx(160 / 600)


def test_prefix_hit_shortens_prefill():
    wl = Workload(
        classes=(
            RequestClass(
                input=LengthDist.fixed(2000),
                output=LengthDist.fixed(10),
                shared_prefix_tokens=1900,
                num_prefix_groups=1,
            ),
        )
    )
    plain = Workload.fixed(2000, 10)
    d = deployment(model=tiny_model(total_params=8_000_000_000, active_params=8_000_000_000))
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=8192)
    lv = LevelSpec(concurrency=1, num_requests=20)
    shared = simulate_level(sim_of(d, cfg, 5000), wl, lv)
    unique = simulate_level(sim_of(d, cfg, 5000), plain, lv)
    ttft = lambda res: sorted(r.first_token_at - r.sent_at for r in res.records)[10]  # noqa: E731
    assert shared.server_metrics["prefix_cache_hit_rate"] > 0.85
    assert ttft(shared) < 0.5 * ttft(unique)


def test_request_larger_than_pool_fails_at_once():
    engine = Engine(deployment(block_size=16), EngineConfig(), 10)
    rec = engine.add_request(spec(0, 150, 20), 1.5)
    assert rec is not None and not rec.ok and rec.error_kind == "kv_capacity" and rec.end_at == 1.5
    assert not engine.has_work


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_blocks=st.integers(6, 40),
    lengths=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 40)), min_size=1, max_size=12),
    gaps=st.lists(st.floats(0, 0.05), min_size=12, max_size=12),
    fast=st.booleans(),
)
def test_forgetting_finished_steps_changes_no_record(num_blocks, lengths, gaps, fast):
    """`kneecap serve` drops the end times of steps no held request needs (bounded memory); the
    records, including those of preempted and requeued requests, must be exactly the same."""
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=32, enable_prefix_caching=False)
    arrivals = list(zip(itertools.accumulate(gaps), (spec(i, isl, osl) for i, (isl, osl) in enumerate(lengths))))
    runs = []
    for forget in (False, True):
        engine = Engine(deployment(block_size=4), cfg, num_blocks)
        records, _ = run_checked(engine, arrivals, max_steps=50 if fast else 1, forget_steps=forget)
        runs.append((sorted(records, key=lambda r: r.request_id), engine))
    (kept, full), (forgot, lean) = runs
    assert [r.to_dict() for r in kept] == [r.to_dict() for r in forgot]
    assert len(lean.step_end_at) == min(1, len(full.step_end_at))  # idle at the end: only the last step's end is kept


SLIDING = tiny_model(
    layer_types=("sliding_attention", "full_attention", "sliding_attention", "sliding_attention"), sliding_window=100
)  # 3 sliding + 1 full layers: a full group and 3 sliding groups of one layer


@pytest.mark.parametrize("model, tight", [(tiny_model(), 600), (SLIDING, 1500)], ids=["dense", "sliding-window"])
def test_fast_path_equals_exact_path(model, tight):
    # sliding-window groups free blocks within a run of decode steps: the run frees and takes them as the
    # step-by-step loop does (same blocks in use at every step, same preemptions)
    wl = Workload(
        classes=(
            RequestClass(
                input=LengthDist(kind="uniform", low=50, high=900),
                output=LengthDist(kind="uniform", low=5, high=400),
                shared_prefix_tokens=48,
                num_prefix_groups=2,
            ),
        )
    )
    d = deployment(model=model, block_size=16)
    cfg = EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024)
    for num_blocks in (20000, tight):  # plenty, and tight enough to preempt
        for lv in (LevelSpec(concurrency=24, num_requests=120), LevelSpec(rate=50.0, num_requests=120)):
            a = simulate_level(sim_of(d, cfg, num_blocks), wl, lv, seed=5, fast_path=True, trace=True)
            b = simulate_level(sim_of(d, cfg, num_blocks), wl, lv, seed=5, fast_path=False, trace=True)
            assert a.server_metrics == b.server_metrics
            assert [r.request_id for r in a.records] == [r.request_id for r in b.records]
            for ra, rb in zip(a.records, b.records):
                assert len(ra.token_times()) == len(rb.token_times())
                assert ra.token_times() == pytest.approx(rb.token_times(), rel=1e-12, abs=1e-9)
            assert len(a.trace) == len(b.trace)
            assert [row["kv_blocks_used"] for row in a.trace] == [row["kv_blocks_used"] for row in b.trace]
            if num_blocks == tight:
                assert a.server_metrics["preemptions"] > 0  # the tight pool really exercises preemption


def test_same_seed_same_records_different_seed_different():
    wl = Workload(
        classes=(
            RequestClass(
                input=LengthDist(kind="uniform", low=10, high=300), output=LengthDist(kind="uniform", low=5, high=100)
            ),
        )
    )
    d, cfg = deployment(), EngineConfig(max_num_seqs=16, max_num_batched_tokens=512)
    lv = LevelSpec(rate=20.0, num_requests=80)
    a = simulate_level(sim_of(d, cfg, 3000), wl, lv, seed=1)
    b = simulate_level(sim_of(d, cfg, 3000), wl, lv, seed=1)
    c = simulate_level(sim_of(d, cfg, 3000), wl, lv, seed=2)
    assert [r.to_dict() for r in a.records] == [r.to_dict() for r in b.records]
    assert [r.to_dict() for r in a.records] != [r.to_dict() for r in c.records]


def test_closed_loop_keeps_concurrency():
    d, cfg = deployment(), EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096)
    res = simulate_level(
        sim_of(d, cfg, 20000),
        Workload.fixed(100, 50),
        LevelSpec(concurrency=8, num_requests=40),
        trace=True,
        delivery_spread_s=0.0,
    )  # a slot sends again one turnaround after its own end
    assert len(res.records) == 40
    assert max(row["num_running"] + row["num_waiting"] for row in res.trace) == 8
    assert res.server_metrics["running_max"] == 8
    # each completion sends the next request one client turnaround later (it joins the step after the one in flight)
    ends = sorted(r.end_at for r in res.records)
    sends = sorted(r.sent_at for r in res.records)[8:]
    assert sends == pytest.approx([e + CLIENT_TURNAROUND_S for e in ends[: len(sends)]], abs=1e-12)

    # with mixed output lengths slots free while other sequences decode: the new request misses the step in flight
    from kneecap.workload import LengthDist, RequestClass

    mixed = Workload(
        classes=(RequestClass(input=LengthDist.fixed(100), output=LengthDist(kind="uniform", low=20, high=80)),)
    )
    res = simulate_level(sim_of(d, cfg, 20000), mixed, LevelSpec(concurrency=8, num_requests=40), trace=True)
    first_tokens = {r.request_id: r.first_token_at for r in res.records}
    steps = [(row["t"], row["t"] + row["duration_s"]) for row in res.trace]
    joined_later = 0
    for r in sorted(res.records, key=lambda r: r.sent_at)[8:]:
        in_flight = [end for start, end in steps if start < r.sent_at < end]  # a step already running (else idle)
        if in_flight:
            assert first_tokens[r.request_id] > in_flight[0]
            joined_later += 1
    assert joined_later > 0


def test_warmup_flagged_and_extra_fields():
    d, cfg = deployment(), EngineConfig()
    res = simulate_level(
        sim_of(d, cfg, 5000), Workload.fixed(64, 8), LevelSpec(concurrency=2, num_requests=6, warmup=2)
    )
    assert len(res.records) == 8
    assert sum(r.warmup for r in res.records) == 2
    for r in res.records:
        assert set(r.extra) >= {"preemptions", "queue_s"} and r.extra["queue_s"] >= 0
        assert len(r.token_times()) == 8 and r.prompt_tokens == 64
        assert [n for _, n, _ in r.token_runs] == [8] and r.chunk_times == r.chunk_tokens == []  # one run of steps


def test_step_with_nothing_to_do_returns_none():
    engine = Engine(deployment(), EngineConfig(), 100)
    assert engine.step(0.0) is None


def test_make_requests_compatibility():
    # the engine consumes kneecap.workload specs as they are
    specs = make_requests(Workload.fixed(30, 3), 4, seed=0)
    engine = Engine(deployment(), EngineConfig(), 100)
    records, _ = run_checked(engine, [(0.0, s) for s in specs])
    assert {r.request_id for r in records} == {s.request_id for s in specs}
    assert list(itertools.chain.from_iterable(r.chunk_tokens for r in records)) == [1] * 12


def test_abort_frees_blocks_and_returns_a_cancelled_record():
    engine = Engine(deployment(block_size=4), EngineConfig(max_num_seqs=1, max_num_batched_tokens=64), 100)
    engine.add_request(spec(0, 20, 50), 0.0)
    engine.add_request(spec(1, 20, 50), 0.0)
    out = engine.step(0.0)
    out = engine.step(out.ended_at)
    rec = engine.abort("r0", out.ended_at)
    assert rec.status == "cancelled" and rec.output_tokens == 2 and rec.end_at == out.ended_at
    queued = engine.abort("r1", out.ended_at)
    assert queued.status == "cancelled" and queued.first_token_at is None
    assert engine.abort("r9", 0.0) is None
    engine.add_request(spec(2, 20, 50), out.ended_at)
    assert engine.abort("r2").end_at == out.ended_at  # default time: the end of the last step
    check_engine(engine)
    assert engine.blocks.num_used == 0 and not engine.has_work


def test_engine_setup_matches_the_plan():
    from kneecap.plan.ledger import build_plan
    from kneecap.sim.setup import from_plan

    d = deployment(model=hybrid_model())
    plan = build_plan(d, context=4096)
    setup = from_plan(plan, defaults="sglang", max_num_seqs=7)
    engine = setup.new_engine()
    assert engine.blocks.num_blocks == plan.num_kv_blocks
    assert setup.config.name == "sglang" and setup.config.max_num_seqs == 7
    assert engine.state_blocks == setup.state_blocks_per_sequence > 0
    facts = setup.describe()
    assert facts["plan"]["num_kv_blocks"] == plan.num_kv_blocks and facts["engine"]["max_num_seqs"] == 7


def test_fast_path_never_skips_an_admission_the_budget_now_allows():
    # step 1 spends the whole budget on r0's prompt (queue blocked by the budget); from step 2 r0 only
    # decodes, so r1 must be admitted at once, not after a run of skipped decode steps
    cfg = EngineConfig(max_num_seqs=8, max_num_batched_tokens=64)
    runs = []
    for max_steps in (1, 1000):
        engine = Engine(deployment(block_size=16), cfg, 1000)
        engine.add_request(spec(0, 64, 100), 0.0)
        engine.add_request(spec(1, 64, 100), 0.0)
        records, _ = run_checked(engine, [], max_steps=max_steps)
        runs.append({r.request_id: (r.first_token_at, r.end_at) for r in records})
    assert runs[0].keys() == runs[1].keys() == {"r0", "r1"}
    for rid in runs[0]:
        assert runs[1][rid] == pytest.approx(runs[0][rid], rel=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_blocks=st.integers(10, 80),
    max_seqs=st.integers(1, 6),
    budget=st.integers(2, 64),
    lengths=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60), st.integers(0, 2)), min_size=1, max_size=10),
    gaps=st.lists(st.floats(0, 0.2), min_size=10, max_size=10),
    sglang=st.booleans(),
)
def test_fast_path_equals_step_by_step_on_random_workloads(num_blocks, max_seqs, budget, lengths, gaps, sglang):
    cfg = EngineConfig(
        max_num_seqs=max_seqs,
        max_num_batched_tokens=budget,
        **(
            {
                "init_new_token_ratio": 0.7,
                "min_new_token_ratio": 0.1,
                "new_token_ratio_decay": 0.01,
                "mixed_prefill_decode": False,
            }
            if sglang
            else {}
        ),
    )
    assert_fast_path_matches_step_by_step(lambda: Engine(deployment(block_size=4), cfg, num_blocks), lengths, gaps)


def test_a_prompt_that_fills_an_empty_pool_is_admitted_under_sglangs_reservation():
    # 14 blocks of 4 tokens; a 53-token prompt takes all 14, leaving no free block for SGLang's new_token_ratio x its
    # one output token: with nothing running, nothing would ever free memory, so it is admitted (it stalled before)
    cfg = EngineConfig(
        max_num_seqs=1,
        max_num_batched_tokens=53,
        init_new_token_ratio=0.7,
        min_new_token_ratio=0.1,
        new_token_ratio_decay=0.01,
    )
    for max_steps in (1, 10_000):
        engine = Engine(deployment(block_size=4), cfg, 14)
        records, _ = run_checked(engine, [(0.0, spec(0, 53, 1))], max_steps=max_steps)
        assert [(r.request_id, r.status) for r in records] == [("r0", "ok")]
