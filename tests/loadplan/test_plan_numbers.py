"""Numbers a plan cannot mean: YAML's .inf/.nan anywhere, a seed below 0 (an internal NumPy error once) or past
2**32 - 1 (the whole plan ran, then summary.json could not be written) are refused when the plan loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.loadplan.schema import load_plan_file

QUICK = Path(__file__).resolve().parents[2] / "examples" / "quick.yaml"


@pytest.mark.parametrize(
    "old,new,field,said",
    [
        ("gpu_hour_usd: 2.5", "gpu_hour_usd: .inf", "candidates[0].cost.gpu_hour_usd", "finite number"),
        ("weight: 3", "weight: .nan", "classes.short-message.weight", "finite number"),
        ("seed: 1", "seed: -1", "seed", "greater than or equal to 0"),
        ("seed: 1", f"seed: {2**70}", "seed", "less than or equal to 4294967295"),
    ],
)
def test_numbers_a_plan_cannot_mean_are_refused_on_load(tmp_path, old, new, field, said):
    plan = tmp_path / "plan.yaml"
    plan.write_text(QUICK.read_text().replace(old, new))
    with pytest.raises(KneecapError) as exc:
        load_plan_file(plan)
    assert f": {field}: " in exc.value.message and said in exc.value.message, exc.value.message


def test_the_example_still_loads():
    spec, _ = load_plan_file(QUICK)
    assert spec.seed == 1
