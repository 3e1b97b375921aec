"""`kneecap report DIR [DIR2]`: render a results folder as markdown + self-contained HTML, or compare two.

Thin: flags -> kneecap.report.render -> print the paths written (or one JSON document with --json).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from kneecap.cli.app import app
from kneecap.errors import KneecapError


@app.command("report")
def report(
    folders: List[Path] = typer.Argument(
        ...,
        metavar="DIR...",
        help="A results folder (bench, simulate, run), a plan.json, or two "
        "sweep folders A B to compare level by level.",
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help="Folder to write into (default: the results folder; "
        "for A B, folder B), or FILE.md / FILE.html to name it.",
    ),
    fmt: str = typer.Option("both", "--format", help="md, html or both."),
    as_json: bool = typer.Option(False, "--json", help="Print {kind, files} as one JSON document."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Compare A B even when one is a concurrency sweep and the "
        "other a rate sweep (plots only: no level matches).",
    ),
) -> int:
    """Render results as report.md + report.html (plots embedded), or compare two runs (compare.md/.html)."""
    import json

    from kneecap.report.load import load_results
    from kneecap.report.render import render_comparison, render_results

    if fmt not in ("md", "html", "both"):
        raise KneecapError(f"unknown --format {fmt!r}", "use --format md, html or both")
    if len(folders) > 2:
        raise KneecapError(
            f"kneecap report takes one folder, or two to compare; got {len(folders)}", "pass DIR, or A B"
        )
    differ: list = []
    if len(folders) == 2:
        from kneecap.report.compare import differences

        differ = differences(load_results(folders[0]).summary, load_results(folders[1]).summary)
        paths, kind = render_comparison(folders[0], folders[1], out, fmt, force), "compare"
    else:
        results = load_results(folders[0])
        kind, paths = results.kind, render_results(results, out, fmt)
    if as_json:
        doc = {"kind": kind, "files": [str(p) for p in paths]}
        if len(folders) == 2:
            doc["differences"] = [{"what": k, "a": a, "b": b} for k, a, b in differ]
        print(json.dumps(doc))
    else:
        if differ:
            print("note: A and B differ in " + "; ".join(f"{k} ({a} vs {b})" for k, a, b in differ), file=sys.stderr)
        for p in paths:
            print(p)
    return 0
