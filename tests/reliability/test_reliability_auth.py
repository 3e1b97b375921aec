"""A server that accepts the key for the first levels, then refuses it (HTTP 401, as a key revoked mid-run):
`kneecap bench` and `kneecap run` stop after the level or cell that met the refusal, with one line naming it,
keep every level or cell already measured, send nothing more, and exit 4."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from servers.scripted import start_scripted_server
from test_reliability_run import read_jsonl, write_plan

BOUND_S = 90
EXIT_AUTH_REFUSED = 4


def _refusals(server) -> int:
    """Completion requests the server refused (the client's /metrics scrapes are refused too, not counted)."""
    return sum(1 for e in server.log() if e.get("status") == 401 and e["path"].endswith("completions"))


def _plan(folder, url):
    """The reliability plan (one class, C=2 then C=4, 6 requests per cell), kept climbing on a loaded machine
    (a cell the client marks suspect would otherwise stop its ramp) so that the cells sent are known."""
    plan = write_plan(folder, url, keepalive=True)
    doc = json.loads(plan.read_text())
    doc["stop"] = {"stop_on_suspect": False}
    plan.write_text(json.dumps(doc))
    return plan


def test_bench_stops_at_once_when_the_key_is_refused_mid_sweep(tmp_path):
    # --keepalive: no probe requests, so the server sees the check request, then level C=2's 4 requests,
    # then refuses: level C=4 gets 401s and C=8 must never be sent
    url, srv = start_scripted_server(auth_fail_after=1 + 4)
    out = tmp_path / "out"
    try:
        proc = subprocess.run([sys.executable, "-m", "kneecap", "bench", "--base-url", url, "--isl", "16", "--osl", "4",
                               "--concurrency", "2,4,8", "--requests", "4", "--keepalive", "--json", "--no-report",
                               "--out", str(out)], capture_output=True, text=True, timeout=BOUND_S)
        refused = _refusals(srv)
    finally:
        srv.stop()
    assert proc.returncode == EXIT_AUTH_REFUSED, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "refused the API key (HTTP 401 to 4 of 4 requests) during C=4" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["stopped"]["reason"] == "auth_refused" and summary["stopped"]["at"] == 4
    first, second = summary["levels"]  # C=8 was not run
    assert (first["concurrency"], first["completed"], first["failed"]) == (2, 4, 0)
    assert (second["concurrency"], second["failed"], second["errors"]) == (4, 4, {"http_401": 4})
    assert len(read_jsonl(out / "requests.jsonl")) == 8  # every request measured is kept
    assert refused == 4  # nothing was sent after the level that met the refusal


def test_run_stops_at_once_when_the_key_is_refused_mid_run(tmp_path):
    # the check request, then cell 0 (chat at C=2, 6 requests) is served; cell 1 (chat at C=4) meets the
    # refusal; the batch class's cells and the second candidate must never be sent
    url, srv = start_scripted_server(auth_fail_after=1 + 6)
    out = tmp_path / "out"
    plan = _plan(tmp_path, url)
    doc = json.loads(plan.read_text())
    doc["classes"]["batch"] = {"input": 32, "output": 4}
    doc["candidates"].append({"name": "other", "target": dict(doc["candidates"][0]["target"])})
    plan.write_text(json.dumps(doc))
    try:
        proc = subprocess.run([sys.executable, "-m", "kneecap", "run", str(plan), "--out", str(out), "--json",
                               "--no-report"], capture_output=True, text=True, timeout=BOUND_S, env=dict(os.environ))
        refused = _refusals(srv)
    finally:
        srv.stop()
    assert proc.returncode == EXIT_AUTH_REFUSED, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("run: candidate srv: the server refused the API key "
                                                   "(HTTP 401 to 6 of 6 requests) during C="), proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["status"] == "stopped" and summary["stopped"]["reason"] == "auth_refused"
    first, last = summary["cells"]
    assert (first["class"], first["load"], first["metrics"]["completed"], first["metrics"]["failed"]) == \
        ("chat", {"concurrency": 2}, 6, 0)
    assert (last["class"], last["load"], last["halted"]) == ("chat", {"concurrency": 4}, "auth_refused")
    assert last["metrics"]["errors"] == {"http_401": 6} and "during C=4;" in lines[0]
    assert len(read_jsonl(out / first["records"])) == len(read_jsonl(out / last["records"])) == 6
    cand, other = summary["candidates"]
    assert cand["verdict"] == "not judged" and "refused the API key" in cand["reason"]
    assert other["verdict"] == "not judged" and other["reason"].startswith("not run: the run stopped before it")
    assert refused == 6  # nothing was sent after the cell that met the refusal


def test_run_resume_after_the_key_is_fixed_runs_the_stopped_cell_again(tmp_path):
    url, srv = start_scripted_server(auth_fail_after=1 + 6)
    out = tmp_path / "out"
    plan = _plan(tmp_path, url)
    cmd = [sys.executable, "-m", "kneecap", "run", str(plan), "--json", "--no-report"]
    try:
        first = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=BOUND_S)
    finally:
        srv.stop()
    assert first.returncode == EXIT_AUTH_REFUSED, first.stderr
    stopped = json.loads(first.stdout)
    (halted,) = [c for c in stopped["cells"] if c.get("halted")]
    # the same server again, on the same port, now accepting the key
    url2, srv2 = start_scripted_server(port=int(url.rsplit(":", 1)[1]))
    try:
        again = subprocess.run([*cmd, "--resume", str(out)], capture_output=True, text=True, timeout=BOUND_S)
    finally:
        srv2.stop()
    assert url2 == url and again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["status"] == "complete" and summary["stopped"] is None
    assert summary["cells"][0] == stopped["cells"][0]  # the cell measured before the stop is kept as it was
    redone = next(c for c in summary["cells"] if c["index"] == halted["index"])
    assert "halted" not in redone and redone["metrics"]["failed"] == 0 and redone["metrics"]["completed"] == 6
    assert (out / "records" / f"cell-{halted['index']:04d}.discarded.jsonl").exists()  # the refused requests, set aside
    assert summary["candidates"][0]["verdict"] in ("accepted", "rejected")


