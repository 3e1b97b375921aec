"""Shared builders for the simulator tests (imported as `simkit`): a tiny dense model, real presets, a step-by-step runner
that checks the engine's invariants after every step."""

from __future__ import annotations

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model.spec import Model
from kneecap.sim.blocks import BlockManager, blocks_for
from kneecap.sim.engine import Engine
from kneecap.sim.scheduler import Sequence
from kneecap.workload import RequestSpec


def tiny_model(**kw) -> Model:
    base = dict(
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
    base.update(kw)
    return Model(**base)


def hybrid_model(**kw) -> Model:
    """A Qwen3-Next-like toy: 3 linear-attention layers per full-attention layer, fixed state per sequence."""
    layers = ("linear_attention", "linear_attention", "linear_attention", "full_attention") * 2
    return tiny_model(
        num_hidden_layers=8, layer_types=layers, num_key_value_heads=2, linear_state_bytes_per_layer=100_000, **kw
    )


def deployment(model=None, gpu="h100-sxm", **kw) -> Deployment:
    return Deployment(model=model or tiny_model(), gpu=get_gpu(gpu), **kw)


def free_blocks(bm: BlockManager) -> list[int]:
    """The pool's free queue, oldest first (its valid entries), as _take_free would meet them."""
    skip = bm._stale[:]
    out = []
    for block in bm._free[bm._head :]:
        if skip[block]:
            skip[block] -= 1
            continue
        out.append(block)
    return out


def check_blocks(bm: BlockManager) -> None:
    """The block manager's invariants (tests call this after every operation): AssertionError naming each broken one."""
    ref_count = bm.ref_count
    used = sum(1 for r in ref_count if r > 0)
    problems = []
    if any(r < 0 for r in ref_count):
        problems.append("negative ref count")
    if sum(1 for r in ref_count if r > 1) != bm._num_shared:
        problems.append(f"{bm._num_shared} blocks counted as shared, {sum(1 for r in ref_count if r > 1)} are")
    free = free_blocks(bm)
    if used + len(free) != bm.num_blocks or len(free) != bm.num_free:
        problems.append(f"free {len(free)} (counted {bm.num_free}) + used {used} != total {bm.num_blocks}")
    if any(ref_count[b] != 0 for b in free):
        problems.append("a free block has references")
    refs = [0] * bm.num_blocks
    for table in bm.tables.values():
        for b in table:
            refs[b] += 1
    if refs != ref_count:
        problems.append("ref counts differ from block-table occurrences")
    for h, b in bm.cached.items():
        if bm.block_hash[b] != h:
            problems.append(f"cache entry {h!r} points at block {b} holding {bm.block_hash[b]!r}")
            break
    assert not problems, "block manager invariant broken: " + "; ".join(problems)


def check_engine(engine: Engine) -> None:
    """Invariants that must hold between any two steps."""
    bm, sched, bs = engine.blocks, engine.scheduler, engine.block_size
    check_blocks(bm)  # free + used == total; ref counts >= 0 and equal to table occurrences
    assert len(sched.running) <= engine.config.max_num_seqs
    for seq in sched.running:
        # a running sequence holds exactly the blocks its computed tokens need, never more
        assert bm.num_held(seq.rid) == blocks_for(seq.num_computed, bs), (seq.rid, seq.num_computed)
        assert seq.num_computed <= seq.num_tokens <= seq.prompt_len + seq.output_len
        assert bm.num_held(("state", seq.rid)) == engine.state_blocks  # fixed linear-attention state
    for seq in sched.waiting:
        assert bm.num_held(seq.rid) == 0 and seq.num_computed == 0
        assert bm.num_held(("state", seq.rid)) == 0
    ids = [s.rid for s in sched.running] + [s.rid for s in sched.waiting]
    assert len(ids) == len(set(ids))
    for r, rank in enumerate(getattr(sched, "ranks", ())):  # SGLang's DP attention: each rank's own pool and cap
        pool = rank.blocks
        held = set()
        for seq in rank.running:
            assert seq.dp_rank == r
            for key in (bm._keys(seq.rid) if bm.grouped else (seq.rid,)) + (("state", seq.rid),):
                held.update(bm.tables.get(key, ()))
        assert pool.used == len(held) <= pool.num_blocks, (r, pool.used, len(held), pool.num_blocks)
        assert len(rank.running) <= rank.config.max_num_seqs
        assert all(seq.dp_rank == r for seq in rank.waiting)


def run_checked(engine: Engine, arrivals, *, max_steps: int = 1, closed_loop=None, forget_steps: bool = False):
    """Drive `engine` with (time, spec) arrivals (sorted); check invariants after every step.

    closed_loop: an iterator of further specs, one sent at each completion. forget_steps: after every
    step, let the engine drop the step times no held request needs (as `kneecap serve` does).
    Returns (records, outcomes)."""
    import math

    arrivals = list(arrivals)
    records, outcomes = [], []
    t, k = 0.0, 0
    while True:
        while k < len(arrivals) and arrivals[k][0] <= t:
            rejected = engine.add_request(arrivals[k][1], arrivals[k][0])
            if rejected:
                records.append(rejected)
            k += 1
        if not engine.has_work:
            if k < len(arrivals):
                t = arrivals[k][0]
                continue
            break
        until = arrivals[k][0] if k < len(arrivals) else math.inf
        out = engine.step(t, until=until, max_steps=max_steps)
        assert out is not None, "engine stalled with work queued"
        assert out.ended_at > t
        # (under SGLang's DP attention each rank's step is held to the budget)
        ranks = engine.scheduler.dp_ranks
        assert out.prefill_tokens + out.decode_tokens <= engine.config.max_num_batched_tokens * out.num_steps * ranks
        check_engine(engine)
        if forget_steps:
            engine.forget_finished_steps(keep_at_most=0)
        outcomes.append(out)
        t = out.ended_at
        for rec in out.finished:
            records.append(rec)
            if closed_loop is not None:
                nxt = next(closed_loop, None)
                if nxt is not None:
                    engine.add_request(nxt, t)
    return records, outcomes


def sim_of(d: Deployment, config, num_blocks: int, *, charge_state: bool = True):
    """The simulated deployment simulate_level takes, for a hand-built deployment and pool of `num_blocks` blocks
    (a stand-in for the Plan: SimDeployment.new_engine reads only its deployment and num_kv_blocks)."""
    from types import SimpleNamespace

    from kneecap.sim.setup import SimDeployment
    from kneecap.sim.steptime import StepTimeModel

    return SimDeployment(
        plan=SimpleNamespace(deployment=d, num_kv_blocks=num_blocks),
        config=config,
        steptime=StepTimeModel(d),
        charge_state=charge_state,
    )


def sched_seq(i: int, isl: int, osl: int = 8) -> Sequence:
    """Request i as a scheduler Sequence (16-token blocks), arrived at 0."""
    spec = RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=isl, output_tokens=osl)
    return Sequence(spec, 0.0, 16)


