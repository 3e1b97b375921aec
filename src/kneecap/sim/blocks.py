"""The paged KV block manager: which physical blocks each sequence holds, plain data.

Owns block tables, reference counts, the free queue and the prefix cache (block hash -> block);
not scheduling decisions (scheduler.py) nor bytes (a block is `block_size` tokens of every layer; with
sliding-window layers, GroupedBlockManager: `block_size` tokens of one layer group, a table per group).

Model (vLLM V1 KVCacheManager / nano-vllm BlockManager): a block is either free (ref 0, in the
free queue) or used (ref >= 1, in >= 1 block tables). A full block whose content is known may carry a
hash; a freed hashed block stays in the free queue *and* in the cache until it is evicted, i.e.
reallocated (the queue is LRU, first in first out: blocks are taken from its front, freed blocks join its back, a
sequence's tail blocks first so its prefix is evicted last). A cache hit on a free block takes it
out of the queue. Invariant: free + used == num_blocks, always.
"""

from __future__ import annotations

from typing import Hashable, Sequence

from kneecap.errors import KneecapError


def blocks_for(tokens: int, block_size: int) -> int:
    """Whole blocks needed for `tokens` tokens."""
    return -(-tokens // block_size)


class BlockManager:
    """Blocks of `block_size` tokens, `num_blocks` of them; sequences are keyed by any hashable id."""

    grouped = False  # one block table per sequence (GroupedBlockManager: one per KV cache group)

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1:
            raise KneecapError(
                f"the KV pool holds {num_blocks} blocks",
                "give the engine memory for at least one block "
                "(lower --overhead-gib or --frag, raise --mem-util or --tp, or use fp8 KV)",
            )
        if block_size < 1:
            raise KneecapError(f"--block-size must be >= 1, got {block_size}", "pass e.g. --block-size 16")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_count = [0] * num_blocks
        self.block_hash: list[Hashable | None] = [None] * num_blocks
        self.cached: dict[Hashable, int] = {}  # hash -> block id
        # the free queue, oldest first. A block leaving it from the middle (a cache hit on a free block) keeps its
        # entry there, counted in _stale[block], and is skipped when it reaches the front; a free block's valid
        # entry is its last one (a block is free exactly when its ref count is 0). The queue is the list
        # _free[_head:]: blocks are taken from its front by moving _head (whole runs at once, by slicing), freed
        # blocks join its back, and the taken prefix is dropped once it is half the list (_compact)
        self._free: list[int] = list(range(num_blocks))
        self._head = 0
        self._stale = [0] * num_blocks
        self._num_stale = 0
        self._num_shared = 0  # blocks held by more than one sequence (ref count >= 2)
        self.tables: dict[Hashable, list[int]] = {}
        # prefix-cache counters, in tokens (as vLLM's prefix_cache_queries / prefix_cache_hits)
        self.query_tokens = 0
        self.hit_tokens = 0
        # what a remembered prefix lookup (prefix_hit) depends on: the hashes whose block left the cache or whose
        # block became free or used, in order, since the log's epoch began (cleared, with a new epoch, once longer
        # than _log_limit). Adding a hash to the cache is not logged: it can only lengthen a lookup, and prefix_hit
        # resumes from where it stopped
        self._log: list[Hashable] = []
        self._epoch = 0
        self._log_limit = max(4096, 2 * num_blocks)

    # --- queries -----------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free) - self._head - self._num_stale

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free) + self._head + self._num_stale

    def num_held(self, seq_id: Hashable) -> int:
        table = self.tables.get(seq_id)
        return len(table) if table is not None else 0

    def max_blocks_for(self, tokens: int) -> int:
        """Blocks a sequence of `tokens` tokens holds at most (what must fit the pool)."""
        return blocks_for(tokens, self.block_size)

    @property
    def capacity_tokens(self) -> int:
        """Tokens one sequence could hold with the whole pool."""
        return self.num_blocks * self.block_size

    # --- allocation --------------------------------------------------------------------------
    def _compact(self) -> None:
        """Drop the taken front of the free list once it is at least half of it (amortised O(1) per block)."""
        if self._head > 1024 and 2 * self._head >= len(self._free):
            del self._free[: self._head]
            self._head = 0

    def _take_free(self) -> int:
        free, stale, head = self._free, self._stale, self._head
        block = free[head]  # LRU: evict the oldest free block
        head += 1
        while stale[block]:  # an entry left behind by a cache hit: the block is not (or not there) free
            stale[block] -= 1
            self._num_stale -= 1
            block = free[head]
            head += 1
        self._head = head
        self._compact()
        h = self.block_hash[block]
        if h is not None:  # evicting a cached block: its content is gone
            self._log.append(h)
            if self.cached.get(h) == block:
                del self.cached[h]
            self.block_hash[block] = None
        self.ref_count[block] = 1
        return block

    def _take_free_many(self, n: int) -> list[int]:
        """`n` blocks from the front of the free queue, as n calls of _take_free would take them."""
        if n == 1:
            return [self._take_free()]
        if self._num_stale:
            return [self._take_free() for _ in range(n)]  # (sets ref counts and forgets hashes itself)
        head = self._head
        taken = self._free[head : head + n]
        if len(taken) < n:
            raise IndexError("take from an empty free queue")
        self._head = head + n
        self._compact()
        if self.cached:  # some free blocks may hold cached content: evicting it forgets the hash
            block_hash, cached = self.block_hash, self.cached
            for block in taken:
                h = block_hash[block]
                if h is not None:
                    self._log.append(h)
                    if cached.get(h) == block:
                        del cached[h]
                    block_hash[block] = None
            self._trim_log()
        # else nothing is cached, so no free block carries a hash (register() and free_seq() keep both in step)
        ref = self.ref_count
        for block in taken:
            ref[block] = 1
        return taken

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block, as vLLM's POST /reset_prefix_cache does (v1 BlockPool.reset_prefix_cache):
        refused (False, nothing changed) while any block is in use."""
        if self.num_used:
            return False
        self.cached.clear()
        self.block_hash = [None] * self.num_blocks
        self._log.clear()
        self._epoch += 1
        return True

    def _trim_log(self) -> None:
        if len(self._log) > self._log_limit:  # remembered lookups older than this rescan once
            self._log.clear()
            self._epoch += 1

    def lookup_prefix(self, hashes: Sequence[Hashable]) -> int:
        """How many leading blocks of `hashes` are cached (no state change)."""
        if not self.enable_prefix_caching:
            return 0
        n = 0
        for h in hashes:
            if h not in self.cached:
                break
            n += 1
        return n

    def prefix_hit(self, hashes: Sequence[Hashable], memo: list | None) -> tuple[int, int, list]:
        """(lookup_prefix(hashes), how many of those leading cached blocks are in use, memo): the lookup
        remembered in `memo` (the list this returned for the same `hashes` object, or None), brought up to date
        from the log of hashes that left the cache or whose block became free or used since: a hit block that left
        the cache shortens the hit to it, one whose block became free or used is counted again, and hashes cached
        since can only lengthen the hit, so the scan resumes where it stopped. A waiting sequence's lookup costs
        O(changes) a step instead of O(prompt blocks)."""
        if not hashes or not self.enable_prefix_caching:
            return 0, 0, memo
        self._trim_log()
        log, cached, ref = self._log, self.cached, self.ref_count
        if memo is not None and memo[0] is hashes and memo[2] == self._epoch:
            _, index, _, pos, hit, used = memo
            if pos < len(log):
                unique = len(index) == len(hashes)
                for h in log[pos:]:
                    i = index.get(h)
                    if i is None or i >= hit:
                        continue
                    if not unique:  # a hash twice in the prompt: count again from the start
                        hit = 0
                        used.clear()
                        break
                    block = cached.get(h)
                    if block is None:  # left the cache: the hit ends before it
                        hit = i
                    elif ref[block] > 0:
                        used.add(i)
                    else:
                        used.discard(i)
                if hit < memo[4]:
                    used.difference_update([i for i in used if i >= hit])
        else:
            index = dict(zip(reversed(hashes), range(len(hashes) - 1, -1, -1)))  # a hash's first index
            hit, used = 0, set()
            memo = [hashes, index, self._epoch, 0, 0, used]
        n = len(hashes)
        while hit < n:
            block = cached.get(hashes[hit])
            if block is None:
                break
            if ref[block] > 0:
                used.add(hit)
            hit += 1
        memo[3], memo[4] = len(log), hit
        return hit, len(used), memo

    def new_blocks_needed(self, seq_id: Hashable, num_tokens: int, hashes: Sequence[Hashable] = ()) -> int:
        """Free blocks that `allocate(seq_id, num_tokens, hashes)` would take (cache hits on free blocks count)."""
        have = self.num_held(seq_id)
        need = blocks_for(num_tokens, self.block_size) - have
        if need <= 0:
            return 0
        if have == 0 and hashes:
            hit = self.lookup_prefix(hashes)
            # a hit on a used block costs nothing; a hit on a free block still removes it from the queue
            hit_used = sum(1 for h in hashes[:hit] if self.ref_count[self.cached[h]] > 0)
            return need - hit_used
        return need

    def allocate(self, seq_id: Hashable, num_tokens: int, hashes: Sequence[Hashable] = ()) -> int | None:
        """Grow `seq_id`'s table to hold `num_tokens` tokens. Returns tokens served from the prefix cache
        (only on a sequence's first allocation, when `hashes` names its leading full blocks), or None —
        with no state change — if there are not enough free blocks."""
        table = self.tables.get(seq_id)
        have = len(table) if table is not None else 0
        need = blocks_for(num_tokens, self.block_size) - have
        if need <= 0:
            return 0
        if self.new_blocks_needed(seq_id, num_tokens, hashes) > self.num_free:
            return None
        if table is None:
            table = self.tables[seq_id] = []
        hit = 0
        if have == 0 and hashes and self.enable_prefix_caching:
            hit = min(self.lookup_prefix(hashes), need)
            for h in hashes[:hit]:
                table.append(self._hold(self.cached[h]))
        if need > hit:
            table.extend(self._take_free_many(need - hit))
        return hit * self.block_size

    def _hold(self, block: int) -> int:
        """One reference more on a cached block (a prefix-cache hit); a free one leaves the free queue."""
        if self.ref_count[block] == 0:
            self._log.append(self.block_hash[block])
            self._stale[block] += 1  # its entry in the free queue is skipped
            self._num_stale += 1
        self.ref_count[block] += 1
        if self.ref_count[block] == 2:
            self._num_shared += 1
        return block

    def _set_hash(self, block: int, block_hash: Hashable) -> None:
        """Cache `block` under `block_hash` unless either is cached already."""
        if self.block_hash[block] is None and block_hash not in self.cached:
            self.block_hash[block] = block_hash
            self.cached[block_hash] = block

    def count_query(self, query_tokens: int, hit_tokens: int) -> None:
        """Record a prefix-cache lookup (tokens asked for, tokens found)."""
        self.query_tokens += query_tokens
        self.hit_tokens += hit_tokens

    def register(self, seq_id: Hashable, index: int, block_hash: Hashable) -> None:
        """Mark block `index` of `seq_id` (now full, content known) as cached under `block_hash`."""
        if not self.enable_prefix_caching:
            return
        self._set_hash(self.tables[seq_id][index], block_hash)

    def free_seq(self, seq_id: Hashable, own_hashes: Sequence[Hashable] = ()) -> None:
        """Release every block of `seq_id`. `own_hashes[i]`, if given, caches block i under that hash
        (a preempted sequence keeps its computed blocks findable for its recompute)."""
        table = self.tables.pop(seq_id, None)
        if not table:
            return
        if own_hashes and self.enable_prefix_caching:
            for block, h in zip(table, own_hashes):
                self._set_hash(block, h)
        ref, free = self.ref_count, self._free
        if not self._num_shared:  # every block is this sequence's alone: all of them become free
            for block in table:
                ref[block] = 0
            free.extend(reversed(table))  # tail first: the prefix is evicted last
            if self.cached:  # its cached blocks became free
                block_hash, log = self.block_hash, self._log
                log.extend(h for block in table if (h := block_hash[block]) is not None)
                self._trim_log()
            return
        self._release(reversed(table))
        self._trim_log()

    def _release(self, blocks) -> None:
        """One reference less on each block, in order: a block no one holds joins the free queue's back."""
        ref, free, block_hash = self.ref_count, self._free, self.block_hash
        for block in blocks:
            rc = ref[block] - 1
            ref[block] = rc
            if rc == 0:
                free.append(block)
                if block_hash[block] is not None:
                    self._log.append(block_hash[block])
            elif rc == 1:
                self._num_shared -= 1

    def take_many(self, seq_ids: Sequence[Hashable], counts: Sequence[int]) -> None:
        """Append counts[i] fresh blocks to seq_ids[i] (caller has checked they are free): the decode fast path."""
        take = self._take_free_many
        tables = self.tables
        for sid, n in zip(seq_ids, counts):
            if n:
                tables[sid].extend(take(n))


class GroupedBlockManager(BlockManager):
    """One pool of blocks shared by several KV cache groups (plan.engines.VllmLayout: vLLM 0.32
    kv_cache_utils._get_kv_cache_groups_uniform_page_size), each sequence holding one block table per group
    (vLLM V1 KVCacheCoordinator over SingleTypeKVCacheManagers, one BlockPool). A group of sliding-window layers
    frees the blocks that fall out of the window (SlidingWindowManager.remove_skipped_blocks: before each
    allocation, the first (computed - window + 1) // block_size blocks of its table become null blocks), and a
    prefix-cache hit there needs the window's last ceil((window - 1) / block_size) blocks cached
    (find_longest_cache_hit). Group 0's table is keyed by the sequence id, group j's by ("g", j, id); a table
    lists its real blocks, `offset` counts the null blocks before them. num_held(id) is a table's length
    including null blocks (blocks_for of the tokens it covers), as vLLM's req_to_blocks."""

    grouped = True

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool, windows: Sequence[int]):
        super().__init__(num_blocks, block_size, enable_prefix_caching)
        self.windows = tuple(windows)
        self.offset: dict[Hashable, int] = {}
        self._seq_keys: dict[Hashable, tuple] = {}  # a held sequence's table keys (dropped by free_seq)

    def _keys(self, seq_id: Hashable) -> tuple:
        keys = self._seq_keys.get(seq_id)
        if keys is None:
            if isinstance(seq_id, tuple) and seq_id[:1] == ("state",):  # linear-attention state: one table
                keys = (seq_id,)
            else:
                keys = (seq_id,) + tuple(("g", j, seq_id) for j in range(1, len(self.windows)))
            self._seq_keys[seq_id] = keys
        return keys

    def _skipped(self, j: int, computed: int) -> int:
        w = self.windows[j]
        return max(0, computed - w + 1) // self.block_size if w else 0

    def _len(self, key: Hashable) -> int:
        table = self.tables.get(key)
        return (len(table) if table is not None else 0) + self.offset.get(key, 0)

    def num_held(self, seq_id: Hashable) -> int:
        return self._len(seq_id)

    def max_blocks_for(self, tokens: int) -> int:
        """Blocks a sequence of `tokens` tokens holds at most, over all groups (what must fit the pool)."""
        n = blocks_for(tokens, self.block_size)
        # a sliding group: vLLM's SlidingWindowSpec.max_admission_blocks_per_request with one token in flight
        return sum(n if not w else min(n, blocks_for(w, self.block_size) + 1) for w in self.windows)

    @property
    def capacity_tokens(self) -> int:
        full = sum(1 for w in self.windows if not w)
        if not full:
            return self.num_blocks * self.block_size
        sliding = sum(blocks_for(w, self.block_size) + 1 for w in self.windows if w)
        return max(0, self.num_blocks - sliding) // full * self.block_size

    def trim(self, seq_id: Hashable, computed: int) -> None:
        """Free the blocks of `seq_id`'s sliding groups that `computed` tokens leave out of the window."""
        windows, offset, tables, bs = self.windows, self.offset, self.tables, self.block_size
        for j, key in enumerate(self._keys(seq_id)):
            w = windows[j]
            if not w or computed < w:  # a full group, or nothing out of the window yet
                continue
            skip = (computed - w + 1) // bs - offset.get(key, 0)
            table = tables.get(key)
            if skip <= 0 or not table:
                continue
            drop = table[:skip]
            del table[:skip]
            offset[key] = offset.get(key, 0) + len(drop)
            self._release(drop)

    def decode_blocks(self, seq_id: Hashable, computed: int) -> None:
        """A decoding sequence's block work for its next token when the free blocks suffice (the decode fast path):
        trim its sliding groups, then take the blocks `allocate(seq_id, computed + 1)` would take, group by group."""
        bs, tables, offset = self.block_size, self.tables, self.offset
        self.trim(seq_id, computed)
        need = -(-(computed + 1) // bs)
        for key in self._keys(seq_id):
            table = tables.get(key)
            if table is None:
                table = tables[key] = []
            fresh = need - len(table) - offset.get(key, 0)
            if fresh > 0:
                table.extend(self._take_free_many(fresh))

    def _cached_in(self, j: int, h: Hashable) -> bool:
        return (h if j == 0 else (j, h)) in self.cached

    def lookup_prefix(self, hashes: Sequence[Hashable]) -> int:
        """Leading blocks of `hashes` cached in every group: the full groups' hit, shortened until each sliding group
        holds the window's blocks before it (vLLM's hybrid coordinator)."""
        hit = super().lookup_prefix(hashes) if not self.windows[0] else len(hashes) * self.enable_prefix_caching
        for j, w in enumerate(self.windows):
            if j == 0 and not w:
                continue
            if not w:  # another full group: its leading cached blocks
                hit = next((i for i, h in enumerate(hashes[:hit]) if not self._cached_in(j, h)), hit)
                continue
            need = blocks_for(w - 1, self.block_size)
            while hit > 0 and not all(self._cached_in(j, h) for h in hashes[max(0, hit - need) : hit]):
                hit -= 1
        return hit

    def _group_plan(self, j: int, key: Hashable, num_tokens: int, hashes: Sequence[Hashable], hit: int):
        """(cached blocks to take, fresh blocks) for group j to cover `num_tokens` tokens."""
        have = self._len(key)
        need = blocks_for(num_tokens, self.block_size) - have
        if need <= 0:
            return [], 0
        taken = []
        if have == 0 and hit:
            skip = self._skipped(j, hit * self.block_size)
            taken = [self.cached[h if j == 0 else (j, h)] for h in hashes[skip:hit]]
            need -= skip
        return taken, need - len(taken)

    def new_blocks_needed(self, seq_id: Hashable, num_tokens: int, hashes: Sequence[Hashable] = ()) -> int:
        cap = blocks_for(num_tokens, self.block_size)
        hit = self.lookup_prefix(hashes[:cap]) if hashes and self.num_held(seq_id) == 0 else 0
        total = 0
        for j, key in enumerate(self._keys(seq_id)):
            taken, fresh = self._group_plan(j, key, num_tokens, hashes, hit)
            total += fresh + sum(1 for b in taken if self.ref_count[b] == 0)
        return total

    def allocate(self, seq_id: Hashable, num_tokens: int, hashes: Sequence[Hashable] = ()) -> int | None:
        if self.num_held(seq_id) >= blocks_for(num_tokens, self.block_size):
            return 0
        if self.new_blocks_needed(seq_id, num_tokens, hashes) > self.num_free:
            return None
        first = self.num_held(seq_id) == 0
        hit = self.lookup_prefix(hashes[: blocks_for(num_tokens, self.block_size)]) if first and hashes else 0
        plans = [(key, *self._group_plan(j, key, num_tokens, hashes, hit)) for j, key in enumerate(self._keys(seq_id))]
        for j, (key, taken, fresh) in enumerate(plans):  # every group's hits leave the free queue before any eviction
            table = self.tables.get(key)
            if table is None:
                table = self.tables[key] = []
                skip = self._skipped(j, hit * self.block_size) if hit else 0
                if skip:
                    self.offset[key] = skip
            table.extend(self._hold(block) for block in taken)
        for key, _, fresh in plans:
            if fresh:
                self.tables[key].extend(self._take_free_many(fresh))
        return hit * self.block_size

    def _cache(self, j: int, key: Hashable, index: int, block_hash: Hashable) -> None:
        i = index - self.offset.get(key, 0)
        table = self.tables.get(key)
        if table is None or not 0 <= i < len(table):
            return  # a null block (out of the window): nothing to cache
        self._set_hash(table[i], block_hash if j == 0 else (j, block_hash))

    def register(self, seq_id: Hashable, index: int, block_hash: Hashable) -> None:
        if not self.enable_prefix_caching:
            return
        for j, key in enumerate(self._keys(seq_id)):
            self._cache(j, key, index, block_hash)

    def free_seq(self, seq_id: Hashable, own_hashes: Sequence[Hashable] = ()) -> None:
        keys = self._keys(seq_id)
        self._seq_keys.pop(seq_id, None)
        for j, key in enumerate(keys):
            if own_hashes and self.enable_prefix_caching:
                for i, h in enumerate(own_hashes):
                    self._cache(j, key, i, h)
            self.offset.pop(key, None)
            self._release(reversed(self.tables.pop(key, None) or ()))
        self._trim_log()
