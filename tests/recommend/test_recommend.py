"""kneecap recommend on a small search space: the search against brute force, every recommendation
simulated on its own at the stated load, one replica fewer failing, the roofline bound never below the
simulated engine, determinism over worker counts, the price table's sources, and one-line errors."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from kneecap.metrics.slo import parse_slo
from kneecap.plan.build import plan_deployment
from kneecap.recommend.bound import replica_bound, steady_batch_bound
from kneecap.recommend.evaluate import FINE_REQUESTS, per_replica_load, replica_max, run_level, simulated, size_replicas
from kneecap.recommend.prices import DEFAULT_PRICES, load_prices
from kneecap.recommend.search import recommend
from kneecap.recommend.space import MAX_NUM_BATCHED_TOKENS_CHOICES, MAX_NUM_SEQS_CHOICES, Knobs, RecommendRequest
from clitools import run_cli

PRICES = load_prices()
SLO = parse_slo("ttft_p99_ms=1500,tpot_p99_ms=40")


def small(**kw) -> RecommendRequest:
    base = dict(
        model="llama-3.1-8b",
        kind="rate",
        load=24.0,
        isl=1000,
        osl=200,
        slo=SLO,
        gpus=("a100-80", "h100-sxm"),
        weight_dtypes=("bf16",),
        kv_dtypes=("bf16",),
        tp_choices=(1, 2),
        pp_choices=(1,),
        max_num_seqs_choices=(64, 256),
        max_num_batched_tokens_choices=(8192,),
        prefix_caching_choices=(True,),
    )
    base.update(kw)
    return RecommendRequest(**base)


@pytest.fixture(scope="module")
def doc():
    return recommend(small(), PRICES, workers=1)


def test_search_matches_brute_force(doc):
    """Brute force: every candidate's replica max by find_max (no bound), sized at the load; the cheapest."""
    req = small()
    costs = []
    for k in req.grid():
        m = replica_max(req, k, bound=req.load)
        if m.value is None:
            continue
        s = size_replicas(req, k, m.value)
        if s.replicas is not None:
            costs.append(PRICES[k.gpu].usd_per_gpu_hour * k.gpus_per_replica * s.replicas)
    assert costs, "the small case must have a feasible candidate"
    aggregated = [c for c in doc["candidates"] if c["disaggregated"] is None]
    assert aggregated[0]["cost_per_hour"] == pytest.approx(min(costs))
    assert doc["best"]["cost_per_hour"] <= min(costs) + 1e-9
    assert doc["evaluated"] == len(req.grid()) == 8


def test_recommendations_meet_the_slo_and_one_fewer_fails(doc):
    req = small()
    assert doc["candidates"] and doc["best"] == doc["candidates"][0]
    for c in doc["candidates"]:
        if c["disaggregated"] is not None:
            continue  # test_disaggregated_pools_meet_the_slo
        k = _knobs(c)
        sim = simulated(req, k)
        at = run_level(sim, req, per_replica_load(req, c["replicas"]), FINE_REQUESTS)
        assert at.met, (c["gpu"], c["replicas"], at.why)
        if c["replicas"] > 1:
            fewer = run_level(sim, req, per_replica_load(req, c["replicas"] - 1), FINE_REQUESTS)
            assert not fewer.met, (c["gpu"], c["replicas"] - 1)
        assert c["cost_per_hour"] == pytest.approx(
            PRICES[c["gpu"]].usd_per_gpu_hour * c["gpus_per_replica"] * c["replicas"]
        )
        assert (
            c["predicted"]["ttft_p99_ms"] <= SLO["ttft_p99_ms"] and c["predicted"]["tpot_p99_ms"] <= SLO["tpot_p99_ms"]
        )


def test_every_cheaper_deployment_fails_or_does_not_fit(doc):
    """One step cheaper, directly (no find_max): for every candidate of the grid, the most replicas that still
    cost less than the recommendation, simulated at the load with them, break the SLO (or the setup does not fit)."""
    req = small()
    best = doc["best"]["cost_per_hour"]
    checked = 0
    for k in req.grid():
        per = PRICES[k.gpu].usd_per_gpu_hour * k.gpus_per_replica
        r = math.ceil(best / per - 1e-9) - 1  # the most replicas costing strictly less than the best
        if r < 1:
            continue
        try:
            sim = simulated(req, k)
        except Exception:
            continue  # does not fit
        assert not run_level(sim, req, per_replica_load(req, r), FINE_REQUESTS).met, (k, r)
        checked += 1
    assert checked >= 1


