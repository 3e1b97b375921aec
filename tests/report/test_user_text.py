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
INTERNAL = re.compile(
    r"\bseed \d{3}\b|\bseed-\d{3}\b|\bissue \d+\b|\.\./shared|\bthe lead\b|project brief|this session", re.IGNORECASE
)
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
    first = text[text.index("## On a fresh machine") : text.index("## The commands")]
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
    # --osl is declared once for bench and simulate (kneecap.cli.sweep_flags): bench's requirement is named
    assert (
        "[bench: required, except with a dataset or --replay, whose data size the outputs] output tokens per request"
        in text
    )
    for shown in (
        "[default: (600)]",
        "[default: (completions)]",
        "[default: (random)]",
        "[default: (0)]",
        "[default: 256]",
        "[default: (1)]",
    ):
        assert shown in text, shown


def test_list_gpus_has_a_header():
    lines = run_cli("plan", "--list-gpus").stdout.splitlines()
    assert lines[0].split()[:2] == ["--gpu", "datasheet"] and "part" in lines[0]


def test_serve_ready_line_names_its_pid():
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kneecap",
            "serve",
            "--preset",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert f"(PID {proc.pid})" in line, line
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_simulate_table_shows_the_slo_verdict_per_level(tmp_path):
    r = run_cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "512",
        "--osl",
        "64",
        "--concurrency",
        "1,64",
        "--requests",
        "64",
        "--slo",
        "ttft_p99_ms=200,itl_p99_ms=15",
        "--out",
        str(tmp_path / "sim"),
        "--no-report",
        timeout=300,
    )
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "│ met │" in text and "BREACH ttft_p99_ms" in text
    assert "SLO BREACHED at C=64 (1 of 2 levels)" in text


def test_the_worked_example_plan_names_no_internal_document():
    """The gqa-70b preset's notes reach the worksheet and --json: they speak of the worked example."""
    from clitools import run_cli

    args = (
        "plan",
        "--preset",
        "gqa-70b",
        "--gpu",
        "mi300x",
        "--context",
        "8192",
        "--mean-context",
        "2050",
        "--compute-batch-cap",
        "128",
    )
    for extra in ((), ("--json",)):
        r = run_cli(*args, *extra)
        assert r.code == 0, r.stderr
        assert "seed" not in r.stdout.lower(), [ln for ln in r.stdout.splitlines() if "seed" in ln.lower()]


# The README's `kneecap plan` / `kneecap preflight` examples: each command is read from the README and run,
# and every figure the README states for it must be in what the command prints (tests/plan checks the same
# numbers against hand-worked values; this keeps the README's own text equal to the output).
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _readme_flat() -> str:
    return " ".join((ROOT / "README.md").read_text().split())


def _between(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i : text.index(end, i)]


def _figures(prose: str) -> set[str]:
    """The numbers a sentence states, code spans (commands, flags, file names) left out."""
    return {n.rstrip(",") for n in NUMBER.findall(re.sub(r"`[^`]*`", " ", prose))}


def _printed(figure: str, output: str) -> bool:
    """The figure as a whole number in the output: 67 does not match inside 1,067 or 6.7."""
    return re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d]|[.,]\d)", output) is not None


def _run(command: str, *extra: str):
    args = command.split()
    assert args[0] == "kneecap", command
    r = run_cli(*args[1:], *extra)
    assert r.code == 0, (command, r.stderr)
    return r


def test_readme_plan_worked_example_prints_every_figure_it_states():
    text = _readme_flat()
    section = _between(text, "### plan — a worked example", "Leave out `--mean-context`")
    command = re.search(r"```bash (kneecap plan [^`]+?) ```", section).group(1)
    prose = _between(section, "plans `gqa-70b`", "The test suite")
    figures = _figures(prose)
    assert {"327,680", "42.21", "1,912", "158.33", "205,822,885,888"} <= figures  # the paragraph was found whole
    out = " ".join(_run(command).stdout.split())
    assert [f for f in sorted(figures) if not _printed(f, out)] == []


def test_readme_worst_case_plan_prints_its_figures():
    text = _readme_flat()
    paragraph = _between(text, "Leave out `--mean-context`", "Each lever's flags")
    command, claims = re.search(r"`(kneecap plan [^`]+)`: ([^)]*)\)", paragraph).groups()
    figures = _figures(claims)
    assert {"11", "131,072", "772"} <= figures
    out = " ".join(_run(command).stdout.split())
    assert [f for f in sorted(figures) if not _printed(f, out)] == []


