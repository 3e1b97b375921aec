"""Prefix caching by content for the served engine: map a prompt's token ids to the simulator's
(prefix_group, prefix_tokens) so that requests sharing leading blocks hit the same cached blocks.

Owns a bounded index of prompt "founders"; not the cache itself (kneecap.sim.blocks holds it). The simulator
names block i of a request by (prefix_group, i); content is known only here. Rule: full blocks of the
prompt are chained (hash of previous chain value and the block's ids, as vLLM's block hashes chain
parent and tokens). The first prompt seen with a given first block founds a group (a fresh id) and
registers all its full blocks; a later prompt with the same first block gets that group and, as prefix,
the leading blocks whose chain matches the founder's (extending the founder's chain when it matches
all of it). Blocks past the divergence are not shared — a conservative rule that never produces a false
hit (a group id is never reused, so an index eviction cannot alias old cached blocks). Pure; no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

MAX_GROUPS = 4096  # founders remembered (LRU); older groups simply stop matching


class PrefixIndex:
    """Token ids -> (group id, shared prefix tokens) for kneecap.workload.RequestSpec."""

    def __init__(self, block_size: int, max_groups: int = MAX_GROUPS):
        self.block_size = block_size
        self.max_groups = max_groups
        self._groups: OrderedDict[int, tuple[int, list[int]]] = OrderedDict()  # first-block chain -> (id, chain)
        self._next_id = 0

    def chain(self, ids: Sequence[int]) -> list[int]:
        bs = self.block_size
        out, h = [], 0
        for i in range(len(ids) // bs):
            h = hash((h, tuple(ids[i * bs : (i + 1) * bs])))
            out.append(h)
        return out

    def assign(self, ids: Sequence[int]) -> tuple[int | None, int]:
        """(prefix_group, prefix_tokens) for a prompt; (None, 0) when it has no full block."""
        chains = self.chain(ids)
        if not chains:
            return None, 0
        root = chains[0]
        found = self._groups.get(root)
        if found is None:
            group = self._next_id
            self._next_id += 1
            self._groups[root] = (group, chains)
            if len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)
            return group, len(chains) * self.block_size
        self._groups.move_to_end(root)
        group, founder = found
        k, n = 0, min(len(founder), len(chains))
        while k < n and founder[k] == chains[k]:
            k += 1
        if k == len(founder) and len(chains) > k:
            founder.extend(chains[k:])  # this prompt continues the founder's: its extra blocks become shareable
            k = len(chains)
        return group, k * self.block_size