def test_contract_keys(doc):
    for key in ("evaluated", "pruned", "seconds", "frontier", "best"):
        assert key in doc
    for key in (
        "gpu",
        "gpus_per_replica",
        "replicas",
        "tp",
        "pp",
        "ep",
        "weight_dtype",
        "kv_dtype",
        "max_num_seqs",
        "max_num_batched_tokens",
        "disaggregated",
        "cost_per_hour",
        "cost_per_mtok_output",
        "predicted",
        "max_load",
        "confirm_cmd",
    ):
        assert key in doc["best"]
    assert set(doc["best"]["predicted"]) >= {"ttft_p99_ms", "tpot_p99_ms", "output_tok_s"}
    assert doc["best"]["confirm_cmd"].startswith("kneecap bench ")
    assert doc["frontier"] and all(f in doc["points"] for f in doc["frontier"])
    assert all(c in doc["points"] for c in doc["candidates"])


@pytest.mark.parametrize(
    "model,gpu,tp,pp,dtype",
    [
        ("llama-3.1-8b", "a100-80", 1, 1, "bf16"),
        ("llama-3.1-8b", "h100-sxm", 1, 1, "bf16"),
        ("llama-3.1-8b", "h100-sxm", 2, 1, "bf16"),
        ("llama-3.1-8b", "a100-80", 1, 2, "bf16"),
        ("qwen3-30b-a3b", "h100-sxm", 1, 1, "fp8"),
    ],
)
def test_bound_is_above_the_simulated_engine(model, gpu, tp, pp, dtype):
    """Just past the roofline bound, and past the step-time model's bound at the steady batch, a steady-state
    simulated level breaks the SLO (the bounds only skip losers), for dense and MoE models, TP and PP, bf16 and fp8."""
    req = small(model=model, gpus=(gpu,))
    k = Knobs(gpu, tp, pp, dtype, dtype, 256, 8192)
    plan = plan_deployment(req.deployment_request(k)).plan
    b = replica_bound(plan, k, req)
    assert b.load > 0
    assert not run_level(simulated(req, k), req, b.load * 1.05, 400).met
    # the step-time model's bound at the steady batch: tighter than the roofline, still above the simulated engine
    s = steady_batch_bound(simulated(req, k), k, req)
    assert s is not None and 0 < s.load <= b.load * 1.0001
    assert not run_level(simulated(req, k), req, s.load * 1.05, 400).met


def test_deterministic_across_worker_counts(doc):
    two = recommend(small(), PRICES, workers=2)
    strip = lambda d: json.dumps({k: v for k, v in d.items() if k not in ("seconds", "ray")}, sort_keys=True)
    assert strip(two) == strip(doc)


def test_prices_are_sourced():
    raw = json.loads(DEFAULT_PRICES.read_text())["prices"]
    for gpu, entry in raw.items():
        if entry["usd_per_gpu_hour"] is not None:
            assert entry["source"].startswith("https://") and entry["date"][:2] == "20", gpu
            assert entry["transcribed_by"].startswith("https://"), gpu
        else:
            assert entry["note"], gpu
    assert PRICES["h100-sxm"].usd_per_gpu_hour == 3.29


