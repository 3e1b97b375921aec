"""`kneecap run` end to end on the simulator: results folder, verdicts, capacity, handoff, determinism."""

from __future__ import annotations

import json
import math
import textwrap

from two_candidates import PLAN


def run_plan(cli, tmp_path, text=PLAN, name="out"):
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(text))
    out = tmp_path / name
    r = cli("run", str(plan), "--out", str(out), "--json", "--no-report")
    return r, out


def test_run_on_simulator(cli, tmp_path):
    r, out = run_plan(cli, tmp_path)
    assert r.code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    assert {
        "kind",
        "cells",
        "capacity",
        "candidates",
        "handoff",
        "model_executed",
        "benchmark_executed",
        "worksheet",
    } <= set(summary)
    assert summary["kind"] == "run"
    assert summary["model_executed"] is False and summary["benchmark_executed"] is False
    cells = summary["cells"]
    assert {c["candidate"] for c in cells} == {"roomy", "starved"}
    for c in cells:
        assert {"class", "state", "load", "repetition", "verdict"} <= set(c)
        if c["verdict"] != "not_run":
            obs = c["observed"]
            # the plan's 40 requests, or enough for a simulated C-stream cell to reach steady state (4.5 C)
            assert (
                obs["scheduled"] == max(40, math.ceil(4.5 * c["load"]["concurrency"]))
                and obs["batch_size"]["max"] >= 1
                and obs["kv_blocks_high_water"] > 0
            )
            assert obs["queue_ms"]["n"] == obs["completed"]
        if c["verdict"] != "not_run":
            assert (out / c["records"]).exists()
    by_name = {c["name"]: c for c in summary["candidates"]}
    # max_num_seqs 1: requests queue behind each other, so TTFT explodes at C=8 and the ramp stops there
    starved = summary["capacity"]["starved"]["chat"]["warm"]
    assert starved["capacity"] == 1 and 8 not in starved["region"]
    assert summary["capacity"]["roomy"]["chat"]["warm"]["capacity"] >= 8
    assert by_name["roomy"]["verdict"] == "accepted"
    assert by_name["roomy"]["cost"]["chat"]["usd_per_million_output_tokens"] > 0
    # every repetition ran (repetition-major order)
    assert {c["repetition"] for c in cells} == {0, 1}
    # a failing cell produced a handoff package
    assert summary["handoff"] == "handoff"
    handoff = json.loads((out / "handoff" / "handoff.json").read_text())
    assert handoff["threshold_crossed"] and handoff["next_experiment"]
    assert (out / "handoff" / "plan.yaml").exists() and (out / "handoff" / "failing_cell_requests.jsonl").exists()


def test_run_is_deterministic(cli, tmp_path):
    r1, out1 = run_plan(cli, tmp_path, name="a")
    r2, out2 = run_plan(cli, tmp_path, name="b")
    assert r1.code == r2.code == 0
    s1, s2 = json.loads(r1.stdout), json.loads(r2.stdout)
    for s in (s1, s2):
        s.pop("manifest", None)
    assert s1 == s2
    assert (out1 / "records" / "cell-0000.jsonl").read_bytes() == (out2 / "records" / "cell-0000.jsonl").read_bytes()


def test_slo_gate_rejects_with_reason(cli, tmp_path):
    text = PLAN.replace("ttft_p99_ms: 600", "ttft_p99_ms: 0.001")
    r, out = run_plan(cli, tmp_path, text=text)
    assert r.code == 0, r.stderr
    cands = {c["name"]: c for c in json.loads(r.stdout)["candidates"]}
    assert cands["roomy"]["verdict"] == "rejected" and cands["roomy"]["gate"] == "slo"
    assert "interactive routing" in cands["starved"]["reason"]


def test_bad_plan_is_one_line(cli, tmp_path):
    r, _ = run_plan(cli, tmp_path, text=PLAN.replace("requests_per_cell: 40", "requests_per_cel: 40"))
    assert r.code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "load.requests_per_cel" in lines[0] and "plan.yaml:12:" in lines[0]
    assert "Traceback" not in r.stderr


def test_repeated_behaviour_case_names_are_one_line(cli, tmp_path):
    """A plan's own behaviour cases need distinct names, as --behaviour-gate's do (one would hide the other's drift)."""
    cases = """behaviour:
  - {name: capital, prompt: "Capital of France?", expect: {regex: Paris}}
  - {name: capital, prompt: "Capital of Spain?", expect: {regex: Madrid}}
candidates:"""
    r, out = run_plan(cli, tmp_path, text=PLAN.replace("candidates:", cases, 1))
    lines = r.stderr.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and "plan.yaml:" in lines[0], r.stderr
    assert "behaviour: case names repeat (capital)" in lines[0] and not out.exists()


