"""Run the real `kneecap` CLI as a subprocess, as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, timeout: float = 120, env: dict | None = None, cwd: str | None = None) -> CliResult:
    """Run `python -m kneecap ARGS` as a real subprocess (what a user runs)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "kneecap", *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)