def test_readme_kv_bytes_of_qwen35_and_deepseek_v3_are_what_plan_prints():
    text = _readme_flat()
    qwen_bytes, qwen_layers = re.search(
        r"Qwen3.5-397B caches ([\d,]+) B/token in its (\d+) full-attention", text
    ).groups()
    ds_bytes, ds_layers = re.search(r"DeepSeek-V3 caches ([\d,]+) B/token \((\d+) ×", text).groups()
    qwen_cmd, ds_cmd = re.search(r"Section 1 of `(kneecap plan [^`]+)` and of `(kneecap plan [^`]+)`", text).groups()
    assert "qwen3.5" in qwen_cmd and "deepseek-v3" in ds_cmd
    qwen = " ".join(_run(qwen_cmd).stdout.split())
    assert f"× {qwen_layers} layers" in qwen and f"= {qwen_bytes} B" in qwen
    ds = " ".join(_run(ds_cmd).stdout.split())
    assert f"× {ds_layers} layers" in ds and f"= {ds_bytes} B" in ds


def test_readme_preflight_example_gives_the_verdicts_it_states():
    import json

    text = _readme_flat()
    section = _between(text, "### preflight — will a sweep fit the KV pool?", "### simulate and serve")
    command = re.search(r"```bash (kneecap preflight [^`]+?) ```", section).group(1)
    kv_tokens = re.search(r"--kv-tokens (\d+)", command).group(1)
    assert f"{int(kv_tokens):,} tokens is the KV pool" in section
    claim = re.search(
        r"C=(\d+) fits \(peak ([\d,]+) tokens\), C=(\d+) is tight .*?C=(\d+) exceeds; "
        r"max safe concurrency (\d+)",
        section,
    )
    fits, peak, tight, exceeds, safe = claim.groups()
    doc = json.loads(_run(command, "--json").stdout)
    levels = {lv["concurrency"]: lv for lv in doc["levels"]}
    assert levels[int(fits)]["verdict"] == "fits" and levels[int(fits)]["peak_tokens"] == int(peak.replace(",", ""))
    assert levels[int(tight)]["verdict"] == "tight" and levels[int(exceeds)]["verdict"] == "exceeds"
    assert doc["max_safe_concurrency"] == int(safe)


# Figures the README quotes from committed bench runs (bench/results/*.json): they must be what the file holds,
# so a re-run that rewrites the file and not the README fails here.
def _results(name: str) -> dict:
    import json

    return json.loads((ROOT / "bench" / "results" / name).read_text())


def test_readme_quotes_the_committed_simulator_speed_run():
    doc = _results("sim_speed.json")
    plain = [r for r in doc["runs"] if not r["extra_flags"]]
    (token_times,) = [r for r in doc["runs"] if r["extra_flags"] == ["--token-times"]]
    text = _readme_flat()
    m = re.search(
        r"load average ([\d.]+) to ([\d.]+) at the time\), `python bench/sim_speed.py [^`]*` ran "
        r"`(kneecap simulate [^`]+)` (\w+) times: ([\d.]+) to ([\d.]+) s wall, ([\d.]+) to ([\d.]+) s of CPU "
        r"and at most (\d+) MB peak RSS each \(bench/results/sim_speed.md\); with `--token-times`, ([\d.]+) s wall "
        r"and ([\d.]+) GB",
        text,
    )
    assert m, "the README's simulator speed sentence"
    load_before, load_after, command, times, wall_lo, wall_hi, cpu_lo, cpu_hi, rss, tt_wall, tt_gb = m.groups()
    assert command.split() == doc["command"]
    assert times == {3: "three"}.get(len(plain))
    assert (load_before, load_after) == (f"{doc['load_avg_before']:.2f}", f"{doc['load_avg_after']:.2f}")
    walls = [r["wall_s"] for r in plain]
    cpus = [r["user_s"] + r["sys_s"] for r in plain]
    assert (wall_lo, wall_hi) == (f"{min(walls):.2f}", f"{max(walls):.2f}")
    assert (cpu_lo, cpu_hi) == (f"{min(cpus):.2f}", f"{max(cpus):.2f}")
    assert f"{max(r['peak_rss_mb'] for r in plain):.0f}" == rss
    assert (tt_wall, tt_gb) == (f"{token_times['wall_s']:.2f}", f"{token_times['peak_rss_mb'] / 1000:.1f}")


def test_readme_quotes_the_committed_ray_run():
    doc = _results("ray_clients.json")
    one = [r for r in doc["rows"] if r["client"] == "one-process" and r["scenario"]["concurrency"] >= 1024]
    loads = [x for r in doc["rows"] for x in (r["load_avg_before"], r["load_avg_after"])]
    text = _readme_flat()
    m = re.search(
        r"In its committed run \(load average at most ([\d.]+)\), one process used ([\d.]+) to ([\d.]+) of "
        r"its core at every level from C=1024 on, with an event-loop lag p99 of (\d+) ms at C=1024 \(latency "
        r"case\)",
        text,
    )
    assert m, "the README's Ray sentence"
    load, lo, hi, lag = m.groups()
    utils = [u for r in one for u in r["actor_cpu_util"]]
    assert load == f"{max(loads):.2f}" and (lo, hi) == (f"{min(utils):.2f}", f"{max(utils):.2f}")
    (latency,) = [r for r in one if r["scenario"]["name"] == "latency" and r["scenario"]["concurrency"] == 1024]
    assert lag == f"{latency['actor_loop_lag_p99_ms'][0]:.0f}"
