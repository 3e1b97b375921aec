"""vLLM V1's rule for a running request's next prefill chunk under KV pressure (EngineConfig.chunk_whole_or_preempt):
the chunk gets all its blocks or the most recently admitted running request is preempted (recompute), itself last, and
nothing is admitted in that step (vllm/v1/core/sched/scheduler.py, 0.10.2: allocate_slots returns None, the loop
preempts self.running.pop()). Without the rule the chunk shrinks to the free blocks."""

from __future__ import annotations

from dataclasses import replace

from kneecap.sim.blocks import BlockManager
from kneecap.sim.config import EngineConfig, sglang_defaults, trtllm_defaults, vllm_defaults
from kneecap.sim.scheduler import Scheduler
from simkit import apply_step as _run
from simkit import sched_seq as _seq

GiB = 1 << 30


def _two_prompts(whole: bool):
    """10 blocks of 16 tokens, 64 tokens a step: r0 (64 tokens) runs whole (4 blocks) and decodes (a 5th block);
    r1 (160 tokens) is admitted with the 63 tokens left in the step (4 blocks), leaving 1 free block, so its next
    64-token chunk (4 more blocks) does not fit."""
    cfg = EngineConfig(name="custom", max_num_seqs=8, max_num_batched_tokens=64, chunk_whole_or_preempt=whole)
    sched = Scheduler(cfg, BlockManager(10, 16, enable_prefix_caching=False))
    r0, r1 = _seq(0, 64, osl=40), _seq(1, 160)
    sched.add(r0)
    batches = []
    for step in range(4):
        if step == 1:
            sched.add(r1)
        batch = sched.schedule()
        batch.queues = ([s.rid for s in sched.running], [s.rid for s in sched.waiting], r1.num_computed)
        batches.append(batch)
        _run(batch)
    return sched, r0, r1, batches


def test_vllm_preempts_the_newest_request_rather_than_shrink_its_chunk():
    sched, r0, r1, batches = _two_prompts(whole=True)
    # step 0: r0's prompt; step 1: r0 decodes, r1 admitted with the 63 tokens left in the budget (4 blocks)
    assert [(s.rid, k) for s, k in batches[1].prefills] == [("r1", 63)]
    # step 2: r1's next chunk (64 tokens, 4 more blocks) does not fit in the 1 free block: r1 preempts itself
    assert batches[2].preempted == [r1]
    assert batches[2].prefills == [] and [s.rid for s in batches[2].decodes] == ["r0"]
    assert batches[2].queues == (["r0"], ["r1"], 0) and r1.preemptions == 1
    # step 3: no preemption, so r1 is admitted again from its first token
    assert [(s.rid, k) for s, k in batches[3].prefills] == [("r1", 63)]


def test_without_the_rule_the_chunk_shrinks_to_the_free_blocks():
    _, _, r1, batches = _two_prompts(whole=False)
    assert batches[2].preempted == []
    assert [(s.rid, k) for s, k in batches[2].prefills] == [("r1", 17)]  # 1 free block + the 1 token left in r1's 4th
    assert r1.preemptions == 0


def test_a_preempted_decode_leaves_the_step():
    """An older request's chunk preempts a newer one already scheduled to decode: the decode and its attention sums
    leave the batch (vLLM schedules in running order, so that decode would not have run)."""
    cfg = EngineConfig(name="custom", max_num_seqs=8, max_num_batched_tokens=64, chunk_whole_or_preempt=True)
    sched = Scheduler(cfg, BlockManager(8, 16, enable_prefix_caching=False))
    old, new = _seq(0, 200), _seq(1, 20, osl=40)
    sched.running = [old, new]
    sched.blocks.allocate(old.rid, 64)  # old: 64 of 200 prompt tokens computed, 4 blocks
    old.num_computed = 64
    sched.blocks.allocate(new.rid, 32)  # new: decoding at 32 tokens (a full 2nd block), 2 blocks
    new.num_computed, new.num_tokens, new.num_output = 32, 33, 1
    batch = sched.schedule()
    # new's decode takes the 7th block; old's next chunk (63 tokens) needs 4 blocks with 1 free: new is preempted
    assert batch.preempted == [new]
    assert batch.decodes == []
    assert [(s.rid, k) for s, k in batch.prefills] == [("r0", 63)]
    # the sums are the chunk's alone: 63 query tokens after 64 cached
    assert batch.kv_tokens_full == 64 + 63 and batch.decode_kv_full == 0
    assert batch.pairs_full == 63 * 64 + 63 * 64 / 2


def test_vllm_defaults_carry_the_rule_and_the_other_engines_do_not():
    assert vllm_defaults(80 * GiB, "h100").chunk_whole_or_preempt
    assert not sglang_defaults(80 * GiB, 100_000, 32_768).chunk_whole_or_preempt
    assert not trtllm_defaults().chunk_whole_or_preempt
    assert not replace(EngineConfig(), name="custom").chunk_whole_or_preempt


def test_a_preempted_decode_gives_its_budget_back():
    """The decode taken out of the step no longer holds its token of the step's budget: a running prompt behind the
    chunk that preempted it gets that token (vLLM walks its running list in order, so the victim, behind the chunk,
    was never charged)."""
    cfg = EngineConfig(name="custom", max_num_seqs=8, max_num_batched_tokens=32, chunk_whole_or_preempt=True)
    sched = Scheduler(cfg, BlockManager(9, 16, enable_prefix_caching=False))
    old, mid, new = _seq(0, 200), _seq(1, 40), _seq(2, 20, osl=40)
    sched.running = [old, mid, new]
    sched.blocks.allocate(old.rid, 64)  # old: 64 of 200 prompt tokens computed, 4 blocks
    old.num_computed = 64
    sched.blocks.allocate(mid.rid, 20)  # mid: 20 of 40 prompt tokens computed, 2 blocks (room for 12 more)
    mid.num_computed = 20
    sched.blocks.allocate(new.rid, 32)  # new: decoding at 32 tokens, 2 blocks; its decode takes the 9th and last block
    new.num_computed, new.num_tokens, new.num_output = 32, 33, 1
    batch = sched.schedule()
    # old's chunk (32 - 1 = 31 tokens) needs 2 more blocks with none free: new is preempted (3 blocks back)
    assert batch.preempted == [new] and batch.decodes == []
    # new's decode token goes back to the budget, and mid, next in line, takes it
    assert [(s.rid, k) for s, k in batch.prefills] == [("r0", 31), ("r1", 1)]
