"""PyTorch's CUDA caching allocator on one stream, reduced to what sets its allocated and reserved bytes (pure).

Owns the allocator's rules and a replay of a list of allocations and frees through them; does not own which tensors
an engine builds, nor in what order (vllm_load.py, sglang_load.py), nor which figure an engine logs: vLLM reads the
allocated bytes once its load is over (`allocated_bytes`), SGLang the drop in free memory after `empty_cache`
(`reserved_bytes`). No library exposes this arithmetic without a GPU (torch.cuda's allocator is C++ behind the
device), so the rules are re-stated from PyTorch's c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator, read
at main commit 001074d and in older copies of the file, PyTorch 2.5 among them, which agree on every rule below;
SGLang 0.4.3 / 0.4.4 require 2.5, vLLM 0.10.2 to 0.33.0 pin torch 2.8.0 to 2.14.0, requirements/cuda.txt, whose tags
were not read one by one):

- round_size: every request is rounded up to a multiple of kMinBlockSize = 512 B (and to at least 512 B);
- get_pool: a rounded request of kSmallSize = 1 MiB or less is served from the small pool, the rest from the large
  pool; small requests never share a segment with large ones;
- get_allocation_size: a new segment is kSmallBuffer = 2 MiB for a small request, kLargeBuffer = 20 MiB for a large
  one under kMinLargeAlloc = 10 MiB, else the request rounded up to kRoundLarge = 2 MiB;
- get_free_block: the smallest free block of the pool that fits (BlockComparatorSize: size, then address); with
  max_split_size set, a request under it never takes a free block of max_split_size or more, and a request of
  max_split_size or more takes a free block only if it is under the request + kLargeBuffer
  (max_non_split_rounding_size's default);
- should_split: a small block is split when 512 B or more would remain, a large one only when the request is under
  max_split_size and more than kSmallSize would remain; an unsplit block counts whole in the allocated bytes
  (allocated_bytes grows by block->size in malloc);
- free_block / try_merge_blocks: a freed block merges with the free neighbours of its segment;
- empty_cache / release_cached_blocks: segments with nothing allocated in them go back to the driver.

Not modelled: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which maps 2 MiB pages instead),
other streams, garbage-collection thresholds, and what happens when the device is out of memory.
"""

from __future__ import annotations

MiB = 2**20
K_MIN_BLOCK = 512  # kMinBlockSize
K_SMALL_SIZE = MiB  # kSmallSize: largest small-pool request
K_SMALL_BUFFER = 2 * MiB  # kSmallBuffer: a small-pool segment
K_LARGE_BUFFER = 20 * MiB  # kLargeBuffer: a new segment for large requests under kMinLargeAlloc
K_MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
K_ROUND_LARGE = 2 * MiB  # kRoundLarge


def round_size(nbytes: int) -> int:
    """round_size: a request rounded up to a multiple of 512 B, at least 512 B."""
    return max(K_MIN_BLOCK, -(-nbytes // K_MIN_BLOCK) * K_MIN_BLOCK)


def allocation_size(nbytes: int) -> int:
    """get_allocation_size: the new segment's size for a rounded request that no free block holds."""
    if nbytes <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if nbytes < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-nbytes // K_ROUND_LARGE) * K_ROUND_LARGE


class Block:
    """A block of one segment; `address` orders blocks as their pointers do (segment, then offset in it)."""

    __slots__ = ("size", "free", "prev", "next", "segment", "offset", "small")

    def __init__(self, size: int, segment: int, offset: int, small: bool) -> None:
        self.size, self.free, self.prev, self.next = size, True, None, None
        self.segment, self.offset, self.small = segment, offset, small

    @property
    def address(self) -> tuple[int, int]:
        return self.segment, self.offset


class CachingAllocator:
    """malloc returns the block it hands out, for free; `allocated_bytes` is torch.cuda.memory_allocated's figure,
    `reserved_bytes` torch.cuda.memory_reserved's."""

    def __init__(self, max_split_bytes: int | None = None) -> None:
        self.max_split = max_split_bytes if max_split_bytes is not None else 2**63
        self.allocated_bytes = 0
        self._free: dict[bool, list[Block]] = {True: [], False: []}  # free blocks by pool (small?)
        self._segments: dict[int, int] = {}  # segment number -> size, for the segments held
        self._next_segment = 0  # later segments sort after earlier ones (their addresses are unknown)

    @property
    def reserved_bytes(self) -> int:
        return sum(self._segments.values())

    def _fits(self, b: Block, size: int) -> bool:
        if b.size < size:
            return False
        if size < self.max_split and b.size >= self.max_split:
            return False  # "Do not return an oversized block for a large request"
        return not (size >= self.max_split and b.size >= size + K_LARGE_BUFFER)

    def malloc(self, nbytes: int) -> Block:
        size = round_size(nbytes)
        small = size <= K_SMALL_SIZE
        pool = self._free[small]
        fits = [b for b in pool if self._fits(b, size)]
        if fits:
            block = min(fits, key=lambda b: (b.size, b.address))
            pool.remove(block)
        else:
            block = Block(allocation_size(size), self._next_segment, 0, small)
            self._segments[self._next_segment] = block.size
            self._next_segment += 1
        left = block.size - size
        if (small and left >= K_MIN_BLOCK) or (not small and size < self.max_split and left > K_SMALL_SIZE):
            rest = Block(left, block.segment, block.offset + size, small)  # should_split
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            pool.append(rest)
        block.free = False
        self.allocated_bytes += block.size
        return block

    def free(self, block: Block) -> None:
        block.free = True
        self.allocated_bytes -= block.size
        pool = self._free[block.small]
        for neighbour in (block.prev, block.next):  # try_merge_blocks
            if neighbour is not None and neighbour.free:
                pool.remove(neighbour)
                block.size += neighbour.size
                if neighbour is block.prev:
                    block.prev, block.offset = neighbour.prev, neighbour.offset
                    if neighbour.prev is not None:
                        neighbour.prev.next = block
                else:
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        pool.append(block)

    def empty_cache(self) -> None:
        """release_cached_blocks: a free block with no neighbour is a whole segment, which goes back."""
        for small, pool in self._free.items():
            whole = [b for b in pool if b.prev is None and b.next is None]
            for b in whole:
                del self._segments[b.segment]
            self._free[small] = [b for b in pool if b.prev is not None or b.next is not None]


# one event of a load: ("a", key, bytes) allocates (key None: kept to the end; a 4th item "buffer" marks a module
# buffer rather than a parameter), ("f", key) frees what ("a", key, ...) allocated
Op = tuple


def replay(ops: list[Op], max_split_bytes: int | None = None) -> CachingAllocator:
    """The allocator after `ops`: read its allocated_bytes, or empty_cache() and read its reserved_bytes."""
    alloc = CachingAllocator(max_split_bytes)
    named: dict[str, Block] = {}
    for op in ops:
        if op[0] == "a":
            block = alloc.malloc(op[2])
            if op[1] is not None:
                named[op[1]] = block
        else:
            alloc.free(named.pop(op[1]))
    return alloc
