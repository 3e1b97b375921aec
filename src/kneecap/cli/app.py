"""The shared Typer application every command module registers on, and what its commands share to render."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

app = typer.Typer(
    name="kneecap",
    help="LLM serving capacity: plan the memory, preflight the sweep, bench or simulate it, report it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from kneecap import __version__

        print(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print kneecap's version and exit", is_eager=True, callback=_print_version
    ),
) -> None:
    """LLM serving capacity: plan the memory, preflight the sweep, bench or simulate it, report it."""


@app.command("version")
def version() -> None:
    """Print kneecap's version."""
    from kneecap import __version__

    print(__version__)


def results_folder(out: str | None, kind: str) -> Path:
    """--out, else ./kneecap-results/KIND-<UTC time>."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(out) if out else Path("kneecap-results") / f"{kind}-{stamp}"


EXPORT_HELP = (
    "vllm: also write each level as `vllm bench serve --save-result` JSON (DIR/vllm/level-N.json); "
    "br: as an llm-d Benchmark Report v0.2.1 (DIR/br/level-N.yaml)"
)  # bench and simulate --export


def stdout_console(width_not_a_tty: int = 200, **options):
    """A rich Console on stdout, `width_not_a_tty` characters wide into a file or pipe (rich would assume 80)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else width_not_a_tty, **options)
