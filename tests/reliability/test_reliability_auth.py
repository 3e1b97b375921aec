"""A server that accepts the key for the first levels, then refuses it (HTTP 401, as a key revoked mid-run):
`kneecap bench` and `kneecap run` cut the level or cell at its first refusal (nothing more is sent, the
requests in flight are cancelled, the records that finished are kept), stop there with one line naming it
and the fix, keep every level or cell already measured, and exit 4.

What is deterministic: the server accepts the first N completion requests and refuses the rest; each accepted
one streams for about a second (ITL_S per token), a refusal is answered at once. When the refusal meets a
level of C streams whose first C requests go out together and C-1 of them are accepted, exactly one request
is refused: by the time any accepted stream could finish and send the next request, the refusal has cut the
level, so the C-1 accepted ones are cancelled in flight and the level's other requests are never sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from servers.scripted import start_scripted_server
from test_reliability_run import read_jsonl, write_plan

BOUND_S = 90
EXIT_AUTH_REFUSED = 4
ITL_S = 0.12  # per streamed token of an accepted request: 4-8 tokens take 0.5-1 s, far longer than a cut takes


def _revoking_server(accepted: int, **knobs):
    """The scripted server, accepting the key for `accepted` completion requests (the set-up check's included)."""
    return start_scripted_server(auth_fail_after=accepted, itl_s=ITL_S, **knobs)


def _completions(server) -> list[dict]:
    """The server's log of completion requests: a refusal when answered, an accepted one when its stream ended."""
    return [e for e in server.log() if e["path"].endswith("completions")]


def _refusals(server, status: int = 401) -> int:
    """Completion requests the server refused (the client's /metrics scrapes are refused too, not counted)."""
    return sum(1 for e in server.log() if e.get("status") == status and e["path"].endswith("completions"))


def _plan(folder, url):
    """The reliability plan (one class, C=2 then C=4, 6 requests per cell), kept climbing on a loaded machine
    (a cell the client marks suspect would otherwise stop its ramp) so that the cells sent are known."""
    plan = write_plan(folder, url, keepalive=True)
    doc = json.loads(plan.read_text())
    doc["stop"] = {"stop_on_suspect": False}
    plan.write_text(json.dumps(doc))
    return plan


@pytest.mark.parametrize("status", [401, 403])
def test_bench_cuts_the_level_at_the_first_refused_key(tmp_path, status):
    # --keepalive: no probe requests, so the server sees the check request, then level C=2's 8 requests, then
    # C=4's first 4 together: 3 accepted (streaming), the 4th refused (403: a key the server forbids, a refused
    # key as a 401 is). The refusal cuts C=4 at once: its 3 streams are cancelled, its other 4 requests and
    # level C=8 are never sent
    url, srv = _revoking_server(1 + 8 + 3, auth_fail_status=status)
    out = tmp_path / "out"
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
                "--json",
                "--no-report",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
        sent = _completions(srv)
        refused = _refusals(srv, status)
    finally:
        srv.stop()
    assert proc.returncode == EXIT_AUTH_REFUSED, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"refused the API key (HTTP {status} to 1 of 4 requests) during C=4" in lines[0], (
        proc.stderr
    )
    assert "KNEECAP_API_KEY" in lines[0] and "--resume" in lines[0]  # the fix, in the same line
    assert "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["stopped"]["reason"] == "auth_refused" and summary["stopped"]["at"] == 4
    first, second = summary["levels"]  # C=8 was not run
    assert (first["concurrency"], first["completed"], first["failed"]) == (2, 8, 0) and "cut" not in first
    assert (second["concurrency"], second["completed"], second["failed"]) == (4, 0, 4)
    assert second["errors"] == {f"http_{status}": 1, "cancelled": 3}, second["errors"]
    assert second["cut"]["reason"] == "auth_refused" and second["cut"]["error_kind"] == f"http_{status}"
    kept = read_jsonl(out / "requests.jsonl")
    assert len(kept) == 8 + 4  # every request sent has its record: C=2's 8, C=4's refused one and 3 cancelled
    assert sorted(r["status"] for r in kept if r["concurrency"] == 4) == ["cancelled"] * 3 + ["error"]
    # every request sent after the refusal would have been refused (and logged) too; the 3 cancelled streams
    # never completed (the server logs a stream when it ends)
    assert refused == 1 and sum(1 for e in sent if e.get("completed")) == 1 + 8


def test_bench_with_workers_cuts_the_level_in_every_worker_at_the_first_refused_key(tmp_path):
    # --workers 2: C=2 is one stream per worker (8 requests served), C=4 two per worker. C=4's first 4 requests
    # go out together over both processes: 3 accepted (streaming ~0.5 s), the 4th refused, in whichever worker
    # sent it. That refusal cuts the level in both workers: the other worker's streams are cancelled in flight
    # too (each worker on its own would have sent its next request into a second refusal), so the level has
    # one refusal and 3 cancelled requests, nothing more is sent, and C=8 never runs
    url, srv = _revoking_server(1 + 8 + 3)
    out = tmp_path / "out"
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
                "--workers",
                "2",
                "--keepalive",
                "--json",
                "--no-report",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
        sent = _completions(srv)
        refused = _refusals(srv)
    finally:
        srv.stop()
    assert proc.returncode == EXIT_AUTH_REFUSED, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "refused the API key (HTTP 401 to 1 of 4 requests) during C=4" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["stopped"]["reason"] == "auth_refused" and summary["stopped"]["at"] == 4
    first, second = summary["levels"]  # C=8 was not run
    assert (first["concurrency"], first["completed"], first["failed"]) == (2, 8, 0) and "cut" not in first
    assert first["client"]["workers"] == 2 and len(first["client"]["per_worker"]) == 2
    assert (second["concurrency"], second["completed"], second["failed"]) == (4, 0, 4)
    assert second["errors"] == {"http_401": 1, "cancelled": 3}, second["errors"]
    assert second["cut"]["reason"] == "auth_refused" and second["cut"]["error_kind"] == "http_401"
    assert len(second["client"]["per_worker"]) == 2  # both workers ran their share of C=4
    kept = read_jsonl(out / "requests.jsonl")
    # a record's concurrency is its worker's share (1, then 2): the level index says which level it is
    assert len(kept) == 8 + 4 and sorted(r["concurrency"] for r in kept if r["level"] == 0) == [1] * 8
    assert all(r["status"] == "ok" for r in kept if r["level"] == 0)
    assert sorted(r["status"] for r in kept if r["level"] == 1) == ["cancelled"] * 3 + ["error"]
    # one refusal in all (at most one per worker, and the second worker's was never sent); the 3 cancelled
    # streams never completed (the server logs a stream when it ends)
    assert refused == 1 and sum(1 for e in sent if e.get("completed")) == 1 + 8


def test_bench_refusal_during_a_warmup_cuts_the_level_before_its_measured_requests(tmp_path):
    # C=2 with 2 warmup requests: the check request and C=2's warmup and 4 requests are served; C=4's warmup
    # sends 2 together, one accepted, one refused: the warmup is cut, the level's measured requests never go
    url, srv = _revoking_server(1 + 2 + 4 + 1)
    out = tmp_path / "out"
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
                "2,4",
                "--requests",
                "4",
                "--warmup",
                "2",
                "--keepalive",
                "--json",
                "--no-report",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
        refused = _refusals(srv)
    finally:
        srv.stop()
    assert proc.returncode == EXIT_AUTH_REFUSED, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "refused the API key (HTTP 401 during the warmup) during C=4" in lines[0], proc.stderr
    summary = json.loads(proc.stdout)
    first, second = summary["levels"]
    assert first["completed"] == 4 and "cut" not in first
    assert second["cut"]["phase"] == "warmup" and second["requests"] == 0, second
    kept = read_jsonl(out / "requests.jsonl")
    cut = [r for r in kept if r["level"] == 1]  # its warmup at min(C, warmup) = 2 streams
    assert sorted(r["status"] for r in cut) == ["cancelled", "error"] and all(r["warmup"] for r in cut), cut
    assert refused == 1


def test_run_cuts_the_cell_at_the_first_refused_key(tmp_path):
    # the check request, then cell 0 (chat at C=2, 6 requests) is served; cell 1 (chat at C=4) sends 4
    # together: 3 accepted, the 4th refused, which cuts the cell (3 cancelled, 2 never sent); the batch
    # class's cells and the second candidate must never be sent
    url, srv = _revoking_server(1 + 6 + 3)
    out = tmp_path / "out"
    plan = _plan(tmp_path, url)
    doc = json.loads(plan.read_text())
    doc["classes"]["batch"] = {"input": 32, "output": 4}
    doc["candidates"].append({"name": "other", "target": dict(doc["candidates"][0]["target"])})
    plan.write_text(json.dumps(doc))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "kneecap", "run", str(plan), "--out", str(out), "--json", "--no-report"],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
            env=dict(os.environ),
        )
        sent = _completions(srv)
        refused = _refusals(srv)
    finally:
        srv.stop()
    assert proc.returncode == EXIT_AUTH_REFUSED, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "run: candidate srv: the server refused the API key (HTTP 401 to 1 of 4 requests) during C="
    ), proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["status"] == "stopped" and summary["stopped"]["reason"] == "auth_refused"
    first, last = summary["cells"]
    assert (first["class"], first["load"], first["metrics"]["completed"], first["metrics"]["failed"]) == (
        "chat",
        {"concurrency": 2},
        6,
        0,
    )
    assert (last["class"], last["load"], last["halted"]) == ("chat", {"concurrency": 4}, "auth_refused")
    assert last["metrics"]["errors"] == {"http_401": 1, "cancelled": 3} and "during C=4;" in lines[0]
    assert len(read_jsonl(out / first["records"])) == 6 and len(read_jsonl(out / last["records"])) == 4
    cand, other = summary["candidates"]
    assert cand["verdict"] == "not judged" and "refused the API key" in cand["reason"]
    assert other["verdict"] == "not judged" and other["reason"].startswith("not run: the run stopped before it")
    assert refused == 1 and sum(1 for e in sent if e.get("completed")) == 1 + 6  # nothing sent after the refusal


def test_run_resume_after_the_key_is_fixed_runs_the_stopped_cell_again(tmp_path):
    url, srv = _revoking_server(1 + 6 + 3)
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
    # requests are served, C=4 is cut at its first refusal; resumed against the same server accepting the key,
    # C=4 is run again (its 4 records, refused or cancelled, set aside) and C=8 after it
    url, srv = _revoking_server(1 + 4 + 3)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kneecap", "bench", "--json", "--no-report", "--quiet"]
    try:
        first = subprocess.run(
            [
                *cmd,
                "--base-url",
                url,
                "--isl",
                "16",
                "--osl",
                "4",
                "--concurrency",
                "2,4,8",
                "--requests",
                "4",
                "--keepalive",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
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
    assert len(read_jsonl(out / "requests.discarded.jsonl")) == 4  # C=4's refused and cancelled requests, set aside
