"""Fixtures for the planner tests."""

from __future__ import annotations

import pytest
from plan_helpers import make_gqa_70b

from kneecap.model.spec import Model


@pytest.fixture(scope="session")
def gqa_70b() -> Model:
    return make_gqa_70b()
