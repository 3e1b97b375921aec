"""`kneecap report` as a user runs it: files written, --json, one-line errors, fast startup."""

from __future__ import annotations

import json


def test_report_prints_the_paths(cli, bench_dir):
    r = cli("report", str(bench_dir))
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == [str(bench_dir / "report.md"), str(bench_dir / "report.html")]
    assert (bench_dir / "report-plots" / "throughput.png").is_file()


def test_report_json_is_one_document(cli, plan_file, tmp_path):
    r = cli("report", str(plan_file), "--json", "--format", "html", "--out", str(tmp_path / "o"))
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == {"kind": "plan", "files": [str(tmp_path / "o" / "report.html")]}


def test_compare_two_folders(cli, bench_dir, sim_dir):
    r = cli("report", str(bench_dir), str(sim_dir), "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "compare"
    assert doc["files"] == [str(sim_dir / "compare.md"), str(sim_dir / "compare.html")]


def _one_line_error(r, *needles):
    assert r.code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    for needle in needles:
        assert needle in lines[0]


def test_errors_are_one_line(cli, tmp_path, bench_dir, plan_file):
    _one_line_error(cli("report", str(tmp_path / "missing")), "does not exist")
    _one_line_error(cli("report", str(bench_dir), "--format", "pdf"), "--format")
    _one_line_error(cli("report", str(bench_dir), str(bench_dir), str(bench_dir)), "two to compare")
    _one_line_error(cli("report", str(bench_dir), str(plan_file)), "plan result")
    (tmp_path / "weird").mkdir()
    (tmp_path / "weird" / "summary.json").write_text('{"kind": "nope"}')
    _one_line_error(cli("report", str(tmp_path / "weird")), "kind 'nope'")
    summary = json.loads((bench_dir / "summary.json").read_text())
    summary["levels"][1]["ttft_ms"] = "fast"  # a level that is not what bench writes: the typed read refuses it
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "summary.json").write_text(json.dumps(summary))
    _one_line_error(cli("report", str(tmp_path / "odd")), "is not a kneecap summary.json: levels[1].ttft_ms")


def test_report_module_keeps_matplotlib_off_the_startup_path():
    import subprocess
    import sys

    code = (
        "import sys, kneecap.cli, kneecap.report; "
        "print(sorted(m for m in ('matplotlib', 'numpy', 'pydantic', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "matplotlib" not in out
