"""A load plan's simulator target speculates as `kneecap simulate --spec-*` does: the same three settings (all or
none), the cell records the drafts and acceptance, and single-stream decode is faster with them."""

from __future__ import annotations

import json
import textwrap

import pytest

PLAN = """
name: spec
seed: 3
classes:
  chat:
    input: {kind: fixed, value: 1000}
    output: {kind: fixed, value: 200}
slo:
  chat: {ttft_p99_ms: 5000, itl_p99_ms: 200, error_rate: 0.01}
states: [warm]
load: {dimension: concurrency, steps: [1], requests_per_cell: 8}
repetitions: 1
candidates:
  - name: plain
    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm}
  - name: eagle
    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, %s}
"""


def _run(cli, tmp_path, spec: str):
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(PLAN % spec))
    return cli("run", str(plan), "--out", str(tmp_path / "out"), "--json", "--no-report")


def test_a_speculating_simulator_target_decodes_faster_and_records_its_acceptance(cli, tmp_path):
    r = _run(cli, tmp_path, "spec_method: eagle, spec_tokens: 3, spec_acceptance: 0.7")
    assert r.code == 0, r.stderr
    cells = {c["candidate"]: c for c in json.loads(r.stdout)["cells"]}
    plain, eagle = cells["plain"]["observed"], cells["eagle"]["observed"]
    assert plain["spec"] is None
    spec = eagle["spec"]
    assert spec["draft_tokens"] > 0 and 0.5 < spec["acceptance_rate"] < 0.9, spec
    tpot = {name: cells[name]["metrics"]["tpot_ms"]["p50"] for name in cells}
    assert tpot["plain"] >= 1.5 * tpot["eagle"], tpot


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("spec_method: eagle, spec_tokens: 3", "spec_method, spec_tokens and spec_acceptance together"),
        ("spec_method: medusa, spec_tokens: 3, spec_acceptance: 0.7", "spec_method"),
        ("spec_method: eagle, spec_tokens: 3, spec_acceptance: nofile.txt", "cannot read"),
    ],
)
def test_a_partial_or_wrong_spec_setting_is_one_line(cli, tmp_path, spec, needle):
    r = _run(cli, tmp_path, spec)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code != 0 and len(lines) == 1 and needle in lines[0], r.stderr


def test_a_file_of_accepted_lengths_is_read_beside_the_plan(cli, tmp_path):
    (tmp_path / "lengths.txt").write_text("4\n3\n4\n2\n")  # tokens kept per verify step (K + 1 = 4 at most)
    r = _run(cli, tmp_path, "spec_method: mtp, spec_tokens: 3, spec_acceptance: lengths.txt")
    assert r.code == 0, r.stderr
    eagle = {c["candidate"]: c for c in json.loads(r.stdout)["cells"]}["eagle"]["observed"]["spec"]
    assert eagle["mean_accepted_length"] == pytest.approx(3.25, abs=0.1)


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("spec_method: eagle, spec_tokens: 3, spec_acceptance: 1.5", "spec_acceptance rates must be in [0, 1]"),
        ("spec_method: eagle, spec_tokens: 3, spec_acceptance: [0.8, 0.6]", "spec_acceptance gives 2 rates for 3"),
        ("spec_method: eagle, spec_tokens: 3, spec_acceptance: '0.5,x'", "spec_acceptance '0.5,x' is neither"),
        ("spec_method: eagle, spec_tokens: 3, spec_acceptance: words.txt", "spec_acceptance file words.txt must"),
    ],
)
def test_a_bad_acceptance_in_a_plan_names_the_plan_key_and_its_line(tmp_path, spec, needle):
    from kneecap.errors import KneecapError
    from kneecap.loadplan.schema import load_plan_file

    (tmp_path / "words.txt").write_text("three\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(PLAN % spec))
    with pytest.raises(KneecapError) as info:
        load_plan_file(plan)  # refused on load, before any cell runs
    line = info.value.one_line()
    assert f"{plan}:17: candidates[1].target.spec_acceptance: {needle}" in line, line
    assert "--spec" not in line, line