def test_bench_resume_after_the_key_is_fixed_runs_the_refused_level_again(tmp_path):
    # the stop line says "then --resume the folder": it must do something. The check request and C=2's 4
    # requests are served, C=4 meets the refusal; resumed against the same server accepting the key, C=4 is
    # run again (its refused records set aside) and C=8 after it
    url, srv = start_scripted_server(auth_fail_after=1 + 4)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kneecap", "bench", "--json", "--no-report", "--quiet"]
    try:
        first = subprocess.run([*cmd, "--base-url", url, "--isl", "16", "--osl", "4", "--concurrency", "2,4,8",
                                "--requests", "4", "--keepalive", "--out", str(out)],
                               capture_output=True, text=True, timeout=BOUND_S)
    finally:
        srv.stop()
    assert first.returncode == EXIT_AUTH_REFUSED and "then --resume the folder" in first.stderr, first.stderr
    stopped = json.loads(first.stdout)
    url2, srv2 = start_scripted_server(port=int(url.rsplit(":", 1)[1]))
    try:
        again = subprocess.run([*cmd, "--resume", str(out)], capture_output=True, text=True, timeout=BOUND_S)
    finally:
        srv2.stop()
    assert url2 == url and again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["status"] == "complete" and not summary.get("stopped")
    assert [lv["concurrency"] for lv in summary["levels"]] == [2, 4, 8]
    assert summary["levels"][0] == stopped["levels"][0]  # the level measured before the stop is kept as it was
    assert all(lv["completed"] == 4 and lv["failed"] == 0 for lv in summary["levels"])
    kept = read_jsonl(out / "requests.jsonl")
    assert len(kept) == 12 and all(r["status"] == "ok" for r in kept)
    assert len(read_jsonl(out / "requests.discarded.jsonl")) == 4  # the refused requests of C=4, set aside
