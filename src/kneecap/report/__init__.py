"""Reports: render a results folder (bench, simulate, run, plan) as markdown and one self-contained
HTML page with plots, and compare two sweeps. Layout: load (read files) -> *_page (build a Document,
pure) -> markdown / html (render) -> render (write files). matplotlib lives only in plots.

Entry points for other commands: `render_report(folder)` and `render_comparison(a, b)`.
"""

from __future__ import annotations


def render_report(folder, out=None, formats=("md", "html")):
    """See kneecap.report.render.render_report (imported lazily: matplotlib is heavy)."""
    from kneecap.report.render import render_report as _render

    return _render(folder, out, formats)


def render_comparison(folder_a, folder_b, out=None, formats=("md", "html")):
    """See kneecap.report.render.render_comparison."""
    from kneecap.report.render import render_comparison as _compare

    return _compare(folder_a, folder_b, out, formats)


def render_report_or_warn(folder) -> None:
    """What bench, simulate and run call at the end: render the folder's report; if that fails, say so in
    one stderr line and carry on — the measurements are already written and must never be lost to it."""
    import sys

    from kneecap.errors import KneecapError

    try:
        render_report(folder)
    except KneecapError as exc:
        print(f"warning: report not rendered: {exc.message}", file=sys.stderr)