def apply_step(batch) -> None:
    """Apply a step as the engine does: prompt tokens computed; a finished prompt or a decode emits one token."""
    for seq, k in batch.prefills:
        seq.num_computed += k
        if seq.num_computed == seq.num_tokens:
            seq.num_output += 1
            seq.num_tokens += 1
    for seq in batch.decodes:
        seq.num_computed += 1
        seq.num_output += 1
        seq.num_tokens += 1


def spec(i: int, isl: int, osl: int, group: int | None = None, prefix: int = 0) -> RequestSpec:
    """Request i ("r<i>", class "c") of isl prompt and osl output tokens, its first `prefix` tokens shared by `group`."""
    return RequestSpec(
        index=i,
        request_id=f"r{i}",
        class_name="c",
        input_tokens=isl,
        output_tokens=osl,
        prefix_group=group,
        prefix_tokens=prefix,
    )


def assert_fast_path_matches_step_by_step(make_engine, lengths, gaps) -> None:
    """Requests of (isl, osl, group) `lengths` sent `gaps` seconds apart (a group shares its first min(8, isl - 1)
    tokens): a fresh make_engine() run one step at a time and one left to its decode fast path give the same records,
    preemptions and steps (run_checked checks every step of both)."""
    t, arrivals = 0.0, []
    for i, (isl, osl, group) in enumerate(lengths):
        t += gaps[i]
        prefix = min(8, isl - 1) if group else 0
        arrivals.append((t, spec(i, isl, osl, group if prefix else None, prefix)))
    results = []
    for max_steps in (1, 10_000):
        engine = make_engine()
        records, _ = run_checked(engine, arrivals, max_steps=max_steps)
        results.append(({r.request_id: r for r in records}, engine.stats.preemptions, engine.stats.num_steps))
    (exact, pre_a, steps_a), (fast, pre_b, steps_b) = results
    assert exact.keys() == fast.keys() and pre_a == pre_b and steps_a == steps_b
    for rid, r in exact.items():
        assert fast[rid].status == r.status and len(fast[rid].chunk_times) == len(r.token_times())
        assert fast[rid].chunk_times == pytest.approx(r.chunk_times, rel=1e-9, abs=1e-12)
