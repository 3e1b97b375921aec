"""Secrets and privacy across the whole tool (issue 7 item 4).

One API key, set only in the environment, goes through `kneecap bench`, `kneecap run` (a server
candidate with api_key_env) and `kneecap preflight --server`, against scripted servers that echo the
Authorization header back in their error bodies (knob error_echo_auth). The test first proves the key
really was sent (the server logs the sha256 of the header it received), then reads EVERY file under
every results folder, and every byte of stdout and stderr, and requires the key to appear nowhere.
Records hold prompt hashes, never prompts, unless asked.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servers.scripted import start_scripted_server

KEY = "sk-kneecap-SECRET-7f3a9c21e0d4b58a"  # distinctive, so any leak is found by a plain substring search
KEY_ENV = "KNEECAP_TEST_SECRET_KEY"
BOUND_S = 120


def kneecap(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kneecap", *args], capture_output=True, text=True, timeout=BOUND_S, env=env
    )


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def leaks(blob: bytes) -> bool:
    return KEY.encode() in blob or KEY[8:].encode() in blob  # the key, or its tail after a masked prefix


@pytest.fixture
def env():
    e = dict(os.environ)
    for name in ("KNEECAP_API_KEY", "OPENAI_API_KEY"):
        e.pop(name, None)
    e[KEY_ENV] = KEY
    return e


def test_the_api_key_is_sent_but_never_printed_logged_or_written(tmp_path, env):
    healthy_url, healthy = start_scripted_server(ttft_s=0.0, itl_s=0.001)
    echo_url, echo = start_scripted_server(fault="http_500", error_echo_auth=True)
    outputs: list[tuple[str, subprocess.CompletedProcess]] = []
    try:
        for name, url in (("bench-ok", healthy_url), ("bench-echo", echo_url)):
            outputs.append(
                (
                    name,
                    kneecap(
                        "bench",
                        "--base-url",
                        url,
                        "--isl",
                        "16",
                        "--osl",
                        "4",
                        "--concurrency",
                        "1,2",
                        "--requests",
                        "4",
                        "--api-key-env",
                        KEY_ENV,
                        "--out",
                        str(tmp_path / name),
                        "--json",
                        env=env,
                    ),
                )
            )
            outputs.append(
                (
                    name + "-table",
                    kneecap(
                        "bench",
                        "--base-url",
                        url,
                        "--isl",
                        "16",
                        "--osl",
                        "4",
                        "--concurrency",
                        "1",
                        "--requests",
                        "3",
                        "--api-key-env",
                        KEY_ENV,
                        "--out",
                        str(tmp_path / (name + "-table")),
                        env=env,
                    ),
                )
            )
        for name, url in (("run-ok", healthy_url), ("run-echo", echo_url)):
            plan = {
                "name": "secrets",
                "classes": {"c": {"input": 16, "output": 4}},
                "state": {"warmup_requests": 1},
                "load": {"steps": [1, 2], "requests_per_cell": 4},
                "candidates": [
                    {
                        "name": "srv",
                        "target": {"kind": "server", "base_url": url, "api_key_env": KEY_ENV, "timeout_s": 5},
                    }
                ],
            }
            plan_path = tmp_path / f"{name}.yaml"
            plan_path.write_text(json.dumps(plan))
            outputs.append((name, kneecap("run", str(plan_path), "--out", str(tmp_path / name), env=env)))
        preflight_env = dict(env, KNEECAP_API_KEY=KEY)  # preflight reads its key from KNEECAP_API_KEY
        for name, url in (("preflight-ok", healthy_url), ("preflight-echo", echo_url)):
            outputs.append(
                (
                    name,
                    kneecap(
                        "preflight",
                        "--server",
                        url,
                        "--isl",
                        "16",
                        "--osl",
                        "4",
                        "--concurrency",
                        "1,2",
                        env=preflight_env,
                    ),
                )
            )
            outputs.append(
                (
                    name + "-json",
                    kneecap(
                        "preflight",
                        "--server",
                        url,
                        "--isl",
                        "16",
                        "--osl",
                        "4",
                        "--concurrency",
                        "1,2",
                        "--json",
                        env=preflight_env,
                    ),
                )
            )
        served = healthy.log() + echo.log()
    finally:
        healthy.stop()
        echo.stop()

    # the key was really sent to both servers (else this test could not fail)
    expected = hashlib.sha256(f"Bearer {KEY}".encode()).hexdigest()
    assert served and all(e["auth_sha256"] == expected for e in served), {e["auth_sha256"] for e in served}
    assert any(e.get("status") == 500 for e in served)  # the echoing server answered with the key in its error body

    for name, proc in outputs:
        assert "Traceback" not in proc.stderr, (name, proc.stderr)
        assert not leaks(proc.stdout.encode()), f"{name}: the key is on stdout"
        assert not leaks(proc.stderr.encode()), f"{name}: the key is on stderr"
    assert {name: proc.returncode for name, proc in outputs} == {name: 0 for name, _ in outputs}, {
        name: proc.stderr[-300:] for name, proc in outputs if proc.returncode
    }

    written = [p for d in tmp_path.iterdir() if d.is_dir() for p in files_under(d)]
    assert len(written) >= 12  # summary, manifest, records of every run were written and are checked
    leaked = [str(p.relative_to(tmp_path)) for p in written if leaks(p.read_bytes())]
    assert not leaked, f"the key was written to {leaked}"

    # the echoing server's error body reached the records, with the key scrubbed out of it
    echoed = [
        json.loads(line)
        for p in written
        if is_records(p) and "echo" in str(p)
        for line in p.read_text().splitlines()
        if line.strip()
    ]
    assert echoed and all(r["error_kind"] == "http_500" for r in echoed)
    assert any("you sent" in (r["error_message"] or "") for r in echoed)  # the echo is kept, minus the key

    # prompts: hashes by default, never the text
    records = [
        json.loads(line) for p in written if is_records(p) for line in p.read_text().splitlines() if line.strip()
    ]
    assert records and all(r["prompt"] is None and r["prompt_hash"] for r in records)


def is_records(path) -> bool:
    """RequestRecord files: bench's requests.jsonl and run's records/cell-NNNN.jsonl (not traces or server metrics)."""
    return path.name == "requests.jsonl" or (
        path.parent.name == "records" and path.name.startswith("cell-") and path.name.count(".") == 1
    )


def test_a_missing_key_variable_is_named_not_printed(tmp_path, env):
    """The error names the variable, and a key set under another name is never echoed."""
    env = dict(env)
    env.pop(KEY_ENV)
    env["OTHER"] = KEY
    plan = {
        "name": "k",
        "classes": {"c": {"input": 8, "output": 2}},
        "load": {"steps": [1], "requests_per_cell": 1},
        "candidates": [
            {"name": "s", "target": {"kind": "server", "base_url": "http://127.0.0.1:9", "api_key_env": KEY_ENV}}
        ],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(json.dumps(plan))
    proc = kneecap("run", str(path), "--out", str(tmp_path / "out"), env=env)
    assert proc.returncode == 2 and KEY_ENV in proc.stderr and not leaks((proc.stdout + proc.stderr).encode())
    proc = kneecap(
        "bench",
        "--base-url",
        "http://127.0.0.1:9",
        "--isl",
        "8",
        "--osl",
        "2",
        "--concurrency",
        "1",
        "--api-key-env",
        KEY_ENV,
        "--out",
        str(tmp_path / "b"),
        env=env,
    )
    assert proc.returncode == 2 and KEY_ENV in proc.stderr and not leaks((proc.stdout + proc.stderr).encode())
