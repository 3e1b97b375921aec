"""A load plan's ramps run on the one level runner through its door (run_sweep): each ramp is one Sweep whose levels
are its cells, the cell verdict the sweep's stop rule; a resumed run hands the runner only the cells the earlier run
did not finish."""

from __future__ import annotations

import json

import pytest

import kneecap.loadplan.execute as execute
import kneecap.sweep.door as door
from kneecap.loadplan.schema import load_plan_file
from kneecap.metrics.stop import REASONS
from kneecap.results import ResultsDir, cell_records_name
from two_candidates import variant

PLAN = variant(load={"steps": [1, 8, 64], "requests_per_cell": 24}, repetitions=1)  # a missed budget stops a ramp


@pytest.fixture
def sweeps(monkeypatch):
    """Every Sweep a run builds: the cell indices it was given and how it ended."""
    seen = []

    class Spy(door.Sweep):
        def run(self, done=frozenset()):
            out = super().run(done)
            seen.append(
                {
                    "levels": [lv.index for lv in self.sweep_levels],
                    "ran": [lv["level"] for lv in self.state.levels],
                    "stopped": self.state.stopped,
                    "status": out["status"],
                }
            )
            return out

    monkeypatch.setattr(door, "Sweep", Spy)  # every sweep enters by the one door (kneecap.sweep.door.run_sweep)
    return seen


def run(tmp_path, name: str, resume=None):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    spec, base = load_plan_file(str(plan))
    results = ResultsDir(tmp_path / name)
    return execute.run_load_plan(spec, base, plan, results, resume=resume), results


def test_each_ramp_is_one_sweep_stopped_by_the_cell_verdict(tmp_path, sweeps):
    summary, _ = run(tmp_path, "out")
    cells = summary["cells"]
    assert [s["levels"] for s in sweeps] == [
        [0, 1, 2],
        [3, 4, 5],
    ]  # one sweep per ramp (roomy, starved), cells as levels
    roomy, starved = sweeps
    assert roomy["ran"] == [0, 1, 2] and roomy["stopped"] is None and roomy["status"] == "complete"
    # max_num_seqs 1: TTFT at C=8 misses its budget by far; the runner stopped the ramp after that cell, never
    # running C=64
    stop_cell = cells[4]
    assert stop_cell["verdict"] == "slo_breach" and starved["ran"] == [3, 4]
    assert starved["stopped"] == {"at": 8, "reason": "slo_breach", "detail": "; ".join(stop_cell["breaches"])}
    assert cells[5]["verdict"] == "not_run" and cells[5]["reason"] == "ramp stopped at concurrency 8"
    assert [c["metrics"]["level"] for c in cells if c.get("metrics")] == [0, 1, 2, 3, 4]


def test_a_resumed_run_gives_the_runner_only_the_unfinished_cells(tmp_path, sweeps):
    whole, _ = run(tmp_path, "whole")
    sweeps.clear()
    # the same run killed during cell 1: cell 0 finished, cell 1 wrote two records
    cut_dir = tmp_path / "cut"
    earlier = dict(whole, status="running", cells=whole["cells"][:1])
    (cut_dir / "records").mkdir(parents=True)
    lines = (tmp_path / "whole" / cell_records_name(1)).read_text().splitlines()[:2]
    (cut_dir / cell_records_name(1)).write_text("\n".join(lines) + "\n")
    resumed, _ = run(tmp_path, "cut", resume=json.loads(json.dumps(earlier)))
    assert [s["levels"] for s in sweeps] == [[1, 2], [3, 4, 5]]  # cell 0 kept, not run again
    assert resumed["cells"][0] == whole["cells"][0]
    assert (cut_dir / cell_records_name(1, "discarded")).read_text().splitlines() == lines  # the cut attempt set aside
    assert [(c["index"], c["verdict"], c.get("metrics")) for c in resumed["cells"]] == [
        (c["index"], c["verdict"], c.get("metrics")) for c in whole["cells"]
    ]


def test_a_cell_past_a_declared_limit_stops_its_ramp_with_the_limit_reason(tmp_path, sweeps):
    plan = tmp_path / "plan.yaml"  # any TTFT spread is an unstable tail: the first cell of each ramp crosses the limit
    plan.write_text(
        variant(
            load={"steps": [1, 8, 64], "requests_per_cell": 24}, repetitions=1, stop={"unstable_tail_ratio": 1.0001}
        )
    )
    spec, base = load_plan_file(str(plan))
    cells = execute.run_load_plan(spec, base, plan, ResultsDir(tmp_path / "out"))["cells"]
    assert [c["verdict"] for c in cells] == ["limit", "not_run", "not_run"] * 2
    # the ramp's stop is a stop record of the one set of stop reasons (kneecap.metrics.stop), as bench's are
    assert [s["stopped"] for s in sweeps] == [{"at": 1, "reason": "limit", "detail": cells[i]["limit"]} for i in (0, 3)]
    assert all(s["stopped"]["reason"] in REASONS for s in sweeps)


def test_a_simulated_rate_cell_too_short_for_steady_state_is_run_longer(tmp_path):
    """24 requests of 1,000 output tokens at 8 req/s end before the cell shows its steady state: the simulated candidate computes it
    again, longer, and judges that; no passing cell is transient."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        variant(
            load={"dimension": "rate", "steps": [2, 8], "requests_per_cell": 24},
            repetitions=1,
            classes={
                "chat": {
                    "input": {"kind": "uniform", "low": 200, "high": 600},
                    "output": {"kind": "fixed", "value": 1000},
                }
            },
        )
    )
    spec, base = load_plan_file(str(plan))
    summary = execute.run_load_plan(spec, base, plan, ResultsDir(tmp_path / "out"))
    ran = [c for c in summary["cells"] if c.get("metrics")]
    assert ran
    for c in ran:
        st = c["metrics"]["stability"]
        assert st["verdict"] != "transient" or c["metrics"]["requests"] >= 3200, (c["name"] if "name" in c else c, st)
        assert c["verdict"] != "pass" or st["verdict"] == "stable"
    assert any(c["metrics"]["requests"] > 24 for c in ran)  # at least one cell was extended
