"""Every data file the package reads at run time is named by pyproject.toml's package-data, so that a wheel (a
non-editable install) carries it: a kernel table left out would silently price steps by the fallback rule."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "kneecap"


def test_every_data_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["kneecap"]
    shipped = {path for pattern in patterns for path in PACKAGE.glob(pattern)}
    data_files = {path for path in (PACKAGE / "data").rglob("*") if path.is_file()}
    assert data_files, "no data files found under src/kneecap/data"
    missing = sorted(str(path.relative_to(PACKAGE)) for path in data_files - shipped)
    assert not missing, f"data files a wheel would not carry (add them to package-data): {missing}"
