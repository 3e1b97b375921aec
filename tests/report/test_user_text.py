"""What users read (README, docs, --help, the report glossary) speaks in their terms: no internal
names (seeds, issue numbers, shared folders), a first step that puts `kneecap` on the PATH, and
claims about the command line that the command line keeps."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from clitools import run_cli

ROOT = Path(__file__).resolve().parents[2]
INTERNAL = re.compile(r"\bseed \d{3}\b|\bseed-\d{3}\b|\bissue \d+\b|\.\./shared|\bthe lead\b|project brief|this session",
                      re.IGNORECASE)
COMMANDS = ("plan", "preflight", "bench", "simulate", "serve", "demo", "calibrate", "run", "report")


def _user_docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _user_docs(), ids=lambda p: p.name)
def test_docs_name_no_internal_references(path):
    hits = [line.strip() for line in path.read_text().splitlines() if INTERNAL.search(line)]
    assert not hits, hits


def test_glossary_names_no_internal_references():
    from kneecap.report.glossary import PLAN_TERMS, RUN_TERMS, SWEEP_TERMS, TERMS

    for name in {*PLAN_TERMS, *RUN_TERMS, *SWEEP_TERMS}:
        unit, text = TERMS[name]
        assert not INTERNAL.search(text), (name, text)


def test_readme_first_step_puts_kneecap_on_the_path():
    text = (ROOT / "README.md").read_text()
    first = text[text.index("## On a fresh machine"):text.index("## The commands")]
    assert "source .venv/bin/activate" in first and "kneecap demo" in first


def test_readme_json_claim_holds_for_every_command_it_names():
    text = " ".join((ROOT / "README.md").read_text().split())
    claim = re.search(r"((?:`\w+`, )+`\w+` and `\w+`) take `--json`", text)
    assert claim, "the README names which commands take --json"
    named = re.findall(r"`(\w+)`", claim.group(1))
    assert set(named) == set(COMMANDS) - {"serve"}
    for command in named:
        r = run_cli(command, "--help")
        assert r.code == 0 and "--json" in r.stdout, command
    assert "--json" not in run_cli("serve", "--help").stdout
def test_version_flag_prints_the_version():
    from kneecap import __version__

    r = run_cli("--version")
    assert r.code == 0 and r.stdout.strip() == __version__, (r.stdout, r.stderr)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_no_internal_references(command):
    r = run_cli(command, "--help")
    assert r.code == 0, r.stderr
    assert not INTERNAL.search(r.stdout), INTERNAL.search(r.stdout).group(0)


def test_bench_help_marks_required_flags_and_shows_defaults():
    text = " ".join(run_cli("bench", "--help").stdout.split())
    assert "--base-url <str> [required, unless --resume]" in text
    assert "[required, except with a dataset or --replay, whose data size the outputs] output tokens per request" in text
    for shown in ("[default: (600)]", "[default: (completions)]", "[default: (random)]", "[default: (0)]",
                  "[default: 256]", "[default: (1)]"):
        assert shown in text, shown


def test_list_gpus_has_a_header():
    lines = run_cli("plan", "--list-gpus").stdout.splitlines()
    assert lines[0].split()[:2] == ["--gpu", "datasheet"] and "part" in lines[0]


def test_serve_ready_line_names_its_pid():
    import os
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "kneecap", "serve", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm",
                             "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert f"(PID {proc.pid})" in line, line
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_simulate_table_shows_the_slo_verdict_per_level(tmp_path):
    r = run_cli("simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "512", "--osl", "64",
                "--concurrency", "1,64", "--requests", "64", "--slo", "ttft_p99_ms=200,itl_p99_ms=15",
                "--out", str(tmp_path / "sim"), "--no-report", timeout=300)
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "│ met │" in text and "BREACH ttft_p99_ms" in text
    assert "SLO BREACHED at C=64 (1 of 2 levels)" in text


def test_the_worked_example_plan_names_no_internal_document():
    """The gqa-70b preset's notes reach the worksheet and --json: they speak of the worked example."""
    from clitools import run_cli

    args = ("plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--context", "8192", "--mean-context", "2050",
            "--compute-batch-cap", "128")
    for extra in ((), ("--json",)):
        r = run_cli(*args, *extra)
        assert r.code == 0, r.stderr
        assert "seed" not in r.stdout.lower(), [ln for ln in r.stdout.splitlines() if "seed" in ln.lower()]
