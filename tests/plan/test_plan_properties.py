"""Properties of the ledger over many deployments (hypothesis): monotone in memory, antitone in context,
paged >= contiguous, and the ledger always sums to the HBM."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.plan.ledger import build_plan

from plan_helpers import make_gqa_70b

MODEL = make_gqa_70b()
GPU = get_gpu("mi300x")

hbm = st.integers(min_value=150_000_000_000, max_value=400_000_000_000)
ctx = st.integers(min_value=1, max_value=262_144)
tps = st.sampled_from([1, 2, 4, 8, 16])
dtypes = st.sampled_from(["fp16", "fp8", "int4", "nvfp4"])
kv = st.sampled_from(["bf16", "fp8"])


def plan_or_none(dep, **kw):
    try:
        return build_plan(dep, **kw)
    except KneecapError:
        return None


@settings(max_examples=150, deadline=None)
@given(hbm, st.integers(min_value=0, max_value=50_000_000_000), ctx, tps, dtypes, kv)
def test_capacity_monotone_in_memory(hbm_bytes, extra, context, tp, wd, kd):
    small = plan_or_none(Deployment(MODEL, GPU, tp=tp, weight_dtype=wd, kv_dtype=kd, hbm=hbm_bytes), context=context)
    big = plan_or_none(
        Deployment(MODEL, GPU, tp=tp, weight_dtype=wd, kv_dtype=kd, hbm=hbm_bytes + extra), context=context
    )
    if small is None:
        return
    assert big is not None
    assert big.ledger.kv_pool_bytes >= small.ledger.kv_pool_bytes
    assert big.kv_capacity_tokens >= small.kv_capacity_tokens
    assert big.max_seqs_contiguous >= small.max_seqs_contiguous
    assert big.max_seqs_paged >= small.max_seqs_paged


@settings(max_examples=150, deadline=None)
@given(hbm, ctx, ctx, tps, kv)
def test_capacity_antitone_in_context(hbm_bytes, c1, c2, tp, kd):
    short, long_ = sorted((c1, c2))
    dep = Deployment(MODEL, GPU, tp=tp, weight_dtype="fp8", kv_dtype=kd, hbm=hbm_bytes)
    a = plan_or_none(dep, context=short)
    b = plan_or_none(dep, context=long_)
    if a is None:
        return
    assert b.max_seqs_contiguous <= a.max_seqs_contiguous
    assert b.max_seqs_paged <= a.max_seqs_paged
    assert b.kv_capacity_tokens == a.kv_capacity_tokens  # the pool does not depend on the context


@settings(max_examples=150, deadline=None)
@given(hbm, ctx, st.floats(min_value=0.0, max_value=1.0), tps, dtypes, kv, st.sampled_from([1, 8, 16, 32]))
def test_paged_never_below_contiguous_and_ledger_sums(hbm_bytes, context, frac, tp, wd, kd, block):
    mean = max(1, int(context * frac))
    dep = Deployment(MODEL, GPU, tp=tp, weight_dtype=wd, kv_dtype=kd, hbm=hbm_bytes, block_size=block)
    p = plan_or_none(dep, context=context, mean_context=mean)
    if p is None:
        return
    if -(-mean // block) * block <= context:  # paging rounds up to a block; below one block it can lose
        assert p.max_seqs_paged >= p.max_seqs_contiguous
    L = p.ledger
    assert (
        L.weights_bytes + L.overhead_bytes + L.fragmentation_bytes + L.kv_pool_bytes + L.reserved_bytes == L.hbm_bytes
    )
    assert p.kv_capacity_tokens % block == 0
    assert p.num_kv_blocks * block * p.kv_bytes_per_token_per_gpu <= L.kv_pool_bytes


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([2, 4, 8, 16]))
def test_more_tp_never_shrinks_the_pool(tp):
    base = build_plan(Deployment(MODEL, GPU, tp=tp // 2, weight_dtype="fp8"), context=8192)
    more = build_plan(dataclasses.replace(base.deployment, tp=tp), context=8192)
    assert more.ledger.kv_pool_bytes > base.ledger.kv_pool_bytes
    assert more.max_seqs_paged >= base.max_seqs_paged