def test_on_off_bursts_on_the_simulator(cli, tmp_path):
    text = PLAN.replace(
        """load:
  dimension: concurrency
  steps: [1, 8, 64]""",
        """load:
  dimension: rate
  steps: [4]
  arrival: {kind: onoff, on_s: 1.0, off_s: 4.0}""",
    ).replace("repetitions: 2", "repetitions: 1")
    r, out = run_plan(cli, tmp_path, text=text)
    assert r.code == 0, r.stderr
    from kneecap.records import read_records

    recs = [x for x in read_records(out / "records" / "cell-0000.jsonl") if not x.warmup]
    start = min(rec.scheduled_at for rec in recs)  # the level's clock starts after its warmup, with its first request
    phases = sorted({round((rec.scheduled_at - start) % 5.0, 6) <= 1.0 for rec in recs})
    assert phases == [True]  # every request was sent inside an on-window


def test_resume_after_sigkill_equals_an_uninterrupted_run(cli, tmp_path):
    """SIGKILL a simulated run after its second cell; --resume finishes it; every cell's verdict and
    metrics equal those of a run that was never interrupted (the simulator is deterministic)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(PLAN).replace("requests_per_cell: 40", "requests_per_cell: 300"))
    whole = cli("run", str(plan), "--out", str(tmp_path / "whole"), "--json", "--no-report", timeout=600)
    assert whole.code == 0, whole.stderr
    out = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kneecap", "run", str(plan), "--out", str(out), "--no-report", "--quiet"]
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if len(json.loads((out / "summary.json").read_text()).get("cells", [])) >= 2:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    cut = json.loads((out / "summary.json").read_text())
    assert cut["status"] == "running" and len(cut["cells"]) < len(json.loads(whole.stdout)["cells"])
    r = cli("run", str(plan), "--resume", str(out), "--json", "--no-report", timeout=600)
    assert r.code == 0, r.stderr
    a, b = json.loads(whole.stdout), json.loads(r.stdout)
    assert [c["index"] for c in b["cells"]] == [c["index"] for c in a["cells"]]  # nothing lost, nothing twice
    for ca, cb in zip(a["cells"], b["cells"]):
        assert (ca["verdict"], ca.get("metrics")) == (cb["verdict"], cb.get("metrics")), ca["index"]
    assert [c["verdict"] for c in a["candidates"]] == [c["verdict"] for c in b["candidates"]]


def test_resume_refuses_another_plan(cli, tmp_path):
    r, out = run_plan(cli, tmp_path)
    assert r.code == 0
    other = tmp_path / "other.yaml"
    other.write_text(textwrap.dedent(PLAN).replace("seed: 5", "seed: 6"))
    r2 = cli("run", str(other), "--resume", str(out))
    assert r2.code == 2 and "not written by this plan" in r2.stderr


def test_fail_on(cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(PLAN))
    r = cli("run", str(plan), "--out", str(tmp_path / "o"), "--quiet", "--no-report", "--fail-on", "slo")
    assert r.code == 1 and "--fail-on slo" in r.stderr  # the starved candidate misses its TTFT budget
    r = cli("run", str(plan), "--out", str(tmp_path / "o2"), "--quiet", "--no-report", "--fail-on", "errors")
    assert r.code == 0  # nothing failed on the simulator
    r = cli("run", str(plan), "--out", str(tmp_path / "o3"), "--fail-on", "bogus")
    assert r.code == 2 and "--fail-on" in r.stderr


def _server_plan(tmp_path, url, extra=""):
    plan = tmp_path / "srv.yaml"
    plan.write_text(
        textwrap.dedent(f"""\
        name: server-candidate
        classes:
          c: {{input: 8, output: 6}}
        state: {{warmup_requests: 0}}
        load: {{steps: [1, 2], requests_per_cell: 4}}
        {extra}
        candidates:
          - name: srv
            target: {{kind: server, base_url: "{url}", timeout_s: 10}}
        """)
    )
    return plan


def test_invalid_output_is_a_declared_limit(cli, tmp_path):
    """A server that returns fewer tokens than asked (here: 3 of 6) produces invalid output: the ramp stops."""
    from servers.scripted import start_scripted_server

    url, srv = start_scripted_server(output_tokens=3)
    try:
        r = cli("run", str(_server_plan(tmp_path, url)), "--out", str(tmp_path / "o"), "--json", "--no-report")
    finally:
        srv.stop()
    assert r.code == 0, r.stderr
    cells = json.loads(r.stdout)["cells"]
    assert cells[0]["verdict"] == "limit" and "invalid output rate" in cells[0]["limit"]
    assert cells[0]["metrics"]["invalid_outputs"] == 4 and cells[1]["verdict"] == "not_run"


def test_redact_server_strings_keeps_them_out_of_every_file(cli, tmp_path):
    from servers.scripted import start_scripted_server

    url, srv = start_scripted_server(model="acme-secret-model-9", fault="http_500")
    try:
        r = cli(
            "run",
            str(_server_plan(tmp_path, url, "privacy: {redact_server_strings: true}")),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        )
    finally:
        srv.stop()
    assert r.code == 0, r.stderr
    for path in (p for p in (tmp_path / "o").rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert b"acme-secret-model-9" not in data and b"scripted 500" not in data, path


def test_behaviour_gate_replays_cases_against_a_live_server(cli, tmp_path):
    """The scripted server answers every chat with 'tok tok …': a case expecting that passes and the load
    cells run; a case expecting 'Paris' fails, so the candidate is rejected before any load or cost."""
    from servers.scripted import start_scripted_server

    url, srv = start_scripted_server()
    try:
        ok_cases = "behaviour: [{name: filler, prompt: 'say tok', max_tokens: 4, expect: {regex: '^(tok )+$'}}]"
        r = cli(
            "run", str(_server_plan(tmp_path, url, ok_cases)), "--out", str(tmp_path / "ok"), "--json", "--no-report"
        )
        assert r.code == 0, r.stderr
        s = json.loads(r.stdout)
        cand = s["candidates"][0]
        assert cand["behaviour"][0]["passed"] is True and cand["verdict"] == "accepted"
        assert s["cells"] and s["model_executed"] is True and s["benchmark_executed"] is True

        bad_cases = "behaviour: [{name: capital, prompt: 'Capital of France?', max_tokens: 4, expect: {exact: Paris}}]"
        r = cli(
            "run",
            str(_server_plan(tmp_path, url, bad_cases)),
            "--out",
            str(tmp_path / "bad"),
            "--json",
            "--no-report",
            "--fail-on",
            "rejected",
        )
        assert r.code == 1 and "rejected" in r.stderr
        s = json.loads(r.stdout)
        cand = s["candidates"][0]
        assert cand["verdict"] == "rejected" and cand["gate"] == "behaviour" and "capital" in cand["reason"]
        assert s["cells"] == []  # rejected before any load was offered
    finally:
        srv.stop()


BURSTY = """
name: bursty
classes:
  chat: {input: 128, output: 16}
