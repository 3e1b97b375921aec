"""Content prefix caching of the served engine: the index never aliases different content (hypothesis),
and shared prompts really hit the simulated cache over HTTP."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from kneecap.serve.prefix import PrefixIndex

BS = 4
# prompts built from a small alphabet of blocks, so that shared prefixes and divergences are frequent
blocks = st.sampled_from([(1, 2, 3, 4), (5, 6, 7, 8), (1, 2, 3, 5), (9, 9, 9, 9)])
prompts = st.lists(blocks, min_size=0, max_size=6).flatmap(
    lambda bl: st.lists(st.integers(0, 3), max_size=3).map(lambda tail: [t for b in bl for t in b] + tail)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(prompts, min_size=1, max_size=25), st.integers(1, 5))
def test_same_group_means_same_content_over_the_shared_prefix(seq, max_groups):
    index = PrefixIndex(BS, max_groups=max_groups)
    seen: dict[int, list[tuple[list[int], int]]] = {}
    for ids in seq:
        group, shared = index.assign(ids)
        assert shared % BS == 0 and 0 <= shared <= len(ids)
        if group is None:
            assert len(ids) < BS and shared == 0
            continue
        for other, other_shared in seen.get(group, []):
            n = min(shared, other_shared)
            assert ids[:n] == other[:n]  # block i of this group always names the same content
        seen.setdefault(group, []).append((ids, shared))


def test_repeats_share_everything_and_divergence_stops_sharing():
    index = PrefixIndex(BS)
    a = list(range(12))
    assert index.assign(a) == (0, 12)
    assert index.assign(a) == (0, 12)
    assert index.assign(a[:8] + [99, 98, 97, 96]) == (0, 8)
    assert index.assign([7] * 12) == (1, 12)  # a new first block founds a new group
    assert index.assign(a + [1, 2, 3, 4]) == (0, 16)  # continues the founder: its extra block is shareable


def test_shared_prompts_hit_the_served_cache(tmp_path):
    import json
    import urllib.request

    from kneecap.cli.serve_process import start_server, stop_server
    from kneecap.client.server_metrics import parse_prometheus

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "4096"])

    def hits() -> tuple[float, float]:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            s = parse_prometheus(
                resp.read().decode(), ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
            )
        return s["vllm:prefix_cache_hits_total"][0][1], s["vllm:prefix_cache_queries_total"][0][1]

    def complete(prompt) -> None:
        body = json.dumps({"prompt": prompt, "max_tokens": 2}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200

    try:
        shared = list(range(5000, 5800))  # 800 tokens = 50 blocks of 16
        complete(shared + [1, 2, 3])
        h0, q0 = hits()
        complete(shared + [4, 5, 6])
        h1, q1 = hits()
        complete("entirely different words " * 40)
        h2, q2 = hits()
    finally:
        stop_server(proc)
    assert (h0, q1 - q0) == (0, 803)
    assert h1 - h0 == 800  # the 50 shared blocks; the block holding the divergence is computed again
    assert h2 == h1 and q2 - q1 == 120  # 3 words x 40
