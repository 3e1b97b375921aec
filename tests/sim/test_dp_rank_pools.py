"""SGLang under DP attention schedules each rank on its own: its own KV pool, its own running-request cap and its own
admission reserve, whose new-token ratio decays only in that rank's decode steps (sim/dp_ranks.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import assert_fast_path_matches_step_by_step, deployment, run_checked, spec

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.config import SGLANG_PROFILE, EngineConfig, sglang_defaults
from kneecap.sim.engine import Engine

# a prefill-first scheduler without an admission reserve (SGLang's profile: requests dealt to the ranks round robin)
PLAIN = EngineConfig(
    name="custom", max_num_seqs=64, max_num_batched_tokens=4096, mixed_prefill_decode=False, profile=SGLANG_PROFILE
)


def _dp_engine(config: EngineConfig, num_blocks: int, tp: int = 2, block_size: int = 16, **kw) -> Engine:
    d = Deployment(
        model=load_model("qwen3-235b-a22b"),
        gpu=get_gpu("h100-sxm"),
        tp=tp,
        weight_dtype="fp8",
        dp_attention=True,
        block_size=block_size,
    )
    return Engine(d, config, num_blocks=num_blocks, **kw)


def test_a_full_rank_queues_its_requests_while_the_other_rank_has_room():
    """Two ranks of 20 blocks of 16 tokens. r0 (rank 0) takes 18 of its rank's blocks; r2, dealt to rank 0 too, needs
    3 more: it waits for r0 to finish, though the other rank's blocks would hold it."""
    eng = _dp_engine(PLAIN, num_blocks=40)
    arrivals = [(0.0, spec(0, 280, 30)), (0.0, spec(1, 20, 10)), (0.0, spec(2, 40, 10))]
    for t, s in arrivals:
        eng.add_request(s, t)
    assert {s.rid: s.dp_rank for s in eng.scheduler.waiting} == {"r0": 0, "r1": 1, "r2": 0}
    batch = eng.scheduler.schedule()
    assert sorted(s.rid for s in batch.admitted) == ["r0", "r1"]
    assert [s.rid for s in eng.scheduler.waiting] == ["r2"]
    assert eng.scheduler.pools[0].num_free == 2 and eng.scheduler.pools[1].num_free == 18

    records, _ = run_checked(_dp_engine(PLAIN, num_blocks=40), arrivals)
    by_id = {r.request_id: r for r in records}
    assert all(r.status == "ok" for r in records)
    assert by_id["r2"].first_token_at > by_id["r0"].end_at


def test_a_request_longer_than_one_ranks_pool_is_refused():
    eng = _dp_engine(PLAIN, num_blocks=40)  # 320 tokens a rank, 640 in all
    rejected = eng.add_request(spec(0, 400, 10), 0.0)
    assert rejected is not None and rejected.error_kind == "kv_capacity"
    assert "a DP rank's KV pool of 320 tokens" in rejected.error_message
    assert eng.add_request(spec(1, 300, 10), 0.0) is None


def test_each_rank_runs_at_most_its_share_of_the_running_requests():
    """max_num_seqs 4 over two ranks: two each. r1 and r3 (rank 1) finish with their first token; r4, rank 0's third,
    still waits for rank 0's two to finish, though only two requests run in all."""
    config = replace(PLAIN, max_num_seqs=4)
    arrivals = [(0.0, spec(i, 20, 1 if i % 2 else 50)) for i in range(5)]
    eng = _dp_engine(config, num_blocks=2000)
    for t, s in arrivals:
        eng.add_request(s, t)
    eng.step(0.0)
    assert [s.rid for s in eng.scheduler.running] == ["r0", "r2"]
    assert [s.rid for s in eng.scheduler.waiting] == ["r4"]
    records, _ = run_checked(_dp_engine(config, num_blocks=2000), arrivals)
    by_id = {r.request_id: r for r in records}
    assert by_id["r4"].first_token_at > by_id["r0"].end_at
    assert eng.scheduler.max_num_seqs == 2


def test_sglangs_default_cap_is_each_ranks_from_its_own_pool():
    # 400,000 tokens over 4 ranks at a 32k context: 100,000 a rank -> max(100000 / 32768 x 512, 2048) = 2048 each
    assert sglang_defaults(80 * 2**30, 400_000, 32_768, dp=4).max_num_seqs == 4 * 2048
    assert sglang_defaults(80 * 2**30, 400_000, 32_768).max_num_seqs == 4096  # one pool: min(6250, 4096)
    # a small pool: each rank's cap is half its own tokens (8,000 / 4 / 2), not half the deployment's
    assert sglang_defaults(80 * 2**30, 8_000, 32_768, dp=4).max_num_seqs == 4 * 1000
    assert sglang_defaults(80 * 2**30, 8_000, 32_768).max_num_seqs == 2048


def test_a_summary_states_each_ranks_cap_and_pool():
    from kneecap.plan.ledger import build_plan
    from kneecap.sim.setup import from_plan

    d = Deployment(model=load_model("qwen3-235b-a22b"), gpu=get_gpu("h100-sxm"), tp=4, weight_dtype="fp8")
    sim = from_plan(build_plan(replace(d, dp_attention=True), context=8192), defaults="sglang")
    facts = sim.describe()
    assert facts["engine"]["dp_rank_max_num_seqs"] == facts["engine"]["max_num_seqs"] // 4
    assert facts["engine"]["dp_rank_kv_blocks"] == facts["plan"]["num_kv_blocks"] // 4
    assert sim.new_engine().scheduler.pools[0].num_blocks == facts["engine"]["dp_rank_kv_blocks"]
    plain = from_plan(build_plan(d, context=8192), defaults="sglang").describe()["engine"]
    assert "dp_rank_max_num_seqs" not in plain