def test_pruned_when_nothing_fits():
    """405B in bf16 does not fit one 80 GB GPU: every candidate is pruned and the error says what would fit."""
    req = small(model="llama-3.1-405b", gpus=("a100-80",), tp_choices=(1,))
    with pytest.raises(Exception) as info:
        recommend(req, PRICES)
    msg = str(info.value.one_line())
    assert "no deployment" in msg and "more GPUs" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--gpus", "h100-sxmm"], "h100-sxmm"),
        (["--gpus", "l4"], "no price for l4"),
        (["--classes", "missing.yaml"], "--classes and --isl/--osl both given"),
        (["--concurrency", "8"], "exactly one of --rate and --concurrency"),
        (["--slo", "ttft_p99=5"], "unknown SLO key"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    base = [
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "4",
        "--isl",
        "100",
        "--osl",
        "20",
        "--slo",
        "ttft_p99_ms=500",
    ]
    for i in range(0, len(args), 2):
        if args[i] in base:
            base[base.index(args[i]) + 1] = args[i + 1]
        else:
            base += args[i : i + 2]
    r = run_cli(*base)
    assert r.code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_cli_json_and_out(tmp_path):
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "2",
        "--isl",
        "500",
        "--osl",
        "50",
        "--slo",
        "ttft_p99_ms=1000,tpot_p99_ms=60",
        "--gpus",
        "a100-80",
        "--weight-dtypes",
        "bf16",
        "--kv-dtypes",
        "bf16",
        "--workers",
        "1",
        "--json",
        "--out",
        str(tmp_path),
        timeout=300,
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["best"]["gpu"] == "a100-80" and doc["best"]["replicas"] >= 1
    assert json.loads((tmp_path / "recommend.json").read_text())["best"] == doc["best"]
    md = (tmp_path / "report.md").read_text()
    assert "a100-80" in md and "kneecap bench" in md
    page = (tmp_path / "report.html").read_text()
    import html  # each candidate's serve and confirm commands, escaped, not the template's own text

    assert html.escape(doc["best"]["serve_cmd"]) in page and "{e(" not in page


def test_concurrency_load_sizes_the_busiest_replica():
    """Closed loop: each replica gets ceil(C / replicas) streams; that meets the SLO, one replica fewer does not."""
    req = small(kind="concurrency", load=48, gpus=("a100-80",), tp_choices=(1,), max_num_seqs_choices=(256,))
    d = recommend(req, PRICES, workers=1)
    b = d["best"]
    k = _knobs(b)
    assert b["predicted"]["per_replica_load"] == math.ceil(48 / b["replicas"])
    assert run_level(simulated(req, k), req, math.ceil(48 / b["replicas"]), FINE_REQUESTS).met
    if b["replicas"] > 1:
        assert not run_level(simulated(req, k), req, math.ceil(48 / (b["replicas"] - 1)), FINE_REQUESTS).met


def test_max_gpus_limits_the_total():
    """A load one GPU cannot serve, with --max-gpus 1: refused in one line naming the limit."""
    req = small(load=200.0, gpus=("a100-80",), tp_choices=(1,), max_gpus=1)
    with pytest.raises(Exception) as info:
        recommend(req, PRICES)
    msg = info.value.one_line()
    assert "need more GPUs than allowed" in msg and "--max-gpus" in msg


def test_prices_file_replaces_the_table(tmp_path):
    f = tmp_path / "p.json"
    f.write_text('{"L40S": 0.86, "h100": {"usd_per_gpu_hour": 2.0, "source": "my contract"}}')
    table = load_prices(f)
    assert set(table) == {"l40s", "h100-sxm"} and table["l40s"].usd_per_gpu_hour == 0.86
    f.write_text('{"l40s": -1}')
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "1",
        "--isl",
        "100",
        "--osl",
        "10",
        "--slo",
        "ttft_p99_ms=500",
        "--prices",
        str(f),
    )
    assert r.code != 0 and "usd_per_gpu_hour of 'l40s' must be a positive number" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_class_file_mix(tmp_path):
    """A class mix: lengths drawn from each class (not the means), context = the longest class, the best
    re-simulated at the load meets the SLO; a length without a maximum is refused in one line."""
    from kneecap.recommend.classes import load_classes, mean_lengths
    from kneecap.recommend.evaluate import MixOptions

    f = tmp_path / "classes.yaml"
    f.write_text(
        'classes:\n  - {name: chat, input: "lognormal:mean=800,std=300,max=3000", output: "150", weight: 0.8}\n'
        '  - {name: rag, input: "4000", output: "uniform:100:300", weight: 0.2}\n'
    )
    mix = load_classes(f)
    isl, osl = mean_lengths(mix)
    assert (isl, osl) == (round(0.8 * 800 + 0.2 * 4000), round(0.8 * 150 + 0.2 * 200))
    assert MixOptions(kind="rate", levels=(1.0,), isl=isl, osl=osl, mix=mix).workload is mix
    req = small(isl=isl, osl=osl, mix=mix, load=6.0, gpus=("a100-80",), tp_choices=(1,), max_num_seqs_choices=(256,))
    assert req.context == 4300
    d = recommend(req, PRICES, workers=1)
    b = d["best"]
    assert b["plan"]["context"] == 4300 and b["confirm_note"] and d["classes"][1]["name"] == "rag"
    k = _knobs(b)
    assert run_level(simulated(req, k), req, per_replica_load(req, b["replicas"]), FINE_REQUESTS).met
    f.write_text('classes:\n  - {input: "lognormal:mean=800,std=300", output: "150"}\n')
    r = run_cli("recommend", "--model", "llama-3.1-8b", "--rate", "1", "--classes", str(f), "--slo", "ttft_p99_ms=500")
    assert r.code != 0 and "has no maximum" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _knobs(c: dict) -> Knobs:
    return Knobs(
        c["gpu"],
        c["tp"],
        c["pp"],
        c["weight_dtype"],
        c["kv_dtype"],
        c["max_num_seqs"],
        c["max_num_batched_tokens"],
        c["ep"],
    )


