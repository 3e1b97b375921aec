"""Engine mode's default non-torch memory (plan/non_torch.py): published vLLM measurements, each checked on records it
was not derived from, and the plan saying where its figure came from."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from kneecap.plan import non_torch
from kneecap.units import GiB

DATA = json.loads((Path(__file__).parent / "data" / "engine_startup_logs.json").read_text())
ROUNDING_GIB = 0.005  # vLLM prints GiB to 2 decimals


def _tp(plan: list[str]) -> int:
    return int(plan[plan.index("--tp") + 1]) if "--tp" in plan else 1


def _logged() -> list[tuple[str, tuple[int, int], int, str, float]]:
    """(id, release, TP, model, logged non-torch GiB) of every V1 record and measurement in the data file."""
    out = []
    for r in DATA["records"]:
        if r["engine"] == "V1" and r.get("inputs_from_log"):
            rel = tuple(int(x) for x in r["release"].split(".")[:2])
            out.append((r["id"], rel, _tp(r["plan"]), r["model"], r["inputs_from_log"]["non_torch_gib"]))
    for m in DATA["non_torch_measurements"]:
        if m.get("pp", 1) > 1:  # pipeline stages: not modelled (test_pipeline_stages_are_not_modelled)
            continue
        rel = tuple(int(x) for x in m["release"].split(".")[:2])
        out.append((m["id"], rel, m["tp"], m.get("model", m["id"]), m["non_torch_gib"]))
    return out


def test_pipeline_stages_are_not_modelled():
    # the figure the plan quotes for pipeline stages is the published logs' own
    pp = [m for m in DATA["non_torch_measurements"] if m.get("pp", 1) > 1]
    assert sorted(m["pp"] for m in pp) == [2, 4] and {m["non_torch_gib"] for m in pp} == {0.07}
    assert {m["model"] for m in pp} == {"meta-llama/Llama-3.1-8B-Instruct"}
    text = non_torch.vllm_non_torch("h100-sxm", 1, (0, 19), pp=2)[1]
    assert "0.07 GiB per stage for Llama-3.1-8B at PP 2 and 4" in text


def test_each_measurement_is_quoted_verbatim_with_its_source():
    for m in DATA["non_torch_measurements"]:
        assert m["url"].startswith("https://github.com/"), m["id"]
        if "line" in m:  # a table row: the TP and non-torch cells
            cells = [c.strip() for c in m["line"].strip("|").split("|")]
            col = m["columns"]
            assert int(cells[col["tp"]]) == m["tp"] and float(cells[col["non_torch"]]) == m["non_torch_gib"], m["id"]
        else:  # a log: its non-default args and its memory-profiling line
            args, profile = m["lines"][:2]
            assert ("'tensor_parallel_size': " in args) == (m["tp"] > 1), m["id"]
            assert f"'tensor_parallel_size': {m['tp']}," in args or m["tp"] == 1, m["id"]
            assert f"non-torch forward increase memory: {m['non_torch_gib']:g}GiB" in profile, m["id"]


@pytest.mark.parametrize("d", non_torch.DEFAULTS, ids=lambda d: f"{d.release}-tp{d.tp}")
def test_each_default_is_its_records_figure_and_holds_on_every_record_it_was_not_derived_from(d):
    logged = _logged()
    by_id = {i: g for i, *_, g in logged}
    # derived: the figure of the record(s) it comes from
    assert d.gib == statistics.median(by_id[i] for i in d.derived_from)
    # held out: every other record of the same release and TP, within the stated spread but the named outliers
    held = [
        (i, model, g) for i, rel, tp, model, g in logged if rel == d.release and tp == d.tp and i not in d.derived_from
    ]
    assert held, d
    worst = 0.0
    for i, model, g in held:
        named = [o for o in d.outliers if o[0] in model.lower()]
        if named:
            assert g == named[0][2], (i, g)
            continue
        worst = max(worst, abs(g - d.gib))
    assert worst <= d.spread_gib + 1e-9, (d, worst)
    # the spread is the measured one, not a loose bound: the furthest record lies at it
    assert worst >= d.spread_gib - 0.005, (d, worst)


def test_a_release_takes_the_newest_measured_release_at_or_below_it():
    assert non_torch.measured_release((0, 10)) is None  # V0-era accounting and 0.10: not measured
    assert non_torch.measured_release((0, 11)) == (0, 11)
    assert non_torch.measured_release((0, 18, 1)) == (0, 11)
    assert non_torch.measured_release((0, 19)) == (0, 19)
    assert non_torch.measured_release((0, 32)) == (0, 19)
    assert non_torch.measured_release((0, 34)) == (0, 19)  # 0.34.0 takes its snapshot where 0.33.0 does
    assert non_torch.measured_release((0, 35)) is None  # newer than any release read


def test_the_tp2_figure_is_the_releases_not_another_ones():
    # 0.11.0 logged 0.54-0.55 GiB at TP 2 and 0.19.0 2.06-2.07 GiB on the same GPU class: one figure for both would
    # miss one release by 1.5 GiB
    assert non_torch.vllm_non_torch("h100-sxm", 2, (0, 11))[0] == int(0.54 * GiB)
    assert non_torch.vllm_non_torch("h100-sxm", 2, (0, 19))[0] == int(2.07 * GiB)
    assert non_torch.vllm_non_torch("h100-sxm", 4, (0, 19))[0] == int(2.13 * GiB)
    assert non_torch.vllm_non_torch("h100-sxm", 4, (0, 11))[0] == 0  # 0.11.0 was not measured at TP 4


def _engine(cli, *args) -> dict:
    r = cli("plan", "--preset", "llama-3.1-8b", "--engine", "vllm", *args, "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)["engine"]


def test_the_plan_says_where_its_non_torch_figure_came_from(cli):
    eng = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.19")
    assert eng["non_torch_bytes"] == int(0.25 * GiB)
    assert eng["non_torch_source"].startswith("0.25 GiB, logged by vLLM 0.19.0 at TP 1 on an H100")
    assert (
        "Granite 3.x language models 0.46" in eng["non_torch_source"]
        and "accuracy/results/v0.19.0/logs" in eng["non_torch_source"]
    )
    # a release between measurements says it was not measured itself
    later = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.32")
    assert later["non_torch_bytes"] == int(0.25 * GiB) and "vLLM 0.32 itself not measured" in later["non_torch_source"]
    # another GPU, or an unmeasured TP: 0, saying so
    a100 = _engine(cli, "--gpu", "a100-80gb", "--engine-version", "0.19")
    assert a100["non_torch_bytes"] == 0 and a100["non_torch_source"].startswith("assumed 0 (not measured on a100")
    tp8 = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.19", "--tp", "8")
    assert tp8["non_torch_bytes"] == 0 and "not measured at TP 8" in tp8["non_torch_source"]
    # pipeline stages: not modelled (0.19.0 logged 0.07 GiB per stage, the PP 2 and 4 Llama logs of the same set)
    pp = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.19", "--pp", "2")
    assert pp["non_torch_bytes"] == 0 and "pipeline parallelism" in pp["non_torch_source"]
    # the user's figure wins
    given = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.19", "--non-torch-gib", "0.4")
    assert given["non_torch_bytes"] == int(0.4 * GiB) and given["non_torch_source"] == "--non-torch-gib"
    # and the text report prints the source
    r = cli("plan", "--preset", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100-sxm", "--engine-version", "0.19")
    assert "non-torch: 0.25 GiB, logged by vLLM 0.19.0" in " ".join(r.stdout.split())


def test_the_tp_sweep_replans_with_each_tps_non_torch_figure():
    from kneecap.plan.build import DeploymentRequest, plan_deployment

    req = DeploymentRequest(preset="llama-3.1-8b", gpu="h100-sxm", engine="vllm", engine_version="0.19")
    by_tp = dict(plan_deployment(req).plan.overhead_by_tp)
    # the activation peak is the same at TP 1, 2 and 4 for this model (the sampler over the whole vocabulary sets
    # it); the kept memory grows by the TP 2 / TP 4 non-torch figures over TP 1's, and by what vLLM's load holds per
    # rank beyond kneecap's weights at each TP (plan/vllm_load: 65,536 B at TP 1, 2,162,688 B at TP 2, 65,536 B
    # at TP 4: the attention layers' scalars and PyTorch's allocator blocks; the norms every rank keeps whole are in
    # the weights, model.params.tp_layout)
    assert by_tp[2] - by_tp[1] == int(2.07 * GiB) - int(0.25 * GiB) + 2_162_688 - 65_536
    assert by_tp[4] - by_tp[1] == int(2.13 * GiB) - int(0.25 * GiB) + 65_536 - 65_536


def test_the_plan_says_whether_the_release_subtracts_its_cuda_graph_estimate(cli):
    from kneecap.plan import cudagraph_memory

    # the range the plan quotes is the published logs' (each deployment once: records and measurements share logs)
    est = {
        m["url"]: m["cudagraph_estimate_gib"]
        for m in DATA["non_torch_measurements"]
        if "cudagraph_estimate_gib" in m and m.get("pp", 1) == 1
    }
    est.update(
        {
            r["url"]: r["logged"]["cudagraph_estimate_gib"]
            for r in DATA["records"]
            if "cudagraph_estimate_gib" in r["logged"]
        }
    )
    for m in DATA["non_torch_measurements"]:
        if "cudagraph_estimate_gib" in m:
            assert f"Estimated CUDA graph memory: {m['cudagraph_estimate_gib']:.2f} GiB total" in m["lines"][2], m["id"]
    text = cudagraph_memory.describe_default("0.20", (1, 512), {"PIECEWISE": 51}, 0)
    assert f"the {len(est)} vLLM 0.19.0 H100 logs" in text
    assert f"those logs read {min(est.values()):.2f}-{max(est.values()):.2f} GiB" in text
    # 0.20 on: subtracted by vLLM, the default unless given; before: not subtracted at all
    later = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.20")
    assert later["cudagraph_bytes"] > 0 and later["cudagraph_from"] == "default"
    given = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.20", "--cudagraph-gib", "0.84")
    assert given["cudagraph_bytes"] == int(0.84 * GiB) and given["cudagraph_source"] == "--cudagraph-gib"
    assert given["kv_pool_bytes"] == later["kv_pool_bytes"] + later["cudagraph_bytes"] - int(0.84 * GiB)
    older = _engine(cli, "--gpu", "h100-sxm", "--engine-version", "0.19", "--cudagraph-gib", "0.84")
    assert older["cudagraph_bytes"] == 0 and older["cudagraph_source"].startswith("not subtracted: vLLM 0.19")
    r = cli("plan", "--preset", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100-sxm", "--engine-version", "0.20")
    assert "CUDA graphs: 0.84 GiB, a default" in r.stdout
