"""`kneecap bench --ray` against a real two-node Ray cluster on this machine's loopback (two `ray start`
processes, each its own process group and ports), driving `kneecap serve` and the scripted Node server
(bench/fast_server.js): the same counts as one process and percentiles within the client's own lag,
actors on both nodes, the API key in no output file and no Ray log, and a node killed mid-level ending
the level in bounded time with its requests counted as failed (client_lost)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from localnodes import LocalNodes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-ray-test-4f1d0c9b7e3a"
ENV = {"KNEECAP_API_KEY": SECRET, "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def cluster():
    nodes = LocalNodes(num_nodes=2, cpus_per_node=1)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.cleanup()


class Server:
    """A server subprocess (its own process group) whose first output line names its URL; stopped by PID."""

    def __init__(self, cmd: list[str], pattern: str, log: Path):
        self.log = log
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not (m := re.search(pattern, log.read_text(errors="replace"))):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start: {log.read_text(errors='replace')[-400:]}")
            time.sleep(0.05)
        self.url = m.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_serve(tmp: Path) -> Server:
    return Server(
        [sys.executable, "-m", "kneecap", "serve", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--port", "0"],
        r"listening on (http://\S+)",
        tmp / "serve.log",
    )


def start_node(tmp: Path, *, ttft_ms: float = 200, itl_ms: float = 20) -> Server:
    if not shutil.which("node"):
        pytest.skip("node is not installed")
    return Server(
        [
            "node",
            str(ROOT / "bench" / "fast_server.js"),
            "--port",
            "0",
            "--ttft-ms",
            str(ttft_ms),
            "--itl-ms",
            str(itl_ms),
            "--log",
            str(tmp / "node-sends.jsonl"),
        ],
        r"LISTENING (http://\S+)",
        tmp / "node.log",
    )


def server_lag_ms(log: Path, ttft_ms: float, itl_ms: float) -> float:
    """How late the scripted server itself sent anything, from its own stamps (it shares 2 busy cores):
    the most any first token, token gap or last token of a request missed its schedule by."""
    worst = 0.0
    for line in log.read_text().splitlines():
        row = json.loads(line)
        sends = row.get("send_ms") or []
        if not sends:
            continue
        worst = max(
            worst,
            sends[0] - row["recv_ms"] - ttft_ms,
            sends[-1] - row["recv_ms"] - ttft_ms - itl_ms * (len(sends) - 1),
            *(abs(b - a - itl_ms) for a, b in zip(sends, sends[1:])),
        )
    return worst


def bench(url: str, out: Path, *extra: str, timeout: float = 180) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "kneecap",
        "bench",
        "--base-url",
        url,
        "--out",
        str(out),
        "--quiet",
        "--no-report",
        "--keepalive",
        "--warmup",
        "0",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **ENV})
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    return json.loads((out / "summary.json").read_text())


def client_lag_ms(level: dict) -> float:
    """The most the client's own lag could have moved one stamp in this level (its self-measurement)."""
    return max(
        (w.get("loop_lag_max_ms") or 0.0) + (w.get("read_loop_wait_max_ms") or 0.0)
        for w in level["client"]["per_worker"]
    )


def assert_no_secret_under(folder: Path) -> int:
    seen = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            seen += 1
            assert SECRET.encode() not in path.read_bytes(), f"the API key is in {path}"
    return seen


@pytest.mark.parametrize("target", ["serve", "node"])
def test_ray_sweep_matches_one_process(cluster, tmp_path, target):
    server = start_serve(tmp_path) if target == "serve" else start_node(tmp_path)
    try:
        common = ["--isl", "64", "--osl", "16", "--concurrency", "2,16", "--requests", "48"]
        one = bench(server.url, tmp_path / "one", *common)
        # 16 streams at most 8 per actor: at least two actors, one per node (SPREAD)
        ray = bench(server.url, tmp_path / "ray", *common, "--ray", cluster.address, "--ray-streams-per-actor", "8")
    finally:
        server.stop()
    for a, b in zip(one["levels"], ray["levels"], strict=True):
        for key in ("requests", "completed", "failed", "errors", "output_tokens", "input_tokens"):
            assert a.get(key) == b.get(key), (key, a.get(key), b.get(key))
        assert b["completed"] == 48 and b["failed"] == 0
        if target == "node":  # scripted timing: what differs is the clients' lag, or the server's own
            # (kneecap serve's step times depend on the CPU it gets on this shared machine: counts only)
            tol_ms = client_lag_ms(a) + client_lag_ms(b) + 2 * server_lag_ms(tmp_path / "node-sends.jsonl", 200, 20)
            for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
                for q in ("p50", "p90", "p99"):
                    gap = abs(a[metric][q] - b[metric][q])
                    assert gap <= tol_ms, (metric, q, a[metric][q], b[metric][q], tol_ms)
    top = ray["levels"][-1]["client"]
    assert top["ray"]["actors"] == 2 and top["ray"]["nodes"] == 2 and top["ray"]["lost_actors"] == 0
    assert len({w["ray"]["node_id"] for w in top["per_worker"]}) == 2
    for w in top["per_worker"]:  # both nodes share this machine's CLOCK_MONOTONIC: the true offset is 0
        assert abs(w["ray"]["clock_offset_s"]) <= w["ray"]["clock_rtt_s"] / 2 + 1e-6
        assert "cpu_s" in w and "loop_lag_p99_ms" in w
    assert assert_no_secret_under(tmp_path) > 4
    assert assert_no_secret_under(cluster.session_logs()) > 10  # every node's Ray logs for this session


