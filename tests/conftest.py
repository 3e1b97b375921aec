"""Shared fixtures. Helpers live in tests/clitools.py (a unique module name: several test folders have
a conftest.py of their own, so `from conftest import ...` would pick whichever was imported first)."""

from __future__ import annotations

import pytest

from clitools import CliResult, run_cli  # noqa: F401  (re-exported for older imports)


@pytest.fixture
def cli():
    return run_cli
