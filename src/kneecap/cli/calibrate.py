"""`kneecap calibrate`: a measured bench summary.json + plan flags -> fitted step-time factors (calib.json) and
predicted vs measured per level.

Thin: reads the summary, builds the SimDeployment as `kneecap simulate` does, calls kneecap.calibrate, writes the
calibration file ({"step_time": {...}, ...}: `kneecap simulate --step-params FILE` and
`kneecap serve --calibration FILE` read it) and prints the table.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kneecap.cli.app import app, stdout_console
from kneecap.cli.plan import (
    ENGINE_DEFAULTS,
    SIM_FLAGS,
    SIM_OPTIONS,
    EngineDefaultsOpt,
    MaxBatchedOpt,
    MaxSeqsOpt,
    deployment_flags,
)
from kneecap.errors import KneecapError


def _load(row: dict) -> str:
    return f"C={row['concurrency']}" if row["concurrency"] is not None else f"{row['rate']:g}/s"


def _table(doc: dict, title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for header in (
        "load",
        "ISL/OSL",
        "TTFT mean meas (ms)",
        "pred",
        "err %",
        "TPOT mean meas (ms)",
        "pred",
        "err %",
        "ITL p50 meas (ms)",
        "pred",
        "err %",
        "out tok/s meas",
        "pred",
        "err %",
    ):
        table.add_column(header, justify="right")

    def fmt(v, digits=1):
        return "—" if v is None else f"{v:,.{digits}f}"

    for row in doc["levels"]:
        cells = [_load(row), f"{row['isl']}/{row['osl']}"]
        for m in ("ttft_ms", "tpot_ms", "itl_ms", "output_tok_s"):
            cells += [fmt(row["measured"][m]), fmt(row["predicted"][m]), fmt(row["error_pct"][m], 1)]
        table.add_row(*cells)
    return table


@app.command("calibrate")
@deployment_flags(SIM_FLAGS, SIM_OPTIONS)
def calibrate_command(
    request=None,
    summary: str = typer.Option(..., "--summary", help="summary.json of a measured sweep (kneecap bench --out DIR)"),
    engine_defaults: EngineDefaultsOpt = ENGINE_DEFAULTS,
    max_num_seqs: MaxSeqsOpt = None,  # the measured server's, when it was not the engine's default
    max_num_batched_tokens: MaxBatchedOpt = None,
    isl: Optional[int] = typer.Option(None, "--isl", help="Input tokens per request (default: the level's mean)"),
    osl: Optional[int] = typer.Option(None, "--osl", help="Output tokens per request (default: the level's mean)"),
    fit: str = typer.Option("mfu,bw_efficiency,overhead_s", "--fit", help="Step-time factors to fit (comma list)"),
    start: Optional[str] = typer.Option(None, "--start", help="Starting factors: k=v list or a calibration file"),
    out: Optional[str] = typer.Option(None, "--out", help="Write the calibration here (default calib.json)"),
    json_out: bool = typer.Option(False, "--json", help="Print the calibration JSON on stdout, nothing else"),
) -> int:
    """Fit the simulator's efficiency factors to a measured sweep; show predicted vs measured per level."""
    import json
    from pathlib import Path

    from kneecap.calibrate import calibrate, levels_from_summary
    from kneecap.sim.setup import simulated_deployment
    from kneecap.sim.step_params import parse_step_params

    path = Path(summary)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise KneecapError(
            f"summary {summary} not found", "pass the summary.json that kneecap bench --out DIR wrote"
        ) from None
    except IsADirectoryError:
        raise KneecapError(
            f"--summary {summary} is a folder",
            f"pass the summary.json in it: --summary {path / 'summary.json'}",
        ) from None
    except OSError as exc:
        raise KneecapError(
            f"cannot read summary {summary}: {exc.strerror or exc}", "check --summary names a readable file"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KneecapError(
            f"summary {summary} is not JSON ({exc})", "pass a summary.json written by kneecap bench"
        ) from None
    levels = levels_from_summary(doc, isl=isl, osl=osl)
    target = simulated_deployment(
        request,
        defaults=engine_defaults,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        step_params=parse_step_params(start, "--start"),
    )
    names = tuple(n.strip() for n in fit.split(",") if n.strip())
    result = calibrate(target, levels, fit=names)
    calib = result.to_dict() | {"summary": str(path), "deployment": target.describe()}
    calib["deployment"].pop("step_time", None)
    out_path = Path(out or "calib.json")
    try:
        out_path.write_text(json.dumps(calib, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise KneecapError(f"cannot write {out_path}: {exc.strerror or exc}", "pass a writable --out path") from None
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if json_out:
        sys.stdout.write(json.dumps(calib, sort_keys=True) + "\n")
        return 0
    console = stdout_console(highlight=False)
    fitted = ", ".join(
        f"{n} {result.initial[n]:.4g} -> {getattr(result.params, n):.4g}"
        + (" (on its bound: not determined)" if n in result.at_bound else "")
        for n in result.fitted
    )
    console.print(
        _table(
            calib,
            f"kneecap calibrate — {target.model_name} on {target.deployment.num_gpus}x "
            f"{target.deployment.gpu.name}: predicted (fitted) vs measured",
        )
    )
    console.print(f"fitted: {fitted}", markup=False)
    console.print(
        f"rms log error: {result.initial_rms_log_error:.3f} before, {result.rms_log_error:.3f} after "
        f"({result.iterations} iterations, {result.evaluations} simulated replays of the sweep)",
        markup=False,
    )
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "output_tok_s": "out tok/s"}
    light = [
        f"{_load(row)} {names[m]} ({w:.2f})"
        for row in calib["levels"]
        for m, w in row.get("weight", {}).items()
        if w < 0.5
    ]
    if light:
        console.print(
            "weighed down in the fit (the simulated value jumps with tiny changes of the factors, so it "
            f"cannot steer them): {', '.join(light)}",
            markup=False,
        )
    console.print(
        f"calibration: {out_path} (use: kneecap simulate --step-params {out_path}; "
        f"kneecap serve --calibration {out_path})",
        markup=False,
    )
    return 0
