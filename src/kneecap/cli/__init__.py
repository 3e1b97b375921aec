"""The `kneecap` command: flags -> dataclasses -> core call -> render.

Each command lives in its own module under kneecap.cli and registers itself on the shared
Typer app (kneecap.cli.app). Heavy imports (numpy, aiohttp, matplotlib, pydantic) stay inside
command bodies so `kneecap plan` starts fast. `main` turns every failure into one line on
stderr with a non-zero exit — never a traceback.
"""

from __future__ import annotations

import importlib
import sys

from kneecap.cli.app import app

# One module per command, each registering itself on the app.
COMMAND_MODULES = (
    "plan",
    "preflight",
    "bench",
    "simulate",
    "serve",
    "calibrate",
    "run",
    "report",
    "demo",
    "recommend",
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"kneecap.cli.{_name}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the process exit code."""
    try:  # recent typer vendors click as typer._click; older typer raises click's own exceptions
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover
        from click import exceptions as click

    import typer

    from kneecap.errors import KneecapError

    _NO_ARGS_IS_HELP = getattr(click, "NoArgsIsHelpError", None) or getattr(click, "NoArgsIsHelp")
    args = sys.argv[1:] if argv is None else argv
    try:
        result = app(args=args, prog_name="kneecap", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except KneecapError as exc:
        print(exc.one_line(), file=sys.stderr)
        code = exc.exit_code
    except _NO_ARGS_IS_HELP as exc:  # bare `kneecap`: show help, exit 0
        print(exc.ctx.get_help() if getattr(exc, "ctx", None) else "", file=sys.stderr)
        code = 0
    except click.UsageError as exc:
        hint = (
            f" — see `kneecap {exc.ctx.info_name} --help`"
            if exc.ctx and exc.ctx.info_name != "kneecap"
            else " — see `kneecap --help`"
        )
        print(" ".join(f"error: {exc.format_message()}{hint}".split()), file=sys.stderr)
        code = 2
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        code = 130
    except KeyboardInterrupt:
        print("error: interrupted — results written so far are kept", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # last resort: still one line, still no traceback
        print(
            " ".join(f"error: internal error {type(exc).__name__}: {exc} — please report it".split()), file=sys.stderr
        )
        code = 1
    sys.stdout.flush()
    return code


def run() -> None:  # pragma: no cover
    sys.exit(main())
