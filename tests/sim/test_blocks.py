"""Block manager: invariants after every operation, over random allocate / grow / register / free sequences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simkit import check_blocks
from kneecap.errors import KneecapError
from kneecap.sim.blocks import BlockManager, blocks_for

OPS = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "grow", "register", "free", "free_cached"]),
        st.integers(0, 7),
        st.integers(1, 200),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=60,
)


def _expected_tokens(tokens: dict, sid) -> int:
    return tokens.get(sid, 0)


@settings(max_examples=200, deadline=None)
@given(num_blocks=st.integers(1, 40), block_size=st.sampled_from([1, 4, 16]), caching=st.booleans(), ops=OPS)
def test_invariants_after_every_operation(num_blocks, block_size, caching, ops):
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
    tokens: dict[int, int] = {}  # tokens each live sequence's table must hold
    for op, sid, n, group in ops:
        prefix = [("p", group, i) for i in range(n // block_size)]
        if op == "alloc" and sid not in tokens:
            free_before = bm.num_free
            need = bm.new_blocks_needed(sid, n, prefix)
            got = bm.allocate(sid, n, prefix)
            if got is None:
                assert need > free_before and bm.num_free == free_before and bm.num_held(sid) == 0
            else:
                assert got % block_size == 0 and got <= n
                assert bm.num_free == free_before - need
                tokens[sid] = n
        elif op == "grow" and sid in tokens:
            target = tokens[sid] + n
            if bm.allocate(sid, target) is not None:
                tokens[sid] = target
        elif op == "register" and sid in tokens:
            full = tokens[sid] // block_size
            for i in range(min(full, len(prefix))):
                bm.register(sid, i, prefix[i])
        elif op in ("free", "free_cached") and sid in tokens:
            own = [("s", sid, i) for i in range(tokens[sid] // block_size)] if op == "free_cached" else ()
            bm.free_seq(sid, own)
            del tokens[sid]
        check_blocks(bm)  # free + used == total, refs >= 0 and equal to table occurrences, cache consistent
        for live, held_tokens in tokens.items():
            # no sequence holds more blocks than its tokens need
            assert bm.num_held(live) == blocks_for(held_tokens, block_size)
        if not caching:
            assert not bm.cached
    for sid in list(tokens):
        bm.free_seq(sid)
    check_blocks(bm)
    assert bm.num_free == num_blocks  # everything comes back


def test_prefix_hit_shares_blocks_and_counts_refs():
    bm = BlockManager(10, 4)
    hashes = [("p", 0, i) for i in range(2)]
    assert bm.allocate("a", 9, hashes) == 0  # nothing cached yet
    for i, h in enumerate(hashes):
        bm.register("a", i, h)
    assert bm.allocate("b", 9, hashes) == 8  # two full blocks found
    assert bm.tables["a"][:2] == bm.tables["b"][:2]
    assert bm.num_used == 3 + 1  # a: 3 blocks; b: shares 2, adds 1
    bm.free_seq("a")
    check_blocks(bm)
    assert bm.num_used == 3  # shared blocks stay referenced by b
    bm.free_seq("b")
    check_blocks(bm)
    # freed but still cached: a third sequence finds them without recomputing
    assert bm.lookup_prefix(hashes) == 2
    assert bm.allocate("c", 8, hashes) == 8


def test_lru_eviction_drops_cached_content():
    bm = BlockManager(2, 4)
    bm.allocate("a", 8)
    bm.register("a", 0, "h0")
    bm.free_seq("a")
    assert bm.lookup_prefix(["h0"]) == 1
    bm.allocate("b", 8)  # needs both blocks: the cached one is evicted
    assert bm.lookup_prefix(["h0"]) == 0
    check_blocks(bm)


def test_allocation_failure_changes_nothing():
    bm = BlockManager(3, 16)
    assert bm.allocate("a", 40) == 0
    assert bm.allocate("b", 17) is None
    assert bm.num_held("b") == 0 and bm.num_free == 0
    check_blocks(bm)


def test_empty_pool_is_a_one_line_error():
    with pytest.raises(KneecapError) as exc:
        BlockManager(0, 16)
    assert "0 blocks" in exc.value.one_line()