def test_api_key_reaches_every_actor_and_no_file(cluster, tmp_path):
    import hashlib

    sys.path.insert(0, str(ROOT / "tests"))
    from servers.scripted import start_scripted_server

    url, server = start_scripted_server(ttft_s=0.01, itl_s=0.001)
    try:
        summary = bench(
            url,
            tmp_path / "auth",
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "4",
            "--requests",
            "8",
            "--ray",
            cluster.address,
            "--ray-streams-per-actor",
            "2",
        )
        entries = server.log()
    finally:
        server.stop()
    assert summary["levels"][0]["completed"] == 8 and summary["levels"][0]["client"]["ray"]["nodes"] == 2
    wanted = hashlib.sha256(f"Bearer {SECRET}".encode()).hexdigest()
    sent = [e for e in entries if e["path"].endswith("/completions")]
    assert len(sent) >= 8 and all(e["auth_sha256"] == wanted for e in sent)  # the 8, and the ready check
    assert_no_secret_under(tmp_path)
    assert_no_secret_under(cluster.session_logs())
    # Ray logs a runtime_env verbatim: the env_vars share is on disk; its partner share must not be
    shares = set()
    hexes = set()
    for path in [*cluster.session_logs().rglob("*"), *tmp_path.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            text = path.read_bytes().decode("utf-8", "replace")
            shares.update(re.findall(r'KNEECAP_RAY_API_KEY": "([0-9a-f]+)"', text))
            hexes.update(re.findall(r"[0-9a-f]{%d}" % (2 * len(SECRET)), text))
    from kneecap.cluster.streams import join_secret

    assert shares, "expected Ray's runtime-env log to hold the env_vars share"
    for share in shares:
        for other in hexes:
            if len(other) == len(share):
                try:
                    assert join_secret(share, other) != SECRET, "both shares of the key are on disk"
                except UnicodeDecodeError:
                    pass


def test_simulate_grid_on_ray_is_byte_identical_to_one_by_one(cluster, tmp_path):
    configs = [
        {
            "name": "8b",
            "preset": "llama-3.1-8b",
            "gpu": "h100-sxm",
            "isl": 256,
            "osl": 16,
            "concurrency": [1, 8],
            "requests": 40,
        },
        {
            "preset": "llama-3.1-70b",
            "gpu": "h100-sxm",
            "tp": 4,
            "isl": 512,
            "osl": 8,
            "rate": "2,4",
            "requests": 30,
            "prefix_caching": False,
        },
    ]
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(configs))
    out = tmp_path / "grid"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kneecap",
            "simulate",
            "--grid",
            str(grid),
            "--ray",
            cluster.address,
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **ENV},
    )
    assert proc.returncode == 0, proc.stderr
    index = json.loads(proc.stdout)
    assert len({row["ray_node_id"] for row in index}) == 2  # one configuration per node (1 CPU each)
    for row in index:
        alone = tmp_path / f"alone-{row['index']}"
        one = subprocess.run(
            [sys.executable, "-m", "kneecap", "simulate", *row["args"], "--out", str(alone), "--quiet", "--no-report"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert one.returncode == 0, one.stderr
        assert (out / row["summary"]).read_bytes() == (alone / "summary.json").read_bytes()


def test_sigterm_mid_sweep_then_resume_on_ray(cluster, tmp_path):
    """SIGTERM (which ray.init would take over) stops a --ray sweep like one process; --resume finishes it."""
    import signal

    server = start_node(tmp_path, ttft_ms=50, itl_ms=50)  # 16 tokens: ~0.8 s a request
    out = tmp_path / "resumed"
    args = [
        "--base-url",
        server.url,
        "--out",
        str(out),
        "--quiet",
        "--no-report",
        "--keepalive",
        "--warmup",
        "0",
        "--isl",
        "16",
        "--osl",
        "16",
        "--concurrency",
        "2,4",
        "--requests",
        "16",
        "--ray",
        cluster.address,
    ]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kneecap", "bench", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **ENV},
        )
        records = out / "requests.jsonl"
        deadline = time.monotonic() + 90
        while not (records.exists() and b'"level":1' in records.read_bytes()):  # the second level is under way
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        cut = json.loads((out / "summary.json").read_text())
        assert cut["status"] == "interrupted"
        resumed = bench(server.url, out, "--resume", str(out), "--ray", cluster.address)
    finally:
        server.stop()
    assert resumed["status"] == "complete"
    assert [(lv["concurrency"], lv["completed"]) for lv in resumed["levels"]] == [(2, 16), (4, 16)]
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(lines) == 32 and len({r["request_id"] for r in lines}) == 32


CUT_ITL_S = 0.5  # per streamed token of an accepted request: 4 tokens take 1.5 s, far longer than a cut takes
CUT_BOUND_S = 1.0  # the other actor's streams in flight are cancelled within this long of the refusal


def test_a_refused_key_in_one_actor_cuts_the_level_in_every_actor(cluster, tmp_path):
    # The server accepts the check request, C=2's 8 requests and 3 of C=4's, then refuses the key (HTTP 401).
    # C=4 is two streams on each of the two actors, started together: 3 accepted (streaming 1.5 s), the 4th
    # refused in one actor. That refusal cuts the level in both: the refusing actor cancels its other stream,
    # the other actor (told by the driver) cancels its two in flight. Each actor on its own would have let its
    # streams finish and sent its next request into a second refusal. Nothing more is sent, C=8 never runs
    sys.path.insert(0, str(ROOT / "tests"))
    from servers.scripted import start_scripted_server

    url, server = start_scripted_server(auth_fail_after=1 + 8 + 3, itl_s=CUT_ITL_S)
    out = tmp_path / "cut"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kneecap",
                "bench",
                "--base-url",
                url,
                "--isl",
                "16",
                "--osl",
                "4",
                "--concurrency",
                "2,4,8",
                "--requests",
                "8",
                "--keepalive",
                "--warmup",
                "0",
                "--json",
                "--no-report",
                "--out",
                str(out),
                "--ray",
                cluster.address,
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, **ENV},
        )
        log = server.log()
    finally:
        server.stop()
    # the same stop as one process: one line naming the refusal, the fix and --resume; exit 4
    assert proc.returncode == 4, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "refused the API key (HTTP 401 to 1 of 4 requests) during C=4" in lines[0], proc.stderr
    assert "KNEECAP_API_KEY" in lines[0] and "--resume" in lines[0] and SECRET not in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["stopped"]["reason"] == "auth_refused" and summary["stopped"]["at"] == 4
    first, second = summary["levels"]  # C=8 was not run
    assert (first["completed"], first["failed"]) == (8, 0) and "cut" not in first
    assert second["errors"] == {"http_401": 1, "cancelled": 3}, second["errors"]
    assert second["cut"]["reason"] == "auth_refused" and second["cut"]["error_kind"] == "http_401"
    ray = second["client"]["ray"]
    assert (ray["actors"], ray["nodes"]) == (2, 2) and len(second["client"]["per_worker"]) == 2
    # exactly one refusal: every request sent after it would have been refused (and logged) too; the 3
    # cancelled streams never completed (the server logs a stream when it ends)
    completions = [e for e in log if e["path"].endswith("/completions")]
    assert sum(1 for e in completions if e.get("status") == 401) == 1
    assert sum(1 for e in completions if e.get("completed")) == 1 + 8
    # the cut crossed actors: the actor that did not meet the refusal (shares are dealt round-robin: request
    # k of the level is actor k % 2's) had its two streams cancelled, within CUT_BOUND_S of the refusal
    cut = [r for r in map(json.loads, (out / "requests.jsonl").read_text().splitlines()) if r["level"] == 1]
    (refused,) = [r for r in cut if r["error_kind"] == "http_401"]
    actor_of = lambda r: int(re.search(r"(\d+)$", r["request_id"]).group(1)) % 2  # noqa: E731
    others = [r for r in cut if actor_of(r) != actor_of(refused)]
    assert len(others) == 2 and all(r["status"] == "cancelled" for r in others), cut
    took_s = max(r["end_at"] for r in others) - refused["end_at"]
    print(f"the other actor's streams were cancelled {took_s * 1000:.0f} ms after the refusal")
    assert 0 < took_s < CUT_BOUND_S, took_s


