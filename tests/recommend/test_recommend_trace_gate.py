"""kneecap recommend with a trace as the workload (--replay TRACE --replay-speed X) and the behaviour gate for
deployments quantized below the checkpoint (--behaviour-gate FILE): what is taken from the trace, the confirming
bench line replaying it, the run plans loading with the load-plan schema and holding the trace's lengths and the
behaviour cases, and one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from kneecap.recommend.gate import quantized
from kneecap.recommend.trace import trace_load
from clitools import run_cli

MOONCAKE_HEAD = Path(__file__).resolve().parents[1] / "workload" / "data" / "mooncake_conversation_head.jsonl"
SLO = "ttft_p99_ms=1000,tpot_p99_ms=60"
GATE = (
    '- name: capital\n  prompt: "The capital of France is"\n  expect: {regex: "Paris"}\n  max_tokens: 8\n'
    '- name: json\n  prompt: "Answer in JSON"\n  expect: {json_schema: {type: object}}\n'
    # any answer the server gave (the run writes "<no answer: ...>" when none came)
    '- name: answered\n  prompt: "Say something"\n  expect: {regex: "^(?!<no answer)"}\n'
)


def _trace(path: Path) -> tuple[list[int], list[int]]:
    """40 requests 0.5 s apart (mean rate 2 requests/s), lengths that differ row to row."""
    ins = [300 + (i * 37) % 400 for i in range(40)]
    outs = [30 + (i * 11) % 50 for i in range(40)]
    path.write_text(
        "".join(
            json.dumps({"timestamp": i * 500, "input_length": a, "output_length": b, "hash_ids": [i]}) + "\n"
            for i, (a, b) in enumerate(zip(ins, outs))
        )
    )
    return ins, outs


def _recommend(tmp_path, *extra, out="out"):
    return run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--slo",
        SLO,
        "--gpus",
        "a100-80",
        "--kv-dtypes",
        "bf16",
        "--workers",
        "1",
        "--json",
        "--out",
        str(tmp_path / out),
        *extra,
        timeout=300,
    )


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """One search on the trace at speed 2 with fp8 weights allowed and a behaviour gate."""
    tmp = tmp_path_factory.mktemp("traced")
    ins, outs = _trace(tmp / "trace.jsonl")
    (tmp / "gate.yaml").write_text(GATE)
    r = _recommend(
        tmp,
        "--replay",
        str(tmp / "trace.jsonl"),
        "--replay-speed",
        "2",
        "--weight-dtypes",
        "bf16,fp8",
        "--behaviour-gate",
        str(tmp / "gate.yaml"),
    )
    assert r.code == 0, r.stderr
    return tmp, json.loads(r.stdout), ins, outs


def test_the_trace_sets_the_lengths_and_the_rate(traced):
    tmp, doc, ins, outs = traced
    t = doc["trace"]
    assert t["rows"] == 40 and t["speed"] == 2.0
    assert t["mean_rate_recorded"] == pytest.approx(39 / 19.5) and doc["load"] == {
        "kind": "rate",
        "value": pytest.approx(4.0),
    }
    assert t["input_tokens_mean"] == pytest.approx(sum(ins) / 40, abs=0.05)
    assert t["output_tokens_mean"] == pytest.approx(sum(outs) / 40, abs=0.05)
    assert t["input_tokens_p99"] == sorted(ins)[math.ceil(0.99 * 40) - 1] == max(ins)
    assert (doc["isl"], doc["osl"]) == (round(sum(ins) / 40), round(sum(outs) / 40))
    # the context a replica must hold: the longest input and output the lengths can draw
    assert doc["best"]["plan"]["context"] == max(ins) + max(outs)
    # the lengths files beside the run plans are the trace's own, in order
    assert [int(x) for x in (tmp / "out" / "trace-input-tokens.txt").read_text().split()] == ins
    assert [int(x) for x in (tmp / "out" / "trace-output-tokens.txt").read_text().split()] == outs


def test_the_search_draws_from_the_trace_lengths(tmp_path):
    """The trace enters the search as a class mix (the --classes path): its lengths, not its means."""
    from kneecap.recommend.evaluate import MixOptions

    ins, outs = _trace(tmp_path / "t.jsonl")
    t = trace_load(tmp_path / "t.jsonl", 3.0)
    assert t.rate == pytest.approx(6.0)
    (cls,) = t.workload.classes
    assert cls.input.values == tuple(ins) and cls.output.values == tuple(outs)
    from kneecap.workload import make_requests

    w = MixOptions(kind="rate", levels=(1.0,), isl=1, osl=1, mix=t.workload).workload  # what a search level draws from
    specs = make_requests(w, 200, seed=0)
    assert {s.input_tokens for s in specs} <= set(ins) and len({s.input_tokens for s in specs}) > 20
    assert {s.output_tokens for s in specs} <= set(outs) and len({s.output_tokens for s in specs}) > 20


def test_confirming_bench_replays_the_trace(traced):
    tmp, doc, _, _ = traced
    trace_rate = doc["trace"]["mean_rate_recorded"]
    for c in doc["candidates"]:
        cmd = c["confirm_cmd"].split()
        assert "--replay" in cmd and cmd[cmd.index("--replay") + 1] == str(tmp / "trace.jsonl")
        assert "--isl" not in cmd and "--rate" not in cmd
        speeds = [float(x) for x in cmd[cmd.index("--replay-speed") + 1].split(",")]
        share = c["predicted"]["per_replica_load"]
        # bench offers speed x the trace's mean rate: the replica's share is one of the levels
        assert any(s * trace_rate == pytest.approx(share, rel=1e-3) for s in speeds), (speeds, share)
        assert min(speeds) * trace_rate == pytest.approx(share / 2, rel=1e-3)  # the lowest level is half the share
        # every level replays all 40 rows: 40 / rate seconds each
        minutes = sum(40 / (s * trace_rate) for s in speeds) / 60
        assert f"all 40 rows, about {minutes:.3g} minutes" in c["confirm_note"], c["confirm_note"]


def test_run_plans_hold_the_trace_lengths_and_the_behaviour_cases(traced):
    from kneecap.loadplan.schema import load_plan_file

    tmp, doc, ins, _ = traced
    quant = [c for c in doc["candidates"] if c["weight_dtype"] == "fp8"]
    plain = [c for c in doc["candidates"] if c["weight_dtype"] == "bf16"]
    assert quant and plain, [(c["weight_dtype"], c["kv_dtype"]) for c in doc["candidates"]]
    assert doc["behaviour_gate"]["cases"] == ["capital", "json", "answered"]
    for c in doc["candidates"]:
        q = c["weight_dtype"] == "fp8"
        assert c["quantized_below_checkpoint"] == (["weights"] if q else [])
        assert c["needs_behaviour_gate"] is q and c["behaviour_unchecked"] is False
        for fname in c["run_plan"].values():
            spec, base = load_plan_file(tmp / "out" / fname)
            assert list(spec.classes) == ["trace"]
            assert spec.classes["trace"].to_request_class("trace", base).input.values == tuple(ins)
            if q:
                assert [b.name for b in spec.behaviour] == ["capital", "json", "answered"]
                assert spec.behaviour[0].expect.regex == "Paris" and spec.behaviour[0].max_tokens == 8
                assert spec.behaviour[1].expect.json_schema == {"type": "object"}
            else:
                assert spec.behaviour == []
    md = (tmp / "out" / "report.md").read_text()
    assert "need the behaviour gate" in md and "trace.jsonl" in md and "40 requests" in md


def test_without_a_gate_quantized_candidates_are_unchecked(tmp_path):
    r = _recommend(tmp_path, "--rate", "4", "--isl", "500", "--osl", "50", "--weight-dtypes", "bf16,fp8")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["behaviour_gate"] is None and doc["trace"] is None
    quant = [c for c in doc["candidates"] if c["quantized_below_checkpoint"]]
    assert quant
    for c in doc["candidates"]:
        assert c["behaviour_unchecked"] is bool(c["quantized_below_checkpoint"]) and c["needs_behaviour_gate"] is False
    assert "assumes their output is acceptable" in (tmp_path / "out" / "report.md").read_text()


def test_below_the_checkpoint_is_relative_to_its_own_dtype():
    bf16 = SimpleNamespace(weight_dtype="bf16", kv_dtype=None)
    assert quantized(bf16, "bf16", "bf16") == []
    assert quantized(bf16, "fp8", "bf16") == ["weights"]
    assert quantized(bf16, "bf16", "fp8") == ["kv"]
    assert quantized(bf16, "int4", "fp8") == ["weights", "kv"]
    fp8 = SimpleNamespace(weight_dtype="fp8", kv_dtype="fp8")  # ships fp8 weights with an fp8-calibrated KV cache
    assert quantized(fp8, "fp8", "fp8") == [] and quantized(fp8, "int4", "fp8") == ["weights"]


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--isl", "100"], "--replay and --isl both given"),
        (["--rate", "3"], "--replay and --rate both given"),
        (["--concurrency", "3"], "--replay and --concurrency both given"),
        (["--replay-speed", "0"], "replay speed must be positive"),
    ],
)
def test_replay_refuses_other_workload_flags(tmp_path, extra, needle):
    _trace(tmp_path / "t.jsonl")
    r = _recommend(tmp_path, "--replay", str(tmp_path / "t.jsonl"), *extra)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and needle in lines[0], r.stderr


@pytest.mark.parametrize(
    "content,needle",
    [
        ('{"timestamp": 0, "input_length": 10}\n', "line 1 lacks output_length"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 5}\nnot json\n', "line 2 is not valid JSON"),
        ("Timestamp,Model\n1,x\n", "has no Request tokens, Response tokens column"),
    ],
)
def test_bad_trace_is_the_readers_one_line(tmp_path, content, needle):
    (tmp_path / "bad.jsonl").write_text(content)
    r = _recommend(tmp_path, "--replay", str(tmp_path / "bad.jsonl"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and needle in lines[0], r.stderr
    assert not (tmp_path / "out").exists()


def test_published_trace_head_is_read(tmp_path):
    """Six rows of Mooncake's published conversation trace (all at timestamp 0 and 1 s, 6-7k-token prompts)."""
    t = trace_load(MOONCAKE_HEAD)
    assert t.rows == 6 and t.input_tokens[0] == 6758 and t.output_tokens[0] == 500


