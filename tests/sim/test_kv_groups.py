"""The engine's KV pool per layer group (vLLM V1's hybrid allocator, vllm 0.32): sliding-window groups free the
blocks that leave the window, and the pool holds as many sequences as `kneecap plan` says for every attention kind.

Block counts here are vLLM's blocks (plan.num_kv_blocks == the engine's num_kv_blocks): block_size tokens of every
layer for a model with one kind of layer, block_size tokens of one KV cache group's layers for a hybrid."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit import check_blocks, deployment, run_checked, spec, tiny_model
from kneecap.model.presets import load_preset
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.engines import model_layout
from kneecap.sim.blocks import BlockManager, GroupedBlockManager, blocks_for
from kneecap.sim.config import EngineConfig
from kneecap.sim.engine import Engine
from kneecap.sim.setup import from_plan

CONFIGS = Path(__file__).resolve().parent.parent / "model" / "configs"


def sliding_model(window=64):
    return tiny_model(layer_types=("sliding_attention", "full_attention") * 2, sliding_window=window)


def groups_of(kinds, window):
    m = tiny_model(num_hidden_layers=len(kinds), layer_types=tuple(kinds), sliding_window=window)
    lay = model_layout(m, tp=1, pp=1, kv_dtype="bf16", block_size=16)
    return list(lay.attention_windows), lay.group_size


def test_layer_groups_follow_vllm():
    oss = load_preset("gpt-oss-20b")  # 12 sliding (window 128) + 12 full: one group of 12 layers each
    assert groups_of(oss.layer_types, oss.sliding_window) == ([0, 128], 12)
    gemma = load_preset("gemma-3-27b")  # 52 sliding + 10 full: groups of 10, the sliding ones padded to 6 groups
    assert groups_of(gemma.layer_types, gemma.sliding_window) == ([0] + [1024] * 6, 10)
    # 13 full + 12 sliding (gpt-oss-20b with an EAGLE layer, vLLM's own example): both padded to 13
    assert groups_of(("full_attention",) * 13 + ("sliding_attention",) * 12, 128) == ([0, 128], 13)
    llama = load_preset("llama-3.1-8b")
    assert groups_of(llama.layer_types, None) == ([0], 32)


def test_a_sliding_group_frees_what_leaves_the_window():
    bm = GroupedBlockManager(100, 16, True, [0, 64])
    assert bm.allocate("a", 100) == 0  # a prompt of 100 tokens: 7 blocks in each group
    assert len(bm.tables["a"]) == len(bm.tables[("g", 1, "a")]) == 7
    bm.trim("a", 100)  # tokens 0..36 are out of the window of the next token: its first 2 blocks are freed
    assert len(bm.tables[("g", 1, "a")]) == 5 and bm.num_held("a") == 7 and bm.num_free == 100 - 12
    for computed in range(100, 1000):  # decode: the sliding group holds ceil(64 / 16) + 1 blocks at most
        bm.trim("a", computed)
        bm.allocate("a", computed + 1)
        assert len(bm.tables[("g", 1, "a")]) <= blocks_for(64, 16) + 1
        assert len(bm.tables["a"]) == blocks_for(computed + 1, 16)
    check_blocks(bm)
    assert bm.max_blocks_for(1000) == blocks_for(1000, 16) + 5
    bm.free_seq("a")
    assert bm.num_free == 100 and not bm.offset
    check_blocks(bm)


def test_a_sliding_prefix_hit_needs_the_window_blocks():
    bm = GroupedBlockManager(40, 16, True, [0, 40])
    hashes = [("p", i) for i in range(6)]
    bm.allocate("a", 6 * 16)
    for i, h in enumerate(hashes):
        bm.register("a", i, h)
    bm.trim("a", 6 * 16)
    bm.free_seq("a")  # every block stays cached in the free queue
    assert bm.lookup_prefix(hashes) == 6  # the last ceil(39 / 16) = 3 sliding blocks are cached
    assert bm.allocate("b", 6 * 16 + 1, hashes) == 6 * 16
    assert len(bm.tables[("g", 1, "b")]) == 4 and bm.offset[("g", 1, "b")] == 3  # 3 null blocks, 3 hits, 1 new
    check_blocks(bm)
    bm.free_seq("b")
    # evict the sliding group's copy of block 4: a hit must end where the window's blocks are all cached
    del bm.cached[(1, hashes[4])]
    assert bm.lookup_prefix(hashes) == 4  # blocks 1..3 of the sliding group are there
    del bm.cached[(1, hashes[2])]
    assert bm.lookup_prefix(hashes) == 2  # blocks 0, 1: fewer than the window, from the start
    assert BlockManager(40, 16).lookup_prefix(hashes) == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_blocks=st.integers(10, 60),
    max_seqs=st.integers(1, 6),
    budget=st.integers(4, 48),
    lengths=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 40), st.integers(0, 3)), min_size=1, max_size=14),
    caching=st.booleans(),
    window=st.sampled_from([4, 9, 16]),
)
def test_invariants_hold_with_sliding_groups(num_blocks, max_seqs, budget, lengths, caching, window):
    # small pools preempt, shared prefixes hit the cache; after every step the pool adds up and each running
    # sequence holds at most its window's blocks (plus one straddling block) in the sliding groups
    cfg = EngineConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget, enable_prefix_caching=caching)
    engine = Engine(deployment(sliding_model(window), block_size=4), cfg, num_blocks)
    bm = engine.blocks
    assert bm.grouped and bm.num_blocks == num_blocks  # vLLM's blocks: 16 tokens of one group's 2 layers
    arrivals = []
    for i, (isl, osl, group) in enumerate(lengths):
        prefix = min(12, isl - 1) if group else 0
        arrivals.append((0.01 * i, spec(i, isl, osl, group if prefix else None, prefix)))
    records, _ = run_checked(engine, arrivals)
    assert sorted(r.request_id for r in records) == sorted(s.request_id for _, s in arrivals)
    for r in records:
        if r.ok:
            assert r.output_tokens == r.expected_output_tokens
        else:
            assert r.error_kind == "kv_capacity"
    check_blocks(bm)
    assert bm.num_free == bm.num_blocks and not bm.tables


def fill(request: DeploymentRequest, length: int, out: int = 64, prefix_caching: bool = False):
    """Sequences of `length` tokens (prompt length - out, then `out` decodes) admitted until the first finishes or is
    preempted: the most that ran at once, the engine's pool figure at `length`, and plan's paged max concurrency
    (plan and engine both with `prefix_caching`: linear-attention groups hold 1 state block each without it)."""
    plan, _ = plan_deployment(dataclasses.replace(request, prefix_caching=prefix_caching))
    setup = from_plan(plan, max_num_seqs=100_000, max_num_batched_tokens=10**7, prefix_caching=prefix_caching)
    engine = setup.new_engine()
    expected = plan.paged_max_seqs_at(length)
    for i in range(int(expected * 1.2) + 10):
        engine.add_request(spec(i, length - out, out), 0.0)
    t, most = 0.0, 0
    while (step := engine.step(t)) is not None and not step.finished and not step.preempted:
        t = step.ended_at
        most = max(most, engine.num_running)
    bm, state = engine.blocks, engine.state_blocks
    # one unit: plan's blocks are the engine's (vLLM's num_gpu_blocks), and so is the block size
    assert engine.server_metrics()["num_kv_blocks"] == plan.num_kv_blocks == bm.num_blocks
    assert bm.block_size == plan.block_size
    pool = bm.num_blocks // (bm.max_blocks_for(length) + state)
    assert most <= bm.num_blocks // (bm.max_blocks_for(length - out) + state)  # every one holds >= length - out tokens
    return most, pool, expected


CASES = [  # (deployment, context the pool is filled at), one per attention kind
    # sliding + full in equal numbers (one group each)
    (DeploymentRequest(preset="gpt-oss-20b", gpu="h100-sxm", context=16384), 8192),
    (DeploymentRequest(preset="gpt-oss-120b", gpu="h100-sxm", tp=2, context=16384), 1024),
    # sliding + full, the sliding layers padded: Gemma 2 (21 + 21, one group each), Gemma 3 (52 + 10: 6 groups of 10)
    (DeploymentRequest(model=str(CONFIGS / "google--gemma-2-9b-it.json"), gpu="l4", context=8192), 4096 + 512),
    (DeploymentRequest(model=str(CONFIGS / "google--gemma-3-27b-it.json"), gpu="h100-sxm", context=16384), 1024 + 64),
    # sliding only (one group)
    (DeploymentRequest(model=str(CONFIGS / "mistral-7b-v0.1.json"), gpu="l4", context=16384), 4096 + 1024),
    # linear attention + full: the state is one block per linear group (prefix caching off, as fill runs them), the
    # block grown to hold a state page
    (DeploymentRequest(preset="qwen3-next-80b-a3b", gpu="h100-sxm", tp=4, context=16384), 8192),
    (DeploymentRequest(model=str(CONFIGS / "nemotron-h-8b-base-8k.json"), gpu="l4", context=8192), 4096),
    # full attention, MLA
    (DeploymentRequest(preset="llama-3.1-8b", gpu="h100-sxm", context=16384), 8192),
    (DeploymentRequest(model=str(CONFIGS / "deepseek-ai--DeepSeek-V2-Lite.json"), gpu="h100-sxm", context=16384), 8192),
]


@pytest.mark.parametrize(
    "request_, length",
    CASES,
    ids=lambda c: getattr(c, "preset", None) or (Path(c.model).stem if isinstance(c, DeploymentRequest) else str(c)),
)
def test_the_pool_holds_what_plan_says(request_, length):
    most, pool, planned = fill(request_, length)
    assert pool == planned
    assert most >= pool  # the engine really runs that many (at most its figure 64 tokens shorter: fill checks)


LINEAR_CASES = [c for c in CASES if c[0].preset == "qwen3-next-80b-a3b" or "nemotron-h" in str(c[0].model)]


@pytest.mark.parametrize(
    "request_, length",
    LINEAR_CASES,
    ids=lambda c: getattr(c, "preset", None) or (Path(c.model).stem if isinstance(c, DeploymentRequest) else str(c)),
)
def test_with_prefix_caching_the_linear_hybrids_hold_vllms_align_state_blocks(request_, length):
    # vLLM's default prefix caching: 2 state blocks per request in each Gated DeltaNet group (Qwen3-Next), 3 in each
    # Mamba-2 group (Nemotron-H); plan and the engine agree, and fewer sequences fit than with 1 block per group
    most, pool, planned = fill(request_, length, prefix_caching=True)
    _, pool_off, _ = fill(request_, length)
    assert pool == planned and most >= pool
    assert pool < pool_off


def test_gemma3_pool_is_vllms_padded_groups():
    # 52 sliding layers are padded to 6 groups of 10 (60 layers' blocks): at 8192 tokens a sequence takes 512 blocks
    # in the full group and 65 in each sliding group, 512 + 6 x 65 = 902 blocks of 10 layers, where the 62 layers
    # alone would take (10 x 512 + 52 x 65) / 10 = 850; plan and the engine both say 17 (not 18)
    request = DeploymentRequest(
        model=str(CONFIGS / "google--gemma-3-27b-it.json"), gpu="h100-sxm", context=16384, language_only=True
    )  # the text tower alone: its vision tower would take 0.85 GB of the pool
    most, pool, planned = fill(request, 8192)
    plan, _ = plan_deployment(request)
    assert planned == pool == plan.num_kv_blocks // 902 == 17
    assert plan.num_kv_blocks == plan.ledger.kv_pool_bytes // (10 * 16 * 2 * 16 * 128 * 2)  # page x group size
    assert most >= 14  # a whole 8128-token prompt is written into every sliding group before it is trimmed


def test_an_aborted_waiting_request_leaves_nothing_in_the_pool():
    # a request that waited (its admission looked at the pool) and was cancelled: the grouped pool keeps no note of
    # it (kneecap serve runs for as long as clients come and go)
    engine = Engine(
        deployment(sliding_model(), block_size=4), EngineConfig(max_num_seqs=1, max_num_batched_tokens=64), 40
    )
    engine.add_request(spec(0, 30, 20), 0.0)
    engine.add_request(spec(1, 30, 20), 0.0)
    engine.step(0.0)  # r0 admitted; r1 waits on max_num_seqs
    engine.blocks.new_blocks_needed("r1", 30)  # what an admission attempt looks up
    assert engine.abort("r1", at=0.1).status == "cancelled"
    assert set(engine.blocks._seq_keys) <= {"r0", ("state", "r0")}


def test_a_logged_kv_pool_of_a_linear_hybrid_is_in_the_deployments_blocks():
    # --kv-pool-gib: a pool an engine logged for its KV alone (the simulator charges no state to it), so plan and the
    # engine count it in block_size-token blocks of the full-attention layers, not in vLLM's grown hybrid blocks
    request = DeploymentRequest(preset="qwen3-next-80b-a3b", gpu="h100-sxm", tp=4, context=16384, kv_pool_gib=20)
    plan, _ = plan_deployment(request)
    engine = from_plan(plan).new_engine()
    assert plan.block_size == engine.blocks.block_size == 16 and engine.state_blocks == 0
    assert engine.blocks.num_blocks == plan.num_kv_blocks == 20 * 2**30 // (plan.kv_bytes_per_token_per_gpu * 16)
