"""What `kneecap run` says about a candidate it accepts: where each capacity region ends, and which
repetition each failure beyond it came from (a real run of the shipped quick example on the simulator)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from two_candidates import variant

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    from clitools import run_cli

    out = tmp_path_factory.mktemp("quick") / "out"
    r = run_cli("run", str(ROOT / "examples" / "quick.yaml"), "--out", str(out), "--no-report", timeout=300)
    assert r.code == 0, r.stderr
    return out, json.loads((out / "summary.json").read_text()), " ".join(r.stdout.split())


def test_an_accepted_verdict_says_where_each_region_ends_and_names_the_failing_repetitions(quick_run):
    _, summary, stdout = quick_run
    accepted = [c for c in summary["candidates"] if c["verdict"] == "accepted"]
    assert accepted, "the quick example's candidate is accepted"
    checked = 0
    for cand in accepted:
        reason = cand["reason"]
        assert "meets behaviour and every SLO budget in every repetition up to its capacity" in reason
        for cls, by_state in summary["capacity"][cand["name"]].items():
            for state, info in by_state.items():
                assert f"{cls}/{state}: capacity {info['dimension']} {info['capacity']:g}" in reason
                outside = [
                    c
                    for c in summary["cells"]
                    if (c["candidate"], c["class"], c["state"]) == (cand["name"], cls, state) and c["verdict"] != "pass"
                ]
                first = min(c["load"][info["dimension"]] for c in outside)
                for cell in (c for c in outside if c["load"][info["dimension"]] == first):
                    assert f"rep{cell['repetition']} ({'; '.join(cell['breaches'])})" in reason
                    checked += 1
    assert checked, "the quick example has failing cells above its capacity"
    assert "where the region ends" in stdout and "failed in rep" in stdout


def test_the_run_report_names_the_repetition_of_each_failure(quick_run):
    from kneecap.report.load import load_results
    from kneecap.report.markdown import to_markdown
    from kneecap.report.render import build_document

    folder, summary, _ = quick_run
    md = html.unescape(to_markdown(build_document(load_results(folder))))  # markdown escapes '>' in table cells
    failing = [c for c in summary["cells"] if c["verdict"] not in ("pass", "not_run")]
    assert failing
    for cell in failing:  # a cell past a declared limit names the limit first, then any budgets it missed
        reasons = ([cell["limit"]] if cell.get("limit") else []) + cell["breaches"]
        assert f"rep{cell['repetition']} ({'; '.join(reasons)})" in md


# the shared two-candidate plan, smaller: fewer requests per cell and a lower top step
TWO_CANDIDATES = variant(load={"steps": [1, 8, 32], "requests_per_cell": 32})


def test_the_handoff_reproduce_line_runs_the_failing_cell_again_with_the_same_numbers(tmp_path):
    """The handoff's Reproduce line is a command: run in the handoff folder it re-runs that one cell, at its
    place in the run order (so the same seed), and the simulator gives the same numbers."""
    import shlex

    from clitools import run_cli

    plan = tmp_path / "plan.yaml"
    plan.write_text(TWO_CANDIDATES)
    r = run_cli("run", str(plan), "--out", str(tmp_path / "full"), "--json", "--no-report", timeout=300)
    assert r.code == 0, r.stderr
    full = json.loads(r.stdout)
    handoff = json.loads((tmp_path / "full" / "handoff" / "handoff.json").read_text())
    failing = handoff["failing_cell"]
    argv = shlex.split(handoff["reproduce"])
    assert argv[:3] == ["kneecap", "run", "plan.yaml"] and "--cell" in argv
    readme = (tmp_path / "full" / "handoff" / "README.md").read_text()
    assert f"`{handoff['reproduce']}`" in readme
    # a cell of the second candidate too: its index (and seed) counts the first candidate's cells
    starved = next(
        c
        for c in full["cells"]
        if c["candidate"] == "starved"
        and c["repetition"] == 1
        and c["verdict"] != "not_run"
        and c["load"]["concurrency"] == 8
    )
    second = ["kneecap", "run", "plan.yaml", "--cell", "starved/chat/warm", "--load", "8", "--repetition", "1"]
    for command, original in ((argv, failing), (second, starved)):
        out = tmp_path / f"again-{original['candidate']}"
        again = run_cli(
            *command[1:],
            "--out",
            str(out),
            "--json",
            "--no-report",
            cwd=str(tmp_path / "full" / "handoff"),
            timeout=300,
        )
        assert again.code == 0, again.stderr
        doc = json.loads(again.stdout)
        (cell,) = doc["cells"]
        before = next(c for c in full["cells"] if c["index"] == cell["index"])
        assert {k: before[k] for k in ("candidate", "class", "state", "load", "repetition")} == {
            k: original[k] for k in ("candidate", "class", "state", "load", "repetition")
        }
        assert (cell["verdict"], cell["breaches"], cell["metrics"]["ttft_ms"], cell["metrics"]["output_tok_s"]) == (
            before["verdict"],
            before["breaches"],
            before["metrics"]["ttft_ms"],
            before["metrics"]["output_tok_s"],
        )
        assert doc["selected_cell"] and doc["candidates"][0]["verdict"] == "not judged"


def test_a_bad_cell_selection_is_one_line(tmp_path):
    from clitools import run_cli

    plan = tmp_path / "plan.yaml"
    plan.write_text(TWO_CANDIDATES)
    for args, needle in (
        (["--cell", "nobody/chat/warm", "--load", "8", "--repetition", "0"], "candidate 'nobody'"),
        (["--cell", "roomy/chat/warm", "--load", "7", "--repetition", "0"], "--load 7 is not one"),
        (["--cell", "roomy/chat/warm", "--load", "8", "--repetition", "2"], "--repetition 2 is outside"),
        (["--cell", "roomy/chat/warm"], "--cell needs --load and --repetition"),
        (["--load", "8"], "together with --cell"),
    ):
        r = run_cli("run", str(plan), "--out", str(tmp_path / "x"), *args)
        assert r.code == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
