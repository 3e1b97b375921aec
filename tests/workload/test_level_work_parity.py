"""`kneecap bench` and `kneecap simulate` translate the same workload flags into the same levels: for the same
flags and seed, each level asks for the same request lengths, prompt token blocks and send offsets (the one
translation, kneecap.workload.level_work). The simulated side is checked twice: what its level asks for
(level_spec) and what the simulated engine was sent (its records)."""

from __future__ import annotations

import json

import pytest

from kneecap.levels import sweep_levels
from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver, level_spec
from kneecap.sim.setup import from_plan
from kneecap.sweep.bench_workload import BenchWorkload, load_workload, replay_schedule
from kneecap.sweep.options import BenchOptions
from kneecap.workload import arrival_offsets
from kneecap.workload.ramps import parse_ramp

URL = "http://127.0.0.1:1"


@pytest.fixture(scope="module")
def sim():
    from kneecap.deployment import Deployment
    from kneecap.hardware import get_gpu
    from kneecap.model.spec import Model
    from kneecap.plan.ledger import build_plan

    model = Model(
        name="tiny",
        source="test",
        architecture="LlamaForCausalLM",
        num_hidden_layers=4,
        hidden_size=1024,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=32000,
        layer_types=("full_attention",) * 4,
        total_params=1_000_000_000,
        active_params=1_000_000_000,
    )
    return from_plan(build_plan(Deployment(model=model, gpu=get_gpu("h100-sxm")), context=8192))


def asked(specs):
    """What a list of requests asks for: lengths, shared-prefix group and length, trace blocks."""
    return [(s.input_tokens, s.output_tokens, s.prefix_group, s.prefix_tokens, s.block_hashes) for s in specs]


def bench_level(opts: BenchOptions, workload: BenchWorkload, plan):
    """bench's warmup + measured work of a level, as its level driver is handed them."""
    return workload.level(plan, warmup=True), workload.level(plan, warmup=False)


@pytest.mark.parametrize("kind", ["concurrency", "rate"])
def test_lengths_prefix_groups_and_arrivals_are_the_same(sim, kind):
    levels = (2, 5) if kind == "concurrency" else (3.0, 7.0)
    bench = BenchOptions(
        base_url=URL,
        isl=600,
        osl=40,
        requests=12,
        warmup=3,
        seed=11,
        shared_prefix_tokens=100,
        num_prefix_groups=4,
        **{kind: levels},
    )
    simo = SimulateOptions(
        kind=kind,
        levels=levels,
        isl=600,
        osl=40,
        requests=12,
        warmup=3,
        seed=11,
        shared_prefix_tokens=100,
        num_prefix_groups=4,
    )
    driver = VirtualTimeDriver(sim, simo)
    for bp, sp in zip(sweep_levels(bench), sweep_levels(simo)):
        warm, work = bench_level(bench, BenchWorkload(bench), bp)
        spec = level_spec(simo, sp)
        assert len(work.specs) == 12 and len(warm.specs) == 3
        assert asked(spec.specs) == asked(warm.specs + work.specs)
        assert [s.request_id for s in spec.specs] == [s.request_id for s in warm.specs + work.specs]
        assert len({s.prefix_group for s in work.specs}) > 1  # the seed draws the groups: they must match
        records = driver.run_level(sp, keep=lambda r: None).records
        by_id = {r.request_id: r for r in records}
        assert {s.request_id: (s.input_tokens, s.output_tokens) for s in warm.specs + work.specs} == {
            i: (r.expected_input_tokens, r.expected_output_tokens) for i, r in by_id.items()
        }
    # rate levels: bench's client draws the measured requests' times as the simulator does, seed + level index
    if kind == "rate":
        plain = BenchOptions(base_url=URL, isl=600, osl=40, requests=12, seed=11, rate=levels)
        simp = SimulateOptions(kind=kind, levels=levels, isl=600, osl=40, requests=12, seed=11)
        for bp, sp in zip(sweep_levels(plain), sweep_levels(simp)):
            want = arrival_offsets(bp.value, 12, plain.burstiness, plain.seed + bp.index)
            got = sorted(
                r.scheduled_at for r in VirtualTimeDriver(sim, simp).run_level(sp, keep=lambda r: None).records
            )
            assert got == pytest.approx(want, abs=1e-12)


