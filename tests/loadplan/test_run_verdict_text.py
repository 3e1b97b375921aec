"""What `kneecap run` says about a candidate it accepts: where each capacity region ends, and which
repetition each failure beyond it came from (a real run of the shipped quick example on the simulator)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

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
                outside = [c for c in summary["cells"] if (c["candidate"], c["class"], c["state"]) ==
                           (cand["name"], cls, state) and c["verdict"] != "pass"]
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
    for cell in failing:
        assert f"rep{cell['repetition']} ({'; '.join(cell['breaches'])})" in md
