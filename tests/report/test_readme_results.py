"""The README's measured client comparison quotes committed benchmark output: every figure in that section
appears in one of the bench/results files the section names, so a re-run that changes a figure shows here
until the README is brought along."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def section(start: str, end: str) -> str:
    text = (ROOT / "README.md").read_text()
    i = text.index(start)
    return text[i : text.index(end, i)]


def test_every_figure_of_the_client_comparison_is_in_the_results_it_cites():
    sec = section("## Is the client ever the bottleneck?", "The server is part of the measurement")
    cited = sorted(set(re.findall(r"bench/results/[\w.]+\.md", sec)))
    assert len(cited) >= 2, cited
    results = "".join((ROOT / f).read_text() for f in cited)
    missing = [n for n in sorted(set(NUMBER.findall(sec))) if n not in results]
    assert not missing, f"README figures not in {cited}: {missing}"
