"""SGLang's scheduler under DP attention: each rank takes at most the chunked prefill size over the DP size of prompt
tokens a step, from its own queue, and its admission reserve runs at 0.3 of its new-token ratios."""

from __future__ import annotations

import pytest
from simkit import apply_step as _run
from simkit import sched_seq as _seq

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.blocks import BlockManager
from kneecap.sim.config import EngineConfig, sglang_defaults, trtllm_defaults, vllm_defaults
from kneecap.sim.dp_ranks import RankedScheduler
from kneecap.sim.engine import Engine
from kneecap.sim.scheduler import Scheduler
from kneecap.workload import RequestSpec


def _rank_budget_steps(ranks: int) -> list[list[tuple[str, int]]]:
    """A step budget of 256: prompts of 200, 50, 50 and 50 tokens, dealt to ranks 0, 1, 0, 1 where there are two."""
    cfg = EngineConfig(name="custom", max_num_seqs=64, max_num_batched_tokens=256, mixed_prefill_decode=False)
    pool = BlockManager(1000, 16, enable_prefix_caching=False)
    sched = RankedScheduler(cfg, pool, ranks, 256 // ranks) if ranks > 1 else Scheduler(cfg, pool)
    for i, isl in enumerate((200, 50, 50, 50)):
        sched.add(_seq(i, isl))
    out = []
    for _ in range(2):
        batch = sched.schedule()
        out.append(sorted((s.rid, n) for s, n in batch.prefills))
        _run(batch)
    return out


def test_each_dp_rank_takes_its_share_of_the_chunk_from_its_own_queue():
    # rank 0's 200-token prompt runs 128 tokens (256 // 2); r2, rank 0's next, waits a step while rank 1's r3 goes on
    assert _rank_budget_steps(2) == [
        [("r0", 128), ("r1", 50), ("r3", 50)],
        [("r0", 72), ("r2", 50)],
    ]
    # one scheduler (no DP attention): the first prompt takes what it needs of the 256, strictly first come
    assert _rank_budget_steps(1) == [[("r0", 200), ("r1", 50), ("r2", 6)], [("r2", 44), ("r3", 50)]]


def _deployment(dp_attention: bool) -> Deployment:
    return Deployment(
        model=load_model("qwen3-235b-a22b"),
        gpu=get_gpu("h100-sxm"),
        tp=4,
        weight_dtype="fp8",
        dp_attention=dp_attention,
    )


def _engine(config: EngineConfig, dp_attention: bool = True) -> Engine:
    return Engine(_deployment(dp_attention), config, num_blocks=400_000 // 16)


def test_sglang_under_dp_attention_chunks_a_prompt_at_its_chunk_size_over_the_dp_size():
    config = sglang_defaults(80 * 2**30, 400_000, 32_768)
    assert config.max_num_batched_tokens == 8192
    eng = _engine(config)
    assert eng.scheduler.rank_tokens == 8192 // 4
    for i in range(2):  # ranks 0 and 1
        spec = RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=6000, output_tokens=8)
        eng.add_request(spec, 0)
    batch = eng.scheduler.schedule()
    assert [(s.rid, n) for s, n in batch.prefills] == [("r0", 2048), ("r1", 2048)]
    # a run through to the end: every prompt token computed, each step's chunk within its rank's share
    t = 0.0
    while eng.has_work:
        t = eng.step(t).ended_at
    assert eng.stats.num_steps > 3
    # without DP attention: one scheduler, the whole chunk size
    assert _engine(config, dp_attention=False).scheduler.rank_tokens == 0
    # TensorRT-LLM places requests by load and keeps its own limits (sim/config.py trtllm_bench_limits)
    assert _engine(trtllm_defaults()).scheduler.rank_tokens == 0


def test_sglang_under_dp_attention_reserves_at_three_tenths_of_its_new_token_ratios():
    config = sglang_defaults(80 * 2**30, 400_000, 32_768)
    eng = _engine(config)
    assert eng.config.init_new_token_ratio == pytest.approx(0.7 * 0.3)
    assert eng.config.min_new_token_ratio == pytest.approx(0.1 * 0.3)
    assert eng.config.new_token_ratio_decay == pytest.approx(0.001 * 0.3)
    assert [r.new_token_ratio for r in eng.scheduler.ranks] == pytest.approx([0.21] * 4)  # each rank's own
    # without DP attention, and for an engine without the rule, the ratios stay as configured
    plain = _engine(config, dp_attention=False)
    assert plain.config.init_new_token_ratio == 0.7 and plain.scheduler.new_token_ratio == 0.7
    assert _engine(vllm_defaults(80 * 2**30, "H100"), dp_attention=True).config.init_new_token_ratio == 0.0


def test_the_lower_reserve_admits_what_sglangs_single_rank_reserve_holds_back():
    """A pool of 62 blocks of 16 tokens (a rank's, under DP attention): one request decoding with 899 tokens still to
    come. A new one of 90 + 400 tokens on the same rank waits behind a 0.7 reserve (0.7 x 1299 > 800 tokens then free)
    but is admitted at 0.21 (0.21 x 1299 < 800)."""
    config = sglang_defaults(80 * 2**30, 400_000, 32_768)

    def admitted(dp_attention: bool) -> list[str]:
        ranks = 4 if dp_attention else 1
        eng = Engine(_deployment(dp_attention), config, num_blocks=ranks * (1000 // 16))
        sched = eng.scheduler
        first = RequestSpec(index=0, request_id="r0", class_name="c", input_tokens=90, output_tokens=900)
        eng.add_request(first, 0)
        for i in range(1, ranks):  # the other ranks' turns: r1 is dealt to r0's rank
            eng.add_request(
                RequestSpec(index=i, request_id=f"x{i}", class_name="c", input_tokens=9, output_tokens=9), 0
            )
        _run(sched.schedule())
        second = RequestSpec(index=ranks, request_id="r1", class_name="c", input_tokens=90, output_tokens=400)
        eng.add_request(second, 0)
        return [s.rid for s in sched.schedule().admitted]

    assert admitted(dp_attention=False) == []
    assert admitted(dp_attention=True) == ["r1"]


def test_a_summary_states_the_scheduler_sglang_runs_under_dp_attention():
    from kneecap.plan.ledger import build_plan
    from kneecap.sim.setup import from_plan

    def engine_facts(dp_attention: bool) -> dict:
        return from_plan(build_plan(_deployment(dp_attention), context=8192), defaults="sglang").describe()["engine"]

    dp, plain = engine_facts(True), engine_facts(False)
    assert dp["dp_rank_prompt_tokens"] == dp["max_num_batched_tokens"] // 4
    assert dp["init_new_token_ratio"] == pytest.approx(0.21)
    assert "dp_rank_prompt_tokens" not in plain and plain["init_new_token_ratio"] == 0.7
