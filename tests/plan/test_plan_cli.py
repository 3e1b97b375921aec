"""`kneecap plan` / `kneecap preflight` through the real CLI: the seed lines, golden --json key sets,
every bad-input path (one stderr line, exit 2, no traceback), and the light import path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plan_helpers import run_kneecap

SEED_LINE = [
    "plan",
    "--preset",
    "gqa-70b",
    "--gpu",
    "mi300x",
    "--context",
    "8192",
    "--mean-context",
    "2050",
    "--compute-batch-cap",
    "128",
]

PLAN_KEYS = {
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "ledger",
    "kv_capacity_tokens",
    "max_seqs",
    "max_concurrency",
    "binding",
    "levers",
    "tp_sweep",
    "context_sweep",
    # additions
    "model",
    "gpu",
    "tp",
    "pp",
    "ep",
    "dp_attention",
    "dp_attention_engine",
    "num_gpus",
    "weight_dtype",
    "kv_dtype",
    "context",
    "mean_context",
    "block_size",
    "block_size_requested",
    "compute_batch_cap",
    "hbm",
    "weights_total_bytes",
    "weights_source",
    "kv_heads_per_gpu",
    "kv_replicated",
    "state_bytes_per_sequence",
    "vision_profile",
    "kv_pool_source",
    "num_kv_blocks",
    "seq_bytes",
    "waste",
    "notes",
    "engine",
    "worst_case",
    "paged_at_mean_context",
    "kv_derivation",
}
LEDGER_KEYS = {"hbm_bytes", "weights_bytes", "overhead_bytes", "fragmentation_bytes", "kv_pool_bytes", "reserved_bytes"}
LEVER_KEYS = {"name", "kv_pool_bytes", "max_seqs", "change", "max_concurrency", "num_gpus", "gain", "note"}
TP_KEYS = {
    "tp",
    "kv_heads_per_gpu",
    "replicated",
    "kv_pool_bytes",
    "max_seqs",
    "num_gpus",
    "fits",
    "kv_bytes_per_token_per_gpu",
    "gain",
}
CONTEXT_KEYS = {"context", "contiguous", "paged", "seq_bytes_contiguous", "model_max"}
PREFLIGHT_KEYS = {
    "kv_capacity_tokens",
    "levels",
    "max_safe_concurrency",
    "isl",
    "osl",
    "block_size",
    "source",
    "notes",
    "plan",
    "server",
}
LEVEL_KEYS = {"concurrency", "peak_tokens", "steady_tokens", "verdict", "headroom_tokens", "fix"}


@pytest.fixture(scope="module")
def seed_json():
    r = run_kneecap(*SEED_LINE, "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_plan_json_golden_keys(seed_json):
    assert set(seed_json) == PLAN_KEYS
    assert set(seed_json["ledger"]) == LEDGER_KEYS
    assert set(seed_json["max_seqs"]) == {"contiguous", "paged"}
    assert all(set(lv) == LEVER_KEYS for lv in seed_json["levers"])
    assert all(set(p) == TP_KEYS for p in seed_json["tp_sweep"])
    assert all(set(c) == CONTEXT_KEYS for c in seed_json["context_sweep"])
    assert {"fp8-weights", "fp8-kv", "fp8-weights+fp8-kv"} <= {lv["name"] for lv in seed_json["levers"]}


@pytest.mark.parametrize(
    "path,expected",
    [
        ("kv_bytes_per_token", 327_680),
        ("ledger.hbm_bytes", 192_000_000_000),
        ("ledger.weights_bytes", 140_000_000_000),
        ("ledger.overhead_bytes", 4_294_967_296),
        ("max_seqs.contiguous", 16),
        ("max_seqs.paged", 67),
        ("max_concurrency", 67),
        ("binding", "hbm"),
        ("hbm.device_bytes", 205_822_885_888),
    ],
)
def test_plan_json_seed_numbers(seed_json, path, expected):
    value = seed_json
    for key in path.split("."):
        value = value[key]
    assert value == expected


def test_plan_json_sweeps(seed_json):
    tps = {p["tp"]: (p["max_seqs"], p["replicated"]) for p in seed_json["tp_sweep"]}
    assert tps[1] == (67, False) and tps[8] == (1912, False) and tps[16] == (2010, True)
    ctx = {c["context"]: (c["contiguous"], c["paged"]) for c in seed_json["context_sweep"]}
    assert ctx[131072] == (1, 67)
    levers = {lv["name"]: lv["max_seqs"] for lv in seed_json["levers"]}
    assert (levers["fp8-weights"], levers["fp8-kv"], levers["fp8-weights+fp8-kv"]) == (165, 134, 330)


def test_plan_worksheet_reads_like_the_seed(cli):
    r = cli(*SEED_LINE)
    assert r.code == 0, r.stderr
    for text in (
        "2 (K and V) × 80 layers × 8 kv_heads × 128 head_dim × 2 B",
        "327,680",
        "178.81",
        "130.39",
        "4.00",
        "2.22",
        "42.21",
        "→ 16 sequences",
        "→ 67 sequences",
        "4.69 MiB",
        "75.0%",
        "HBM binds",
        "104.14",
        "1,912",
        "2,010",
        "1 (replicated)",
        "131,072",
        "205,822,885,888",
    ):
        assert text in r.stdout, text


def test_hbm_device_uses_the_driver_total(cli):
    r = cli(*SEED_LINE, "--hbm", "device", "--json")
    doc = json.loads(r.stdout)
    assert doc["ledger"]["hbm_bytes"] == 205_822_885_888
    assert doc["max_seqs"]["paged"] > 67


def test_kv_pool_gib_turns_a_logged_pool_into_tokens(cli):
    r = cli(*SEED_LINE, "--kv-pool-gib", "42.21", "--json")
    doc = json.loads(r.stdout)
    assert doc["kv_pool_source"] == "override"
    assert doc["ledger"]["kv_pool_bytes"] == 45_322_642_391  # int(42.21 x 2^30) = 45,097,156,608 + 225,485,783
    assert doc["max_seqs"]["paged"] == 67
    assert [lv["name"] for lv in doc["levers"]] == ["fp8-kv"]


def test_engine_vllm_prints_its_log_lines(cli):
    r = cli("plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32768")
    assert r.code == 0, r.stderr
    assert "GPU KV cache size:" in r.stdout and "Maximum concurrency for 32,768 tokens per request:" in r.stdout


def test_engine_sglang_json(cli):
    r = cli(
        "plan",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--engine",
        "sglang",
        "--mem-fraction",
        "0.88",
        "--context",
        "32768",
        "--json",
    )
    doc = json.loads(r.stdout)
    assert doc["engine"]["engine"] == "sglang" and doc["engine"]["kv_capacity_tokens"] > 0
    assert [line.split(" #tokens: ")[0] for line in doc["engine"]["log_lines"]] == ["KV Cache is allocated."]


def test_preflight_seed_000_json(cli):
    r = cli(
        "preflight",
        "--kv-tokens",
        "1573854",
        "--isl",
        "1000",
        "--osl",
        "1000",
        "--concurrency",
        "64,128,256,512,1024,2048",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == PREFLIGHT_KEYS
    assert all(set(lv) == LEVEL_KEYS for lv in doc["levels"])
    verdicts = {lv["concurrency"]: lv["verdict"] for lv in doc["levels"]}
    assert (verdicts[512], verdicts[1024], verdicts[2048]) == ("fits", "tight", "exceeds")
    assert doc["max_safe_concurrency"] == 786
    assert {lv["concurrency"]: lv["peak_tokens"] for lv in doc["levels"]}[512] == 1_024_000


def test_preflight_seed_001_kimi_on_rtx_pro_6000(cli):
    r = cli(
        "preflight",
        "--model",
        "kimi-k2.5",
        "--gpu",
        "rtx-pro-6000",
        "--tp",
        "8",
        "--weight-dtype",
        "nvfp4",
        "--isl",
        "1000",
        "--osl",
        "1000",
        "--concurrency",
        "64,128,256,512,1024",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    c1024 = [lv for lv in doc["levels"] if lv["concurrency"] == 1024][0]
    assert c1024["verdict"] == "exceeds"
    assert doc["max_safe_concurrency"] < 256
    assert c1024["fix"]["max_seq_tokens"] < 512
    assert doc["plan"]["num_gpus"] == 8


BAD = [
    (["plan", "--preset", "gqa-70b", "--gpu", "h10"], "did you mean h100-sxm"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--tp", "0"], "--tp must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--tp", "-2"], "--tp must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--context", "0"], "--context must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--block-size", "-16"], "--block-size must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--params", "-7"], "--params must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--kv-pool-gib", "0"], "--kv-pool-gib must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--overhead-gib", "-1"], "--overhead-gib must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--mem-util", "0"], "--mem-util must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--frag", "1"], "--frag must be"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--hbm", "lots"], "--hbm"),
    (["plan", "--preset", "gqa-70b", "--gpu", "h100-sxm"], "try --tp 2 or --weight-dtype fp8"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--tp", "3"], "does not divide the 64 attention heads"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--weight-dtype", "fp3"], "unknown weight dtype"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--kv-dtype", "int3"], "unknown KV dtype"),
    (
        ["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--context", "2000", "--mean-context", "4000"],
        "exceeds --context",
    ),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--engine", "tgi"], "unknown engine"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--engine", "vllm", "--tp", "3"], "does not divide"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--mamba-cache-size", "64"], "--mamba-cache-size"),
    (["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--mem-fraction", "0.8"], "--mem-fraction"),
    (
        ["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--engine", "sglang", "--mem-fraction", "2"],
        "--mem-fraction must be in (0, 1]",
    ),
    (
        ["plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--engine", "vllm", "--engine-version", "-1.2"],
        "bad engine version '-1.2'",
    ),
    (["plan", "--gpu", "mi300x"], "no model given"),
    (["plan", "--preset", "gqa-70b"], "no GPU given"),
    (["preflight", "--kv-tokens", "0"], "--kv-tokens must be"),
    (["preflight", "--kv-tokens", "1000", "--isl", "-1"], "--isl must be"),
    (["preflight", "--kv-tokens", "1000", "--concurrency", "0,4"], "concurrency"),
    (["preflight"], "exactly one capacity source"),
    (["preflight", "--kv-tokens", "1000", "--preset", "gqa-70b", "--gpu", "mi300x"], "exactly one capacity source"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a[1:]) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2(cli, args, needle):
    r = cli(*args)
    assert r.code == 2, (r.code, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr
    assert needle in lines[0]


HEAVY = ("numpy", "pydantic", "aiohttp", "matplotlib")
# typer >= 0.28 coerces every CLI parameter through pydantic; pyproject pins typer < 0.28 so the
# whole `kneecap plan --json` path stays off all four.


def test_plan_json_path_stays_off_heavy_imports():
    code = (
        "import sys, io, contextlib\n"
        "from kneecap.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        f"    rc = main({SEED_LINE + ['--json']!r})\n"
        f"heavy = [m for m in {HEAVY!r} + ('rich',) if m in sys.modules]\n"
        "print(rc, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0 []", out.stdout + out.stderr


def test_plan_modules_alone_stay_off_heavy_imports():
    code = (
        "import sys\n"
        "import kneecap.cli.plan, kneecap.cli.preflight, kneecap.plan.ledger, kneecap.plan.levers\n"
        "import kneecap.plan.sweeps, kneecap.plan.engines, kneecap.plan.preflight, kneecap.plan.render\n"
        f"print([m for m in {HEAVY!r} + ('rich',) if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_engine_mode_is_the_ledger_in_the_engines_terms(cli):
    r = cli(
        "plan",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--engine",
        "vllm",
        "--context",
        "32768",
        "--activation-gib",
        "1.2",
        "--non-torch-gib",
        "0.4",
        "--cudagraph-gib",
        "0.5",
        "--json",
    )
    doc = json.loads(r.stdout)
    assert doc["ledger"]["kv_pool_bytes"] == doc["engine"]["kv_pool_bytes"]
    assert doc["kv_capacity_tokens"] == doc["engine"]["kv_capacity_tokens"]
    assert doc["ledger"]["fragmentation_bytes"] == 0
    assert doc["ledger"]["hbm_bytes"] == 85_029_615_043  # the PyTorch total, 79.19 GiB
    assert {lv["name"] for lv in doc["levers"]} >= {"fp8-weights", "fp8-kv", "more-gpus"}
    assert doc["tp_sweep"]


def test_list_gpus_json(cli):
    r = cli("plan", "--list-gpus", "--json")
    names = [g["name"] for g in json.loads(r.stdout)["gpus"]]
    assert "mi300x" in names and "rtx-pro-6000" in names


def test_preflight_vllm_hybrid_uses_its_grown_block(cli):
    r = cli(
        "preflight",
        "--preset",
        "qwen3.5-397b-a17b",
        "--gpu",
        "rtx-pro-6000",
        "--tp",
        "8",
        "--weight-dtype",
        "nvfp4",
        "--engine",
        "vllm",
        "--concurrency",
        "512",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (
        doc["block_size"] == 528
    )  # attention block grown to hold one Gated DeltaNet state page (see test_plan_engines)
    assert doc["levels"][0]["peak_tokens"] == 512 * 2112  # 2000 tokens -> 4 blocks of 528
    assert any("mixes layer kinds" in n for n in doc["notes"])
