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


def test_every_decimal_figure_of_the_simulator_speed_paragraph_is_in_the_committed_run():
    """docs/simulator.md's Speed section quotes bench/results/sim_speed.md (times, sizes, loads)."""
    text = (ROOT / "docs" / "simulator.md").read_text()
    i = text.index("Its committed run (")
    para = text[i : text.index("Vidur (", i)]
    results = (ROOT / "bench" / "results" / "sim_speed.md").read_text()
    figures = [n for n in set(NUMBER.findall(para)) if "." in n]
    assert len(figures) >= 10, figures
    missing = sorted(n for n in figures if n not in results)
    assert not missing, f"docs/simulator.md figures not in bench/results/sim_speed.md: {missing}"
