"""A new user's bad input, command by command: one line on stderr naming what is wrong and how to fix it, exit 2,
never `internal error` (kneecap.cli.main's last resort for an exception no layer turned into a KneecapError)."""

from __future__ import annotations

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