SGLANG_LIKE = EngineConfig(
    name="custom",
    max_num_seqs=16,
    max_num_batched_tokens=64,
    init_new_token_ratio=0.7,
    min_new_token_ratio=0.1,
    new_token_ratio_decay=0.01,
    mixed_prefill_decode=False,
)


def test_the_new_token_ratio_decays_only_in_decode_steps():
    """A 150-token prompt runs in three steps of at most 64 tokens: the ratio stays at 0.7; each of the four decode steps
    after it takes 0.01 off (SGLang decays it in update_running_batch, which runs only when no prompt can)."""
    eng = Engine(deployment(block_size=4), SGLANG_LIKE, num_blocks=200, fast_path=False)
    eng.add_request(spec(0, 150, 5), 0.0)
    t, ratios = 0.0, []
    while eng.has_work:
        out = eng.step(t)
        t = out.ended_at
        ratios.append(round(eng.scheduler.new_token_ratio, 9))
    assert ratios == [0.7, 0.7, 0.7, 0.69, 0.68, 0.67, 0.66]


def test_each_dp_rank_decays_its_own_ratio_in_its_own_decode_steps():
    """r0 (rank 0) decodes from step 2 while r1's 200-token prompt runs on rank 1 in chunks of 64 (128 // 2) until
    step 4: rank 0's ratio decays in steps 2-4, rank 1's stays at its start."""
    config = replace(SGLANG_LIKE, max_num_batched_tokens=128, profile=SGLANG_PROFILE)
    eng = _dp_engine(config, num_blocks=400, fast_path=False)
    init, decay = eng.config.init_new_token_ratio, eng.config.new_token_ratio_decay
    assert init == pytest.approx(0.21) and decay == pytest.approx(0.003)
    eng.add_request(spec(0, 20, 30), 0.0)
    eng.add_request(spec(1, 200, 30), 0.0)
    t = 0.0
    for _ in range(4):
        t = eng.step(t).ended_at
    rank0, rank1 = eng.scheduler.ranks
    assert rank1.new_token_ratio == init
    assert rank0.new_token_ratio == pytest.approx(init - 3 * decay)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_blocks=st.integers(20, 120),
    max_seqs=st.integers(2, 8),
    budget=st.integers(4, 128),
    lengths=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60), st.integers(0, 2)), min_size=1, max_size=12),
    gaps=st.lists(st.floats(0, 0.05), min_size=12, max_size=12),
    reserve=st.booleans(),
)
def test_dp_ranks_fast_path_equals_step_by_step(num_blocks, max_seqs, budget, lengths, gaps, reserve):
    """Two ranks with pools of their own, small enough to fill, shared prefixes cached per rank: the decode fast path
    gives the same records, preemptions and steps as the engine stepping one step at a time; every step keeps each
    rank's block count and cap (simkit.check_engine)."""
    config = replace(
        PLAIN,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=budget,
        **({"init_new_token_ratio": 0.7, "min_new_token_ratio": 0.1, "new_token_ratio_decay": 0.01} if reserve else {}),
    )
    assert_fast_path_matches_step_by_step(lambda: _dp_engine(config, num_blocks, block_size=4), lengths, gaps)


def test_a_rank_caches_its_own_prefixes():
    """Four requests of one shared 64-token prefix over two ranks: each rank computes the prefix once, its second request
    hits its own cache (SGLang keeps a radix cache per rank)."""
    eng = _dp_engine(PLAIN, num_blocks=400)
    arrivals = [(0.2 * i, spec(i, 100, 4, group=0, prefix=64)) for i in range(4)]  # each after the last ran
    records, _ = run_checked(eng, arrivals)
    cached = {r.request_id: r.extra["cached_tokens"] for r in records}
    assert cached == {"r0": 0, "r1": 0, "r2": 64, "r3": 64}


def test_the_ranks_queues_read_as_one_at_their_tail():
    """What `kneecap serve` does with the queue: take out the requests that arrived after a time, then put them back."""
    eng = _dp_engine(PLAIN, num_blocks=400)
    for i in range(5):
        eng.add_request(spec(i, 20, 4), 0.1 * i)
    waiting = eng.scheduler.waiting
    assert len(waiting) == 5 and waiting[-1].rid == "r4"
    held = []
    while waiting and waiting[-1].arrival_at > 0.25:
        held.append(waiting.pop())
    assert [s.rid for s in held] == ["r4", "r3"] and len(waiting) == 3
    waiting.extend(reversed(held))
    assert [[s.rid for s in rank.waiting] for rank in eng.scheduler.ranks] == [["r0", "r2", "r4"], ["r1", "r3"]]


def test_a_merged_batch_joins_every_list_and_sums_every_figure():
    from dataclasses import fields

    from kneecap.sim.scheduler import BLOCKED_NONE, Batch

    def part(i: int) -> Batch:
        b = Batch()
        for f in fields(Batch):
            if f.name != "blocked":
                setattr(b, f.name, [f"{f.name}{i}"] if isinstance(getattr(b, f.name), list) else float(i + 1))
        return b

    merged = Batch.merged([part(0), part(1), part(2)], blocked="kv")
    for f in fields(Batch):
        value = getattr(merged, f.name)
        if f.name == "blocked":
            assert value == "kv"
        elif isinstance(value, list):
            assert value == [f"{f.name}0", f"{f.name}1", f"{f.name}2"], f.name
        else:
            assert value == 6.0, f.name
    assert Batch.merged([]).blocked == BLOCKED_NONE and Batch.merged([]).num_seqs == 0
