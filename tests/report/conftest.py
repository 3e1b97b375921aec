"""The report tests' inputs, made by the commands users run, once per test session (small sweeps):
`kneecap simulate`, `kneecap bench` against `kneecap serve` (and against the scripted test server, which
does not say it is simulated), `kneecap plan` and `kneecap run` on a small simulated load plan.

Properties a test needs come from the commands' flags: a KV pool small enough to preempt
(--kv-pool-gib), an SLO no level meets,
prompts longer than the server's --context, markup in the served model name (--served-model-name) and in the load plan's name and description.
Tests that change a folder get a copy of it (bench_dir, sim_dir, run_dir).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

HOSTILE = "<script>alert(1)</script>"
# the hostile server's served model name: markup, an ampersand and mathtext dollars, shown as typed
HOSTILE_MODEL = f"{HOSTILE} & <b>bold</b> costs $5 and $\\frac{{1}}{{0}}$"
DATA = Path(__file__).resolve().parent / "data"
TWO_CANDIDATES = DATA / "two_candidates.yaml"
# kneecap serve with a 0.2 GiB KV pool: 1,632 tokens (131,072 B per token for llama-3.1-8b), so 16 requests of
# 132 tokens overflow it (preemptions) while 4 fit; a 512-token context refuses 600-token prompts (HTTP 400)
HOSTILE_SERVE_ARGS = [
    "--preset",
    "llama-3.1-8b",
    "--gpu",
    "h100-sxm",
    "--served-model-name",
    HOSTILE_MODEL,
    "--context",
    "512",
    "--kv-pool-gib",
    "0.2",
]


def _copy(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


@pytest.fixture
def hostile() -> str:
    return HOSTILE


@pytest.fixture
def hostile_model() -> str:
    return HOSTILE_MODEL


@pytest.fixture(scope="session")
def real_worked_plan(tmp_path_factory) -> Path:
    """The README's worked example, `kneecap plan ... --json` written to a file."""
    path = tmp_path_factory.mktemp("real") / "worked-plan.json"
    path.write_text(
        _cli(
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
            "--json",
        ).stdout
    )
    return path


@pytest.fixture
def plan_file(tmp_path, real_worked_plan) -> Path:
    """A copy of a real `kneecap plan --json` document (the README's worked example)."""
    path = tmp_path / "plan.json"
    path.write_text(real_worked_plan.read_text())
    return path


@pytest.fixture(scope="session")
def hostile_server():
    """`kneecap serve` whose served model name holds markup, with a small KV pool and a 512-token context."""
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(HOSTILE_SERVE_ARGS)
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def bench_run(tmp_path_factory, hostile_server) -> Path:
    """`kneecap bench` against the hostile server: C=1,4,16 of 100-token prompts (16 past the KV pool: --force),
    the served model name with markup."""
    out = tmp_path_factory.mktemp("real") / "bench-run"
    _cli(
        "bench",
        "--base-url",
        hostile_server,
        "--isl",
        "100",
        "--osl",
        "32",
        "--concurrency",
        "1,4,16",
        "--requests",
        "16",
        "--force",
        "--out",
        str(out),
        "--no-report",
        "--quiet",
    )
    return out


@pytest.fixture(scope="session")
def refused_bench(tmp_path_factory, hostile_server) -> Path:
    """`kneecap bench` of 600-token prompts against the hostile server's 512-token context: the server answers
    every request HTTP 400 with its own message (bench exits 0: failed requests are measured, not fatal)."""
    out = tmp_path_factory.mktemp("real") / "refused-bench"
    _cli(
        "bench",
        "--base-url",
        hostile_server,
        "--isl",
        "600",
        "--osl",
        "32",
        "--concurrency",
        "1",
        "--requests",
        "4",
        "--out",
        str(out),
        "--no-report",
        "--quiet",
    )
    return out


@pytest.fixture(scope="session")
def scripted_bench(tmp_path_factory) -> Path:
    """`kneecap bench` against the scripted test server (it does not say it is simulated): two tokens per
    chunk, C=4,16 (the loads pressured_sim runs, for comparing)."""
    from servers.scripted import start_scripted_server

    out = tmp_path_factory.mktemp("real") / "scripted-bench"
    url, server = start_scripted_server(ttft_s=0.02, itl_s=0.005, tokens_per_chunk=2)
    try:
        _cli(
            "bench",
            "--base-url",
            url,
            "--isl",
            "64",
            "--osl",
            "16",
            "--concurrency",
            "4,16",
            "--requests",
            "16",
            "--out",
            str(out),
            "--no-report",
            "--quiet",
        )
    finally:
        server.stop()
    return out


