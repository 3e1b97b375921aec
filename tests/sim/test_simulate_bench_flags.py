"""`kneecap simulate` takes bench's --until-stable / --stable-window-s, --goodput and --dataset-name with bench's
meaning, through the same parsers (kneecap.metrics.goodput, kneecap.workload.datasets.dataset_flag) and the
same stable-p99 rule (kneecap.workload.slices.p99_stable)."""

from __future__ import annotations

import json

from clitools import run_cli

from kneecap.records import iter_records
from kneecap.workload.slices import p99_stable

BASE = [
    "simulate",
    "--preset",
    "llama-3.1-8b",
    "--gpu",
    "h100-sxm",
    "--no-report",
    "--json",
    "--isl",
    "500",
    "--osl",
    "100",
]


def test_until_stable_ends_a_duration_level_once_its_p99s_settled(tmp_path):
    full = json.loads(run_cli(*BASE, "--concurrency", "4", "--duration", "300", "--out", str(tmp_path / "f")).stdout)
    out = tmp_path / "s"
    r = run_cli(
        *BASE,
        "--concurrency",
        "4",
        "--duration",
        "300",
        "--until-stable",
        "0.05",
        "--stable-window-s",
        "10",
        "--out",
        str(out),
    )
    assert r.code == 0, r.stderr
    (level,) = json.loads(r.stdout)["levels"]
    verdict = level["stable_p99"]
    assert verdict["stable"] is True and verdict["rel_tol"] == 0.05 and verdict["window_s"] == 10.0
    # it ends on the steady-state rule every level is judged by, too (kneecap.metrics.stability)
    assert verdict["steady_state"] == "stable" and level["stability"]["verdict"] == "stable"
    assert len(verdict["ttft_p99_ms"]) == 4  # the last 3 windows and the one before them
    # it ended early: fewer requests than the whole 300 s, none sent after the verdict's last window end
    assert 0 < level["requests"] < full["levels"][0]["requests"]
    records = list(iter_records(out / "requests.jsonl"))
    stop_s = max(r.sent_at for r in records)
    assert stop_s < 300
    # the verdict holds for the records of the level that ran: the same rule, at the same moment
    again = p99_stable(records, 10.0, rel_tol=0.05, now_s=verdict_end(records, stop_s, 10.0))
    assert again.stable and list(again.ttft_p99_ms) == verdict["ttft_p99_ms"]


def test_until_stable_stops_at_the_same_moment_whatever_the_longest_duration(tmp_path):
    """The level runs to growing horizons until its p99s settle: the answer must not depend on --duration."""
    runs = [
        json.loads(
            run_cli(
                *BASE, "--concurrency", "16", "--duration", d, "--until-stable", "0.02", "--out", str(tmp_path / d)
            ).stdout
        )["levels"][0]
        for d in ("200", "3000")
    ]
    assert runs[0]["stable_p99"]["stable"] is True
    assert runs[0]["stable_p99"] == runs[1]["stable_p99"] and runs[0]["requests"] == runs[1]["requests"]
    assert runs[0]["ttft_ms"] == runs[1]["ttft_ms"]


def verdict_end(records, last_send_s: float, window_s: float) -> float:
    """The window end after the last send: where the driver stopped sending."""
    import math

    t0 = min(r.sent_at for r in records if not r.warmup)
    return t0 + math.ceil((last_send_s - t0) / window_s + 1e-12) * window_s


def test_until_stable_needs_a_closed_loop_duration_level(tmp_path):
    r = run_cli(*BASE, "--concurrency", "4", "--requests", "40", "--until-stable", "0.05", "--out", str(tmp_path / "x"))
    assert r.code == 2 and "--until-stable ends a closed-loop --duration level early" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    r = run_cli(*BASE, "--concurrency", "4", "--duration", "60", "--until-stable", "2", "--out", str(tmp_path / "y"))
    assert r.code == 2 and "--until-stable must be a fraction between 0 and 1" in r.stderr