def test_killed_node_fails_its_requests_and_the_level_ends(cluster, tmp_path):
    """Must run last in this module: it kills the second node."""
    server = start_node(tmp_path, ttft_ms=100, itl_ms=100)  # 32 tokens: ~3.2 s a request
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "kneecap",
        "bench",
        "--base-url",
        server.url,
        "--out",
        str(out),
        "--quiet",
        "--no-report",
        "--keepalive",
        "--warmup",
        "0",
        "--isl",
        "16",
        "--osl",
        "32",
        "--concurrency",
        "8",
        "--requests",
        "32",
        "--ray",
        cluster.address,
        "--ray-streams-per-actor",
        "4",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
    try:
        records = out / "requests.jsonl"
        deadline = time.monotonic() + 90
        while not (records.exists() and records.read_bytes().count(b"\n") >= 4):  # the level is under way
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
            time.sleep(0.1)
        killed_at = time.monotonic()
        cluster.kill_node(1)
        stdout, stderr = proc.communicate(timeout=60)
        ended_s = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    assert proc.returncode == 0, stderr
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    assert level["requests"] == 32 and level["completed"] + level["failed"] == 32
    assert level["errors"].get("client_lost", 0) > 0 and level["completed"] > 0, level["errors"]
    assert level["client"]["ray"]["lost_actors"] == 1 and level["suspect"] is True
    assert ended_s < 30, ended_s
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len({r["request_id"] for r in lines}) == len(lines) == 32  # none twice, none missing