@pytest.mark.parametrize(
    "content,needle",
    [
        ("- {name: a, prompt: p, expect: {regex: x, exact: y}}\n", "case 1: expect: an expectation needs exactly one"),
        ("- {name: a, prompt: p, expect: {regex: x}, max_token: 3}\n", "case 1: max_token: unknown field"),
        (
            "- {name: a, prompt: p, expect: {regex: x}}\n- {name: a, prompt: q, expect: {exact: y}}\n",
            "case names repeat (a)",
        ),
        ("name: a\n", "holds no list of behaviour cases"),
    ],
)
def test_bad_behaviour_gate_is_one_line(tmp_path, content, needle):
    (tmp_path / "gate.yaml").write_text(content)
    r = _recommend(
        tmp_path, "--rate", "4", "--isl", "500", "--osl", "50", "--behaviour-gate", str(tmp_path / "gate.yaml")
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and needle in lines[0], r.stderr


def test_the_run_plan_rejects_a_quantized_deployment_whose_answers_fail(traced, tmp_path):
    """The real thing: a quantized candidate's `kneecap run` plan, pointed at `kneecap serve` (the simulated engine,
    which answers no question about France), is rejected at the behaviour gate before any load is sent."""
    import yaml

    from kneecap.cli.serve_process import start_server, stop_server

    tmp, doc, _, _ = traced
    c = next(c for c in doc["candidates"] if c["needs_behaviour_gate"])
    plan = yaml.safe_load((tmp / "out" / c["run_plan"]["server"]).read_text())
    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "a100-80"])
    try:
        plan["candidates"][0]["target"]["base_url"] = url  # what a user does: point it at their server
        for kind in ("input", "output"):  # the trace's lengths files are beside the plan
            plan["classes"]["trace"][kind]["file"] = str(tmp / "out" / plan["classes"]["trace"][kind]["file"])
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
        r = run_cli(
            "run",
            str(tmp_path / "plan.yaml"),
            "--out",
            str(tmp_path / "run"),
            "--json",
            "--quiet",
            "--no-report",
            timeout=300,
        )
    finally:
        stop_server(proc)
    assert r.stdout, r.stderr
    entry = json.loads(r.stdout)["candidates"][0]
    assert entry["verdict"] == "rejected" and entry["gate"] == "behaviour", entry
    rows = {b["case"]: b for b in entry["behaviour"]}
    assert rows["answered"]["passed"] is True, rows  # the server answered ...
    assert rows["capital"]["executed"] is True and rows["capital"]["passed"] is False, rows  # ... not about Paris
