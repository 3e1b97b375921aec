"""plan/caching_allocator: PyTorch's caching-allocator rules, one test each (each fails when its rule is taken out),
on allocations written by hand; the figures worked out in the comments from CUDACachingAllocator.cpp's rules."""

from __future__ import annotations

from kneecap.plan.caching_allocator import CachingAllocator, allocation_size, replay

MiB = 2**20


def allocated(ops: list, max_split: int | None = None) -> int:
    """("a", key, bytes) / ("f", key) through the allocator: torch.cuda.memory_allocated at the end (vLLM's figure)."""
    return replay(ops, max_split).allocated_bytes


def reserved_after_empty_cache(ops: list) -> int:
    """The same, then empty_cache: torch.cuda.memory_reserved (what SGLang's free-memory drop counts)."""
    alloc = replay(ops)
    alloc.empty_cache()
    return alloc.reserved_bytes


def test_requests_are_rounded_to_512_bytes():
    assert allocated([("a", None, 1)]) == 512
    assert allocated([("a", None, 1000)]) == 1024


def test_new_segments_are_2_mib_small_20_mib_under_10_mib_else_rounded_to_2_mib():
    # get_allocation_size: <= 1 MiB -> a 2 MiB small segment; < 10 MiB -> 20 MiB; else rounded up to 2 MiB
    assert allocation_size(4096) == 2 * MiB
    assert allocation_size(3 * MiB) == 20 * MiB
    assert allocation_size(12 * MiB + MiB // 2) == 14 * MiB
    assert allocation_size(64 * MiB) == 64 * MiB
    # through malloc: 9 MiB: a 20 MiB segment, 11 MiB split off; 10.5 MiB then takes that block, 0.5 MiB left: unsplit, 11 counted.
    # (A 10 MiB segment would leave 1 MiB, unsplit: 10 + a new 12 MiB segment split for 10.5 = 20.5 MiB)
    assert allocated([("a", None, 9 * MiB), ("a", None, int(10.5 * MiB))]) == 20 * MiB


def test_small_requests_share_2_mib_segments():
    # two 10 KiB norms: one 2 MiB small segment, split for each (>= 512 B left); a third segment only past 2 MiB
    assert reserved_after_empty_cache([("a", None, 10 * 1024)] * 2) == 2 * MiB
    assert reserved_after_empty_cache([("a", None, MiB)] * 3) == 4 * MiB


def test_small_requests_take_the_small_pool_not_a_large_blocks_remainder():
    # 18.5 MiB takes a new 20 MiB segment (2 MiB rounding) and leaves 1.5 MiB, split off; a 1 MiB request is small and
    # counts 1 MiB. Served from the large pool, it would take the 1.5 MiB block and leave 0.5 MiB: unsplit, 1.5 counted
    assert allocated([("a", None, int(18.5 * MiB)), ("a", None, MiB)]) == int(19.5 * MiB)


def test_large_blocks_split_only_when_more_than_1_mib_remains():
    # 11 MiB: a 12 MiB segment, 1 MiB would remain: not split, 12 counted; 10.5 MiB: 1.5 remains, split, 10.5 counted
    assert allocated([("a", None, 11 * MiB)]) == 12 * MiB
    assert allocated([("a", None, int(10.5 * MiB))]) == int(10.5 * MiB)
    # the split-off 1.5 MiB stays in the segment: a 1.5 MiB request then fits it, no new segment is reserved
    ops = [("a", None, int(12.5 * MiB)), ("a", None, int(1.5 * MiB))]
    assert reserved_after_empty_cache(ops) == 14 * MiB


def test_the_smallest_free_block_that_fits_is_taken():
    # free blocks of 16 and 14 MiB (16 first); 13.5 MiB takes the 14 (0.5 left, whole: 14 counted), not the 16
    # (2.5 left, split: 13.5 counted)
    ops = [("a", "x", 16 * MiB), ("a", "y", 14 * MiB), ("f", "x"), ("f", "y"), ("a", None, int(13.5 * MiB))]
    assert allocated(ops) == 14 * MiB


def test_freed_neighbours_merge():
    # two 6 MiB tensors from one 20 MiB segment, freed: one 20 MiB block, which 17 MiB splits (17 counted). Unmerged,
    # 17 MiB would take a new 18 MiB segment, 1 MiB left: 18 counted
    ops = [("a", "x", 6 * MiB), ("a", "y", 6 * MiB), ("f", "x"), ("f", "y"), ("a", None, 17 * MiB)]
    assert allocated(ops) == 17 * MiB


def test_empty_cache_returns_only_segments_with_nothing_allocated():
    # a 32 MiB temporary's segment goes back; the 14 MiB segment whose 12.5 MiB is still held stays, whole
    ops = [("a", None, int(12.5 * MiB)), ("a", "tmp", 32 * MiB), ("f", "tmp")]
    alloc = replay(ops)
    assert alloc.reserved_bytes == 46 * MiB
    alloc.empty_cache()
    assert alloc.reserved_bytes == 14 * MiB
    alloc.malloc(32 * MiB)  # a new segment once more: the freed one is gone
    assert alloc.reserved_bytes == 46 * MiB


def test_the_split_limit_keeps_large_tensors_whole():
    # max_split_size 20 MiB (vLLM 0.21+ around load_model): 20.5 MiB keeps its whole 22 MiB segment; without it the
    # 1.5 MiB left is split off
    assert allocated([("a", None, int(20.5 * MiB))], max_split=20 * MiB) == 22 * MiB
    assert allocated([("a", None, int(20.5 * MiB))]) == int(20.5 * MiB)


def test_a_large_request_takes_no_free_block_20_mib_larger_than_itself_under_the_split_limit():
    # a freed 40 MiB block and a 20 MiB request: under max_split_size the block is 20 MiB too large (the request
    # gets its own 20 MiB segment); taking it, unsplit (20 MiB >= the limit), would count 40
    ops = [("a", "x", 40 * MiB), ("f", "x"), ("a", None, 20 * MiB)]
    assert allocated(ops, max_split=20 * MiB) == 20 * MiB


def test_a_request_under_the_split_limit_takes_no_block_at_or_over_it():
    # a freed 24 MiB block and an 18 MiB request under max_split_size 20 MiB: "do not return an oversized block for a
    # large request", so a new 18 MiB segment is reserved (42 MiB); without the limit the 24 MiB block is split
    ops = [("a", "x", 24 * MiB), ("f", "x"), ("a", None, 18 * MiB)]
    assert replay(ops, 20 * MiB).reserved_bytes == 42 * MiB
    assert replay(ops).reserved_bytes == 24 * MiB


def test_allocated_bytes_go_back_to_zero_when_everything_is_freed():
    alloc = CachingAllocator()
    blocks = [alloc.malloc(n) for n in (100, 3 * MiB, 30 * MiB, 700 * 1024)]
    for b in blocks:
        alloc.free(b)
    assert alloc.allocated_bytes == 0
    alloc.empty_cache()
    assert alloc.reserved_bytes == 0
