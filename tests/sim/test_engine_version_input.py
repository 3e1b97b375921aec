"""simulate's --engine-version: a release number or vLLM's V0, else one error quoting what the user typed."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.sim.config import check_release


@pytest.mark.parametrize("version", ["banana", "-3.1", "0.-1", "0.1_0", "+1.2", "0.11.x", ""])
def test_a_version_that_is_not_a_release_is_quoted_as_typed(version):
    with pytest.raises(KneecapError) as exc:
        check_release(version)
    assert exc.value.message == f"bad engine version {version!r}"


@pytest.mark.parametrize("version", [None, "0.11.0", "v0.17.1", "0.21.0rc2", "0.11.1.dev3", "0.5.3.post1", "V0", "1"])
def test_releases_pass(version):
    check_release(version)