def test_frontier_covers_every_simulated_candidate(doc):
    """The frontier is taken over every simulated candidate (not only the sized ones): no point meeting the SLO
    dominates a frontier point, and every point not on the frontier is dominated by one that is."""
    pts = [p for p in doc["points"] if p["meets_slo"]]
    assert len(doc["points"]) >= doc["simulated"] - 2 and len(doc["points"]) > len(doc["candidates"])
    key = lambda p: (p["cost_per_mtok_output"], p["predicted"]["ttft_p99_ms"])
    dominates = lambda a, b: all(x <= y for x, y in zip(key(a), key(b))) and key(a) != key(b)
    for f in doc["frontier"]:
        assert not any(dominates(p, f) for p in pts)
    for p in pts:
        if p not in doc["frontier"]:
            assert any(dominates(f, p) or key(f) == key(p) for f in doc["frontier"])


def test_disaggregated_pools_meet_the_slo():
    """A TPOT limit that prefills breaking into decode steps make hard: xPyD candidates are searched beside the
    aggregated ones; each, re-simulated at the rate with its pool sizes, meets the SLO, and one replica fewer in
    either pool fails it; TTFT includes the prefill time and the KV transfer."""
    from kneecap.recommend.disagg import run_pools

    req = small(
        slo=parse_slo("ttft_p99_ms=1500,tpot_p99_ms=12"),
        gpus=("h100-sxm",),
        tp_choices=(1,),
        max_num_seqs_choices=(256,),
    )
    d = recommend(req, PRICES, workers=1)
    dis = [c for c in d["candidates"] if c["disaggregated"] is not None]
    assert d["disaggregated_tried"] >= 1 and dis, d["disaggregated_not_met"]
    for c in dis:
        info, k = c["disaggregated"], _knobs(c)
        x, y = info["prefill_replicas"], info["decode_replicas"]
        assert c["replicas"] == x + y and c["total_gpus"] == (x + y) * c["gpus_per_replica"]
        o = run_pools(req, k, x, y)
        assert o.level.met, o.level.why
        assert o.level.ttft_p99_ms > o.transfer_ms > 0 and info["kv_link"] == "nvlink"
        if x > 1:
            assert not run_pools(req, k, x - 1, y).level.met
        if y > 1:
            assert not run_pools(req, k, x, y - 1).level.met
        assert "--kv-transfer-config" in c["serve_cmd"]


def test_kv_transfer_uses_the_ledger_and_the_link():
    """KV bytes = the plan's KV bytes per token per GPU x prompt tokens; NVLink inside a node, the network past 8 GPUs."""
    from kneecap.recommend.disagg import NETWORK_BYTES_S_PER_GPU, link_for, transfer_s

    req = small()
    k = Knobs("h100-sxm", 2, 1, "bf16", "bf16", 256, 8192)
    plan = plan_deployment(req.deployment_request(k)).plan
    near, far = link_for(req, k, 1, 1), link_for(req, k, 3, 2)
    assert near.name == "nvlink" and far.name == "network" and far.bytes_s == NETWORK_BYTES_S_PER_GPU
    assert transfer_s(plan.kv_bytes_per_token_per_gpu, 1000, near) == pytest.approx(
        plan.kv_bytes_per_token_per_gpu * 1000 / 450e9
    )


