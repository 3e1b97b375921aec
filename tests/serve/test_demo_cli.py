"""`kneecap demo` end to end (small and bounded): a real server in a process of its own, the real bench, table, knee, PID gone."""

from __future__ import annotations

import json
import os
import re


def test_demo_prints_table_and_knee_and_stops_its_server(cli, tmp_path):
    r = cli(
        "demo",
        "--isl",
        "2048",
        "--osl",
        "8",
        "--concurrency",
        "1,4,16",
        "--duration",
        "1.5",
        "--out",
        str(tmp_path / "demo"),
        timeout=180,
    )
    assert r.code == 0, r.stderr
    pid = int(re.search(r"\(PID (\d+)\)", r.stdout).group(1))
    assert "TTFT p50" in r.stdout and re.search(r"^knee: ", r.stdout, re.M), r.stdout
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert [lv["concurrency"] for lv in summary["levels"]] == [1, 4, 16]
    assert all(lv["failed"] == 0 and lv["completed"] > 0 for lv in summary["levels"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:  # a zombie is not possible (the demo waited on it); a live process is a leak
        raise AssertionError(f"demo left its server (PID {pid}) running")


def test_demo_json_is_one_document(cli, tmp_path):
    r = cli(
        "demo",
        "--isl",
        "128",
        "--osl",
        "4",
        "--concurrency",
        "1,2",
        "--duration",
        "0.5",
        "--out",
        str(tmp_path / "d"),
        "--json",
        timeout=120,
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "bench" and len(doc["levels"]) == 2


def test_demo_bad_preset_is_one_line(cli, tmp_path):
    r = cli("demo", "--preset", "no-such-model", "--out", str(tmp_path / "x"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code != 0 and len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in r.stderr


def test_serve_bad_flags_and_busy_port_are_one_line(cli):
    import socket

    for args in (
        ["--gpu", "nope"],
        ["--gpu", "h100-sxm", "--time-scale", "0"],
        ["--gpu", "h100-sxm", "--port", "70000"],
    ):
        r = cli("serve", "--preset", "llama-3.1-8b", *args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (args, r.stderr)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = cli("serve", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--port", str(port))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and "cannot bind" in lines[0] and "Traceback" not in r.stderr


def test_demo_levels_follow_the_cores_and_advise_on_unclean_levels():
    from kneecap.cli.demo import STREAMS_PER_CORE, auto_levels, level_advice

    assert auto_levels(2) == (1, 4, 16, 64) and max(auto_levels(2)) <= 2 * STREAMS_PER_CORE
    assert auto_levels(1) == (1, 4, 16) and auto_levels(8) == (1, 4, 16, 64, 256)
    suspect = {
        "concurrency": 64,
        "suspect": True,
        "client": {"suspect_reasons": ["event-loop lag p99 9.0 ms > 5 ms"]},
        "stability": {"verdict": "stable"},
    }
    transient = {"concurrency": 16, "duration_s": 30.0, "stability": {"verdict": "transient"}}
    lines = level_advice([suspect, transient, {"concurrency": 1, "stability": {"verdict": "stable"}}], 2)
    assert len(lines) == 2
    assert lines[0].startswith("C=64 is client-suspect: event-loop lag p99 9.0 ms > 5 ms") and "close other" in lines[0]
    assert lines[1].startswith("C=16 did not reach steady state") and "--duration 60" in lines[1]


def test_no_package_code_runs_the_kneecap_command_as_a_subprocess():
    """Servers and sweeps are library calls (a spawned process for `kneecap serve`), never `python -m kneecap` or
    the `kneecap` executable run from inside the package."""
    from pathlib import Path

    import kneecap

    offenders = [
        str(p)
        for p in Path(kneecap.__file__).parent.rglob("*.py")
        if re.search(r'"-m",\s*"kneecap"|shutil\.which\("kneecap"\)', p.read_text())
    ]
    assert offenders == []
