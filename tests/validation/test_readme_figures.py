"""The README's paragraph on the simulator's accuracy quotes docs/validation.md's generated block (which
tests/validation/test_validation.py holds to what `python -m kneecap.validation` computes): every figure it
states is that block's figure, so the README cannot keep an older run's numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (the README's words, the generated table's group and value, the column: abs or signed)
QUOTED = [
    ("MoE models", "MoE", "yes", "abs"),
    ("MLA models", "MLA", "yes", "abs"),
    ("AMD MI300X", "GPU vendor", "AMD", "abs"),
    ("SGLang is at", "engine", "sglang", "abs"),
    ("vLLM", "engine", "vllm", "abs"),
    ("NIM", "engine", "nim", "abs"),
    ("TensorRT-LLM", "engine", "tensorrt-llm", "abs"),
    ("FP8", "FP8", "yes", "abs"),
    ("FP4", "FP4", "yes", "abs"),
    ("MLA models", "MLA", "yes", "signed"),
    ("MoE", "MoE", "yes", "signed"),
    ("single-stream runs", "concurrency band", "<= 1", "signed"),
    ("latency metrics", "metric", "latency", "signed"),
]


def generated_block() -> str:
    text = (ROOT / "docs" / "validation.md").read_text()
    return text[text.index("<!-- BEGIN GENERATED TABLE") : text.index("<!-- END GENERATED TABLE")]


def group_rows(block: str) -> dict[tuple[str, str], dict[str, str]]:
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[3].endswith("%"):
            rows[(cells[0], cells[1])] = {"abs": cells[3], "signed": cells[4].split()[0]}
    return rows


def readme_paragraph() -> str:
    text = " ".join((ROOT / "README.md").read_text().split())
    start = text.index("`docs/validation.md` holds the simulator against")
    return text[start : text.index("The per-group table", start)]


def test_the_readme_states_the_generated_totals():
    block, para = " ".join(generated_block().split()), readme_paragraph()
    points, sources = re.search(r"(\d+) published points from (\d+) sources; (\d+) simulated", block).group(1, 2, 3)[:2]
    simulated = re.search(r"; (\d+) simulated", block).group(1)
    median = re.search(r"Median absolute error \*\*([\d.]+%)\*\*", block).group(1)
    within = re.search(r"(\d+) of (\d+) within 25%", block).group(0)
    assert f"against {points} published measurements from {sources} sources ({simulated} of them simulated)" in para
    assert f"median absolute error {median} overall ({within})" in para


@pytest.mark.parametrize("words, group, value, column", QUOTED, ids=[f"{q[0]}-{q[3]}" for q in QUOTED])
def test_each_group_figure_in_the_readme_is_the_generated_one(words, group, value, column):
    figure = group_rows(generated_block())[(group, value)][column]
    para = readme_paragraph()
    assert f"{words} ({figure})" in para or f"{words} {figure}" in para, (words, figure, para)


def test_the_documents_list_counts_the_published_measurements():
    points = re.search(r"(\d+) published points", generated_block()).group(1)
    text = " ".join((ROOT / "README.md").read_text().split())
    assert f"`docs/validation.md` (simulator vs {points} published measurements)" in text