def test_run_plans_load_and_run_on_the_simulator(tmp_path):
    """--out writes a `kneecap run` plan per top candidate; both load with the load-plan schema, and the simulated
    twin runs with `kneecap run` and accepts the candidate at its share of the load."""
    from kneecap.loadplan.schema import BUDGET_METRICS, BUDGET_PCTS, load_plan_file
    from kneecap.recommend import runplan

    assert (runplan.BUDGET_METRICS, runplan.BUDGET_PCTS) == (BUDGET_METRICS, BUDGET_PCTS)
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "4",
        "--isl",
        "500",
        "--osl",
        "50",
        "--slo",
        "ttft_p99_ms=1000,tpot_p99_ms=60",
        "--gpus",
        "a100-80",
        "--weight-dtypes",
        "bf16",
        "--kv-dtypes",
        "bf16",
        "--workers",
        "1",
        "--out",
        str(tmp_path),
        timeout=300,
    )
    assert r.code == 0, r.stderr
    doc = json.loads((tmp_path / "recommend.json").read_text())
    best = doc["best"]
    server, _ = load_plan_file(tmp_path / best["run_plan"]["server"])
    sim, _ = load_plan_file(tmp_path / best["run_plan"]["simulated"])
    assert server.candidates[0].target.kind == "server" and sim.candidates[0].target.kind == "simulator"
    assert server.load == sim.load and server.load.required == best["predicted"]["per_replica_load"]
    t = sim.candidates[0].target
    assert (t.gpu, t.tp, t.pp, t.max_num_seqs, t.max_num_batched_tokens) == (
        best["gpu"],
        best["tp"],
        best["pp"],
        best["max_num_seqs"],
        best["max_num_batched_tokens"],
    )
    assert server.slo["requests"].limits() == {"ttft_p99_ms": 1000, "tpot_p99_ms": 60}
    out = run_cli(
        "run",
        str(tmp_path / best["run_plan"]["simulated"]),
        "--out",
        str(tmp_path / "run"),
        "--json",
        "--quiet",
        timeout=300,
    )
    assert out.code == 0, out.stderr
    verdict = json.loads(out.stdout)["candidates"][0]
    assert verdict["verdict"] == "accepted", verdict["reason"]
    md = (tmp_path / "report.md").read_text()
    assert best["run_plan"]["server"] in md and "Pareto frontier" in md
    assert (tmp_path / "recommend-cost-ttft.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_function_draws_points_and_frontier():
    from kneecap.report.plots import recommend_pareto

    png = recommend_pareto(
        [(1.0, 2.0, "a"), (2.0, 1.0, "b"), (3.0, 3.0, "c")], [(1.0, 2.0, "a"), (2.0, 1.0, "b")], "x", "y", "t"
    )
    assert png[:4] == b"\x89PNG"
    assert recommend_pareto([], [], "x", "y", "t") is None


def test_expert_parallel_is_searched_for_moe_models():
    """A MoE model's grid holds ep = tp beside ep = 1 for every tp > 1 (a dense model's only ep = 1); an EP
    candidate plans through the one deployment builder with its ep, and its vLLM line enables expert parallelism."""
    from kneecap.recommend.confirm import serve_cmd

    moe = small(model="qwen3-30b-a3b", gpus=("h100-sxm",), tp_choices=(1, 2, 4))
    eps = {(k.tp, k.ep) for k in moe.grid()}
    assert eps == {(1, 1), (2, 1), (2, 2), (4, 1), (4, 4)}
    assert {k.ep for k in small().grid()} == {1}
    k = Knobs("h100-sxm", 2, 1, "bf16", "bf16", 256, 8192, 2)
    assert plan_deployment(moe.deployment_request(k)).plan.deployment.ep == 2
    assert "--enable-expert-parallel" in serve_cmd(moe, k, checkpoint_dtype="bf16")
    # fp8 weights from a bf16 checkpoint: vLLM quantizes them as it loads (--quantization fp8); a checkpoint that
    # ships quantized carries its own quantization_config, and a second method would be refused
    k8 = Knobs("h100-sxm", 2, 1, "fp8", "bf16", 256, 8192, 2)
    assert "--quantization fp8" in serve_cmd(moe, k8, checkpoint_dtype="bf16")
    assert "--quantization" not in serve_cmd(moe, k8, checkpoint_dtype="fp8")
    d = recommend(
        small(model="qwen3-30b-a3b", gpus=("h100-sxm",), tp_choices=(2,), max_num_seqs_choices=(256,), load=8.0),
        PRICES,
        workers=1,
    )
    assert {p["ep"] for p in d["points"]} == {1, 2}, [(p["tp"], p["ep"]) for p in d["points"]]


def test_decode_pool_takes_prompts_with_their_kv():
    """The decode replica finds each prompt's KV in its pool (a prefix-cache hit on all its full blocks) and
    computes only the last partial block: at a light rate its TTFT is a small part of an aggregated replica's,
    whose TTFT holds the whole prefill of an 8,000-token prompt."""
    from kneecap.recommend.disagg import Link, decode_records
    from kneecap.metrics.summarize import summarize_level

    req = small(isl=8000, osl=50, load=1.0, gpus=("h100-sxm",))
    k = Knobs("h100-sxm", 1, 1, "bf16", "bf16", 256, 8192)
    recs, failed, sm = decode_records(req, k, 1.0, [0.0], Link(450e9, "nvlink"), 40)
    assert not failed and len(recs) == 40 and all(r.ok for r in recs)
    block = simulated(req, k).plan.deployment.block_size
    assert sm["prefix_cache_hits_tokens"] == 40 * ((8000 - 1) // block) * block
    dec = summarize_level(recs, rate=1.0)["ttft_ms"]["p50"]
    whole = run_level(simulated(req, k), req, 1.0, 40)
    assert whole.ttft_p99_ms is not None and dec < 0.2 * whole.ttft_p99_ms, (dec, whole.ttft_p99_ms)


def test_decode_pool_full_of_waiting_kv_fails_the_rest():
    """Prompts whose KV fills the decode replica's pool before any of them can be admitted stop the replica: every
    request that was not recorded counts as failed (none vanishes from the level)."""
    from kneecap.recommend.disagg import Link, decode_records

    req = small(isl=6000, osl=800, load=60.0, gpus=("h100-sxm",))
    k = Knobs("h100-sxm", 1, 1, "bf16", "bf16", 64, 8192)
    recs, failed, _ = decode_records(req, k, 60.0, [0.0], Link(450e9, "nvlink"), 160)
    assert failed and len(recs) + len(failed) == 160
    assert not {r.request_id for r in recs} & set(failed)


def test_recommendation_holds_at_steady_state_and_one_fewer_is_over_capacity_or_fails(tmp_path):
    """The deployment recommended for 70B at 8 req/s, simulated alone at its share for 1,600 requests (five times
    the length of the levels that used to decide), meets both SLOs at a stable level; one replica fewer does not."""
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-70b",
        "--rate",
        "8",
        "--isl",
        "1000",
        "--osl",
        "1000",
        "--slo",
        "ttft_p99_ms=2000,tpot_p99_ms=50",
        "--gpus",
        "h100-sxm,h200,b200,mi300x",
        "--json",
        timeout=300,
    )
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["evaluated"] >= 5000 and d["arrivals"].startswith("Poisson")
    f = d["funnel"]  # every candidate stopped at exactly one stage of the search
    assert (
        f["considered"]
        == d["evaluated"]
        == (f["do_not_fit"] + f["ruled_out_by_bound"] + f["simulated"] + f["represented_by_their_setup"])
    )
    assert f["checked_at_steady_state"] >= 1 and f["simulated"] == d["simulated"]
    best = d["best"]
    assert not best["disaggregated"], "this load's cheapest is aggregated; the check below simulates one replica"
    share = best["predicted"]["per_replica_load"]
    assert share == pytest.approx(8 / best["replicas"])
    out = tmp_path / "alone"
    flags = [
        "--model",
        "llama-3.1-70b",
        "--gpu",
        best["gpu"],
        "--tp",
        str(best["tp"]),
        "--pp",
        str(best["pp"]),
        "--weight-dtype",
        best["weight_dtype"],
        "--kv-dtype",
        best["kv_dtype"],
        "--max-num-seqs",
        str(best["max_num_seqs"]),
        "--max-num-batched-tokens",
        str(best["max_num_batched_tokens"]),
        "--isl",
        "1000",
        "--osl",
        "1000",
        "--prefix-caching" if best["prefix_caching"] else "--no-prefix-caching",
        "--requests",
        "1600",
        "--slo",
        "ttft_p99_ms=2000,tpot_p99_ms=50",
    ]
    r = run_cli(
        "simulate", *flags, "--rate", f"{share},{8 / (best['replicas'] - 1)}", "--out", str(out), "--json", timeout=300
    )
    assert r.code == 0, r.stderr
    alone, fewer = json.loads(r.stdout)["levels"]
    assert alone["slo"]["met"] and alone["stability"]["verdict"] == "stable", (alone["slo"], alone["stability"])
    assert not fewer["slo"]["met"] or fewer["stability"]["verdict"] == "over_capacity"
    assert best["one_fewer_replica"]["met"] is False
    # the per-replica maximum the table shows does not contradict the one-fewer check
    assert best["max_load"] < 8 / (best["replicas"] - 1)


def test_burstiness_is_an_assumption_recommend_states(tmp_path):
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "24",
        "--isl",
        "1000",
        "--osl",
        "200",
        "--slo",
        "ttft_p99_ms=1500,tpot_p99_ms=40",
        "--gpus",
        "h100-sxm",
        "--weight-dtypes",
        "bf16",
        "--kv-dtypes",
        "bf16",
        "--burstiness",
        "0.5",
        "--workers",
        "1",
        "--out",
        str(tmp_path / "rec"),
    )
    assert r.code == 0, r.stderr
    assert "assumed arrivals: gamma-distributed arrival gaps of shape 0.5 (burstier than Poisson)" in r.stdout
    assert (
        "Assumed arrivals: gamma-distributed arrival gaps of shape 0.5" in (tmp_path / "rec" / "report.md").read_text()
    )
    assert json.loads((tmp_path / "rec" / "recommend.json").read_text())["burstiness"] == 0.5
    assert "--burstiness 0.5" in r.stdout  # the confirming bench offers the same arrivals
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "24",
        "--isl",
        "1000",
        "--osl",
        "200",
        "--slo",
        "ttft_p99_ms=1500",
        "--gpus",
        "h100-sxm",
        "--burstiness",
        "0",
    )
    assert r.code != 0 and r.stderr.count("\n") <= 2 and "--burstiness must be > 0" in r.stderr


