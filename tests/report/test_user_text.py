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
