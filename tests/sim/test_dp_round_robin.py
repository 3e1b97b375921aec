"""SGLang's attention data parallelism: each request is dealt to the next rank in turn whatever the load, keeps that
rank for its life, and each rank runs prefill-first on its own (a rank without a prompt keeps decoding); a step lasts
as long as its busiest rank's attention side. TensorRT-LLM's least-loaded placement keeps the even share."""

from __future__ import annotations

from dataclasses import replace

import pytest
from simkit import apply_step as _run
from simkit import sched_seq as _seq

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.blocks import BlockManager
from kneecap.sim.config import SGLANG_PROFILE, TRTLLM_PROFILE, EngineConfig, sglang_defaults
from kneecap.sim.dp_ranks import RankedScheduler
from kneecap.sim.engine import Engine
from kneecap.sim.scheduler import Scheduler
from kneecap.sim.steptime import StepTimeModel
from kneecap.workload import RequestSpec


def _dp_deployment(tp=8):
    return Deployment(model=load_model("qwen3-235b-a22b"), gpu=get_gpu("h100-sxm"), tp=tp, weight_dtype="fp8")


def _model(profile, tp=8):
    return StepTimeModel(_dp_deployment(tp), dp_attention=True).for_engine(profile)


def _decode_loads(ctx_by_rank: list[list[int]]) -> list[tuple]:
    return [(float(len(c)), float(sum(c)), 0.0, 0.0, 0.0, 0.0, 0.0) for c in ctx_by_rank]


def _decode_step(model, ctx_by_rank):
    ctx = [c for cs in ctx_by_rank for c in cs]
    n, kv = len(ctx), float(sum(ctx))
    return model.seconds(n, kv, 0, kv, 0, n, ranks=_decode_loads(ctx_by_rank))


def test_sglang_deals_requests_round_robin_and_trtllm_to_the_least_loaded_rank():
    assert SGLANG_PROFILE.dp_placement == "round_robin"
    assert TRTLLM_PROFILE.dp_placement == "least_tokens"
    assert _model(SGLANG_PROFILE).rank_by_rank and not _model(TRTLLM_PROFILE).rank_by_rank
    # without DP attention there is one rank: nothing to track
    assert not StepTimeModel(_dp_deployment()).for_engine(SGLANG_PROFILE).rank_by_rank


def test_a_decode_step_lasts_as_long_as_its_busiest_rank():
    sg = _model(SGLANG_PROFILE)
    even = [[16000] * 16 for _ in range(8)]  # 128 decodes of 16000 tokens, 16 on each rank (a CUDA graph's batch)
    lopsided = [[16000] * 16 for _ in range(8)]
    lopsided[0], lopsided[1] = [16000] * 24, [16000] * 8  # the same decodes, 24 on one rank
    t_even, t_lop = _decode_step(sg, even), _decode_step(sg, lopsided)
    # the busiest rank reads 1.5x the K/V of the even share: at 128 x 16000 tokens a visible part of the step
    assert t_lop > t_even * 1.03
    # an even spread prices as the even share does
    n, kv = 128, 128 * 16000.0
    assert t_even == pytest.approx(sg.seconds(n, kv, 0, kv, 0, n), rel=0.01)
    # the least-loaded placement ignores the ranks: the even share
    trt = _model(TRTLLM_PROFILE)
    assert _decode_step(trt, lopsided) == trt.seconds(n, kv, 0, kv, 0, n)


def test_a_prompt_on_one_rank_beside_the_other_ranks_decodes():
    sg = _model(SGLANG_PROFILE)
    prompt, ctx = 4000, 2000
    # rank 0 runs a 4000-token prompt, the seven others 32 decodes each (per-rank prefill-first)
    loads = [(float(prompt), 0.0, 0.0, prompt * (prompt + 1) / 2, 0.0, float(prompt), 0.0)]
    loads += [(32.0, 32.0 * ctx, 0.0, 0.0, 0.0, 0.0, 0.0)] * 7
    dec = 7 * 32
    with_decodes = sg.seconds(
        prompt + dec,
        prompt * (prompt + 1) / 2 + dec * ctx,
        0,
        prompt + dec * ctx,
        0,
        dec + 1,
        num_decodes=dec,
        decode_kv_full=dec * ctx,
        decode_kv_window=0,
        ranks=loads,
    )
    alone = sg.seconds(
        prompt,
        prompt * (prompt + 1) / 2,
        0,
        prompt,
        0,
        1,
        ranks=[loads[0]] + [(0.0,) * 7] * 7,
    )
    # the prompt's rank is the busiest: the decodes elsewhere add only their MoE and head work
    assert alone < with_decodes < alone * 1.2


