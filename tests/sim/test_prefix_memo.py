"""The scheduler's remembered prefix lookups (BlockManager.prefix_hit, kept per waiting sequence) give exactly what
rescanning every prompt block each step gives: the same hit and in-use count after any mix of allocations, hits,
registrations, preemptions and evictions, and the same records, trace and counters for whole simulations with long
prompts, preemption and shared prefixes."""

from __future__ import annotations

import random

import pytest
from simkit import check_blocks, deployment, sim_of, tiny_model

from kneecap.sim.blocks import BlockManager
from kneecap.sim.config import EngineConfig
from kneecap.sim.scheduler import Scheduler
from kneecap.sim.sweep import LevelSpec, simulate_level
from kneecap.workload import LengthDist, RequestClass, Workload


def _rescanned(bm: BlockManager, hashes) -> tuple[int, int]:
    hit = bm.lookup_prefix(hashes)
    return hit, sum(1 for h in hashes[:hit] if bm.ref_count[bm.cached[h]] > 0)


@pytest.mark.parametrize("seed", range(6))
def test_prefix_hit_equals_a_rescan_after_every_operation(seed):
    rng = random.Random(seed)
    bm = BlockManager(num_blocks=60, block_size=4)
    # prompts over a few shared prefixes and their own blocks; some name one hash twice (the rescan fallback)
    prompts = []
    for p in range(12):
        shared = [("p", p % 3, i) for i in range(rng.randint(0, 8))]
        own = [("s", p, i) for i in range(rng.randint(0, 10))]
        prompts.append(tuple(shared + own + ([shared[0]] if shared and p % 5 == 0 else [])))
    memos: dict[int, list | None] = {p: None for p in range(len(prompts))}
    held: set[int] = set()
    checked_moves = 0
    for _ in range(400):
        p = rng.randrange(len(prompts))
        hashes = prompts[p]
        op = rng.random()
        if p in held and op < 0.5:  # finish or preempt (its blocks cached under its hashes)
            bm.free_seq(p, hashes[: bm.num_held(p)] if op < 0.3 else ())
            held.discard(p)
        elif p in held:  # its blocks fill: register one, or grow
            i = rng.randrange(bm.num_held(p))
            if i < len(hashes):
                bm.register(p, i, hashes[i])
            if bm.num_free:
                bm.allocate(p, (bm.num_held(p) + 1) * bm.block_size)
        else:
            hit, _ = _rescanned(bm, hashes)
            if bm.allocate(p, (len(hashes) + 1) * bm.block_size, hashes[:hit]) is not None:
                held.add(p)
        if op > 0.97:
            bm.reset_prefix_cache()
        check_blocks(bm)
        for q, hq in enumerate(prompts):  # every prompt's remembered lookup, asked after each operation
            if rng.random() < 0.5:
                before = memos[q][4] if memos[q] else None
                hit, used, memos[q] = bm.prefix_hit(hq, memos[q])
                assert (hit, used) == _rescanned(bm, hq), (q, hq)
                checked_moves += before is not None and before != hit
    assert checked_moves > 20  # the lookups really moved between asks (grew and shrank)


LONG = Workload(
    classes=(
        RequestClass(
            input=LengthDist(kind="uniform", low=300, high=3000),
            output=LengthDist(kind="uniform", low=2, high=200),
            shared_prefix_tokens=400,
            num_prefix_groups=2,
        ),
    )
)


def _run(monkeypatch, remember: bool, cfg, num_blocks, level):
    monkeypatch.setattr(Scheduler, "remember_prefix", remember)
    d = deployment(model=tiny_model(), block_size=16)
    return simulate_level(sim_of(d, cfg, num_blocks), LONG, level, seed=5, trace=True, token_times=True)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "whole-prompts"])
@pytest.mark.parametrize("num_blocks", [700, 5000])
def test_remembered_lookups_give_the_same_simulation(monkeypatch, chunked, num_blocks):
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=4096, chunked_prefill=chunked)
    for level in (LevelSpec(concurrency=12, num_requests=60), LevelSpec(rate=40.0, num_requests=60)):
        a = _run(monkeypatch, True, cfg, num_blocks, level)
        b = _run(monkeypatch, False, cfg, num_blocks, level)
        assert a.server_metrics == b.server_metrics
        assert a.trace == b.trace
        assert [r.to_dict() for r in a.records] == [r.to_dict() for r in b.records]
        if num_blocks == 700:
            assert a.server_metrics["preemptions"] > 0  # the tight pool really preempts
        assert a.server_metrics["prefix_cache_hits_tokens"] > 0  # prefixes really shared