@pytest.fixture(scope="session")
def pressured_sim(tmp_path_factory) -> Path:
    """`kneecap simulate` with a 0.2 GiB KV pool (1,632 tokens): C=4 of 232-token requests fits, C=16 preempts
    (virtual time: the same preemptions every run); with a trace."""
    out = tmp_path_factory.mktemp("real") / "pressured-sim"
    _cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--kv-pool-gib",
        "0.2",
        "--isl",
        "200",
        "--osl",
        "32",
        "--concurrency",
        "4,16",
        "--requests",
        "16",
        "--trace",
        "--out",
        str(out),
        "--no-report",
        "--quiet",
    )
    return out


@pytest.fixture(scope="session")
def rate_sim(tmp_path_factory) -> Path:
    """`kneecap simulate` over request rates (open loop)."""
    out = tmp_path_factory.mktemp("real") / "rate-sim"
    _cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "128",
        "--osl",
        "16",
        "--rate",
        "0.5,1,2,4",
        "--requests",
        "16",
        "--out",
        str(out),
        "--no-report",
        "--quiet",
    )
    return out


@pytest.fixture(scope="session")
def run_two(tmp_path_factory) -> Path:
    """`kneecap run` of tests/report/data/two_candidates.yaml: one candidate accepted, one rejected."""
    out = tmp_path_factory.mktemp("real") / "run-out"
    _cli("run", str(TWO_CANDIDATES), "--out", str(out), "--quiet", "--no-report")
    return out


@pytest.fixture
def bench_dir(tmp_path, bench_run) -> Path:
    """A copy of bench_run, for tests that render into the folder or change it."""
    return _copy(bench_run, tmp_path / "bench-run")


@pytest.fixture
def sim_dir(tmp_path, pressured_sim) -> Path:
    """A copy of pressured_sim."""
    return _copy(pressured_sim, tmp_path / "sim-run")


@pytest.fixture
def run_dir(tmp_path, run_two) -> Path:
    """A copy of run_two."""
    return _copy(run_two, tmp_path / "run-out")


# -- real runs: the report tests' inputs made by the commands users run (session-scoped, small sweeps) --------

REAL_SIM_ARGS = (
    "simulate",
    "--preset",
    "llama-3.1-8b",
    "--gpu",
    "h100-sxm",
    "--isl",
    "512",
    "--osl",
    "64",
    "--concurrency",
    "1,16,64",
    "--requests",
    "64",
    "--slo",
    "ttft_p99_ms=200,itl_p99_ms=15",
    "--trace",
)
REAL_PLAN_ARGS = ("plan", "--preset", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "8", "--weight-dtype", "fp8")
# an ITL budget no server meets (a microsecond): every bench level breaches it, whatever the machine's load
REAL_BENCH_SLO = "ttft_p99_ms=600000,itl_p99_ms=0.001"


def _cli(*args: str, timeout: float = 300):
    from clitools import run_cli

    r = run_cli(*args, timeout=timeout)
    assert r.code == 0, (args, r.code, r.stderr[-2000:])  # no --fail-on: an SLO breach still exits 0
    return r


@pytest.fixture(scope="session")
def real_sim(tmp_path_factory):
    """`kneecap simulate` with an SLO that C=1 and C=16 meet and C=64 breaches (virtual time: deterministic)."""
    out = tmp_path_factory.mktemp("real") / "sim"
    r = _cli(*REAL_SIM_ARGS, "--out", str(out))
    return out, r.stdout


@pytest.fixture(scope="session")
def real_plan(tmp_path_factory) -> Path:
    """`kneecap plan --json` written to a file, as a user saves it for `kneecap report`."""
    path = tmp_path_factory.mktemp("real") / "plan.json"
    path.write_text(_cli(*REAL_PLAN_ARGS, "--json").stdout)
    return path


@pytest.fixture(scope="session")
def simulated_server():
    """`kneecap serve` on a free loopback port, stopped by its PID at the end of the session."""
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm"])
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def real_bench(tmp_path_factory, simulated_server):
    """`kneecap bench` against `kneecap serve`: (results folder, terminal output)."""
    out = tmp_path_factory.mktemp("real") / "bench"
    r = _cli(
        "bench",
        "--base-url",
        simulated_server,
        "--isl",
        "256",
        "--osl",
        "16",
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--slo",
        REAL_BENCH_SLO,
        "--out",
        str(out),
    )
    return out, r.stdout


@pytest.fixture(scope="session")
def real_run(tmp_path_factory) -> Path:
    """`kneecap run` of the shipped quick example (simulated candidates, two repetitions, failing cells)."""
    out = tmp_path_factory.mktemp("real") / "run"
    _cli("run", str(Path(__file__).resolve().parents[2] / "examples" / "quick.yaml"), "--out", str(out), "--quiet")
    return out
