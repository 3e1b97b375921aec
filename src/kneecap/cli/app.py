"""The shared Typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="kneecap",
    help="LLM serving capacity: plan the memory, preflight the sweep, bench or simulate it, report it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """LLM serving capacity: plan the memory, preflight the sweep, bench or simulate it, report it."""


@app.command("version")
def version() -> None:
    """Print kneecap's version."""
    from kneecap import __version__

    print(__version__)
