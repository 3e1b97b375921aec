"""vLLM's MXFP4 expert tensors (gpt-oss) in `kneecap plan --engine vllm`: Marlin's padding, against published loads.

The records are tests/plan/data/engine_startup_logs.json's 'mxfp4_expert_loads': each server's "Model loading took"
line verbatim and the MoE backend it used. For a record on a backend kneecap models (Marlin) kneecap's "Model loading
took" (weights + Marlin's padding + RoPE buffer) must be the logged one within PyTorch's caching-allocator rounding
seen on the dense records (docs/engine-model.md: up to +72 MiB), and the checkpoint's bytes alone must not be; where
the log also prints "Available KV cache memory", the table shows the activation peak and non-torch memory that the
logged figures imply (util x total - loaded - available), a measurement, not a rule.

The table in docs/engine-model.md ("MXFP4 experts") is this module's output:
`PYTHONPATH=src python tests/plan/test_plan_mxfp4_experts.py` prints it, and the test requires the page to carry it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # clitools, when run as a script
from clitools import run_cli  # noqa: E402

from kneecap.deployment import Deployment  # noqa: E402
from kneecap.errors import KneecapError  # noqa: E402
from kneecap.hardware import get_gpu  # noqa: E402
from kneecap.model.presets import load_preset  # noqa: E402
from kneecap.plan import vllm_mxfp4  # noqa: E402

ROOT = Path(__file__).parents[2]
DATA = Path(__file__).parent / "data" / "engine_startup_logs.json"
DOC = ROOT / "docs" / "engine-model.md"
RECORDS = json.loads(DATA.read_text())["mxfp4_expert_loads"]
GiB = 2**30
ALLOCATOR_ROUNDING_GIB = 0.072  # the largest caching-allocator excess on the dense records (Gemma-3-27B, +72.1 MiB)


def _engine(args: list[str]) -> dict:
    r = run_cli("plan", *args, "--engine", "vllm", "--json", cwd=str(ROOT))
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)["engine"]


def compare(rec: dict) -> dict:
    # a server left with no KV cache (the 0.10.1 one: the profile run's sort of 1,024 rows of logits, 7.37 GiB): engine
    # mode refuses to plan it as vLLM refused to start, so its load is read with the activation peak given as 0
    no_pool = rec["logged"].get("available_kv_gib", 1) < 0
    eng = _engine([*rec["plan"], *(["--activation-gib", "0"] if no_pool else [])])
    loaded = (eng["weights_bytes"] + eng["expert_pad_bytes"] + eng["rope_cache_bytes"]) / GiB
    row = {
        "id": rec["id"],
        "release": rec["release"],
        "backend": rec["backend"],
        "logged": rec["logged"]["weights_gib"],
        "checkpoint": (eng["weights_bytes"] + eng["rope_cache_bytes"]) / GiB,
        "pad": eng["expert_pad_bytes"] / GiB,
        "loaded": loaded,
        "modelled": rec["modelled"],
    }
    if "available_kv_gib" in rec["logged"]:
        budget = eng["total_bytes"] * rec["gpu_memory_utilization"] / GiB
        row["implied_rest"] = budget - rec["logged"]["weights_gib"] - rec["logged"]["available_kv_gib"]
        row["total"] = eng["total_bytes"] / GiB
    return row


def table(rows: list[dict]) -> str:
    out = [
        "| record | release | backend | logged 'Model loading took' | kneecap: checkpoint + RoPE | + Marlin padding "
        "| = kneecap | gap | activation + non-torch the log implies |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        implied = (
            f"{r['implied_rest']:.2f} GiB ({r['total']:.2f} GiB total)" if "implied_rest" in r else "(no pool logged)"
        )
        out.append(
            f"| {r['id']} | {r['release']} | {r['backend']} | {r['logged']:g} GiB | {r['checkpoint']:.2f} GiB "
            f"| {r['pad']:+.2f} GiB | {r['loaded']:.2f} GiB | {r['loaded'] - r['logged']:+.3f} GiB"
            f"{'' if r['modelled'] else ' (not modelled)'} | {implied} |"
        )
    return "\n".join(out)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [compare(r) for r in RECORDS]


def test_every_record_cites_its_source_and_prints_the_load():
    for rec in RECORDS:
        assert rec["url"].startswith("https://") and rec["lines"], rec["id"]
        logged = f"{rec['logged']['weights_gib']:g}"
        assert any(f"Model loading took {logged} GiB" in line for line in rec["lines"]), rec["id"]
        if "available_kv_gib" in rec["logged"]:
            pool = f"Available KV cache memory: {rec['logged']['available_kv_gib']:.2f} GiB"
            assert any(pool in line for line in rec["lines"]), rec["id"]


def test_marlins_padding_is_what_the_marlin_servers_loaded_beyond_the_checkpoint(rows):
    for r in (r for r in rows if r["modelled"]):
        assert abs(r["loaded"] - r["logged"]) <= ALLOCATOR_ROUNDING_GIB, r
        assert r["logged"] - r["checkpoint"] > 10 * ALLOCATOR_ROUNDING_GIB, r  # the checkpoint alone misses


def test_the_triton_server_is_not_modelled_and_the_plan_says_so(rows):
    (r,) = [r for r in rows if r["backend"] == "triton"]
    assert r["pad"] == 0 and r["logged"] - r["loaded"] > 3.0  # 64.38 logged against 60.74 GiB of tensors
    out = run_cli("plan", *RECORDS[-1]["plan"], "--engine", "vllm", cwd=str(ROOT)).stdout
    assert "Triton kernels from 0.12 (not modelled" in " ".join(out.split())


def _deployment(preset: str, gpu: str, tp: int = 1) -> Deployment:
    return Deployment(model=load_preset(preset), gpu=get_gpu(gpu), tp=tp, weight_dtype="mxfp4")


@pytest.mark.parametrize(
    "gpu,version,backend",
    [
        ("a100-80", (0, 10, 2), "marlin"),
        ("a100-80", (0, 19, 0), "marlin"),
        ("a100-80", (0, 33, 0), "marlin"),
        ("l40s", (0, 11, 0), "marlin"),
        ("h100-sxm", (0, 10, 2), "marlin"),  # no triton_kernels in 0.10/0.11's requirements or image
        ("h100-sxm", (0, 11, 0), "marlin"),
        ("h100-sxm", (0, 12, 0), "triton"),  # bundled from 0.12
        ("h200", (0, 19, 0), "triton"),
        ("b200", (0, 11, 0), "flashinfer"),
        ("mi300x", (0, 11, 0), "other"),
    ],
)
def test_the_backend_vllm_picks_by_gpu_and_release(gpu, version, backend):
    assert vllm_mxfp4.mxfp4_backend(gpu, version) == backend


def test_the_padded_expert_tensors_from_their_shapes():
    # gpt-oss-120b, one layer of 128 experts: w13 [128, 2I, H/2] + scales [128, 2I, H/32] + bias [128, 2I] bf16,
    # w2 [128, H, I/2] + scales [128, H, I/32] + bias [128, H] bf16; I 2,880 -> 2,944, H 2,880 -> 3,072
    def layer(i, h):
        return 128 * (2 * i * h // 2 + 2 * i * h // 32 + 2 * i * 2 + h * i // 2 + h * i // 32 + h * 2)

    assert vllm_mxfp4.expert_tensor_bytes(128, 3072, 2944) == layer(2944, 3072) == 1_847_263_232
    assert vllm_mxfp4.expert_tensor_bytes(128, 2880, 2880) == layer(2880, 2880)
    pad_only = 36 * (layer(2944, 3072) - layer(2880, 2880)) / GiB
    assert round(pad_only, 2) == 5.13  # the padding alone; the rest of the 5.18 GiB is the biases at bf16
    d = _deployment("gpt-oss-120b", "h100-sxm")
    assert round(vllm_mxfp4.marlin_extra_bytes(d, (0, 10, 2)) / GiB, 2) == 5.18
    assert vllm_mxfp4.marlin_extra_bytes(d, (0, 12, 0)) == 0  # Triton from 0.12


def test_tensor_parallel_ranks_pad_their_own_share():
    # TP 2: each rank holds I / 2 = 1,440, padded to 1,536 (vs 2,944 / 2 = 1,472 at TP 1)
    d1, d2 = _deployment("gpt-oss-120b", "a100-80"), _deployment("gpt-oss-120b", "a100-80", tp=2)
    assert "1,440 -> 1,536" in vllm_mxfp4.describe(d2, (0, 19, 0), 1)
    assert vllm_mxfp4.marlin_extra_bytes(d2, (0, 19, 0)) > vllm_mxfp4.marlin_extra_bytes(d1, (0, 19, 0)) / 2


def test_a_server_that_ran_the_other_kernel_can_be_named():
    d = _deployment("gpt-oss-120b", "h100-sxm")
    assert vllm_mxfp4.marlin_extra_bytes(d, (0, 10, 2), "triton") == 0  # 0.10.2 with triton_kernels installed
    assert vllm_mxfp4.marlin_extra_bytes(d, (0, 19, 0), "marlin") > 5 * GiB  # VLLM_MXFP4_USE_MARLIN=1
    assert "not modelled" in vllm_mxfp4.describe(d, (0, 10, 2), 0, "triton")
    from kneecap.plan.build import DeploymentRequest, plan_deployment

    # (FlashInfer's sampler: with the pip wheel's sort the profile run leaves this deployment no KV cache)
    ask = dict(
        preset="gpt-oss-120b",
        gpu="h100-sxm",
        engine="vllm",
        engine_version="0.10.2",
        context=32768,
        vllm_sampler="flashinfer",
    )
    default = plan_deployment(DeploymentRequest(**ask)).engine_pool
    triton = plan_deployment(DeploymentRequest(**ask, moe_backend="triton")).engine_pool
    assert triton.expert_pad_bytes == 0 and triton.kv_pool_bytes - default.kv_pool_bytes == default.expert_pad_bytes
    with pytest.raises(KneecapError, match="unknown MXFP4 MoE backend 'cutlass'") as err:
        vllm_mxfp4.mxfp4_backend("h100-sxm", (0, 10, 2), "cutlass")
    assert err.value.hint == "use one of marlin, triton"
    with pytest.raises(KneecapError, match="Triton on a100-80 .compute capability 8.x"):
        vllm_mxfp4.mxfp4_backend("a100-80", (0, 11, 0), "triton")


def test_other_models_and_dtypes_get_no_padding():
    assert vllm_mxfp4.marlin_extra_bytes(_deployment("llama-3.1-8b", "a100-80"), (0, 19, 0)) == 0
    d = Deployment(model=load_preset("gpt-oss-20b"), gpu=get_gpu("a100-80"), weight_dtype="bf16")
    assert vllm_mxfp4.marlin_extra_bytes(d, (0, 19, 0)) == 0


def test_the_ledger_without_an_engine_keeps_the_checkpoints_bytes():
    base = ["--preset", "gpt-oss-120b", "--gpu", "h100-sxm", "--context", "32768", "--json"]
    plain = json.loads(run_cli("plan", *base, cwd=str(ROOT)).stdout)
    engine_args = ["--engine", "vllm", "--engine-version", "0.10.2", "--vllm-sampler", "flashinfer"]  # (a KV cache)
    engine = json.loads(run_cli("plan", *base, *engine_args, cwd=str(ROOT)).stdout)
    assert plain["weights_total_bytes"] == engine["weights_total_bytes"] == engine["engine"]["weights_bytes"]
    assert engine["engine"]["expert_pad_bytes"] > 5 * GiB


def test_the_docs_table_is_this_modules_output(rows):
    assert table(rows) in DOC.read_text()


if __name__ == "__main__":
    print(table([compare(r) for r in RECORDS]))


def test_the_user_names_the_kernel_with_moe_backend():
    base = ["--preset", "gpt-oss-120b", "--gpu", "h100-sxm", "--context", "32768", "--json", "--engine", "vllm"]
    base += ["--engine-version", "0.10.2", "--vllm-sampler", "flashinfer"]  # (the sort would leave no KV cache)
    default = json.loads(run_cli("plan", *base, cwd=str(ROOT)).stdout)["engine"]
    triton = json.loads(run_cli("plan", *base, "--moe-backend", "triton", cwd=str(ROOT)).stdout)["engine"]
    assert default["expert_pad_bytes"] > 5 * GiB and triton["expert_pad_bytes"] == 0
    ampere = [a if a != "h100-sxm" else "a100-80" for a in base]
    bad = run_cli("plan", *ampere, "--moe-backend", "triton", cwd=str(ROOT))
    assert bad.code != 0 and len(bad.stderr.strip().splitlines()) == 1 and "name marlin" in bad.stderr


def test_moe_backend_is_refused_where_it_would_change_nothing():
    base = ["--preset", "gpt-oss-120b", "--gpu", "h100-sxm", "--context", "32768"]
    for args, words in (
        (["--moe-backend", "marlin"], "add --engine vllm"),  # the ledger keeps the checkpoint's bytes
        (["--engine", "sglang", "--moe-backend", "triton"], "add --engine vllm"),
        (["--preset", "llama-3.1-8b", "--engine", "vllm", "--moe-backend", "cutlass"], "use one of marlin, triton"),
    ):
        bad = run_cli("plan", *base, *args, cwd=str(ROOT))
        assert bad.code != 0 and len(bad.stderr.strip().splitlines()) == 1 and words in bad.stderr, (args, bad.stderr)
