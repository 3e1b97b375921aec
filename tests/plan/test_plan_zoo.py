"""Every view of one deployment counts the same capacity, over the whole config zoo.

For every real config in tests/model/configs and every preset, at TP 1/2/4/8, bf16 and fp8 KV, with and without a
mean context, and in vLLM's engine mode, on an H200: plan's paged sequences (section 3), the context sweep (section 7), preflight's capacity
at that length (kneecap.plan.preflight.plan_capacity), the simulator's pool and report's preflight limit all give
the count of kneecap.plan.ledger.sequences_at; section 2's "blocks x block = tokens" holds for one kind of layer;
and each lever's row is what its flags give when added to the request (fp8 KV, more GPUs).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.model.presets import preset_names
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.ledger import sequences_at
from kneecap.plan.levers import compute_levers
from kneecap.plan.preflight import plan_capacity, tokens_in_blocks
from kneecap.plan.sweeps import context_sweep
from kneecap.metrics.summary_model import SweepSummary
from kneecap.report.levels import _derived_preflight_limit
from kneecap.sim.setup import from_plan

CONFIGS = sorted(str(p) for p in (Path(__file__).parents[1] / "model" / "configs").glob("*.json"))
ZOO = [("model", c) for c in CONFIGS] + [("preset", p) for p in preset_names()]
CONTEXT = 32_768


def _planned(request: DeploymentRequest):
    try:
        return plan_deployment(request)
    except KneecapError:
        return None, None  # this TP does not split the heads, or the model does not fit the GPU: nothing to compare


def _plan(request: DeploymentRequest):
    return _planned(request)[0]


@pytest.mark.parametrize("kind, spec", ZOO, ids=[Path(s).stem for _, s in ZOO])
def test_every_view_counts_the_same_capacity(kind, spec):
    compared = 0
    for tp in (1, 2, 4, 8):
        for kv in ("bf16", "fp8"):
            for mean, engine in ((None, None), (2000, None), (2000, "vllm")):
                base = DeploymentRequest(
                    **{kind: spec}, gpu="h200", tp=tp, kv_dtype=kv, mean_context=mean, engine=engine
                )
                # a config that states no max context (granite-3.1-2b-base) is planned at CONTEXT
                probe = _plan(base) or _plan(dataclasses.replace(base, context=CONTEXT))
                if probe is None:
                    continue
                request = dataclasses.replace(base, context=min(CONTEXT, probe.context))
                plan, engine_pool = _planned(request)
                if plan is None or plan.max_seqs_paged == 0:
                    continue
                compared += 1
                where = (Path(spec).stem, tp, kv, mean, engine)
                if engine_pool is not None:  # kneecap's own capacity of the engine's pool is the plan's
                    assert engine_pool.kv_capacity_tokens == plan.kv_capacity_tokens, where
                    engine_cap = plan_capacity(plan, engine_pool, plan.mean_context)
                    assert engine_cap.kv_capacity_tokens // tokens_in_blocks(
                        plan.mean_context, engine_cap.block_size
                    ) == sequences_at(plan, plan.mean_context), where
                n = sequences_at(plan, plan.mean_context)
                assert plan.max_seqs_paged == n, where  # section 3
                row = next(p for p in context_sweep(plan) if p.context == plan.context)
                assert row.paged == n, where  # section 7 at the plan's context
                if plan.kv_groups is None:  # section 2: blocks x block = tokens
                    assert plan.kv_capacity_tokens == plan.num_kv_blocks * plan.block_size, where
                length = plan.mean_context
                cap = plan_capacity(plan, None, length)  # preflight at that length
                assert cap.kv_capacity_tokens // tokens_in_blocks(length, cap.block_size) == n, where
                sim = from_plan(plan).describe()["plan"]  # the simulator's pool
                assert (sim["kv_capacity_tokens"], sim["num_kv_blocks"]) == (
                    plan.kv_capacity_tokens,
                    plan.num_kv_blocks,
                ), where
                if length > 2:  # report's preflight limit for a simulate sweep of that length
                    isl, osl = length - length // 2, length // 2
                    summary = {
                        "plan": sim,
                        "workload": {"isl": isl, "osl": osl},
                        "load": "concurrency",
                        "deployment": {"block_size": plan.block_size},
                    }
                    limit = _derived_preflight_limit(SweepSummary.read(summary))
                    assert limit == sequences_at(plan, isl + osl), where
                for lever in compute_levers(plan):
                    if lever.name == "fp8-kv":
                        flagged = _plan(dataclasses.replace(request, kv_dtype="fp8"))
                    elif lever.name == "more-gpus":
                        flagged = _plan(dataclasses.replace(request, tp=int(lever.change.split()[-1])))
                    else:
                        continue
                    assert flagged is not None and lever.max_seqs == flagged.max_seqs_paged, (where, lever)
    if compared == 0:
        pytest.skip(f"kneecap plans no H200 deployment of {Path(spec).stem} at TP 1-8 (a model it refuses, or too big)")


QWEN35 = (
    "--model",
    "qwen3.5-397b-a17b",
    "--gpu",
    "rtx-pro-6000",
    "--tp",
    "8",
    "--weight-dtype",
    "fp8",
    "--context",
    "32768",
    "--engine",
    "vllm",
)


def test_the_qwen35_hybrid_has_one_capacity_in_plan_and_preflight(cli):
    """Qwen3.5-397B on 8 RTX PRO 6000 (vLLM 0.32's layout: 528-token blocks, 3 Gated DeltaNet groups of 2 state
    blocks beside the full-attention group; the norms, router and replicated K/V heads whole on each GPU; the CUDA-graph default under Model Runner V2, 0.94 GiB, subtracted; gpu_memory_utilization 0.92, vLLM's default from 0.20): 4,741 blocks; a
    4,096-token request takes 8 + 6 = 14, so 338 run at once in plan's section 3, its context sweep and preflight; at C=400 the longest ISL+OSL is 5 blocks (2,640
    tokens) and fp8 KV holds 474 (the state does not shrink with the KV dtype), as plan's fp8-kv lever says."""
    import json

    plan = json.loads(cli("plan", *QWEN35, "--mean-context", "4096", "--json").stdout)
    pre = json.loads(
        cli("preflight", *QWEN35, "--isl", "3000", "--osl", "1096", "--concurrency", "400", "--json").stdout
    )
    assert plan["num_kv_blocks"] == 4741 and plan["max_seqs"]["paged"] == 338 == pre["max_safe_concurrency"]
    assert next(p["paged"] for p in plan["context_sweep"] if p["context"] == 4096) == 338
    fix = pre["levels"][0]["fix"]
    assert fix["max_seq_tokens"] == 2640 and fix["fp8_kv_fits"] is True
    fp8 = next(lv for lv in plan["levers"] if lv["name"] == "fp8-kv")
    assert f"fp8 KV holds {fp8['max_seqs']} sequences of 4,096 tokens instead of 338" in fix["text"]
    text = cli("plan", *QWEN35, "--mean-context", "4096").stdout
    assert "pool = 4,741 blocks of 528 tokens (4,741 × 528 = 2,503,248 token slots" in text