def test_widened_grid_passes_every_knob_to_the_serve_command():
    """The default grid tries max_num_seqs 32..1024, five token budgets and prefix caching on and off, and a
    candidate's serve command carries each of them as vLLM's own flag."""
    from kneecap.recommend.confirm import serve_cmd

    req = small(max_num_seqs_choices=MAX_NUM_SEQS_CHOICES, prefix_caching_choices=(True, False))
    req = dataclasses.replace(req, max_num_batched_tokens_choices=MAX_NUM_BATCHED_TOKENS_CHOICES)
    grid = req.grid()
    assert len(grid) == 2 * 2 * len(MAX_NUM_SEQS_CHOICES) * len(MAX_NUM_BATCHED_TOKENS_CHOICES) * 2
    assert {k.max_num_seqs for k in grid} == {32, 64, 128, 256, 512, 1024}
    assert {k.max_num_batched_tokens for k in grid} == {2048, 4096, 8192, 16384, 32768}
    off = next(k for k in grid if not k.prefix_caching and k.max_num_seqs == 1024 and k.max_num_batched_tokens == 32768)
    cmd = serve_cmd(req, off, checkpoint_dtype="bf16").split()
    assert "--no-enable-prefix-caching" in cmd
    assert cmd[cmd.index("--max-num-seqs") + 1] == "1024" and cmd[cmd.index("--max-num-batched-tokens") + 1] == "32768"
    on = off._replace(prefix_caching=True)
    assert "prefix-caching" not in serve_cmd(req, on, checkpoint_dtype="bf16")
