"""Dataset prompts for the HTTP client: a PromptSource over the texts of a dataset file.

Owns only the client side: load_prompts (the texts, via kneecap.workload.datasets, the one reader
per format: {"prompt": ...} lines, ShareGPT "conversations", OpenAI "messages") and DatasetPrompts,
which hands request i its prompt in a seeded order. Sampling with length filters and lengths taken
from the data is kneecap.workload.datasets.sample_dataset. Random prompts of exact length live in
prompts.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from kneecap.client.prompts import Prompt
from kneecap.errors import KneecapError
from kneecap.workload import RequestSpec
from kneecap.workload.datasets import read_dataset


def load_prompts(path: str | Path) -> list[str]:
    """Prompts of a JSONL file (one record a line) or a JSON array file, in file order; empty ones skipped."""
    return [e.prompt for e in read_dataset(path)]


@dataclass(frozen=True)
class DatasetPrompts:
    """Prompts taken from a dataset in a seeded order; request i gets the i-th (cycling).

    The prompt's length is the dataset's, not spec.input_tokens: num_tokens is None (the server's usage says).
    """

    texts: tuple[str, ...]
    seed: int = 0
    in_order: bool = False  # request i gets texts[i mod len] (the texts are a seeded sample already, lengths beside)
    _order: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.texts:
            raise KneecapError("a dataset prompt source needs at least one prompt", "check the dataset file")
        order = list(range(len(self.texts)))
        if not self.in_order:
            random.Random(f"kneecap-dataset:{self.seed}").shuffle(order)
        object.__setattr__(self, "_order", tuple(order))

    def prompt_for(self, spec: RequestSpec) -> Prompt:
        text = self.texts[self._order[spec.index % len(self.texts)]]
        return Prompt.of(text, None)
