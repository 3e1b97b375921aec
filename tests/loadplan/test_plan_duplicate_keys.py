"""A key given twice in a YAML plan or list file is an error naming it and its line: PyYAML alone keeps the last
one without a word, so a pasted line would change the plan silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.list_file import read_list_file
from kneecap.loadplan.schema import load_plan_file

QUICK = Path(__file__).resolve().parents[2] / "examples" / "quick.yaml"


def test_a_plan_key_given_twice_is_named_with_its_line(tmp_path):
    text = QUICK.read_text()
    plan = tmp_path / "plan.yaml"
    plan.write_text(text.replace("repetitions: 2", "repetitions: 2\nrepetitions: 3"))
    line = text[: text.index("repetitions: 2")].count("\n") + 2  # the second one
    with pytest.raises(KneecapError) as exc:
        load_plan_file(plan)
    assert exc.value.message == f"{plan}:{line}: 'repetitions' is given twice in one mapping"


def test_a_nested_key_given_twice_is_found_and_the_example_loads(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(QUICK.read_text().replace("weight: 3", "weight: 3\n    weight: 1"))
    with pytest.raises(KneecapError, match="'weight' is given twice"):
        load_plan_file(plan)
    load_plan_file(QUICK)  # every key once: loads


def test_a_list_file_key_given_twice_is_named(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("- {preset: llama-3.1-8b, gpu: h100-sxm, gpu: h200}\n")
    with pytest.raises(KneecapError, match=r"grid.yaml:1: 'gpu' is given twice"):
        read_list_file(grid, "--grid", None, "configurations", "fix it", mappings=True)
    grid.write_text("- {preset: llama-3.1-8b, gpu: h100-sxm}\n- {preset: llama-3.1-8b, gpu: h200}\n")
    assert len(read_list_file(grid, "--grid", None, "configurations", "fix it", mappings=True)) == 2
