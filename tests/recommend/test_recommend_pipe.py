"""`kneecap recommend ... | cat`: into a pipe the table keeps every column whole (rich would squeeze it to 80
columns and cut cells to "fp8…")."""

from __future__ import annotations

from tests.clitools import run_cli


def test_piped_table_cuts_no_cell():
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "2",
        "--isl",
        "500",
        "--osl",
        "50",
        "--slo",
        "ttft_p99_ms=2000,tpot_p99_ms=50",
        "--gpus",
        "h100-sxm,a100-80",
        "--workers",
        "1",
    )
    assert r.code == 0, r.stderr
    assert "…" not in r.stdout
    header = next(line for line in r.stdout.splitlines() if "GPU" in line and "replicas" in line)
    for column in (
        "weights/KV",
        "seqs/tokens",
        "$/M out tok",
        "TTFT p99 ms",
        "TPOT p99 ms",
        "max/replica",
        "binding (margin)",
    ):
        assert column in header, (column, header)
