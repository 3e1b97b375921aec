"""SGLang's attention data parallelism in the scheduler: one Scheduler per DP rank, each over its own KV pool.

Owns the dealing of requests to the ranks, each rank's own share of the engine's block pool (RankPool) and the merge
of the ranks' batches into one engine step; not the policy each rank runs (scheduler.py, unchanged per rank) nor the
step's price (steptime.py prices the busiest rank from Scheduler.rank_loads).

What SGLang 0.5.7 does under --enable-dp-attention (sim/config.py DP_PLACEMENT_NOTE and DP_SCHEDULER_NOTE):
  - each request goes to the next rank in turn and stays there; every rank runs a Scheduler process of its own
    (managers/data_parallel_controller.py:393-480, launch_dp_attention_schedulers) with a KV pool of its own, sized
    from the smallest free memory over all GPUs so that every rank gets the same #tokens
    (model_executor/model_runner_kv_cache_mixin.py:113-118, 271-341), and its own radix (prefix) cache;
  - a rank admits a request against its own free and evictable tokens less its own reserve, new_token_ratio x the
    remaining output of its own running requests (managers/schedule_policy.py:350-356, 369-398, PrefillAdder), and
    retracts its own running requests when its pool runs out in a decode (managers/scheduler.py:2081-2139,
    update_running_batch);
  - its running-request cap is its own: --max-running-requests // dp_size when given, else min(its pool's tokens // 2,
    its req_to_token_pool size) (model_executor/model_runner.py:523-532; without --max-running-requests that size is
    min(max(tokens / context_len x 512, 2048), 4096), model_runner_kv_cache_mixin.py:274-287), checked before each
    prefill (managers/scheduler.py:560-563, 1855-1859, 1888-1894: pp_max_micro_batch_size less the running requests);
  - each rank's admission reserve keeps a new-token ratio of its own, which decays only in that rank's decode steps
    (scheduler.py:2140-2144, update_running_batch, run only when no prefill batch was formed: 1833-1841).
The same rules read in 0.5.6 (managers/tp_worker.py:289-297 for the cap, scheduler.py:1933-1937 for the decay) and
0.5.5 (tp_worker.py:281-289, scheduler.py:1925-1928); other releases were not read and run the same rules.

The ranks' pools are kept in the engine's one BlockManager (the engine's counters, `kneecap serve` and the
disaggregated pools read it as one): RankPool gives each rank its share of the blocks and counts the blocks its
sequences hold; a rank's prefixes are cached under hashes of its own, so no rank hits another's cache. What differs
from separate pools: the cached blocks no rank holds are evicted in one least-recently-freed order for all ranks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence as Seq
from dataclasses import replace

from kneecap.errors import KneecapError
from kneecap.sim.blocks import BlockManager
from kneecap.sim.config import EngineConfig
from kneecap.sim.scheduler import (
    BLOCKED_AHEAD,
    BLOCKED_BLOCKS,
    BLOCKED_BUDGET,
    BLOCKED_DELAY,
    BLOCKED_NONE,
    BLOCKED_RESERVE,
    BLOCKED_SEQS,
    Batch,
    Scheduler,
    Sequence,
)

# which rank's reason the engine is told when ranks wait for different reasons: the ones that may let a request in
# soonest first (the engine's decode fast path runs only while every waiting rank is held by a limit decodes keep)
_BLOCKED_ORDER = (
    BLOCKED_DELAY,
    BLOCKED_AHEAD,
    BLOCKED_NONE,
    BLOCKED_RESERVE,
    BLOCKED_BLOCKS,
    BLOCKED_BUDGET,
    BLOCKED_SEQS,
)


class RankPool:
    """One DP rank's own pool of `num_blocks` blocks inside the engine's BlockManager: what a rank's Scheduler sees as
    its pool. Its free blocks are its share less the blocks its sequences hold (cached blocks no sequence holds count
    as free, as SGLang counts a radix cache's evictable tokens), never more than the whole pool has free."""

    def __init__(self, pool: BlockManager, num_blocks: int):
        self.pool = pool
        self.num_blocks = num_blocks
        self.used = 0  # blocks this rank's sequences hold (each counted once)
        self.block_size = pool.block_size
        self.enable_prefix_caching = pool.enable_prefix_caching
        self.grouped = pool.grouped
        self.tables = pool.tables

    @property
    def num_free(self) -> int:
        own = self.num_blocks - self.used
        left = self.pool.num_free
        return own if own < left else left

    @property
    def num_used(self) -> int:
        return self.used

    def num_held(self, seq_id: Hashable) -> int:
        return self.pool.num_held(seq_id)

    def new_blocks_needed(self, seq_id: Hashable, num_tokens: int, hashes: Seq[Hashable] = ()) -> int:
        return self.pool.new_blocks_needed(seq_id, num_tokens, hashes)

    def lookup_prefix(self, hashes: Seq[Hashable]) -> int:
        return self.pool.lookup_prefix(hashes)

    def prefix_hit(self, hashes: Seq[Hashable], memo: list | None) -> tuple[int, int, list]:
        return self.pool.prefix_hit(hashes, memo)

    def count_query(self, query_tokens: int, hit_tokens: int) -> None:
        self.pool.count_query(query_tokens, hit_tokens)

    def register(self, seq_id: Hashable, index: int, block_hash: Hashable) -> None:
        self.pool.register(seq_id, index, block_hash)

    # the changes: the pool's blocks in use before and after tell how many of them this rank took or gave back
    # (a rank's sequences share blocks only with each other: its prefixes' hashes are its own)
    def allocate(self, seq_id: Hashable, num_tokens: int, hashes: Seq[Hashable] = ()) -> int | None:
        pool = self.pool
        if pool.new_blocks_needed(seq_id, num_tokens, hashes) > self.num_free:
            return None
        before = pool.num_used
        got = pool.allocate(seq_id, num_tokens, hashes)
        self.used += pool.num_used - before
        return got

    def free_seq(self, seq_id: Hashable, own_hashes: Seq[Hashable] = ()) -> None:
        pool = self.pool
        before = pool.num_used
        pool.free_seq(seq_id, own_hashes)
        self.used += pool.num_used - before

    def trim(self, seq_id: Hashable, computed: int) -> None:
        pool = self.pool
        before = pool.num_used
        pool.trim(seq_id, computed)
        self.used += pool.num_used - before

    def _take_free_many(self, n: int) -> list[int]:
        taken = self.pool._take_free_many(n)
        self.used += len(taken)
        return taken

    def take_many(self, seq_ids: Seq[Hashable], counts: Seq[int]) -> None:
        pool = self.pool
        before = pool.num_used
        pool.take_many(seq_ids, counts)
        self.used += pool.num_used - before


class RankQueues:
    """The ranks' waiting queues seen as one queue (what the engine and `kneecap serve` read and change): its length,
    its requests rank by rank, and its tail, the request that arrived last."""

    def __init__(self, ranks: list[Scheduler]):
        self.ranks = ranks

    def __len__(self) -> int:
        return sum(len(s.waiting) for s in self.ranks)

    def __bool__(self) -> bool:
        return any(s.waiting for s in self.ranks)

    def __iter__(self) -> Iterator[Sequence]:
        for s in self.ranks:
            yield from s.waiting

    def _last(self) -> Scheduler:
        tails = [s for s in self.ranks if s.waiting]
        if not tails:
            raise IndexError("no request is waiting")
        return max(tails, key=lambda s: s.waiting[-1].arrival_at)

    def __getitem__(self, index: int) -> Sequence:
        if index != -1:
            raise IndexError("the ranks' queues are read at their tail only")
        return self._last().waiting[-1]

    def pop(self) -> Sequence:
        """Take out the waiting request that arrived last."""
        return self._last().waiting.pop()

    def extend(self, seqs: list[Sequence]) -> None:
        """Put requests back at the tail of their ranks' queues, in order."""
        for seq in seqs:
            self.ranks[seq.dp_rank].waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        self.ranks[seq.dp_rank].waiting.remove(seq)


class RankedScheduler:
    """SGLang's DP attention: requests dealt to `ranks` Schedulers round robin, in order of arrival, each with its own
    pool (the engine's `blocks` split evenly), its own running-request cap (config.max_num_seqs // ranks: the
    deployment's total, as SGLang's --max-running-requests), its own new-token ratio and at most `rank_tokens` prompt
    tokens a step; `schedule()` merges what each rank runs into one step: prefill first on each rank, the ranks without
    a prompt decoding beside it (with speculative decoding the ranks sync before their decodes, so a prompt on any
    rank idles the others: sim/config.py DP_PLACEMENT_NOTE)."""

    rank_loads = Scheduler.rank_loads  # each rank's share of a batch (reads config, window and dp_ranks)

    def __init__(
        self,
        config: EngineConfig,
        blocks: BlockManager,
        ranks: int,
        rank_tokens: int,
        window: int = 0,
        state_blocks: int = 0,
    ):
        per_rank = blocks.num_blocks // ranks
        if per_rank < 1:
            raise KneecapError(
                f"the KV pool holds {blocks.num_blocks} blocks, fewer than one for each of the {ranks} DP ranks",
                "give the engine memory for more KV blocks, or run without DP attention",
            )
        self.config = config
        self.blocks = blocks
        self.window = window
        self.dp_ranks = ranks
        self.rank_tokens = rank_tokens
        rank_config = replace(config, max_num_seqs=max(1, config.max_num_seqs // ranks))
        self.pools = [RankPool(blocks, per_rank) for _ in range(ranks)]
        self.ranks: list[Scheduler] = []
        for pool in self.pools:
            sched = Scheduler(rank_config, pool, window=window, state_blocks=state_blocks)
            sched.rank_tokens = rank_tokens
            self.ranks.append(sched)
        self.budget = self.ranks[0].budget
        self.waiting = RankQueues(self.ranks)
        self._next_rank = 0
        self._parts: list[Batch] = []  # each rank's part of the last batch (note_step)

    # --- what the engine reads and sets, passed on to every rank --------------------------------
    @property
    def running(self) -> list[Sequence]:
        """Every rank's running requests, rank by rank (each in its admission order)."""
        return [seq for sched in self.ranks for seq in sched.running]

    @property
    def max_num_seqs(self) -> int:
        """One rank's running-request cap."""
        return self.ranks[0].config.max_num_seqs

    def _set_all(self, name: str, value) -> None:
        for sched in self.ranks:
            setattr(sched, name, value)

    now = property(lambda self: self.ranks[0].now, lambda self, v: self._set_all("now", v))
    receive_before = property(
        lambda self: self.ranks[0].receive_before, lambda self, v: self._set_all("receive_before", v)
    )
    last_prompt_latency = property(
        lambda self: self.ranks[0].last_prompt_latency, lambda self, v: self._set_all("last_prompt_latency", v)
    )

    # --- requests -------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Deal `seq` to the next rank; its shared prefix is looked up in that rank's cache alone."""
        rank = self._next_rank
        self._next_rank = (rank + 1) % self.dp_ranks
        seq.dp_rank = rank
        if seq.prefix_hashes:
            seq.prefix_hashes = tuple(("rank", rank, h) for h in seq.prefix_hashes)
        self.ranks[rank].add(seq)

    def finish(self, seq: Sequence) -> None:
        self.ranks[seq.dp_rank].finish(seq)

    # --- the step -------------------------------------------------------------------------------
    def schedule(self) -> Batch:
        ranks = self.ranks
        if self.config.mixed_prefill_decode:
            parts = [sched.schedule() for sched in ranks]
        else:  # prefill first, each rank on its own
            parts = [sched.prefill_batch() for sched in ranks]
            if not any(p.prefills for p in parts):
                parts = [sched.decode_batch(p.blocked) for sched, p in zip(ranks, parts)]
            elif not self.config.spec_tokens:  # the ranks without a prompt decode beside it
                parts = [p if p.prefills else sched.decode_batch(p.blocked) for sched, p in zip(ranks, parts)]
        self._parts = parts
        waits = {p.blocked for sched, p in zip(ranks, parts) if sched.waiting}
        return Batch.merged(parts, blocked=next((b for b in _BLOCKED_ORDER if b in waits), BLOCKED_NONE))

    def note_step(self, batch: Batch) -> None:
        """After the step: each rank's ratio decays where that rank ran decodes alone (Scheduler.note_step)."""
        for sched, part in zip(self.ranks, self._parts):
            sched.note_step(part)

    def decay(self, steps: int) -> None:
        """`steps` decode steps: the ratios of the ranks that decode decay (a rank with nothing running has none)."""
        for sched in self.ranks:
            if sched.running:
                sched.decay(steps)
