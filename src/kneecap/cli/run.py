"""`kneecap run PLAN.yaml`: a load plan (classes x states x load steps x repetitions) against its candidates."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kneecap.cli.app import app, results_folder, stdout_console
from kneecap.errors import KneecapError


@app.command("run")
def run(
    plan_file: str = typer.Argument(..., help="Load-plan YAML (see examples/)"),
    out: Optional[str] = typer.Option(None, "--out", help="Results folder (default ./kneecap-results/run-<UTC time>)"),
    json_out: bool = typer.Option(False, "--json", help="Print summary.json on stdout, nothing else"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines"),
    no_report: bool = typer.Option(False, "--no-report", help="Do not render report.md/report.html at the end"),
    export: Optional[str] = typer.Option(
        None, "--export", help="br: also write each cell as an llm-d Benchmark Report v0.2.1 (DIR/br/cell-NNNN.yaml)"
    ),
    resume: Optional[str] = typer.Option(
        None, "--resume", help="Continue a killed run of this plan in its results folder"
    ),
    fail_on: Optional[str] = typer.Option(
        None, "--fail-on", help="Exit 1 on: errors, limit, slo, rejected (comma list)"
    ),
    cell: Optional[str] = typer.Option(
        None,
        "--cell",
        help="Run one cell again: CANDIDATE/CLASS/STATE (with --load and --repetition; the handoff's Reproduce line)",
    ),
    load: Optional[float] = typer.Option(None, "--load", help="With --cell: the load step (concurrency or rate)"),
    repetition: Optional[int] = typer.Option(None, "--repetition", help="With --cell: the repetition, counted from 0"),
) -> int:
    """Run a load plan: behaviour gate, then SLO gate, then cost; capacity region per class; handoff on failure.

    Exit codes: 0 done, whatever the verdicts; 1 a --fail-on condition held; 2 bad input or a candidate server
    that cannot be used; 3 a candidate server stopped answering mid-run; 4 a candidate server refused the API
    key mid-run (3 and 4 stop the run after that cell; the cells measured are kept; --resume runs it again);
    130 interrupted.
    """
    from pathlib import Path

    import orjson

    from kneecap.loadplan.execute import run_load_plan
    from kneecap.loadplan.render import render_verdict_table
    from kneecap.loadplan.schema import load_plan_file
    from kneecap.results import ResultsDir, current_argv

    if export not in (None, "br"):
        raise KneecapError(f"--export {export!r} is not a format run writes", "pass --export br")
    spec, base_dir = load_plan_file(plan_file)
    if spec.load.dimension == "rate" and spec.load.steps == "auto":
        raise KneecapError(
            f"{plan_file}: load.steps: auto works for concurrency only", "list the rates, e.g. steps: [1, 2, 4, 8]"
        )
    from kneecap.loadplan.execute import FAIL_ON, plan_digest
    from kneecap.loadplan.reproduce import select_cell

    only = select_cell(spec, cell, load, repetition)
    if only is not None and resume:
        raise KneecapError("--cell and --resume both given", "re-run one cell into a new --out folder")
    wanted = tuple(x.strip() for x in (fail_on or "").split(",") if x.strip())
    unknown = [x for x in wanted if x not in FAIL_ON]
    if unknown:
        raise KneecapError(
            f"--fail-on {','.join(unknown)} is not one of {', '.join(FAIL_ON)}", "pass e.g. --fail-on errors,rejected"
        )
    previous = None
    if resume:
        if out and Path(out) != Path(resume):
            raise KneecapError("--resume and --out name different folders", "pass only --resume DIR")
        folder = Path(resume)
        if not folder.is_dir():  # checked before ResultsDir, which would create it
            raise KneecapError(
                f"--resume folder {folder} does not exist", "pass the results folder of an earlier kneecap run"
            )
        results = ResultsDir(folder)
        if not results.summary_path.exists():
            raise KneecapError(
                f"nothing to resume in {folder}: no summary.json", "pass the folder of an earlier kneecap run"
            )
        previous = results.read_summary()
        if previous.get("kind") != "run" or previous.get("plan_sha256") != plan_digest(Path(plan_file)):
            raise KneecapError(
                f"{folder} was not written by this plan file (or was changed since)",
                "resume with the same plan file, or start a new --out folder",
            )
    else:
        folder = results_folder(out, "run")
        results = ResultsDir(folder)
    results.write_manifest(
        current_argv(), extra={"kind": "run", "plan": str(Path(plan_file).resolve().name), "seed": spec.seed}
    )
    say = None if (quiet or json_out) else (lambda line: print(line, file=sys.stderr, flush=True))
    summary = run_load_plan(spec, base_dir, Path(plan_file), results, progress=say, resume=previous, only=only)
    if export == "br":
        from kneecap.sweep.export import export_run_br

        export_run_br(results.path, summary, {c.name: c.target.model_dump() for c in spec.candidates})
    if not no_report:
        from kneecap.report import render_report_or_warn

        render_report_or_warn(results.path)
    if json_out:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_SORT_KEYS).decode() + "\n")
    elif not quiet:
        console = stdout_console(160)
        for table in render_verdict_table(summary):
            console.print(table)
        console.print(f"results: {results.path}")
    code, why = run_exit_code(summary, wanted)
    if why:  # one line saying why the exit code is not 0, even with --quiet / --json
        print(why, file=sys.stderr)
    return code


EXIT_SERVER_DEAD = 3  # as bench: a candidate server stopped answering; the cells measured are kept
EXIT_AUTH_REFUSED = 4  # as bench: a candidate server started refusing the API key; the cells measured are kept


def run_exit_code(summary: dict, wanted: tuple[str, ...]) -> tuple[int, str | None]:
    """3 when a candidate server stopped answering, 4 when it refused the key mid-run (the run stops at
    once either way), else 1 when a --fail-on condition holds, else 0; with the one line saying why."""
    from kneecap.loadplan.execute import fail_on_reason

    stopped = summary.get("stopped") or {}
    if stopped.get("reason") in ("server_dead", "auth_refused"):
        fix = (
            "restart it, then --resume the folder"
            if stopped["reason"] == "server_dead"
            else "set the key the server expects (the target's api_key_env), then --resume the folder"
        )
        return (
            (EXIT_SERVER_DEAD if stopped["reason"] == "server_dead" else EXIT_AUTH_REFUSED),
            f"run: candidate {stopped.get('candidate')}: {stopped.get('detail')}; the cells measured so far "
            f"are kept ({fix})",
        )
    why = fail_on_reason(summary, wanted)
    return (1, why) if why else (0, None)
