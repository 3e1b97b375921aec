"""Plan-file validation: every error names the file, the line and the field."""

from __future__ import annotations

import textwrap

import pytest

from kneecap.errors import KneecapError
from kneecap.loadplan.schema import load_plan_file

GOOD = """\
name: demo
seed: 3
classes:
  short-message:
    input: {kind: lognormal, mean: 300, std: 120, max: 2000}
    output: 200
    weight: 3
  long-thread:
    input: {kind: uniform, low: 4000, high: 8000}
    output: {kind: fixed, value: 400}
slo:
  short-message: {ttft_p99_ms: 500, itl_p99_ms: 60}
load:
  dimension: concurrency
  steps: [1, 2, 4]
  requests_per_cell: 20
candidates:
  - name: small
    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, max_num_seqs: 16}
"""


def write(tmp_path, text):
    p = tmp_path / "plan.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_server_keepalive_is_auto_unless_set(tmp_path):
    server = "    target: {kind: server, base_url: 'http://127.0.0.1:8000'}\n"
    simulator = "    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, max_num_seqs: 16}\n"
    spec, _ = load_plan_file(write(tmp_path, GOOD.replace(simulator, server)))
    assert spec.candidates[0].target.keepalive == "auto"
    spec, _ = load_plan_file(write(tmp_path, GOOD.replace(simulator, server.replace("}", ", keepalive: false}"))))
    assert spec.candidates[0].target.keepalive is False


def test_good_plan_loads(tmp_path):
    spec, base = load_plan_file(write(tmp_path, GOOD))
    assert spec.name == "demo"
    assert spec.classes["short-message"].output.value == 200  # shorthand int -> fixed
    assert spec.candidates[0].target.kind == "simulator"
    assert spec.load.steps == [1, 2, 4]


@pytest.mark.parametrize(
    "old,new,line,field",
    [
        ("    weight: 3\n", "    wieght: 3\n", 7, "classes.short-message.wieght"),  # typo -> unknown field
        ("  steps: [1, 2, 4]\n", "  steps: [1, -2, 4]\n", 15, "load.steps"),
        (
            "  short-message: {ttft_p99_ms: 500, itl_p99_ms: 60}\n",
            "  short-mesage: {ttft_p99_ms: 500}\n",
            None,
            "(top level)",
        ),
        (
            "    input: {kind: uniform, low: 4000, high: 8000}\n",
            "    input: {kind: uniform, low: 4000}\n",
            9,
            "classes.long-thread.input",
        ),
        (
            "    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, max_num_seqs: 16}\n",
            "    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, max_num_seqs: 0}\n",
            19,
            "candidates[0].target.max_num_seqs",
        ),
        (
            "    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, max_num_seqs: 16}\n",
            "    target: {kind: server, base_url: 'http://127.0.0.1:8000', keepalive: sometimes}\n",
            19,
            "candidates[0].target.keepalive",
        ),
    ],
)
def test_errors_name_file_line_field(tmp_path, old, new, line, field):
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(KneecapError) as exc:
        load_plan_file(p)
    msg = exc.value.one_line()
    assert str(p) in msg
    assert field in msg
    if line is not None:
        assert f"{p}:{line}:" in msg


def test_yaml_syntax_error_names_line(tmp_path):
    p = write(tmp_path, GOOD.replace("  steps: [1, 2, 4]\n", "  steps: [1, 2, 4\n"))
    with pytest.raises(KneecapError) as exc:
        load_plan_file(p)
    assert "YAML syntax error" in exc.value.message and f"{p}:" in exc.value.message


def test_missing_file(tmp_path):
    with pytest.raises(KneecapError) as exc:
        load_plan_file(tmp_path / "nope.yaml")
    assert "cannot read load plan" in exc.value.message


def test_empirical_lengths_from_file(tmp_path):
    (tmp_path / "lens.txt").write_text("10\n20\n30\n")
    p = write(tmp_path, GOOD.replace("    output: 200\n", "    output: {kind: empirical, file: lens.txt}\n"))
    spec, base = load_plan_file(p)
    dist = spec.classes["short-message"].output.to_dist(base)
    assert dist.values == (10, 20, 30)


def test_a_class_named_server_keeps_its_name_in_errors(tmp_path):
    p = write(
        tmp_path,
        GOOD.replace("  long-thread:\n", "  server:\n").replace(
            "    input: {kind: uniform, low: 4000, high: 8000}\n", "    input: {kind: uniform, low: 4000}\n"
        ),
    )
    with pytest.raises(KneecapError) as exc:
        load_plan_file(p)
    assert "classes.server.input" in exc.value.message


def test_simulator_target_takes_expert_parallelism_and_dp_attention(tmp_path):
    """ep and dp_attention on a simulator target reach the one deployment builder (as kneecap plan --ep /
    --dp-attention); the defaults are off; a bad value names its line and field; a dense model with --ep is refused."""
    from kneecap.loadplan.targets import make_candidate

    plan = GOOD.replace(
        "target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, max_num_seqs: 16}",
        "target: {kind: simulator, model: deepseek-v3, gpu: h200, tp: 8, ep: 8, dp_attention: true, "
        "weight_dtype: fp8, max_num_seqs: 64}",
    )
    spec, _ = load_plan_file(write(tmp_path, plan))
    t = spec.candidates[0].target
    assert (t.ep, t.dp_attention) == (8, True)
    d = make_candidate(t).plan.deployment
    assert (d.ep, d.dp_attention, d.attention_dp) == (8, True, 8)
    plain, _ = load_plan_file(write(tmp_path, GOOD))
    assert (plain.candidates[0].target.ep, plain.candidates[0].target.dp_attention) == (1, False)
    with pytest.raises(KneecapError) as info:
        load_plan_file(write(tmp_path, plan.replace("ep: 8,", "ep: 0,")))
    assert ":19:" in info.value.one_line() and "candidates[0].target.ep" in info.value.one_line()
    dense = GOOD.replace("gpu: h100-sxm,", "gpu: h100-sxm, tp: 2, ep: 2,")
    spec, _ = load_plan_file(write(tmp_path, dense))
    with pytest.raises(KneecapError) as info:
        make_candidate(spec.candidates[0].target)
    assert "mixture-of-experts" in info.value.one_line()


def test_a_union_field_of_the_wrong_type_names_the_plan_key_not_the_union_branch(tmp_path):
    p = write(tmp_path, GOOD.replace("  steps: [1, 2, 4]\n", "  steps: fast\n"))
    with pytest.raises(KneecapError) as exc:
        load_plan_file(p)
    line = exc.value.one_line()
    assert f"{p}:15: load.steps: expected a list or 'auto', got the string 'fast'" in line, line
    assert "list[float]" not in line and "more" not in line