def _rr_steps(dp_ranks: int) -> list[tuple[list[str], list[str]]]:
    cfg = EngineConfig(name="custom", max_num_seqs=64, max_num_batched_tokens=256, mixed_prefill_decode=False)
    pool = BlockManager(1000, 16, enable_prefix_caching=False)
    sched = RankedScheduler(cfg, pool, dp_ranks, 256 // dp_ranks) if dp_ranks > 1 else Scheduler(cfg, pool)
    out = []
    for step in range(4):
        if step < 3:  # r0, r1, r2 arrive one a step: ranks 0, 1, 0
            sched.add(_seq(step, 100))
        batch = sched.schedule()
        out.append(([s.rid for s in batch.decodes], [s.rid for s, _ in batch.prefills]))
        _run(batch)
    return out


def test_each_rank_runs_prefill_first_on_its_own():
    assert _rr_steps(2) == [
        ([], ["r0"]),
        (["r0"], ["r1"]),  # rank 0 has no prompt: r0 decodes beside rank 1's prompt
        (["r1"], ["r2"]),  # r2 is rank 0's: r0 waits, rank 1's r1 decodes
        (["r0", "r2", "r1"], []),  # (rank by rank)
    ]
    # one rank (no DP attention): the global prefill-first
    assert _rr_steps(1) == [([], ["r0"]), ([], ["r1"]), ([], ["r2"]), (["r0", "r1", "r2"], [])]


def _engine(placement: str, fast_path: bool = True) -> Engine:
    d = Deployment(
        model=load_model("qwen3-235b-a22b"), gpu=get_gpu("h100-sxm"), tp=4, weight_dtype="fp8", dp_attention=True
    )
    config = sglang_defaults(80 * 2**30, 400_000, 32_768)
    config = replace(config, profile=replace(config.profile, dp_placement=placement))
    return Engine(d, config, num_blocks=400_000 // 16, fast_path=fast_path)


def _decode_durations(placement: str, fast_path: bool = True) -> list[float]:
    """Eight requests sent at once, long and short prompts in turn: round robin over 4 ranks puts the four long ones on
    ranks 0 and 2. The durations of the steps once all eight decode (each call's mean step, and its steps)."""
    eng = _engine(placement, fast_path)
    for i in range(8):
        isl = 6000 if i % 2 == 0 else 200
        eng.add_request(RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=isl, output_tokens=64), 0)
    t, durs = 0.0, []
    while eng.has_work:
        out = eng.step(t, max_steps=16)
        if out.num_prefill_seqs == 0:
            durs.append(((out.ended_at - t) / out.num_steps, out.num_steps))
        t = out.ended_at
    return durs


def test_round_robin_placement_prices_decodes_on_the_rank_with_the_long_contexts():
    rr, lt = _decode_durations("round_robin"), _decode_durations("least_tokens")
    assert [s.dp_rank for s in _placed("round_robin")] == [0, 1, 2, 3, 0, 1, 2, 3]  # (in order of arrival)
    assert [s.dp_rank for s in _placed("least_tokens")] == [0] * 8  # not tracked
    # ranks 0 and 2 each read two 6000-token contexts, where the even share reads a quarter of all eight
    assert rr[0][0] > lt[0][0] * 1.01
    # the fast path prices the same steps rank by rank
    slow = _decode_durations("round_robin", fast_path=False)
    assert max(k for _, k in rr) > 1 and max(k for _, k in slow) == 1
    total = sum(d * k for d, k in rr)
    assert total == pytest.approx(sum(d for d, _ in slow), rel=1e-3)
    assert total > sum(d * k for d, k in lt) * 1.01


def _placed(placement: str):
    eng = _engine(placement)
    for i in range(8):
        eng.add_request(RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=100, output_tokens=4), 0)
    return sorted(eng.scheduler.waiting, key=lambda s: s.spec.index)


def test_a_decode_step_replays_the_cuda_graph_of_its_busiest_ranks_batch():
    sg = _model(SGLANG_PROFILE)
    largest = sg.graph_sizes[-1]
    per_rank = largest // 4  # 8 ranks: twice the largest capture size in all, a quarter of it on each rank
    n = 8 * per_rank
    kv = n * 1000.0
    floor = sg.eager_floor(n, n)
    assert floor > 0  # the whole batch is above the largest capture size: launched kernel by kernel
    graphed = _decode_step(sg, [[1000] * per_rank for _ in range(8)])
    assert graphed < 0.7 * floor  # each rank's batch is in a captured graph: not host-bound
    assert sg.seconds(n, kv, 0, kv, 0, n) >= floor  # the even share without ranks keeps the whole batch's test
    # a busiest rank above the largest capture size runs eagerly, whatever the others hold
    lopsided = [[1000] * (largest + 8)] + [[1000] * per_rank for _ in range(7)]
    assert _decode_step(sg, lopsided) >= sg.eager_floor(largest + 8, largest + 8)
    assert sg._graph_rows(n, per_rank) == n and sg._graph_rows(n - 8, per_rank - 1) == n
