"""kneecap recommend's candidate kinds beyond plain tensor parallelism: DP attention for MLA mixture-of-experts
models (searched, pruned by each DP rank's KV pool, bounded, priced by the simulated engine), a `kneecap run` plan
for expert-parallel, DP-attention and disaggregated candidates (each loaded by the load-plan schema; the simulated
ones run with `kneecap run`), the bench lines that confirm each disaggregated pool, disaggregated pools tried where
the bound says they may win, and GPUs left out for lack of a price named in the output."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from kneecap.metrics.slo import parse_slo
from kneecap.plan.build import plan_deployment
from kneecap.recommend.bound import replica_bound
from kneecap.recommend.confirm import serve_cmd
from kneecap.recommend.evaluate import run_level, simulated
from kneecap.recommend.prices import load_prices
from kneecap.recommend.runplan import run_plans
from kneecap.recommend.search import DISAGG_SETUPS, _disagg_setups, Counts, recommend
from kneecap.recommend.space import RecommendRequest
from clitools import run_cli

PRICES = load_prices()


def dsv3(**kw) -> RecommendRequest:
    base = dict(
        model="deepseek-v3",
        kind="rate",
        load=4.0,
        isl=2000,
        osl=300,
        slo=parse_slo("ttft_p99_ms=3000,tpot_p99_ms=60"),
        gpus=("h200",),
        weight_dtypes=("fp8",),
        kv_dtypes=("bf16",),
        tp_choices=(8,),
        pp_choices=(1,),
        max_num_seqs_choices=(64,),
        max_num_batched_tokens_choices=(8192,),
        prefix_caching_choices=(True,),
    )
    base.update(kw)
    return RecommendRequest(**base)


@pytest.fixture(scope="module")
def dsv3_doc():
    return recommend(dsv3(), PRICES, workers=1)


def _write(tmp_path, plans: dict) -> dict:
    out = {}
    for kind, plan in plans.items():
        f = tmp_path / f"{plan['name']}.yaml"
        f.write_text(yaml.safe_dump(plan, sort_keys=False))
        out[kind] = f
    return out


def test_dp_attention_is_an_axis_for_mla_moe_models_only():
    """DeepSeek V3 (MLA, MoE): every tp > 1 also with DP attention (ep = tp, the engine limits per DP rank, so the
    replica's are tp times the choice); Qwen3 30B-A3B (MoE, no MLA) and a dense model: never."""
    g = dsv3(tp_choices=(1, 8), max_num_seqs_choices=(64, 128)).grid()
    dp = [k for k in g if k.dp_attention]
    assert {(k.tp, k.ep) for k in dp} == {(8, 8)} and sorted(k.max_num_seqs for k in dp) == [512, 1024]
    assert all(k.max_num_batched_tokens == 8 * 8192 for k in dp)
    assert not any(k.dp_attention for k in dsv3(model="qwen3-30b-a3b", tp_choices=(2,)).grid())
    assert not any(k.dp_attention for k in dsv3(model="llama-3.1-8b", tp_choices=(2,)).grid())
    assert not any(k.dp_attention for k in dsv3(dp_attention=False).grid())


def test_dp_attention_plans_a_pool_per_rank_and_prices_it_in_the_simulator(dsv3_doc):
    """The DP-attention candidate plans through the one deployment builder (a KV pool per DP rank: 8 pools, each
    whole-latent, more tokens in all than TP's one replicated pool), its roofline bound stays above the simulated
    engine, and the search prices it: on the frontier, meeting the SLO at the load, with vLLM's data-parallel line."""
    req = dsv3()
    k_dp = next(k for k in req.grid() if k.dp_attention)
    k_tp = next(k for k in req.grid() if not k.dp_attention and k.ep == 8)
    p_dp, p_tp = (plan_deployment(req.deployment_request(k)).plan for k in (k_dp, k_tp))
    assert p_dp.deployment.dp_attention and p_dp.deployment.attention_dp == 8
    assert p_dp.kv_capacity_tokens > 4 * p_tp.kv_capacity_tokens
    b = replica_bound(p_dp, k_dp, req)
    assert b.load > 0 and not run_level(simulated(req, k_dp), req, b.load * 1.05, 400).met
    dp = [c for c in dsv3_doc["candidates"] if c["dp_attention"]]
    assert dp and dp[0]["meets_slo"] and dp[0]["ep"] == 8
    assert run_level(simulated(req, k_dp), req, req.load / dp[0]["replicas"], 200).met
    cmd = serve_cmd(req, k_dp, checkpoint_dtype=p_dp.deployment.model.weight_dtype)
    # DeepSeek V3 ships block-FP8 weights with their quantization_config: vLLM reads it, no --quantization
    assert p_dp.deployment.model.weight_dtype == "fp8-block" and "--quantization" not in cmd
    assert "--data-parallel-size 8" in cmd and "--tensor-parallel-size 1" in cmd and "--enable-expert-parallel" in cmd
    assert "--max-num-seqs 64" in cmd and "--max-num-batched-tokens 8192" in cmd  # per DP rank


def test_dp_attention_pruned_when_one_rank_cannot_hold_a_sequence():
    """Kimi K2 in fp8 on 8x H200: one TP pool holds a 50,000-token sequence, each DP rank's pool (an eighth of the
    GPUs' KV memory, less the replicated attention weights) does not: the DP candidate is pruned, named."""
    req = dsv3(model="kimi-k2", isl=49000, osl=1000, slo=parse_slo("ttft_p99_ms=60000,tpot_p99_ms=200"), load=0.05)
    d = recommend(req, PRICES, workers=1)
    assert any("each DP rank's KV pool" in r for r in d["prune_reasons"]), d["prune_reasons"]
    assert not any(p["dp_attention"] for p in d["points"]) and d["candidates"]


def test_ep_and_dp_attention_candidates_get_a_simulated_run_plan(tmp_path, dsv3_doc):
    """The load plan's simulator target takes ep and dp_attention: an EP and a DP-attention candidate each get the
    simulated twin, loaded by the schema with their own parallelism; both run with `kneecap run`, accepted at the
    candidate's share of the load."""
    from kneecap.loadplan.schema import load_plan_file

    req = RecommendRequest(
        model="qwen3-30b-a3b",
        kind="rate",
        load=6.0,
        isl=500,
        osl=100,
        slo=parse_slo("ttft_p99_ms=1500,tpot_p99_ms=40"),
        gpus=("h100-sxm",),
        weight_dtypes=("bf16",),
        kv_dtypes=("bf16",),
        tp_choices=(2,),
        pp_choices=(1,),
        max_num_seqs_choices=(256,),
        max_num_batched_tokens_choices=(8192,),
    )
    doc = recommend(req, PRICES, workers=1)
    ep = next(c for c in doc["candidates"] if c["ep"] == 2 and c["disaggregated"] is None)
    files = _write(tmp_path, run_plans(req, doc, ep, "confirm-ep"))
    spec, _ = load_plan_file(files["simulated"])
    t = spec.candidates[0].target
    assert (t.tp, t.ep, t.dp_attention) == (2, 2, False)
    dpc = next(c for c in dsv3_doc["candidates"] if c["dp_attention"])
    dfiles = _write(tmp_path, run_plans(dsv3(), dsv3_doc, dpc, "confirm-dp"))
    dspec, _ = load_plan_file(dfiles["simulated"])
    assert (dspec.candidates[0].target.ep, dspec.candidates[0].target.dp_attention) == (8, True)
    for name, f in (("ep", files["simulated"]), ("dp", dfiles["simulated"])):
        out = run_cli("run", str(f), "--out", str(tmp_path / f"run-{name}"), "--json", "--quiet", timeout=300)
        assert out.code == 0, out.stderr
        verdict = json.loads(out.stdout)["candidates"][0]
        assert verdict["verdict"] == "accepted", (name, verdict["reason"])


@pytest.fixture(scope="module")
def dis_case():
    req = RecommendRequest(
        model="llama-3.1-8b",
        kind="rate",
        load=24.0,
        isl=1000,
        osl=200,
        slo=parse_slo("ttft_p99_ms=1500,tpot_p99_ms=12"),
        gpus=("h100-sxm",),
        weight_dtypes=("bf16",),
        kv_dtypes=("bf16",),
        tp_choices=(1,),
        pp_choices=(1,),
        max_num_seqs_choices=(256,),
        max_num_batched_tokens_choices=(8192,),
    )
    return req, recommend(req, PRICES, workers=1)


def test_disaggregated_candidates_get_pool_plans_and_bench_lines(tmp_path, dis_case):
    """A disaggregated candidate's plans: the proxy at the whole rate, and the prefill pool alone (one output token,
    each TTFT budget less the KV transfer) against the real instance and on the simulated engine; all three load with
    the schema and the simulated prefill plan runs with `kneecap run`, accepted at the prefill share. The bench lines
    confirm each pool: one prefill instance at rate / X with --osl 1, the decode pool's TPOT at rate / Y."""
    from kneecap.loadplan.schema import load_plan_file

    req, doc = dis_case
    c = next(c for c in doc["candidates"] if c["disaggregated"] is not None)
    info = c["disaggregated"]
    x, y = info["prefill_replicas"], info["decode_replicas"]
    files = _write(tmp_path, run_plans(req, doc, c, "confirm-dis"))
    assert set(files) == {"server", "prefill", "prefill-simulated"}
    specs = {k: load_plan_file(f)[0] for k, f in files.items()}
    assert specs["server"].load.required == req.load
    pre = specs["prefill-simulated"]
    assert pre.load.required == pytest.approx(req.load / x)
    assert pre.classes["requests"].output.value == 1
    assert pre.slo["requests"].limits()["ttft_p99_ms"] == pytest.approx(1500 - info["kv_transfer_ms"], abs=0.1)
    assert pre.candidates[0].target.kind == "simulator" and specs["prefill"].candidates[0].target.kind == "server"
    out = run_cli(
        "run", str(files["prefill-simulated"]), "--out", str(tmp_path / "run"), "--json", "--quiet", timeout=300
    )
    assert out.code == 0, out.stderr
    verdict = json.loads(out.stdout)["candidates"][0]
    assert verdict["verdict"] == "accepted", verdict["reason"]
    pools = c["confirm_pools"]
    assert "--osl 1 " in pools["prefill"] and f",{round(req.load / x, 3):g} " in pools["prefill"]
    assert f"--rate {round(req.load / y / 2, 3):g},{round(req.load / y, 3):g} " in pools["decode"]
    assert "tpot_p99_ms=12" in pools["decode"]
    assert "ttft" not in pools["decode"]
    from kneecap.report.recommend_page import write_report

    write_report(tmp_path, doc)  # every sized candidate, disaggregated ones with a share per pool
    md = (tmp_path / "report.md").read_text()
    assert f"{req.load / x:.4g} per prefill replica" in md and pools["prefill"] in md and pools["decode"] in md


def test_disaggregated_setups_chosen_by_the_bound(dis_case):
    """Pools are tried for every setup whose bound on the pools' cost is below the cheapest aggregated candidate
    (at most DISAGG_SETUPS, cheapest bound first), not for a fixed two: with no aggregated candidate to beat every
    setup up to the cap is tried, with a cost no pool can beat none is, and the document counts the rest."""
    req, doc = dis_case
    wide = RecommendRequest(**{**req.__dict__, "gpus": ("a100-80", "h100-sxm", "h200"), "tp_choices": (1, 2)})
    from kneecap.recommend.evaluate import planned

    plans, by_setup = {}, {}
    for i, k in enumerate(wide.grid()):
        plans[k.plan_key] = planned(wide.deployment_request(k))
        b = replica_bound(plans[k.plan_key], k, wide)
        by_setup.setdefault(k.plan_key, []).append((0.0, i, k, b, PRICES[k.gpu].usd_per_gpu_hour))
    c = Counts()
    every = _disagg_setups(wide, plans, by_setup, [], math.inf, c)
    assert len(every) == min(DISAGG_SETUPS, len(by_setup)) == DISAGG_SETUPS and len(by_setup) > 2
    assert c.disagg_bounded_out == len(by_setup) - DISAGG_SETUPS
    cheapest_pools = min(PRICES[k.gpu].usd_per_gpu_hour * k.gpus_per_replica * 2 for k in wide.grid())
    c = Counts()
    assert _disagg_setups(wide, plans, by_setup, [], cheapest_pools, c) == [] and c.disagg_bounded_out == len(by_setup)
    assert doc["disaggregated_tried"] + doc["disaggregated_bounded_out"] == 1  # the one setup of the case


def test_unpriced_gpus_are_named_as_skipped(tmp_path):
    """Without --gpus, a GPU whose price is null is left out and the output says so (table line and recommend.json)."""
    f = tmp_path / "prices.json"
    f.write_text(json.dumps({"prices": {"a100-80": 1.59, "l4": {"usd_per_gpu_hour": None, "note": "no public price"}}}))
    args = (
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "2",
        "--isl",
        "300",
        "--osl",
        "30",
        "--slo",
        "ttft_p99_ms=1000,tpot_p99_ms=60",
        "--prices",
        str(f),
        "--weight-dtypes",
        "bf16",
        "--kv-dtypes",
        "bf16",
        "--workers",
        "1",
    )
    r = run_cli(*args, timeout=300)
    assert r.code == 0, r.stderr
    assert "skipped for lack of a price" in r.stdout and "l4" in r.stdout.split("skipped for lack of a price")[1]
    j = run_cli(*args, "--json", timeout=300)
    doc = json.loads(j.stdout)
    assert doc["unpriced_gpus"] == [{"gpu": "l4", "note": "no public price"}] and doc["gpus"] == ["a100-80"]