def test_a_replayed_trace_is_sent_with_the_same_blocks_and_times(sim, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": 700 * i + (i % 3) * 90,
                    "input_length": 600 + 10 * i,
                    "output_length": 4 + i,
                    "hash_ids": [7, 8 + i % 2],
                }
            )
            + "\n"
            for i in range(9)
        )
    )
    trace = replay_schedule(str(path), None, False)
    speeds = (1.0, 2.5)
    bench = BenchOptions(
        base_url=URL,
        replay=str(path),
        replay_speeds=speeds,
        trace_rate=trace.rate,
        replay_requests=len(trace.schedule),
        rate=tuple(s * trace.rate for s in speeds),
        warmup=2,
    )
    simo = SimulateOptions(
        kind="rate", levels=tuple(s * trace.rate for s in speeds), schedule=trace.schedule, warmup=2, isl=1, osl=1
    )
    workload = load_workload(bench, context_tokens=8192)
    for bp, sp in zip(sweep_levels(bench), sweep_levels(simo)):
        warm, work = bench_level(bench, workload, bp)
        spec = level_spec(simo, sp)
        assert asked(s for _, s in spec.schedule) == asked(warm.specs + work.specs)
        # the measured rows at the same offsets from the first measured row (bench sends the warmup rows first)
        measured = [at for at, _ in spec.schedule[2:]]
        assert [at - measured[0] for at in measured] == pytest.approx(work.offsets, abs=1e-12)
        records = VirtualTimeDriver(sim, simo).run_level(sp, keep=lambda r: None).records
        got = sorted(r.scheduled_at for r in records if not r.warmup)
        assert [t - got[0] for t in got] == pytest.approx(work.offsets, abs=1e-12)


def test_a_rate_ramp_and_conversations_are_the_same(sim):
    ramp = "linear:1:6:10"
    r = parse_ramp(ramp)
    bench = BenchOptions(base_url=URL, isl=300, osl=20, rate=(1.0,), ramp=ramp, seed=4)
    simo = SimulateOptions(kind="rate", levels=(1.0,), isl=300, osl=20, ramp=r, seed=4)
    (bp,), (sp,) = sweep_levels(bench), sweep_levels(simo)
    work = BenchWorkload(bench).level(bp, warmup=False)
    spec = level_spec(simo, sp)
    assert [at for at, _ in spec.schedule] == list(work.offsets) and asked(s for _, s in spec.schedule) == asked(
        work.specs
    )
    records = VirtualTimeDriver(sim, simo).run_level(sp, keep=lambda r: None)
    assert sorted(x.scheduled_at for x in records.records) == pytest.approx(list(work.offsets), abs=1e-12)
    assert len(records.fields["slices"]) == 10

    bench = BenchOptions(base_url=URL, isl=50, osl=8, concurrency=(2,), turns=3, requests=12, warmup=6, seed=9)
    simo = SimulateOptions(kind="concurrency", levels=(2,), isl=50, osl=8, turns=3, requests=12, warmup=6, seed=9)
    (bp,), (sp,) = sweep_levels(bench), sweep_levels(simo)
    warm, work = bench_level(bench, BenchWorkload(bench), bp)
    spec = level_spec(simo, sp)
    assert [asked(c) for c in spec.conversations] == [
        asked(t for t in warm.specs + work.specs if t.conversation_id == c)
        for c in dict.fromkeys(t.conversation_id for t in warm.specs + work.specs)
    ]
    done = VirtualTimeDriver(sim, simo).run_level(sp, keep=lambda r: None).records
    assert sorted((r.conversation_id, r.turn) for r in done) == sorted(
        (t.conversation_id, t.turn) for t in warm.specs + work.specs
    )
