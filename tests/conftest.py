"""Shared fixtures. Helpers live in tests/clitools.py (a unique module name: several test folders have
a conftest.py of their own, so `from conftest import ...` would pick whichever was imported first)."""

from __future__ import annotations

import pytest

from clitools import run_cli


@pytest.fixture
def cli():
    return run_cli
