"""`kneecap report A B` states what differs between the two runs (model, GPU, engine, lengths, dataset, load
dimension, seed), and refuses a concurrency sweep against a rate sweep unless --force. The runs are real
`kneecap simulate` results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.report.compare import differences, run_facts
from tests.clitools import run_cli

BASE = ("simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--osl", "20", "--requests", "12")


def _simulate(out: Path, *args: str) -> Path:
    r = run_cli(*BASE, *args, "--out", str(out))
    assert r.code == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    return {
        "a": _simulate(d / "a", "--isl", "200", "--concurrency", "1,4"),
        "same": _simulate(d / "same", "--isl", "200", "--concurrency", "1,4"),
        "longer": _simulate(d / "longer", "--isl", "800", "--concurrency", "1,4", "--seed", "3"),
        "rate": _simulate(d / "rate", "--isl", "200", "--rate", "1,4"),
    }


def _summary(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    summary["manifest"] = json.loads((folder / "manifest.json").read_text())
    return summary


def test_facts_name_what_the_run_was(runs):
    facts = run_facts(_summary(runs["a"]))
    assert facts["model"] == "llama-3.1-8b" and "h100-sxm" in facts["GPU"]
    assert facts["lengths"] == "ISL 200 / OSL 20" and facts["load dimension"] == "concurrency"
    assert facts["seed"] == "0" and "simulated" in facts["engine"]


def test_same_workload_has_no_difference(runs):
    assert differences(_summary(runs["a"]), _summary(runs["same"])) == []


def test_different_lengths_and_seed_are_stated(runs, tmp_path):
    diff = {k: (a, b) for k, a, b in differences(_summary(runs["a"]), _summary(runs["longer"]))}
    assert diff == {"lengths": ("ISL 200 / OSL 20", "ISL 800 / OSL 20"), "seed": ("0", "3")}
    r = run_cli("report", str(runs["a"]), str(runs["longer"]), "--out", str(tmp_path / "cmp"))
    assert r.code == 0, r.stderr
    assert "A and B differ in lengths (ISL 200 / OSL 20 vs ISL 800 / OSL 20); seed (0 vs 3)" in r.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "The runs differ in lengths, seed." in md and "| lengths | ISL 200 / OSL 20 | ISL 800 / OSL 20 |" in md


def test_rate_against_concurrency_needs_force(runs, tmp_path):
    r = run_cli("report", str(runs["a"]), str(runs["rate"]), "--out", str(tmp_path / "no"))
    assert r.code == 2 and "concurrency sweep with a rate sweep" in r.stderr and "--force" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    r = run_cli("report", str(runs["a"]), str(runs["rate"]), "--out", str(tmp_path / "yes"), "--force", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"what": "load dimension", "a": "concurrency", "b": "rate"} in doc["differences"]
    assert "| load dimension | concurrency | rate |" in (tmp_path / "yes" / "compare.md").read_text()
