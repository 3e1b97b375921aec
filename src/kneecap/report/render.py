"""Write a report to disk: load the results, build the page, write report.md (+ its PNGs) and the
self-contained report.html. The thin I/O shell around the pure page builders; bench, simulate and
run call `render_report(folder)` at the end of their runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.results import write_atomic

FORMATS = ("md", "html")
DEFAULT_STEM = "report"
COMPARE_STEM = "compare"


def _formats(fmt: str | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(fmt, str):
        chosen = FORMATS if fmt == "both" else (fmt,)
    else:
        chosen = tuple(fmt)
    for f in chosen:
        if f not in FORMATS:
            raise KneecapError(f"unknown report format {f!r}", "use --format md, html or both")
    return chosen


def build_document(results):
    """The page for one loaded Results, by kind."""
    if results.kind in ("bench", "simulate"):
        from kneecap.report.sweep_page import sweep_document

        return sweep_document(results)
    if results.kind == "plan":
        from kneecap.report.plan_page import plan_document

        return plan_document(results)
    from kneecap.report.run_page import run_document

    return run_document(results)


def _target(out: str | os.PathLike | None, default_dir: Path, stem: str) -> tuple[Path, str]:
    """(directory, file stem): --out DIR, or --out FILE.md / FILE.html to choose the name too."""
    if out is None:
        return default_dir, stem
    path = Path(out)
    if path.suffix in (".md", ".html"):
        return path.parent if str(path.parent) else Path("."), path.stem
    return path, stem


def write_document(doc, directory: Path, stem: str, formats: tuple[str, ...]) -> list[Path]:
    """Write `stem.md` (+ `stem-plots/*.png`) and/or `stem.html` into directory; returns the paths."""
    from kneecap.report.html import to_html
    from kneecap.report.markdown import to_markdown

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KneecapError(f"cannot create report folder {directory}: {exc.strerror}", "pass a writable --out")
    written: list[Path] = []
    try:
        if "md" in formats:
            image_dir = f"{stem}-plots"
            if doc.figures:
                (directory / image_dir).mkdir(exist_ok=True)
                for fig in doc.figures:
                    write_atomic(directory / image_dir / f"{fig.name}.png", fig.png)
            if (directory / image_dir).is_dir():  # a plot an earlier render drew but this one did not
                current = {f"{fig.name}.png" for fig in doc.figures}
                for stale in (directory / image_dir).glob("*.png"):
                    if stale.name not in current:
                        stale.unlink()
            md_path = directory / f"{stem}.md"
            write_atomic(md_path, to_markdown(doc, image_dir).encode("utf-8"))
            written.append(md_path)
        if "html" in formats:
            html_path = directory / f"{stem}.html"
            write_atomic(html_path, to_html(doc).encode("utf-8"))
            written.append(html_path)
    except OSError as exc:
        raise KneecapError(f"cannot write the report into {directory}: {exc.strerror}", "pass a writable --out")
    return written


def render_report(
    folder: str | os.PathLike, out: str | os.PathLike | None = None, formats: str | tuple[str, ...] = FORMATS
) -> list[Path]:
    """Render one results folder (bench, simulate, run, or plan) as report.md and report.html.

    Writes into `folder` unless `out` names a directory (or a FILE.md / FILE.html). Returns the
    paths written. Raises KneecapError for a missing folder, an unknown kind, or an unwritable out.
    """
    from kneecap.report.load import load_results

    return render_results(load_results(folder), out, formats)


def render_results(
    results, out: str | os.PathLike | None = None, formats: str | tuple[str, ...] = FORMATS
) -> list[Path]:
    """render_report for Results already loaded (kneecap.report.load.load_results)."""
    directory, stem = _target(out, results.path, DEFAULT_STEM)
    return write_document(build_document(results), directory, stem, _formats(formats))


def render_comparison(
    folder_a: str | os.PathLike,
    folder_b: str | os.PathLike,
    out: str | os.PathLike | None = None,
    formats: str | tuple[str, ...] = FORMATS,
    force: bool = False,
) -> list[Path]:
    """Compare two bench/simulate sweeps level by level; writes compare.md / compare.html.

    Written into folder_b (the newer run, by convention) unless `out` says otherwise.
    """
    from kneecap.report.compare import compare_document
    from kneecap.report.load import load_results

    a, b = load_results(folder_a), load_results(folder_b)
    directory, stem = _target(out, b.path, COMPARE_STEM)
    return write_document(compare_document(a, b, force), directory, stem, _formats(formats))
