"""--export br: each level of a bench or simulate sweep as an llm-d Benchmark Report v0.2.1, valid against the
schema its authors publish (tests/sweep/data/br/) and their own loader, with the level's own numbers in it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.clitools import run_cli

SCHEMA = json.loads((Path(__file__).parent / "data" / "br" / "br_v0_2_json_schema.json").read_text())


def _validate(doc: dict) -> None:
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    from llmd_benchmark_report.core import load_benchmark_report

    assert type(load_benchmark_report(doc)).__name__ == "BenchmarkReportV02"


def _reports(folder: Path) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): yaml.safe_load(p.read_text()) for p in sorted((folder / "br").glob("*.yaml"))}


def _check_against_summary(folder: Path, kind: str) -> dict[int, dict]:
    summary = json.loads((folder / "summary.json").read_text())
    reports = _reports(folder)
    assert sorted(reports) == [lv["level"] for lv in summary["levels"]]
    for level in summary["levels"]:
        doc = reports[level["level"]]
        _validate(doc)
        agg = doc["results"]["request_performance"]["aggregate"]
        assert agg["requests"]["total"] == level["requests"] and agg["requests"]["failures"] == level["failed"]
        assert agg["latency"]["time_to_first_token"]["p99"] == pytest.approx(level["ttft_ms"]["p99"])
        assert agg["latency"]["time_per_output_token"]["p50"] == pytest.approx(level["tpot_ms"]["p50"])
        assert agg["throughput"]["output_token_rate"]["mean"] == pytest.approx(level["output_tok_s"])
        assert agg["requests"]["output_length"]["mean"] * level["completed"] == pytest.approx(level["output_tokens"])
        assert kind in doc["run"]["keywords"]
    uids = {doc["run"]["uid"] for doc in reports.values()}
    assert len(uids) == len(reports) and len({doc["run"]["eid"] for doc in reports.values()}) == 1
    return reports


def test_simulate_export_br(tmp_path):
    out = tmp_path / "sim"
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--tp",
        "2",
        "--isl",
        "300",
        "--osl",
        "40",
        "--rate",
        "2,8",
        "--requests",
        "30",
        "--shared-prefix",
        "100x2",
        "--out",
        str(out),
        "--export",
        "br",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    reports = _check_against_summary(out, "simulate")
    doc = reports[1]
    engine = doc["scenario"]["stack"][0]["standardized"]
    assert engine["accelerator"] == {
        "model": "h100-sxm",
        "count": 2,
        "parallelism": {"tp": 2, "pp": 1, "ep": 1, "dp": 1},
    }
    assert engine["tool"].startswith("kneecap-simulator") and "simulated" in doc["run"]["keywords"]
    load = doc["scenario"]["load"]["standardized"]
    assert load["rate_qps"] == 8.0 and load["input_seq_len"] == {"distribution": "fixed", "value": 300}
    assert load["prefix"]["prefix_len"]["value"] == 100 and load["prefix"]["num_groups"] == 2
    assert doc["scenario"]["load"]["native"]["args"]["--rate"] == "2,8"


@pytest.fixture(scope="module")
def kneecap_server():
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--time-scale", "0.05"])
    yield url
    stop_server(proc)


def test_bench_export_br_against_serve(tmp_path, kneecap_server):
    url = kneecap_server
    out = tmp_path / "bench"
    r = run_cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "64",
        "--osl",
        "8",
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--out",
        str(out),
        "--export",
        "br",
        "--no-report",
        "--quiet",
    )
    assert r.code == 0, r.stderr
    reports = _check_against_summary(out, "bench")
    assert reports[1]["scenario"]["load"]["standardized"]["concurrency"] == 4


def test_unknown_export_format_is_one_line(tmp_path):
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "10",
        "--osl",
        "5",
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--export",
        "csv",
        "--out",
        str(tmp_path / "x"),
    )
    assert r.code == 2 and "pass --export vllm or --export br" in r.stderr


def test_the_docs_worked_example_runs(tmp_path):
    """docs/benchmark-report.md's command, as printed (its --out pointed at a temporary folder)."""
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[2] / "docs" / "benchmark-report.md").read_text()
    command = re.search(r"```bash\n(kneecap simulate .*?)\n```", doc, re.S).group(1).replace("\\\n", " ")
    args = shlex.split(command)[1:]
    args[args.index("--out") + 1] = str(tmp_path / "br-example")
    r = run_cli(*args, "--no-report", "--quiet")
    assert r.code == 0, r.stderr
    reports = _check_against_summary(tmp_path / "br-example", "simulate")
    assert [doc["scenario"]["load"]["standardized"]["rate_qps"] for doc in reports.values()] == [2.0, 8.0]


def test_run_export_br_writes_a_report_per_cell(tmp_path):
    plan = Path(__file__).resolve().parents[2] / "tests" / "report" / "data" / "two_candidates.yaml"
    r = run_cli("run", str(plan), "--out", str(tmp_path / "run"), "--export", "br", "--json", "--no-report")
    assert r.code == 0, r.stderr
    summary = json.loads(r.stdout)
    ran = [c for c in summary["cells"] if (c.get("metrics") or {}).get("duration_s")]
    files = sorted((tmp_path / "run" / "br").glob("cell-*.yaml"))
    assert len(files) == len(ran) > 0
    for path, cell in zip(files, sorted(ran, key=lambda c: c["index"])):
        doc = yaml.safe_load(path.read_text())
        _validate(doc)
        agg = doc["results"]["request_performance"]["aggregate"]
        assert agg["requests"]["total"] == cell["metrics"]["requests"]
        assert cell["candidate"] in doc["run"]["keywords"]
        assert doc["scenario"]["load"]["standardized"]["rate_qps"] == cell["load"]["rate"]
