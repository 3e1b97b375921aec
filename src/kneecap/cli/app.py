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


def _print_version(value: bool) -> None:
    if value:
        from kneecap import __version__

        print(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print kneecap's version and exit", is_eager=True,
                                 callback=_print_version),
) -> None:
    """LLM serving capacity: plan the memory, preflight the sweep, bench or simulate it, report it."""


@app.command("version")
def version() -> None:
    """Print kneecap's version."""
    from kneecap import __version__

    print(__version__)
