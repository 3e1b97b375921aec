"""The layers written down in docs/architecture.md are the ones import-linter enforces (.importlinter),
and the import graph keeps them (lint-imports, which the test command also runs before pytest)."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def documented_layers() -> list[set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- BEGIN LAYERS")[1].split("<!-- END LAYERS -->")[0]
    rows = [line for line in table.splitlines() if re.match(r"\| \d+ \|", line)]
    return [set(re.findall(r"`([\w.]+)`", row.split("|")[2] + "|" + "|".join(row.split("|")[3:-2]))) for row in rows]


def contract_layers() -> list[set[str]]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layers = config["importlinter:contract:layers"]["layers"].strip().splitlines()
    return [{name.strip().removeprefix("kneecap.") for name in line.split("|")} for line in layers]


def test_the_documented_layers_are_the_enforced_ones():
    assert documented_layers() == contract_layers()


def test_every_package_module_is_on_a_floor():
    placed = set().union(*contract_layers())
    top = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "src" / "kneecap").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert top <= placed, f"not on any floor of .importlinter: {sorted(top - placed)}"


def test_lint_imports_passes():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (it is in the test extra)")
    r = subprocess.run([exe, "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