load:
  dimension: rate
  steps: [4, 8, 16]
  requests_per_cell: 12
  required: 8
  arrival: {kind: gamma, burstiness: 0.3}
state: {warmup_requests: 0}
states: [warm]
slo:
  chat: {ttft_p99_ms: 5000}
candidates:
  - name: sim
    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm}
"""


def test_rate_cells_report_the_rate_offered_and_capacity_rests_on_it(cli, tmp_path):
    """Twelve bursty requests a cell go out far from their step (seed 0: the 16 req/s step sends at 4.6 req/s).
    Each cell says the rate its requests were sent at beside its step; the capacity verdict compares what
    was offered with the plan's required rate, so a step that passed at a fraction of its rate proves no more."""
    from kneecap.records import read_records

    r, out = run_plan(cli, tmp_path, BURSTY)
    assert r.code == 0, r.stderr
    summary = json.loads(r.stdout)
    for c in summary["cells"]:
        sends = sorted(x.scheduled_at for x in read_records(out / c["records"]))
        assert c["offered"]["offered_request_s"] == (len(sends) - 1) / (sends[-1] - sends[0])
        assert c["offered"]["nominal_request_s"] == c["load"]["rate"]
    top = summary["cells"][-1]
    assert top["verdict"] == "pass" and top["load"]["rate"] == 16.0
    assert top["offered"]["offered_request_s"] < 0.8 * 16.0  # this sample of arrivals went out well below its step
    info = summary["capacity"]["sim"]["chat"]["warm"]
    assert info["capacity"] == 16.0 and info["offered_at_capacity"] == top["offered"]["offered_request_s"]
    assert info["capacity_shown"] == info["offered_at_capacity"]
    (cand,) = summary["candidates"]
    # every step passed, and 16 >= the required 8, but what was offered at the capacity step is below 8
    assert info["capacity_shown"] < 8
    assert cand["verdict"] == "rejected" and cand["gate"] == "slo", cand
    assert "as offered" in cand["reason"] and "(required 8)" in cand["reason"]
