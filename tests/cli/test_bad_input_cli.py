"""A new user's bad input, command by command: one line on stderr naming what is wrong and how to fix it, exit 2,
never `internal error` (kneecap.cli.main's last resort for an exception no layer turned into a KneecapError)."""

from __future__ import annotations

import pytest

from kneecap.cli import main


def _one_error_line(capsys, *args: str) -> str:
    code = main(list(args))
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "internal error" not in err, err
    return lines[0]


def test_calibrate_summary_that_is_a_folder(capsys, tmp_path):
    line = _one_error_line(
        capsys, "calibrate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--summary", str(tmp_path)
    )
    assert "is a folder" in line and str(tmp_path / "summary.json") in line


def test_recommend_list_flags_that_name_nothing(capsys):
    base = ("recommend", "--model", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1")
    line = _one_error_line(capsys, *base, "--slo", "ttft_p99_ms=2000", "--gpus", ",")
    assert line.startswith("error: --gpus ',' lists nothing")
    line = _one_error_line(capsys, *base, "--slo", "ttft_p99_ms=2000", "--gpus", "h100-sxm", "--kv-dtypes", " , ")
    assert line.startswith("error: --kv-dtypes ' , ' lists nothing")


_SERVER_PLAN = """name: one-server
classes:
  c1:
    input: {kind: fixed, value: 10}
    output: {kind: fixed, value: 8}
slo:
  c1: {ttft_p99_ms: 5000}
load: {dimension: concurrency, steps: [1], requests_per_cell: 2}
candidates:
  - name: s
    target: {kind: server, base_url: "URL", model: m}
"""


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_names_the_plan_field_of_a_candidate_server_it_cannot_use(capsys, tmp_path):
    """The hint names the plan's target.base_url, not preflight's --server / --kv-tokens, which run has not."""
    plan = tmp_path / "plan.yaml"
    for url, said in ((f"http://127.0.0.1:{_closed_port()}", "cannot reach"), ("127.0.0.1:8000", "not an http(s) URL")):
        plan.write_text(_SERVER_PLAN.replace("URL", url))
        line = _one_error_line(capsys, "run", "--quiet", "--no-report", str(plan), "--out", str(tmp_path / "out"))
        assert said in line and "target.base_url" in line, line
        assert "--kv-tokens" not in line and "--server" not in line, line


def test_run_resume_of_a_folder_that_does_not_exist_creates_nothing(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(_SERVER_PLAN.replace("URL", "http://127.0.0.1:8000"))
    missing = tmp_path / "no-such-run"
    line = _one_error_line(capsys, "run", "--quiet", str(plan), "--resume", str(missing))
    assert "does not exist" in line, line
    assert not missing.exists()


def test_serve_on_an_address_this_machine_lacks_is_told_to_fix_the_host(capsys):
    """192.0.2.1 is a documentation address (RFC 5737) no machine holds: --host is wrong, not --port."""
    line = _one_error_line(capsys, "serve", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--host", "192.0.2.1")
    assert line.startswith("error: cannot bind 192.0.2.1:8000") and "pass --host" in line and "--port" not in line


_SIM = ("simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "10", "--osl", "10", "--requests", "5")


@pytest.mark.parametrize(
    "flag,value,said",
    [
        ("--seed", str(2**70), "error: --seed must be at most 4294967295"),
        ("--turns", "0", "error: --turns must be a whole number >= 1, got 0"),
        ("--scheduler-delay-factor", "nan", "error: --scheduler-delay-factor must be a finite number >= 0"),
    ],
)
def test_simulate_refuses_before_running_what_it_could_not_write_or_mean(capsys, tmp_path, flag, value, said):
    """--seed past 64 bits used to run the whole sweep, then fail writing summary.json; --turns 0 and a NaN
    --scheduler-delay-factor were taken silently."""
    out = tmp_path / "out"
    line = _one_error_line(capsys, *_SIM, "--out", str(out), "--quiet", "--no-report", flag, value)
    assert line.startswith(said), line
    assert not out.exists()


def test_bench_turns_zero_is_refused_before_the_server_is_asked(capsys):
    line = _one_error_line(
        capsys, "bench", "--base-url", f"http://127.0.0.1:{_closed_port()}", "--isl", "10", "--osl", "8", "--turns", "0"
    )
    assert line.startswith("error: --turns must be a whole number >= 1"), line