def test_goodput_is_added_to_the_slo_as_per_request_terms(tmp_path):
    s = json.loads(
        run_cli(
            *BASE,
            "--concurrency",
            "1,64",
            "--requests",
            "64",
            "--goodput",
            "ttft:100 tpot:50",
            "--out",
            str(tmp_path / "g"),
        ).stdout
    )
    assert s["slo"] == {"ttft_max_ms": 100.0, "tpot_max_ms": 50.0}
    low, high = s["levels"]
    assert low["slo"]["met"] is True and low["ttft_ms"]["max"] <= 100
    # 64 prompts at once: the slowest request's TTFT goes past 100 ms, and that is the breach named
    assert high["slo"]["met"] is False and [b["key"] for b in high["slo"]["breaches"]] == ["ttft_max_ms"]
    assert high["slo"]["breaches"][0]["value"] == high["ttft_ms"]["max"] > 100
    r = run_cli(
        *BASE, "--concurrency", "1", "--requests", "4", "--goodput", "latency:100", "--out", str(tmp_path / "b")
    )
    assert r.code == 2 and "--goodput term 'latency:100' is not KEY:VALUE" in r.stderr


def test_dataset_name_and_path_as_vllm_takes_them(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": "word " * (40 * (i + 1)), "output_len": 10 + i}) + "\n" for i in range(5))
    )
    runs = {}
    for name, args in (
        ("path", ["--dataset", str(data)]),
        ("named", ["--dataset-name", "jsonl", "--dataset-path", str(data)]),
        ("alone", ["--dataset-path", str(data)]),
    ):
        r = run_cli(*BASE, *args, "--concurrency", "2", "--requests", "10", "--out", str(tmp_path / name))
        assert r.code == 0, r.stderr
        runs[name] = sorted(
            (x.request_id, x.expected_input_tokens, x.expected_output_tokens)
            for x in iter_records(tmp_path / name / "requests.jsonl")
        )
    assert runs["path"] == runs["named"] == runs["alone"]
    assert {o for _, _, o in runs["path"]} <= {10 + i for i in range(5)}
    r = run_cli(
        *BASE, "--dataset-name", "sharegpt", "--concurrency", "2", "--requests", "4", "--out", str(tmp_path / "n")
    )
    assert r.code == 2 and "--dataset sharegpt needs the file" in r.stderr
    r = run_cli(
        *BASE, "--dataset-name", "random", "--concurrency", "2", "--requests", "4", "--out", str(tmp_path / "r")
    )
    assert r.code == 0, r.stderr


def test_isl_and_osl_take_the_same_length_forms_as_bench(tmp_path):
    """One --isl/--osl declaration (kneecap.cli.sweep_flags): a length distribution works in simulate as in bench,
    the same bad value gives both commands the same one-line error, and both --help texts say the same."""
    r = run_cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--no-report",
        "--json",
        "--isl",
        "uniform:500:1500",
        "--osl",
        "normal:mean=100,std=20,max=200",
        "--rate",
        "2",
        "--requests",
        "300",
        "--out",
        str(tmp_path / "u"),
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["workload"]["isl_dist"] == "uniform:500:1500" and doc["workload"]["isl"] is None
    records = list(iter_records(tmp_path / "u" / "requests.jsonl"))
    ins = [rec.expected_input_tokens for rec in records]
    outs = [rec.expected_output_tokens for rec in records]
    assert min(ins) >= 500 and max(ins) <= 1500 and len(set(ins)) > 100 and 900 < sum(ins) / len(ins) < 1100
    assert max(outs) <= 200 and len(set(outs)) > 10
    errors = [
        run_cli(cmd, *args, "--isl", "uniform:x", "--rate", "2", "--out", str(tmp_path / cmd)).stderr
        for cmd, args in (
            ("simulate", ("--preset", "llama-3.1-8b", "--gpu", "h100-sxm")),
            ("bench", ("--base-url", "http://127.0.0.1:9", "--osl", "10")),
        )
    ]
    assert (
        errors[0] == errors[1]
        and errors[0].startswith("error: --isl length 'uniform:x'")
        and errors[0].count("\n") == 1
    )
    helps = [" ".join(run_cli(cmd, "--help").stdout.split()) for cmd in ("simulate", "bench")]
    for text in (
        "input tokens per request: N, or a length distribution such as uniform:100:2000",
        "--find-max",
        "--goodput",
        "--shared-prefix",
    ):
        assert text in helps[0] and text in helps[1]
    r = run_cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "lognormal:mean=1000,std=300",
        "--rate",
        "2",
        "--out",
        str(tmp_path / "unbounded"),
    )
    assert r.code == 2 and "add max=N" in r.stderr and r.stderr.count("\n") == 1
