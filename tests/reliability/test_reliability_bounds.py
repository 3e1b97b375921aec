"""Bounded time and memory on inputs the fuzzers and the audit found unbounded, and crash safety of
`kneecap run` (issue 7 items 2 and 5). Each bug found here is pinned by its one-line repro as a
regression test. Every child runs under a wall-clock timeout and an
address-space limit, so a regression cannot take the machine down."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kneecap.client.keepalive import PROBE_PROMPT_PREFIX
from kneecap.client.setup import CHECK_USER
from servers.scripted import start_scripted_server

MEMORY_LIMIT_BYTES = 3 * 1024**3  # address space of a child; the legitimate cases here use < 1 GiB
CHILD_TIMEOUT_S = 12


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def kneecap_bounded(*args: str, cwd: Path) -> tuple[int | None, str]:
    """(exit code or None on timeout, stderr) of `kneecap ARGS` under the time and memory bounds."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kneecap", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        preexec_fn=_limit_memory,
    )
    try:
        _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, ""


SIM = (
    "simulate",
    "--preset",
    "llama-3.1-8b",
    "--gpu",
    "h100-sxm",
    "--isl",
    "16",
    "--osl",
    "4",
    "--quiet",
    "--out",
    "sim",
)


@pytest.mark.parametrize("duration", ["inf", "1e308"])
def test_simulate_unbounded_duration_is_refused(tmp_path, duration):
    code, err = kneecap_bounded(*SIM, "--concurrency", "2", "--duration", duration, cwd=tmp_path)
    assert code == 2 and err.startswith("error: "), (code, err[-300:])


def test_simulate_huge_request_count_is_refused(tmp_path):
    code, err = kneecap_bounded(*SIM, "--concurrency", "4", "--requests", "99999999", cwd=tmp_path)
    assert code == 2 and err.startswith("error: --requests 99,999,999 exceeds"), (code, err[-300:])
    assert len(err.strip().splitlines()) == 1


def test_simulate_small_run_stays_inside_the_bounds(tmp_path):
    """The harness itself: a normal tiny run passes under the same limits (so the tests above fail for their bug, not the harness)."""
    code, err = kneecap_bounded(*SIM, "--concurrency", "2", "--requests", "8", cwd=tmp_path)
    assert code == 0, err


def finished_cell_requests(srv) -> int:
    """Requests the server finished for the plan's cells (not the keep-alive probe's two)."""
    return sum(
        e["completed"]
        for e in srv.log()
        if PROBE_PROMPT_PREFIX not in json.dumps(e["body"]) and e["body"].get("user") != CHECK_USER
    )


def test_run_keeps_finished_records_after_sigkill_mid_cell(tmp_path):
    """Regression: execute.py wrote a cell's records only when the cell ended, so SIGKILL mid-cell lost them."""
    url, srv = start_scripted_server(ttft_s=0.0, itl_s=0.05)
    out = tmp_path / "out"
    plan = {
        "name": "kill",
        "classes": {"c": {"input": 8, "output": 8}},
        "state": {"warmup_requests": 0},
        "load": {"steps": [1], "requests_per_cell": 8},
        "candidates": [{"name": "srv", "target": {"kind": "server", "base_url": url, "timeout_s": 10}}],
    }
    (tmp_path / "plan.yaml").write_text(json.dumps(plan))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kneecap",
            "run",
            str(tmp_path / "plan.yaml"),
            "--out",
            str(out),
            "--quiet",
            "--no-report",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and finished_cell_requests(srv) < 3:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        finished = finished_cell_requests(srv)
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.stop()
    assert finished >= 3
    kept = [line for p in (out / "records").glob("*.jsonl") for line in p.read_text().splitlines() if line.strip()]
    assert len(kept) >= 3, f"the server finished {finished} requests, {len(kept)} records kept"


def test_run_has_resume(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kneecap", "run", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "--resume" in proc.stdout
